"""Verdicts are re-derived from recorded evidence through the claim kind (issue #23 §1–2):
``ClaimKind.decide`` of the evidence as a report records it gives the verdict the run gave, an
edited number moves it, and a missing or malformed number is an EvidenceError.

Every built-in kind decides through ``decide``: the cheap ones run here; dpsgd, dp-fedavg,
sparse-upload, flower-local-dp and flower are checked next to their own runs
(tests/experiments/kinds/test_dpsgd_dp_fedavg.py, kinds/test_sparse_upload.py,
tests/integrations/flower/test_local_dp.py and test_simulation.py), the flower rule on its own below
too."""

from __future__ import annotations

import copy

import pytest
from tests.helpers import check_rederived, recorded

from fedaudit.experiments.kind import (ClaimKind, Decision, EvidenceError, derived_verdict, mapping, number,
                                       rows)
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.experiments.runner import run_plan

LAPLACE = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 2, "epsilon": 1.0, "samples": 4000,
           "curve": False}


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


# ------------------------------------------------------------------ every built-in kind decides


def test_every_builtin_kind_implements_decide_as_its_last_method():
    """``decide`` is implemented by every built-in kind (so every verdict is re-derived) and is
    declared last in its class, after ``run``."""
    for name in CLAIM_KINDS.names():
        cls = type(claim_kind(name))
        assert cls.decide is not ClaimKind.decide, name
        methods = [k for k, v in vars(cls).items() if callable(v) and not k.startswith("__")]
        assert methods[-1] == "decide", (name, methods)


def run_claims(*claims):
    return run_plan({"plan": {"title": "rederive", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}).claims


RR = {"id": "rr", "kind": "accounting", "mechanism": "rr", "dim": 2, "epsilon": 1.0, "rounds": 20,
      "max_epsilon": 30.0, "curve_points": 4}


def test_accounting_rederives_from_the_composed_epsilon_and_the_budget():
    within, over = run_claims(RR, {**RR, "id": "over", "max_epsilon": 5.0, "expect": "violation"})
    assert within.verdict == over.verdict == "PASS" and over.evidence["epsilon"] > 5.0
    check_rederived(within, flips=[(lambda e: e.update(epsilon=30.5), "FAIL"),
                                   (lambda e: e.update(epsilon="inf"), "FAIL")],
                    missing=[lambda e: e.pop("max_epsilon"), lambda e: e.update(epsilon=None)])
    check_rederived(over, flips=[(lambda e: e.update(max_epsilon=1e6), "FAIL")])


CONV = {"id": "conv", "kind": "convergence", "optimizers": ["dgd", "dnag"], "rounds": 4, "n_honest": 4,
        "max_final_loss": 10.0, "min_speedup": {"dnag": 0.5}}


def test_convergence_rederives_every_threshold_from_the_per_optimizer_numbers():
    (claim,) = run_claims(CONV)
    ev = claim.evidence
    assert claim.verdict == "PASS" and ev["thresholds"] == {"max_rounds": None, "min_speedup": {"dnag": 0.5},
                                                            "max_final_loss": 10.0, "min_final_accuracy": None}

    def per(name, **values):
        return lambda e: e["per_optimizer"][name].update(values)

    check_rederived(claim, flips=[(per("dnag", speedup=0.4), "FAIL"), (per("dgd", final_loss=10.5), "FAIL"),
                                  (per("dgd", final_loss=None), "FAIL"),  # diverged: meets no threshold
                                  (lambda e: e["thresholds"].update(min_final_accuracy=1.0), "FAIL"),
                                  (lambda e: e["thresholds"].update(max_rounds={"dnag": 0}), "FAIL")],
                    missing=[lambda e: e.pop("thresholds"), lambda e: e["thresholds"].pop("max_rounds"),
                             lambda e: e["per_optimizer"]["dnag"].pop("speedup"),
                             lambda e: e["thresholds"].update(min_speedup={"adam": 0.5})])
    forged = recorded(claim)  # the stored checks rows are not what decides
    forged["checks"] = [{**c, "holds": False} for c in forged["checks"]]
    assert derived_verdict(claim_kind("convergence"), "pass", forged) == "PASS"


ROBUST = {"id": "rob", "kind": "robustness", "aggregator": "cwtm", "n": 3, "f": 1, "dim": 2, "trials": 2,
          "attacks": ["alie"], "search_evals": 0, "max_nu": 50.0}


def test_robustness_rederives_nu_hat_from_its_configurations():
    robust, mean = run_claims(ROBUST, {**ROBUST, "id": "mean", "aggregator": "mean", "expect": "violation"})
    assert robust.verdict == mean.verdict == "PASS"
    assert mean.evidence["nu_empirical"] == float("inf")  # recorded as "inf", compared as ∞
    nu = robust.evidence["nu_empirical"]

    def worse(value):  # one configuration worse, and the headline ν̂ following it
        def edit(e):
            label = next(iter(e["audit"]["per_configuration"]))
            e["audit"]["per_configuration"][label] = e["nu_empirical"] = value
        return edit

    check_rederived(robust, flips=[(worse(60.0), "FAIL"), (lambda e: e.update(max_nu=nu / 2), "FAIL"),
                                   (lambda e: e.update(nu_bound=nu / 2), "FAIL")],
                    missing=[lambda e: e.pop("max_nu"), lambda e: e.pop("nu_empirical"),
                             lambda e: e["audit"].pop("per_configuration"),
                             lambda e: e.update(nu_empirical=nu / 2)])  # a headline its rows contradict
    def finite(e):  # every configuration finite: no max_nu, no bound, nothing violated
        per = e["audit"]["per_configuration"]
        for label in per:
            per[label] = 0.5
        e.update(nu_empirical=0.5, max_nu=None, nu_bound=None)

    check_rederived(mean, flips=[(finite, "FAIL")])
    # ν̂ = ∞ is a violation by itself: without max_nu and with κ = ∞ (the mean's) the verdict stays
    from fedaudit.experiments.kind import derived_verdict
    from fedaudit.experiments.kinds import claim_kind

    unbounded = recorded(mean)
    unbounded.update(max_nu=None, nu_bound=float("inf"))
    assert derived_verdict(claim_kind("robustness"), "violation", unbounded) == "PASS"
    assert derived_verdict(claim_kind("robustness"), "pass", unbounded) == "FAIL"


STRESS = {"id": "stress", "kind": "stress", "aggregators": ["cwtm"], "attacks": ["alie"], "fs": [1, 2],
          "rounds": 3, "n_honest": 6, "backend": "serial", "min_accuracy": 0.1}


def test_stress_rederives_from_its_cells_and_the_grid_size():
    (claim,) = run_claims(STRESS)
    assert claim.verdict == "PASS" and claim.evidence["cells_in_grid"] == len(claim.evidence["per_cell"]) == 2

    def cell(**values):
        return lambda e: e["per_cell"][1].update(values)

    check_rederived(claim, flips=[(cell(final_accuracy=0.05), "FAIL"), (cell(final_accuracy=None), "FAIL"),
                                  (lambda e: e["per_cell"].pop(), "FAIL"),  # an incomplete grid
                                  (lambda e: e["requirement"].update(max_loss=1e-9), "FAIL")],
                    missing=[lambda e: e.pop("cells_in_grid"), lambda e: e["per_cell"][0].pop("final_accuracy"),
                             lambda e: e["requirement"].pop("max_loss"), lambda e: e.update(per_cell="2 cells")])
    failing = recorded(claim)
    failing["per_cell"][0]["final_accuracy"] = 0.0
    assert derived_verdict(claim_kind("stress"), "violation", failing) == "PASS"  # a failing cell is detected


VARIANCE = {"id": "var", "kind": "variance", "dim": 16, "ks": [2, 8], "samples": 300, "max_slope": 0.0,
            "max_mse": 1e9}


def test_variance_rederives_every_bound_from_the_recorded_intervals():
    (claim,) = run_claims(VARIANCE)
    assert claim.verdict == "PASS"
    lo, hi = claim.evidence["slope_private_ci"]

    def ci(k, low, high):
        return lambda e: e["per_k"][k].update(ci=[low, high])

    check_rederived(claim, flips=[(lambda e: e.update(slope_private_ci=[lo, 0.1]), "FAIL"),  # across: not shown
                                  (ci(1, 1.0, 2e9), "FAIL"),
                                  (lambda e: e["bounds"].update(min_slope=hi + 1), "FAIL")],
                    missing=[lambda e: e.pop("bounds"), lambda e: e["bounds"].pop("min_slope"),
                             lambda e: e.update(slope_private_ci=[lo]), lambda e: e["per_k"][0].pop("ci")])
    kind = claim_kind("variance")
    above = recorded(claim)
    above["slope_private_ci"] = [0.1, 0.2]  # entirely above max_slope: a detected violation
    assert derived_verdict(kind, "violation", above) == "PASS" and derived_verdict(kind, "pass", above) == "FAIL"


FLOWER = {"accuracy_attacked": 0.9, "accuracy_clean": 0.92, "min_accuracy": 0.85, "max_accuracy_drop": 0.03,
          "client_errors": 0, "ldp": {"budget": 12.0, "spent_max": 12.0}}


@pytest.mark.parametrize("edit, verdict", [
    ({}, "PASS"), ({"accuracy_attacked": 0.8}, "FAIL"), ({"accuracy_clean": 0.95}, "FAIL"),
    ({"client_errors": 1}, "FAIL"), ({"ldp": {"budget": 12.0, "spent_max": 12.5}}, "FAIL"),
    ({"ldp": {"budget": None, "spent_max": 99.0}}, "PASS"), ({"ldp": None, "min_accuracy": None}, "PASS"),
])
def test_the_flower_rule_on_its_recorded_numbers(edit, verdict):
    """The flower kind's rule (its simulation runs in tests/integrations/flower/test_simulation.py)."""
    assert derived_verdict(claim_kind("flower"), "pass", {**FLOWER, **edit}) == verdict


@pytest.mark.parametrize("drop", ["accuracy_clean", "min_accuracy", "client_errors", "ldp"])
def test_the_flower_rule_needs_its_numbers(drop):
    evidence = {k: v for k, v in FLOWER.items() if k != drop}
    with pytest.raises(EvidenceError, match=drop):
        derived_verdict(claim_kind("flower"), "pass", evidence)


def test_objects_and_rows_are_read_strictly():
    assert mapping({"t": None}, "t", nullable=True) is None and number({"x": None}, "x", nullable=True) is None
    assert rows({"r": [{"a": 1}]}, "r") == [{"a": 1}]
    for bad in (lambda: mapping({}, "t", nullable=True), lambda: mapping({"t": [1]}, "t"),
                lambda: number({}, "x", nullable=True), lambda: rows({"r": [1]}, "r"),
                lambda: rows({"r": {"omitted": "..."}}, "r")):
        with pytest.raises(EvidenceError):
            bad()
