"""fedaudit.audit.pairs: the LDP audit's input pairs. A mechanism of one's own over categories
declares ``categorical_inputs = True`` and is audited on the one-hot pair, by ``audit_pair``, by
the ``ldp`` claim kind and by the pair search, like randomized response (before, only a
RandomizedResponse instance passed the check)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from fedaudit.audit.pairs import LDP_PAIRS, audit_pair, input_pair, pair_power
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import PureLDP
from fedaudit.mechanisms.base import Mechanism, has_categorical_inputs
from fedaudit.mechanisms.randomized_response import RandomizedResponse


class CoinOverCategories(Mechanism):
    """k-ary randomized response written from scratch (no RandomizedResponse subclass): inputs are
    one-hot rows, a report is the category kept with probability e^ε/(e^ε + k − 1)."""

    name = "coin-over-categories"
    categorical_inputs = True

    def __init__(self, k: int, epsilon: float):
        self.dim = self.k = k
        self.guarantee = PureLDP(epsilon)
        self.report_width = 1
        self.log_keep = epsilon - math.log(math.exp(epsilon) + k - 1)
        self.log_other = -math.log(math.exp(epsilon) + k - 1)

    @property
    def bits_per_report(self) -> int:
        return (self.k - 1).bit_length()

    @staticmethod
    def _category(X: np.ndarray) -> np.ndarray:
        if not (np.isin(X, (0.0, 1.0)).all() and (X.sum(axis=1) == 1).all()):
            raise FedAuditError("inputs must be one-hot rows")
        return X.argmax(axis=1)

    def _encode(self, X, rng):
        c = self._category(X)
        keep = rng.random(len(c)) < math.exp(self.log_keep)
        other = (c + 1 + rng.integers(0, self.k - 1, size=len(c))) % self.k
        return np.where(keep, c, other).astype(np.float64)[:, None]

    def decode(self, reports):
        return np.eye(self.k)[np.asarray(reports, dtype=int)[:, 0]]

    def _log_prob(self, reports, x):
        c = self._category(x[None, :])[0]
        return np.where(reports[:, 0] == c, self.log_keep, self.log_other)

    def epsilon_for_pair(self, x0, x1):
        return 0.0 if self._category(x0[None, :])[0] == self._category(x1[None, :])[0] else self.epsilon


def test_categorical_inputs_is_declared_by_a_class_attribute():
    assert RandomizedResponse.categorical_inputs and has_categorical_inputs(RandomizedResponse(3, 1.0))
    assert has_categorical_inputs(CoinOverCategories(3, 1.0))
    assert not Mechanism.categorical_inputs and not has_categorical_inputs(lambda x, size, rng: x)  # a sampler


def test_a_user_categorical_mechanism_is_audited_on_the_one_hot_pair():
    mech = CoinOverCategories(4, 1.0)
    res, x0, x1, label = audit_pair(mech, "antipodal", dim=None, clip=1.0, samples=2000, search_samples=200,
                                    seed=0, epsilon=1.0, delta=None, confidence=0.95, distinguisher="auto")
    assert label == "e0 vs e1" and x0.tolist() == [1, 0, 0, 0] and x1.tolist() == [0, 1, 0, 0]
    assert 0.0 < res.epsilon_lower <= 1.0 and res.epsilon_exact == pytest.approx(1.0)
    assert pair_power(res, 1.0) == pytest.approx(1.0)


def test_the_ldp_kind_forces_the_one_hot_pair_for_a_registered_categorical_mechanism():
    from fedaudit.experiments.plan import load_plan
    from fedaudit.mechanisms.registry import MECHANISMS, register_mechanism

    register_mechanism("coin-test", lambda dim, epsilon, **_: CoinOverCategories(dim, epsilon))
    try:
        plan = load_plan({"plan": {"title": "t", "seed": 0},
                          "claim": [{"id": "c", "kind": "ldp", "mechanism": "coin-test", "dim": 4, "epsilon": 1.0,
                                     "samples": 1000}]})
    finally:
        MECHANISMS.unregister("coin-test")
    assert plan.claims[0].params["pair"] == "one-hot"


def test_the_pair_search_tries_one_hot_candidates_only_for_categorical_inputs():
    from fedaudit.audit.pair_search import audit_worst_case

    res = audit_worst_case(CoinOverCategories(4, 1.0), dim=4, clip=1.0, samples=2000, search_samples=200, seed=0,
                           epsilon=1.0, confidence=0.95)
    assert [c["pair"] for c in res.search["candidates"]] == ["e0 vs e3", "e0 vs e1"]  # no vector pair, no local moves


def test_input_pairs_and_their_names():
    assert LDP_PAIRS == ("antipodal", "flat", "zero-boundary")
    x0, x1 = input_pair("flat", 4, 2.0)
    assert np.allclose(x0, 1.0) and np.allclose(x1, -1.0)
    with pytest.raises(FedAuditError, match="pair must be one of 'antipodal', 'flat', 'zero-boundary', 'one-hot'"):
        input_pair("diagonal", 4, 1.0)


def test_sparse_upload_pairs_have_their_own_name_and_the_old_one_warns():
    from fedaudit.audit import sparse_upload

    assert sparse_upload.UPLOAD_PAIRS == ("data", "worst", "both")
    with pytest.warns(DeprecationWarning, match="UPLOAD_PAIRS"):
        assert sparse_upload.PAIRS == sparse_upload.UPLOAD_PAIRS
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from fedaudit.audit.sparse_upload import UPLOAD_PAIRS  # noqa: F401  (the new name is silent)
