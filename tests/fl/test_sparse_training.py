"""fedaudit.fl.sparse_training: ``fedaudit sparse`` dispatches through the SPARSE_METHODS registry,
so every registered method trains — FedIter-HT, the ``fed-ht`` name of Fed-HT, a method of one's
own — with the per-dataset settings of TRAINING_SETTINGS (an unknown name: tests/cli/test_sparse.py)."""

from __future__ import annotations

import pytest

from fedaudit.errors import FedAuditError
from fedaudit.fl.registry import SPARSE_METHODS, register_sparse_method
from fedaudit.fl.sparse_training import TRAINING_SETTINGS, train_sparse
from fedaudit.progress import increments_from_totals


def test_every_built_in_sparse_method_has_its_settings():
    assert set(SPARSE_METHODS.names()) <= set(TRAINING_SETTINGS)


def test_fediter_ht_and_the_canonical_fed_ht_name_train_from_the_registry():
    seen = []
    res = train_sparse("fediter-ht", "synthetic", rounds=2, clients=4, seed=0, progress=seen.append)
    assert res.method == "fediter-ht" and res.m == 50 and res.density == pytest.approx(0.05) and sum(seen) == 2
    assert res.bytes_per_client_round < 4000  # its τ-sparse upload is smaller than a dense model
    alias, canonical = (train_sparse(name, "synthetic", rounds=2, clients=4, seed=0) for name in ("fediht", "fed-ht"))
    assert alias.run["history"]["bytes"] == canonical.run["history"]["bytes"]  # same method, same settings


def test_a_registered_method_of_ones_own_trains_without_settings():
    calls = []

    def mine(model, clients, *, rounds, density, rng, progress=None, lr=0.05):
        calls.append({"rounds": rounds, "density": density, "lr": lr})
        return SPARSE_METHODS.factory("fedavg-prune")(model, clients, rounds=rounds, density=density, rng=rng,
                                                       progress=progress, lr=lr)

    register_sparse_method("mine-test", mine)
    try:
        res = train_sparse("mine-test", "digits", rounds=1, clients=2, seed=0, density=0.1)
    finally:
        SPARSE_METHODS.unregister("mine-test")
    assert calls == [{"rounds": 1, "density": 0.1, "lr": 0.05}]  # no tuned settings: its own default lr
    assert res.method == "mine-test" and res.metric == "accuracy"


def test_a_method_that_lacks_a_keyword_is_one_line():
    register_sparse_method("rigid-test", lambda model, clients, *, rounds, density, rng: None)
    try:
        with pytest.raises(FedAuditError, match="sparse method 'rigid-test' takes no keyword 'progress'"):
            train_sparse("rigid-test", "synthetic", rounds=1, clients=2)
    finally:
        SPARSE_METHODS.unregister("rigid-test")


def test_increments_from_totals_counts_each_unit_once():
    seen = []
    advance = increments_from_totals(seen.append)
    for done in (1, 3, 3, 2, 7):
        advance(done)
    assert seen == [1, 2, 4]
