"""Typed guarantees (fedaudit.guarantees): validation, JSON, dispatch (issue #10)."""

from __future__ import annotations

import json

import pytest

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, Guarantee, PureLDP, epsilon_delta, make_guarantee


def test_values_and_json():
    assert PureLDP(1).epsilon == 1.0 and isinstance(PureLDP(1).epsilon, float)
    assert PureLDP(2.0).to_dict() == {"type": "pure-ldp", "epsilon": 2.0}
    assert ApproxLDP(1.0, 1e-5).to_dict() == {"type": "approx-ldp", "epsilon": 1.0, "delta": 1e-5}
    json.dumps(ApproxLDP(1.0, 1e-5).to_dict(), allow_nan=False)
    assert PureLDP(1.0) == PureLDP(1.0) and PureLDP(1.0) != ApproxLDP(1.0, 1e-9)
    assert isinstance(PureLDP(1.0), Guarantee) and isinstance(ApproxLDP(1.0, 0.1), Guarantee)
    with pytest.raises(AttributeError):
        PureLDP(1.0).epsilon = 2.0  # frozen


@pytest.mark.parametrize("build, message", [
    (lambda: PureLDP(0.0), r"epsilon must be a finite real number > 0"),
    (lambda: PureLDP(float("inf")), r"epsilon must be a finite real number > 0"),
    (lambda: PureLDP(float("nan")), "epsilon"),
    (lambda: ApproxLDP(1.0, 0.0), r"delta must be a finite real number in \(0, 1\)"),
    (lambda: ApproxLDP(1.0, 1.0), r"delta must be a finite real number in \(0, 1\)"),
    (lambda: ApproxLDP(-1.0, 0.1), "epsilon"),
    (lambda: make_guarantee(1.0, -0.1), "delta"),
])
def test_validation(build, message):
    with pytest.raises(FedAuditError, match=message):
        build()


def test_dispatch_on_type():
    assert epsilon_delta(PureLDP(1.5)) == (1.5, 0.0)
    assert epsilon_delta(ApproxLDP(1.5, 1e-6)) == (1.5, 1e-6)
    assert epsilon_delta(None) == (None, 0.0)
    with pytest.raises(FedAuditError, match="guarantee must be a PureLDP, an ApproxLDP or None"):
        epsilon_delta(Guarantee())

    class Lookalike:  # has epsilon and delta but is no guarantee: not read by attribute
        epsilon, delta = 1.0, 0.0

    with pytest.raises(FedAuditError, match="got Lookalike"):
        epsilon_delta(Lookalike())
    assert make_guarantee(1.0) == PureLDP(1.0)
    assert make_guarantee(1.0, 1e-5) == ApproxLDP(1.0, 1e-5)
    assert make_guarantee(None, 0.5) is None


def test_published_and_planted_mechanisms_carry_the_guarantee_they_claim():
    from fedaudit.mechanisms import SSTQ, SSTQSketch
    from fedaudit.testing import CleartextIndicesSSTQ, LeakedNormSSTQ, ScaledLaplace, UnsplitBudgetSSTQ

    assert SSTQSketch(8, 2, 4, 1.0).guarantee == PureLDP(1.0)  # claimed, NOT delivered
    for m in (UnsplitBudgetSSTQ(8, 2, 4, 1.0), LeakedNormSSTQ(8, 2, 4, 1.0), CleartextIndicesSSTQ(8, 2, 4, 1.0),
              ScaledLaplace(2, 1.0, factor=3)):
        assert m.guarantee == PureLDP(1.0) and (m.epsilon, m.delta) == (1.0, 0.0)
    assert ScaledLaplace(2, 1.0, factor=3).params() == {"dim": 2, "epsilon": 1.0, "clip": 1.0, "factor": 3}
    assert SSTQ(8, 2, 4, None).guarantee is None
