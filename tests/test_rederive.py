"""Verdicts are re-derived from recorded evidence through the claim kind (issue #23 §1–2):
``ClaimKind.decide`` of the evidence as a report records it gives the verdict the run gave, an
edited number moves it, and a missing or malformed number is an EvidenceError."""

from __future__ import annotations

import copy

import pytest

from fedaudit import json as fjson
from fedaudit.experiments.kind import ClaimKind, Decision, EvidenceError, derived_verdict, number
from fedaudit.experiments.kinds import claim_kind
from fedaudit.experiments.runner import run_plan

LAPLACE = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 2, "epsilon": 1.0, "samples": 4000,
           "curve": False}


def recorded(claim):
    """The claim's evidence as report.json stores it (strict JSON round trip)."""
    return fjson.loads(fjson.dumps(claim.evidence), what="evidence")


@pytest.fixture(scope="module")
def ldp_claims():
    honest = dict(LAPLACE)
    broken = {**LAPLACE, "id": "broken", "claimed_epsilon": 0.1, "expect": "violation"}
    report = run_plan({"plan": {"title": "rederive", "seed": 3}, "claim": [honest, broken]})
    return report.claims


def test_ldp_verdicts_rederive_from_recorded_evidence(ldp_claims):
    kind = claim_kind("ldp")
    for claim in ldp_claims:
        assert claim.error is None
        assert derived_verdict(kind, claim.expect, recorded(claim)) == claim.verdict == "PASS"


def test_an_edited_number_moves_the_rederived_verdict(ldp_claims):
    honest, broken = ldp_claims
    kind = claim_kind("ldp")
    forged = recorded(honest)
    forged["epsilon_lower"] = forged["epsilon_claimed"] * 1.01  # a certified bound above the claim
    assert derived_verdict(kind, "pass", forged) == "FAIL"
    hidden = recorded(broken)
    hidden["epsilon_lower"] = 0.0  # the violation erased
    assert derived_verdict(kind, "violation", hidden) == "FAIL"
    weak = recorded(honest)
    weak["min_pair_power"] = 50.0  # a power requirement the pair cannot meet
    assert derived_verdict(kind, "pass", weak) == "INCONCLUSIVE"


@pytest.mark.parametrize("edit", [lambda e: e.pop("epsilon_lower"), lambda e: e.update(epsilon_lower="0.5"),
                                  lambda e: e.update(epsilon_claimed=True), lambda e: e.update(min_pair_power=[1])])
def test_missing_or_malformed_evidence_cannot_decide(ldp_claims, edit):
    evidence = recorded(ldp_claims[0])
    edit(evidence)
    with pytest.raises(EvidenceError):
        derived_verdict(claim_kind("ldp"), "pass", evidence)
    with pytest.raises(EvidenceError, match="not an object"):
        derived_verdict(claim_kind("ldp"), "pass", ["not", "a", "dict"])


def test_non_finite_numbers_are_read_as_strict_json_stores_them():
    assert number({"x": "inf"}, "x") == float("inf") and number({"x": 2}, "x") == 2.0
    assert number({}, "x", optional=True) is None
    for bad in ({"x": True}, {"x": "1"}, {}):
        with pytest.raises(EvidenceError, match="'x'"):
            number(bad, "x")


class _NoDecide(ClaimKind):
    name = "no-decide"


class _Wrong(ClaimKind):
    name = "wrong"

    def decide(self, evidence, expect):
        return True


def test_a_kind_without_decide_is_not_rederived_and_a_bad_decide_is_caught():
    assert derived_verdict(_NoDecide(), "pass", {"x": 1}) is None
    with pytest.raises(EvidenceError, match="not a Decision"):
        derived_verdict(_Wrong(), "pass", {})


def test_the_runner_refuses_a_run_whose_rule_disagrees_with_decide(monkeypatch):
    from fedaudit.experiments import runner

    monkeypatch.setattr(runner, "derived_verdict", lambda kind, expect, evidence: "FAIL")
    report = run_plan({"plan": {"title": "bad", "seed": 1}, "claim": [copy.deepcopy(LAPLACE)]})
    (claim,) = report.claims
    assert claim.verdict == "INCONCLUSIVE" and "decide() of the recorded evidence gives FAIL" in claim.error
