"""The mechanism registry: built-ins, keyword checks, did-you-mean, user mechanisms (issue #10)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from fedaudit.audit import audit_ldp
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.mechanisms import (SSTQ, Duchi, Gaussian, Laplace, PrivUnitG, RandomizedResponse, SSTQSketch, VQSGD,
                                 MECHANISMS, make_mechanism, register_mechanism)

BUILT_IN = {"sstq": SSTQ, "sstq-sketch": SSTQSketch, "vqsgd": VQSGD, "privunitg": PrivUnitG, "duchi": Duchi,
            "laplace": Laplace, "gaussian": Gaussian, "rr": RandomizedResponse}


def test_built_in_names_and_classes():
    assert set(BUILT_IN) <= set(MECHANISMS.names())
    for name, cls in BUILT_IN.items():
        m = make_mechanism(name, 32, 1.0, k=4)
        assert type(m) is cls and m.name == name
    assert all(summary for _, summary in MECHANISMS.describe())


def test_make_mechanism_passes_the_common_keywords_each_mechanism_takes():
    m = make_mechanism("sstq", 64, 2.0, levels=8, clip=0.5, rotate=False)
    assert m.params() == SSTQ(64, 4, 8, 2.0, 0.5, rotate=False).params()  # k = max(1, 64 // 16)
    assert make_mechanism("sstq-sketch", 64, 2.0, k=3, levels=8).params() == SSTQSketch(64, 3, 8, 2.0).params()
    g = make_mechanism("gaussian", 4, 1.0, delta=1e-6, clip=2.0, k=3, levels=9)  # k, levels: not Gaussian's
    assert g.params() == Gaussian(4, 1.0, 1e-6, 2.0).params()
    assert make_mechanism("rr", 5, 1.0).k == 5
    assert make_mechanism("SSTQ", 16, None).epsilon is None  # names are case-insensitive; no claim


def test_unknown_name_and_keyword_suggest_the_nearest():
    with pytest.raises(FedAuditError, match=r"unknown mechanism 'lapalce' \(did you mean 'laplace'\?\)"):
        make_mechanism("lapalce", 4, 1.0)
    with pytest.raises(FedAuditError, match=r"mechanism 'laplace' takes no keyword 'k'.*accepts: clip"):
        MECHANISMS.build("laplace", 4, 1.0, k=2)
    with pytest.raises(FedAuditError, match=r"takes no keyword 'levles' \(did you mean 'levels'\?\)"):
        MECHANISMS.check_keywords("sstq", {"levles": 4})
    assert MECHANISMS.accepted("gaussian") == ("delta", "clip")
    assert isinstance(MECHANISMS.build("laplace", 4, 1.0, clip=2.0), Laplace)


class Coin(Laplace):
    """A user's pure-DP mechanism built on Laplace (registered under a new name)."""

    name = "user-coin"


def _coin(dim, epsilon, *, clip=1.0):
    """A user's Laplace."""
    return Coin(dim, epsilon, clip)


def test_a_registered_user_mechanism_is_built_and_audited():
    register_mechanism("user-coin", _coin)
    try:
        with pytest.raises(FedAuditError, match="already registered"):
            register_mechanism("user-coin", _coin)
        m = make_mechanism("user-coin", 2, 1.0, k=7)  # k is not the factory's: not passed
        assert isinstance(m, Coin) and m.guarantee == PureLDP(1.0)
        res = audit_ldp(m, [1.0, 0.0], [-1.0, 0.0], samples=20_000, seed=3)
        assert res.epsilon_claimed == 1.0 and not res.violation and 0.0 < res.epsilon_lower <= 1.0
        assert res.mechanism["mechanism"] == "user-coin"
    finally:
        MECHANISMS.unregister("user-coin")
    assert "user-coin" not in MECHANISMS.names()


def test_a_factory_needing_a_keyword_make_mechanism_cannot_pass_is_refused_clearly():
    register_mechanism("user-scaled", lambda dim, epsilon, *, scale: Laplace(dim, epsilon / scale))
    try:
        with pytest.raises(FedAuditError, match=r"mechanism 'user-scaled' needs the keyword\(s\) scale"):
            make_mechanism("user-scaled", 2, 1.0)
        assert MECHANISMS.build("user-scaled", 2, 1.0, scale=2.0).epsilon == 0.5
    finally:
        MECHANISMS.unregister("user-scaled")


def test_a_module_attr_reference_is_a_mechanism_name():
    mod = types.ModuleType("fedaudit_user_mechs")
    mod.leaky = lambda dim, epsilon, **kw: Laplace(dim, 4.0 * epsilon, kw["clip"])  # claims ε, delivers 4ε

    class Claimed(Laplace):
        def __init__(self, dim, epsilon, clip=1.0):
            super().__init__(dim, 4.0 * epsilon, clip)
            self.guarantee = PureLDP(epsilon)  # the (false) claim

    mod.Claimed = Claimed
    sys.modules[mod.__name__] = mod
    try:
        assert "fedaudit_user_mechs:leaky" in MECHANISMS
        m = make_mechanism("fedaudit_user_mechs:leaky", 2, 0.5, clip=1.0)  # **kw: every keyword passed
        assert m.epsilon == 2.0
        bad = make_mechanism("fedaudit_user_mechs:Claimed", 1, 0.5)
        assert bad.guarantee == PureLDP(0.5)
        res = audit_ldp(bad, [1.0], [-1.0], samples=100_000, seed=1)
        assert res.epsilon_claimed == 0.5 and res.violation and res.epsilon_lower > 1.0
        with pytest.raises(FedAuditError, match="has no attribute 'nope'"):
            make_mechanism("fedaudit_user_mechs:nope", 2, 1.0)
    finally:
        del sys.modules[mod.__name__]


def test_every_mechanism_exposes_a_typed_guarantee():
    for name in BUILT_IN:
        m = make_mechanism(name, 8, 1.0, k=2)
        expected = ApproxLDP(1.0, 1e-5) if name == "gaussian" else PureLDP(1.0)
        assert m.guarantee == expected
        assert (m.epsilon, m.delta) == (1.0, 1e-5 if name == "gaussian" else 0.0)
        assert m.to_dict()["guarantee"] == expected.to_dict()
    assert make_mechanism("vqsgd", 8, None).guarantee is None
    assert make_mechanism("vqsgd", 8, None).to_dict()["guarantee"] is None
    assert np.isfinite(make_mechanism("gaussian", 8, 1.0).sigma)


def test_estimate_mean_is_the_mean_of_the_decoded_reports():
    m = SSTQ(dim=64, k=8, levels=2, epsilon=4.0, clip=1.0)
    x = np.ones(64) / 8.0
    reports = m.sample(x, 4000, rng=0)
    est = m.estimate_mean(reports)
    np.testing.assert_array_equal(est, m.decode(reports).mean(axis=0))
    # unbiased: within 5 standard errors of x on every coordinate
    se = m.decode(reports).std(axis=0) / np.sqrt(4000)
    assert np.all(np.abs(est - x) <= 5 * se + 1e-12)
