"""Claim kind ``accounting``: a mechanism's reports composed over a schedule, against a budget.

The composed ε is checked against independent computations: k·ε for basic composition, the
exact k-fold randomized-response curve summed here with scipy (for advanced and PLD), the
binomial tail of the participation count, and the published Feldman–McMillan–Talwar number
for shuffling (n = 1e5, ε0 = 4, δ = 1e-6: ε in [0.1675, 0.1728])."""

from __future__ import annotations

import copy
import json
import math

import jsonschema
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom

from fedaudit.errors import FedAuditError
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan
from fedaudit.reports import load_schema
from fedaudit.reports.plots import render_png

RR = {"id": "rr", "kind": "accounting", "mechanism": "rr", "dim": 2, "epsilon": 1.0, "rounds": 50,
      "max_epsilon": 30.0, "curve_points": 8}


def plan(*claims):
    return {"plan": {"title": "accounting", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


def run(**overrides):
    report = run_plan(plan({**RR, **overrides}))
    (claim,) = report.claims
    assert claim.error is None, claim.error
    return claim, report


def rr_composed_epsilon(k: int, eps: float, delta: float) -> float:
    """ε at δ of k-fold ε-randomized response, from its privacy-loss distribution: under the
    first input the loss is ε(k − 2I), I ~ Bin(k, 1/(1 + e^ε)), and δ(ε') = E[(1 − e^{ε' − L})₊]."""
    i = np.arange(k + 1)
    pmf = binom.pmf(i, k, 1 / (1 + math.exp(eps)))
    loss = eps * (k - 2 * i)

    def excess(e):
        return float(np.sum(pmf * -np.expm1(np.minimum(e - loss, 0.0)))) - delta  # (1 − e^{ε − L})₊

    return brentq(excess, 0.0, k * eps - 1e-9, xtol=1e-12)


def kary_rr_composed_epsilon(k: int, cats: int, eps: float, delta: float) -> float:
    """ε at δ of k reports of ``cats``-ary ε-RR on the worst pair x ≠ x': each report's loss is +ε
    (output x, prob e^ε/Z), −ε (output x', 1/Z) or 0 (another category, (cats − 2)/Z) under the
    first input, Z = e^ε + cats − 1; the k-fold loss law is their k-fold convolution."""
    z = math.exp(eps) + cats - 1
    one = np.array([1 / z, (cats - 2) / z, math.exp(eps) / z])  # loss −ε, 0, +ε
    pmf = np.array([1.0])
    for _ in range(k):
        pmf = np.convolve(pmf, one)
    loss = eps * np.arange(-k, k + 1)

    def excess(e):
        return float(np.sum(pmf * -np.expm1(np.minimum(e - loss, 0.0)))) - delta  # (1 − e^{ε − L})₊

    return brentq(excess, 0.0, k * eps - 1e-9, xtol=1e-12)


def test_pld_uses_the_mechanisms_own_loss_distribution():
    claim, _ = run(dim=5, accountant="pld", target_delta=1e-6)
    ev = claim.evidence
    exact = kary_rr_composed_epsilon(50, 5, 1.0, 1e-6)
    assert exact - 1e-6 <= ev["epsilon"] <= exact + 50 * 1e-4
    # 5-ary RR leaks less than the worst ε-DP pair: below the (exact) advanced composition of its ε
    assert ev["epsilon"] < ev["references"]["advanced"]["epsilon"] - 1.0
    assert "own privacy loss distribution" in ev["per_round"]["pld"]


def test_basic_composition_is_k_times_epsilon_with_no_delta():
    claim, _ = run(accountant="basic", target_delta=0.0, max_epsilon=50.0)
    ev = claim.evidence
    assert ev["epsilon"] == pytest.approx(50.0) and ev["delta"] == 0.0 and claim.verdict == "PASS"
    assert ev["schedule"]["reports_charged"] == 50
    assert ev["references"]["advanced"]["note"] == "needs δ > 0"  # no finite advanced/PLD ε at δ = 0


@pytest.mark.parametrize("method", ["advanced", "pld"])
def test_advanced_and_pld_match_the_exact_randomized_response_curve(method):
    claim, _ = run(accountant=method, target_delta=1e-6)
    ev = claim.evidence
    exact = rr_composed_epsilon(50, 1.0, 1e-6)
    # advanced is exact for equal ε; PLD rounds the loss up on a 1e-4 grid (≤ 50·1e-4 above)
    assert exact - 1e-6 <= ev["epsilon"] <= exact + (1e-6 if method == "advanced" else 50 * 1e-4)
    assert ev["epsilon"] < 50.0 and ev["references"]["basic"]["epsilon"] == pytest.approx(50.0)
    other = "pld" if method == "advanced" else "advanced"
    assert ev["references"][other]["epsilon"] == pytest.approx(exact, abs=50 * 1e-4)
    assert claim.verdict == "FAIL" and "EXCEEDS the budget ε = 30" in claim.summary  # 30 < exact ≈ 36


def test_the_budget_decides_the_verdict_under_both_expectations():
    exact = rr_composed_epsilon(50, 1.0, 1e-6)
    under, _ = run(max_epsilon=exact - 0.05)
    over, _ = run(max_epsilon=exact + 0.05)
    caught, _ = run(max_epsilon=exact - 0.05, expect="violation")
    assert (under.verdict, over.verdict, caught.verdict) == ("FAIL", "PASS", "PASS")
    assert over.evidence["margin"] == pytest.approx(0.05, abs=50 * 1e-4)


def test_sampling_does_not_amplify_local_dp_unless_the_tail_is_accounted():
    full, _ = run(accountant="basic", target_delta=0.0, max_epsilon=100.0)
    sampled, _ = run(accountant="basic", target_delta=0.0, max_epsilon=100.0, sampling=0.1)
    assert sampled.evidence["epsilon"] == full.evidence["epsilon"] == pytest.approx(50.0)
    assert "does not amplify local DP" in sampled.summary
    tail, _ = run(accountant="basic", sampling=0.1, participation="tail", target_delta=1e-6, max_epsilon=100.0)
    sched = tail.evidence["schedule"]
    k = sched["reports_charged"]
    # k is the smallest count whose binomial tail is at most δ/2 (checked on scipy directly)
    assert binom.sf(k, 50, 0.1) <= 0.5e-6 < binom.sf(k - 1, 50, 0.1)
    assert sched["tail_delta"] == pytest.approx(binom.sf(k, 50, 0.1))
    assert tail.evidence["epsilon"] == pytest.approx(k * 1.0) and k < 50
    assert tail.evidence["delta"] <= 1e-6 and f"{k} of 50 rounds charged" in tail.summary


def test_one_shuffled_round_lands_in_the_published_interval():
    claim, _ = run(mechanism="rr", epsilon=4.0, rounds=1, shuffle_n=100_000, accountant="basic", max_epsilon=1.0,
                   target_delta=1e-6)
    ev = claim.evidence
    assert 0.1675 <= ev["epsilon"] <= 0.1728 and ev["per_round"]["shuffle"]["amplified"]
    assert ev["delta"] == pytest.approx(1e-6) and claim.verdict == "PASS"


def test_shuffled_rounds_compose_and_advanced_beats_basic_over_many_rounds():
    claim, _ = run(epsilon=2.0, rounds=200, shuffle_n=100_000, accountant="advanced", max_epsilon=20.0)
    ev = claim.evidence
    per_round = ev["per_round"]
    assert per_round["shuffled"] and 0 < per_round["epsilon"] < 2.0 and per_round["delta_share"] in (
        0.1, 0.25, 0.5, 0.75, 0.9)
    assert per_round["delta"] == pytest.approx(per_round["delta_share"] * 1e-6 / 200)
    assert ev["epsilon"] < ev["references"]["basic"]["epsilon"] < 200 * 2.0
    assert ev["epsilon"] < 200 * per_round["epsilon"]


def test_no_amplification_is_stated_and_charged_as_eps0():
    with _no_warning():
        claim, _ = run(epsilon=8.0, rounds=3, shuffle_n=10_000, accountant="basic", max_epsilon=30.0)
    ev = claim.evidence
    assert ev["per_round"] == {**ev["per_round"], "type": "pure-ldp", "epsilon": 8.0}
    assert ev["epsilon"] == pytest.approx(24.0) and "shuffling certifies no amplification" in claim.summary


class _no_warning:
    """The kind states shuffle_epsilon's warning in the evidence instead of letting it escape."""

    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings(record=True)
        self.caught = self._ctx.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)
        assert not [w for w in self.caught if "shuffle_epsilon" in str(w.message)]
        return False


def test_the_curve_is_monotone_ends_at_the_composed_value_and_renders():
    claim, report = run(rounds=120, curve_points=12, accountant="pld")
    ev, (plot,) = claim.evidence, claim.plots
    xs, ys = ev["curve"]["rounds"], ev["curve"]["epsilon"]
    assert xs[0] == 1 and xs[-1] == 120 and len(xs) == 12 and ys[-1] == ev["epsilon"]
    assert all(b >= a - 1e-9 for a, b in zip(ys, ys[1:]))  # more rounds never lower ε
    assert ys[0] == pytest.approx(1.0, abs=1e-3)  # one report of 1-RR costs ε = 1
    assert plot["type"] == "epsilon_vs_steps" and plot["epsilon_claimed"] == 30.0 and plot["steps"] == xs
    basic = plot["references"]["basic composition"]
    assert basic == pytest.approx([float(x) for x in xs])
    assert render_png(plot).startswith(b"\x89PNG")
    jsonschema.validate(json.loads(json.dumps(report.seal().to_dict())), load_schema())


def test_an_approximate_dp_mechanism_spends_its_delta():
    claim, _ = run(mechanism="gaussian", epsilon=0.5, delta=1e-5, rounds=20, accountant="basic", target_delta=1e-5,
                   max_epsilon=100.0)
    assert math.isinf(claim.evidence["epsilon"]) and claim.verdict == "FAIL"  # Σδ = 2e-4 > 1e-5
    ok, _ = run(mechanism="gaussian", epsilon=0.5, delta=1e-7, rounds=20, accountant="basic", target_delta=1e-5,
                max_epsilon=100.0)
    assert ok.evidence["epsilon"] == pytest.approx(10.0) and ok.evidence["delta"] == pytest.approx(20 * 1e-7)


@pytest.mark.parametrize("overrides, pattern", [
    ({"rounds": 0}, r"key 'rounds' must be an integer in \[1, 1000000\], got 0"),
    ({"sampling": 0.0}, r"key 'sampling' must be a number in \(0, 1\], got 0.0"),
    ({"sampling": 1.5}, r"key 'sampling' must be a number in \(0, 1\]"),
    ({"target_delta": 1.0}, r"key 'target_delta' must be a number in \[0, 1\)"),
    ({"max_epsilon": -1}, r"key 'max_epsilon' must be a number > 0"),
    ({"accountant": "gdp"}, r"key 'accountant' must be one of 'basic', 'advanced', 'pld', 'rdp', 'prv', 'dpa-rdp', "
                            r"'shuffle', 'blanket', got 'gdp'$"),
    ({"accountant": "rdp"}, r"key 'accountant' 'rdp' does not account the mechanism's reports under replace-one "
                            r"neighbours \(events RandomizedResponseDpEvent, EpsilonDeltaDpEvent\); those that do: "
                            r"basic, advanced, pld, dpa-rdp$"),
    ({"mechanism": "rrr"}, r"key 'mechanism' is not a mechanism: unknown mechanism 'rrr' \(did you mean 'rr'\?\)"),
    ({"mechanism": "gaussian", "shuffle_n": 1000}, r"key 'shuffle_n' needs a pure ε-LDP mechanism"),
    ({"shuffle_n": 0}, r"key 'shuffle_n' must be an integer >= 1, got 0"),
    ({"participation": "tail"}, r"key 'participation' 'tail' needs sampling < 1"),
    ({"target_delta": 0.0}, r"key 'target_delta' = 0 \(pure ε\) needs key 'accountant' = 'basic'; give a δ in"),
    ({"target_delta": 0.0, "accountant": "basic", "shuffle_n": 100},
     r"key 'target_delta' = 0 \(pure ε\) needs no shuffling \(key 'shuffle_n' unset\)"),
    ({k: None for k in ("max_epsilon",)}, r"missing required key 'max_epsilon'"),
])
def test_bad_schedules_are_refused_when_the_plan_is_loaded(overrides, pattern):
    claim = {**RR, **overrides}
    claim = {k: v for k, v in claim.items() if v is not None}
    with pytest.raises(FedAuditError, match=r"^claim 'rr' \(#1\): " + pattern):
        load_plan(plan(claim))


def test_default_title_states_the_schedule_and_budget():
    p = load_plan(plan({k: v for k, v in {**RR, "sampling": 0.5, "shuffle_n": 1000}.items()}))
    assert p.claims[0].title == ("rr (ε=1) over 50 rounds at sampling 0.5, shuffled in batches of 1000 must "
                                 "stay within ε = 30 at δ = 1e-06 (PLD)")


def test_the_shipped_accounting_plan_meets_every_expectation():
    from fedaudit.plans import available, plan_path

    assert "accounting" in available()
    with plan_path("accounting") as path:
        report = run_plan(path)
    assert [c.verdict for c in report.claims] == ["PASS"] * len(report.claims) and len(report.claims) == 4
    by = {c.id: c.evidence for c in report.claims}
    # the tail charges fewer rounds than the worst case, and the shuffler beats basic composition of ε0
    assert by["krr-sampled-tail"]["schedule"]["reports_charged"] < 100
    assert by["shuffled-rr"]["epsilon"] < 50 * 4.0 / 10
    assert by["laplace-over-budget"]["epsilon"] > 20.0


def test_a_mechanism_without_its_own_pld_is_charged_its_claims_dominating_pair():
    claim, _ = run(mechanism="sstq", dim=16, epsilon=1.0, accountant="pld")
    ev = claim.evidence
    # the generic ε-DP pair is binary RR: the exact k-fold RR curve, within the PLD's discretisation
    exact = rr_composed_epsilon(50, 1.0, 1e-6)
    assert exact - 1e-6 <= ev["epsilon"] <= exact + 50 * 1e-4 and "dominating pair" in ev["per_round"]["pld"]
    sketch, _ = run(mechanism="sstq-sketch", dim=16, epsilon=1.0, accountant="pld")
    assert "is kept as published and is NOT LDP" in sketch.summary
    # …and it is a caveat next to the verdict (issue #22): a budget met by a claim that does not hold
    assert len(sketch.caveats) == 1 and "is kept as published and is NOT LDP" in sketch.caveats[0]
    assert claim.caveats == [] and sketch.guarantee == "privacy"


def test_the_privacy_blanket_for_k_ary_randomized_response():
    import warnings

    from fedaudit.accounting import blanket_epsilon

    claim, _ = run(dim=4, epsilon=4.0, rounds=10, shuffle_n=100_000, shuffle_method="blanket", accountant="basic",
                   max_epsilon=20.0)
    ev = claim.evidence
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # amplified: no warning
        direct = blanket_epsilon(100_000, "krr", 4.0, 1e-7, k=4)
    assert ev["per_round"]["shuffle"]["gamma"] == pytest.approx(4 / (math.exp(4.0) + 3))  # k/(e^ε0 + k − 1)
    assert ev["epsilon"] == pytest.approx(10 * direct.epsilon) and direct.epsilon < 4.0
    with pytest.raises(FedAuditError, match=r"key 'shuffle_method' 'blanket' is the privacy blanket of k-ary"):
        load_plan(plan({**RR, "mechanism": "laplace", "dim": 1, "shuffle_n": 1000, "shuffle_method": "blanket"}))


def test_pld_is_refused_beyond_its_memory_budget_and_dropped_as_a_reference():
    with pytest.raises(FedAuditError, match=r"key 'accountant' 'pld' composes at most a total loss rounds × ε = 250"):
        load_plan(plan({**RR, "rounds": 1000, "accountant": "pld"}))
    claim, _ = run(rounds=1000, accountant="advanced", max_epsilon=1000.0)
    ev = claim.evidence
    assert ev["epsilon"] == pytest.approx(rr_composed_epsilon(1000, 1.0, 1e-6), abs=1e-6)
    assert ev["references"]["pld"]["epsilon"] is None and "exceeds a total loss of 250" in ev["references"]["pld"]["note"]
    assert set(claim.plots[0]["references"]) == {"basic composition"}


class _SummedClaims:
    """A user's accountant for the accounting kind: basic composition of (ε, δ) claims (Σε while Σδ
    is within the δ asked for), so its number is known in closed form."""

    def __init__(self, neighboring_relation):
        self.neighboring_relation, self.epsilon, self.delta = neighboring_relation, 0.0, 0.0
        self.ledger = None

    def supports(self, event):
        from fedaudit.accounting.events import EpsilonDeltaDpEvent

        inner = getattr(event, "event", event)  # one SelfComposedDpEvent deep, as the kind composes
        return isinstance(inner, EpsilonDeltaDpEvent)

    def compose(self, event, count=1):
        if not self.supports(event):
            from dp_accounting.privacy_accountant import UnsupportedEventError

            raise UnsupportedEventError(f"summed claims only, not {event}")
        times = count * getattr(event, "count", 1)
        inner = getattr(event, "event", event)
        self.epsilon += times * inner.epsilon
        self.delta += times * inner.delta
        return self

    def get_epsilon(self, target_delta):
        return self.epsilon if self.delta <= target_delta else math.inf

    def get_delta(self, target_epsilon):
        return self.delta if target_epsilon >= self.epsilon else 1.0


@pytest.fixture
def summed():
    from fedaudit.accounting import ACCOUNTANTS

    ACCOUNTANTS.register("summed-claims", _SummedClaims)
    yield "summed-claims"
    ACCOUNTANTS.unregister("summed-claims")


def test_a_registered_accountant_is_named_in_a_plan_and_on_the_cli(summed, tmp_path, capsys):
    """The accountant key takes any name of ACCOUNTANTS: a user's accountant registered once runs from
    a plan claim and from ``fedaudit audit accounting --accountant NAME`` (the flag generated from
    the key), with the same evidence; an unknown name is one line listing the registered ones."""
    from fedaudit.cli import main

    claim, _ = run(accountant=summed, rounds=20, curve_points=4)
    ev = claim.evidence
    assert ev["method"] == summed and ev["epsilon"] == pytest.approx(20 * 1.0)  # Σε of 20 reports of 1-RR
    assert ev["per_round"]["event"] == "the event of the mechanism's (ε, δ) claim"  # it refuses RR's own event
    assert set(ev["references"]) == {"basic", "advanced", "pld"}
    assert claim.title.endswith(f"({summed})") and f"({summed};" in claim.summary
    out = tmp_path / "cli.json"
    argv = ["audit", "accounting", "--mechanism", "rr", "--dim", "2", "--rounds", "20", "--max-epsilon", "30",
            "--curve-points", "4", "--quiet", "--json", str(out)]
    assert main([*argv, "--accountant", summed]) == 0
    cli = json.loads(out.read_text(encoding="utf-8"))
    assert cli["evidence"]["method"] == summed and cli["evidence"]["epsilon"] == ev["epsilon"]
    assert summed in capsys.readouterr().out
    assert main([*argv, "--accountant", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--accountant must be one of 'basic', 'advanced', 'pld'" in err[0]
    assert f"'{summed}', got 'nope'" in err[0]
