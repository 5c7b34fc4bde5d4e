"""Claim kinds ``dpsgd`` and ``dp-fedavg``: the accountant within the claim and a canary audit that
must not refute it; the σ/10 run must come out as a violation. The accountant curve is checked
against the accountant itself at every point, the ceiling against the published 5.78."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from tests.helpers import UnitCounter, check_rederived

from fedaudit.errors import FedAuditError
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan
from fedaudit.reports import load_schema
from fedaudit.reports.plots import render_png

SGD = {"id": "sgd", "kind": "dpsgd", "noise_multiplier": 2.0, "sample_rate": 0.1, "steps": 60, "claimed_epsilon": 3.0,
       "curve_points": 12}


def plan(*claims):
    return {"plan": {"title": "audits", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


@pytest.fixture(scope="module")
def sgd_report():
    units = UnitCounter()
    broken = {**SGD, "id": "broken", "noise_multiplier": 0.2, "claimed_noise_multiplier": 2.0, "expect": "violation"}
    over = {**SGD, "id": "over", "claimed_epsilon": 1.0}
    return run_plan(plan(SGD, broken, over), progress=units), units


def test_a_calibrated_run_passes_and_sigma_over_10_is_a_violation(sgd_report):
    from fedaudit.accounting import epsilon_dpsgd

    report, _ = sgd_report
    ok, broken, over = report.claims
    assert [c.error for c in report.claims] == [None, None, None]
    acc = epsilon_dpsgd(2.0, 0.1, 60, 1e-5).epsilon  # the claimed configuration's accountant
    assert ok.evidence["accountant_epsilon"] == pytest.approx(acc) and acc < 3.0
    assert ok.verdict == "PASS" and not ok.evidence["violation"]
    assert max(ok.evidence["epsilon_one_run"], ok.evidence["epsilon_one_run_fdp"]) < acc
    # trained at σ/10, the accountant still says acc: the certified bound must exceed it
    ev = broken.evidence
    assert ev["accountant_epsilon"] == pytest.approx(acc) and ev["noise_multiplier"] == 0.2
    assert ev["violation"] and ev["accountant_violated"] and max(ev["epsilon_one_run"], ev["epsilon_one_run_fdp"]) > acc
    assert broken.verdict == "PASS" and "expected a violation, detected" in broken.summary
    # an accountant above the claim fails the claim although the audit refutes nothing
    assert over.evidence["accountant_epsilon"] > 1.0 and not over.evidence["accountant_violated"]
    assert over.verdict == "FAIL" and "ABOVE the claimed ε = 1" in over.summary


def test_dpsgd_verdicts_rederive_from_the_accountant_and_the_certified_bounds(sgd_report):
    """decide() of the recorded evidence gives each verdict; a certified bound above the accountant
    or the claim, or an accountant above the claim, moves it; the stored flags decide nothing."""
    ok, broken, over = sgd_report[0].claims
    acc = ok.evidence["accountant_epsilon"]
    check_rederived(ok, flips=[(lambda e: e.update(epsilon_one_run=acc * 1.01), "FAIL"),
                               (lambda e: e.update(epsilon_one_run_fdp=acc * 1.01), "FAIL"),
                               (lambda e: e.update(claimed_epsilon=acc * 0.99), "FAIL")],
                    missing=[lambda e: e.pop("epsilon_one_run_fdp"), lambda e: e.update(accountant_epsilon=None)])
    check_rederived(broken, flips=[(lambda e: e.update(epsilon_one_run=0.0, epsilon_one_run_fdp=0.0), "FAIL")])
    check_rederived(over, flips=[(lambda e: e.update(claimed_epsilon=100.0, violation=True), "PASS")])


def test_the_curve_is_the_accountant_at_every_point_and_the_figure_carries_the_bounds(sgd_report):
    from fedaudit.accounting import epsilon_dpsgd

    report, units = sgd_report
    ok = report.claims[0]
    xs, ys = ok.evidence["curve"]["steps"], ok.evidence["curve"]["epsilon"]
    assert xs[0] == 1 and xs[-1] == 60 and len(xs) == 12
    for x, y in zip(xs[::4], ys[::4]):  # coarser PLD grid: an upper bound within 0.5% of the accountant
        exact = epsilon_dpsgd(2.0, 0.1, x, 1e-5).epsilon
        assert exact - 1e-9 <= y <= exact * 1.005
    assert all(b > a for a, b in zip(ys, ys[1:]))  # more steps never lower ε
    (plot,) = ok.plots
    assert plot["type"] == "epsilon_vs_steps" and plot["epsilon_claimed"] == 3.0
    labels = [p["label"] for p in plot["lower_bounds"]]
    assert labels == ["one-run (Steinke)", "one-run f-DP", "GDP"] and plot["lower_bounds"][2]["certified"] is False
    assert all(p["steps"] == 60 and p["confidence"] == 0.95 for p in plot["lower_bounds"])
    assert render_png(plot).startswith(b"\x89PNG")
    jsonschema.validate(json.loads(json.dumps(report.seal().to_dict())), load_schema())
    assert units.total["sgd"] == (60 + 12, "steps") and units.done["sgd"] == 60 + 12


def test_the_evidence_states_the_one_run_ceiling():
    from fedaudit.experiments.evidence import one_run_ceiling

    assert one_run_ceiling(1000, 1e-5, 0.95) == pytest.approx(5.78, abs=0.01)  # Steinke et al., privacy.md §0


@pytest.mark.parametrize("overrides, pattern", [
    ({"noise_multiplier": 0}, r"key 'noise_multiplier' must be a number > 0"),
    ({"noise_multiplier": -1}, r"key 'noise_multiplier' must be a number > 0"),
    ({"sample_rate": 0}, r"key 'sample_rate' must be a number in \(0, 1\]"),
    ({"sample_rate": 1.5}, r"key 'sample_rate' must be a number in \(0, 1\]"),
    ({"delta": 0}, r"key 'delta' must be a number in \(0, 1\)"),
    ({"delta": 1}, r"key 'delta' must be a number in \(0, 1\)"),
    ({"steps": 0}, r"key 'steps' must be an integer in \[1, 1000000\]"),
    ({"canaries": 5}, r"key 'canaries' must be an integer in \[20, 5000\]"),
    ({"threat": "grey-box"}, r"key 'threat' must be one of 'white-box', 'white-box-final', 'black-box'"),
])
def test_bad_dpsgd_claims_are_refused_when_the_plan_is_loaded(overrides, pattern):
    claim = {k: v for k, v in {**SGD, **overrides}.items() if v is not None}
    with pytest.raises(FedAuditError, match=r"^claim 'sgd' \(#1\): " + pattern):
        load_plan(plan(claim))


def test_a_dpsgd_claim_without_claimed_epsilon_claims_the_accountants_epsilon():
    """claimed_epsilon is optional (it used to be required): unset, the claim is the accountant's ε of
    the claimed configuration, which the title says."""
    claim = {k: v for k, v in SGD.items() if k != "claimed_epsilon"}
    spec = load_plan(plan(claim)).claims[0]
    assert spec.params["claimed_epsilon"] is None
    assert "(the accountant's ε, 1e-05)-DP" in spec.title


AVG = {"id": "avg", "kind": "dp-fedavg", "noise_multiplier": 4.0, "sample_rate": 0.5, "rounds": 5, "clients": 20,
       "claimed_epsilon": 2.0}


def test_fedavg_dp_calibrated_passes_and_under_calibrated_is_caught():
    from fedaudit.accounting.dp_fedavg import epsilon_dp_fedavg

    broken = {**AVG, "id": "weak", "noise_multiplier": 0.4, "claimed_noise_multiplier": 4.0, "expect": "violation"}
    report = run_plan(plan(AVG, broken))
    ok, weak = report.claims
    assert [c.error for c in report.claims] == [None, None]
    acc = epsilon_dp_fedavg(4.0, 0.5, 5, 1e-5).epsilon  # client level, the claimed z
    assert ok.evidence["accountant_epsilon"] == pytest.approx(acc) and acc < 2.0
    assert ok.verdict == "PASS" and not ok.evidence["violation"]
    assert weak.evidence["accountant_epsilon"] == pytest.approx(acc) and weak.evidence["violation"]
    assert weak.evidence["epsilon_one_run"] > acc and weak.verdict == "PASS"
    xs, ys = ok.evidence["curve"]["rounds"], ok.evidence["curve"]["epsilon"]
    assert xs == [1, 2, 3, 4, 5] and ys[-1] == acc
    assert ys[0] == pytest.approx(epsilon_dp_fedavg(4.0, 0.5, 1, 1e-5).epsilon, rel=5e-3)
    assert ok.plots[0]["x_label"] == "rounds" and render_png(ok.plots[0]).startswith(b"\x89PNG")
    check_rederived(ok, flips=[(lambda e: e.update(epsilon_one_run=acc * 1.01), "FAIL")],
                    missing=[lambda e: e.pop("claimed_epsilon")])
    check_rederived(weak, flips=[(lambda e: e.update(epsilon_one_run=0.0, epsilon_one_run_fdp=0.0), "FAIL")])


@pytest.mark.parametrize("overrides, pattern", [
    ({"clients": 0}, r"key 'clients' must be an integer in \[1, 100000\], got 0"),
    ({"sample_rate": 0}, r"key 'sample_rate' must be a number in \(0, 1\]"),
    ({"rounds": 0}, r"key 'rounds' must be an integer in \[1, 1000000\]"),
    ({"noise_multiplier": -0.5}, r"key 'noise_multiplier' must be a number > 0"),
    ({"dataset": "mnist"}, r"key 'dataset' must be one of 'synthetic', 'digits'"),
])
def test_bad_fedavg_dp_claims_are_refused(overrides, pattern):
    with pytest.raises(FedAuditError, match=r"^claim 'avg' \(#1\): " + pattern):
        load_plan(plan({**AVG, **overrides}))


def test_the_shipped_training_plan_is_valid():
    from fedaudit.plans import plan_path

    with plan_path("training-audits") as path:
        p = load_plan(path)
    assert [c.kind for c in p.claims] == ["dpsgd", "dpsgd", "dp-fedavg", "dp-fedavg"]
    assert [c.expect for c in p.claims] == ["pass", "violation", "pass", "violation"]


@pytest.mark.slow
def test_the_shipped_training_plan_meets_every_expectation():
    from fedaudit.plans import plan_path

    with plan_path("training-audits") as path:
        report = run_plan(path)
    assert [c.verdict for c in report.claims] == ["PASS"] * 4, [c.summary for c in report.claims]


def test_the_former_kind_name_fedavg_dp_still_loads_with_one_warning():
    """Issue #24: one spelling of DP-FedAvg. A plan naming the kind ``fedavg-dp`` loads, with one
    DeprecationWarning (the CLI prints it as a note), and records the kind as ``dp-fedavg``; the
    old class path still resolves."""
    with pytest.warns(DeprecationWarning, match=r"kind 'fedavg-dp' is deprecated; use 'dp-fedavg'"):
        p = load_plan(plan({**AVG, "kind": "fedavg-dp"}))
    assert [c.kind for c in p.claims] == ["dp-fedavg"]
    assert load_plan(plan(AVG)).claims == p.claims
    from fedaudit.experiments.kinds.dp_fedavg import DPFedAvg

    with pytest.warns(DeprecationWarning, match="FedAvgDP is deprecated"):
        from fedaudit.experiments.kinds.fedavg_dp import FedAvgDP
    assert FedAvgDP is DPFedAvg
