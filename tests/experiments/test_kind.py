"""Claim kinds are plugins: a kind registered by a user (or named "module:Class") runs end to end
in a plan — validated keys, its own cross-check and title, the runner's rng, a report that
renders and verifies — and mechanisms and aggregators named "module:attr" run in plans."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Evidence, verdict
from fedaudit.experiments.keys import Key, key_error
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind, register_claim_kind
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.plan_reference import markdown
from fedaudit.experiments.runner import run_plan, run_plan_to_dir
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.reports import render_html, render_markdown, verify_report


class Coin(ClaimKind):
    """Flip a biased coin ``flips`` times and check that the observed rate stays below ``max_rate``.

    A test kind: the rate is exact in distribution, so a fixed seed fixes the verdict."""

    name = "coin"
    unit = "flips"
    figures = ("curves",)

    def keys(self):
        return {"p": Key("float", 0.5, low=0, high=1, help="probability of heads"),
                "flips": Key("int", 1000, low=10, help="number of flips"),
                "max_rate": Key("float", low=0, high=1, help="largest acceptable rate of heads")}

    def cross_check(self, where, params, expect):
        if params["max_rate"] < params["p"] / 10:
            raise key_error(where, "max_rate", f"must be at least p/10 = {params['p'] / 10:g}")

    def default_title(self, params, expect):
        return f"a {params['p']:g}-coin shows at most {params['max_rate']:g} heads"

    def work_units(self, params):
        return params["flips"]

    def run(self, spec, rng, progress, *, workdir=None):
        p = spec.params
        flips = rng.random(p["flips"]) < p["p"]
        progress(p["flips"])
        rate = float(flips.mean())
        running = np.cumsum(flips) / np.arange(1, flips.size + 1)
        idx = np.unique(np.geomspace(1, flips.size, 20).astype(int)) - 1
        plots = ({"type": "curves", "title": "running rate of heads", "x_label": "flips", "y_label": "rate",
                  "log_y": False, "series": {"rate": {"x": (idx + 1).tolist(), "y": running[idx].tolist()}},
                  "hlines": {"max_rate": p["max_rate"]}},)
        holds = rate <= p["max_rate"]
        return Evidence(holds=holds, violated=not holds, evidence={"rate": rate, "heads": int(flips.sum())},
                        summary=f"rate of heads {rate:.3f} vs max_rate {p['max_rate']:g}", plots=plots)


@pytest.fixture
def coin_kind():
    register_claim_kind(Coin)
    yield
    CLAIM_KINDS.unregister("coin")


def plan(*claims, seed=0):
    return {"plan": {"title": "plugins", "seed": seed}, "claim": [copy.deepcopy(c) for c in claims]}


FAIR = {"id": "fair", "kind": "coin", "p": 0.5, "flips": 4000, "max_rate": 0.55}
BIASED = {"id": "biased", "kind": "coin", "p": 0.7, "flips": 4000, "max_rate": 0.55, "expect": "violation"}


def test_a_registered_kind_runs_end_to_end_and_its_report_verifies(coin_kind, tmp_path):
    report, paths = run_plan_to_dir(plan(FAIR, BIASED), tmp_path / "out")
    fair, biased = report.claims
    assert (fair.verdict, biased.verdict) == ("PASS", "PASS") and report.overall == "PASS"
    assert fair.kind == "coin" and fair.title == "a 0.5-coin shows at most 0.55 heads"
    assert 0.45 < fair.evidence["rate"] < 0.55 < 0.65 < biased.evidence["rate"]
    # the runner appends the plan's parameters after the results
    assert list(fair.evidence) == ["rate", "heads", "parameters"]
    assert fair.evidence["parameters"] == {"p": 0.5, "flips": 4000, "max_rate": 0.55}
    # the kind's rng is default_rng(claim seed): the numbers follow from the plan alone
    expected = int((np.random.default_rng(fair.seed).random(4000) < 0.5).sum())
    assert fair.evidence["heads"] == expected
    check = verify_report(tmp_path / "out")
    assert check.ok, check.problems
    assert "running rate of heads" in render_markdown(report) and "<img" in render_html(report)
    assert {"report.json", "report.html"} <= {p.name for p in paths.values()}


def test_a_registered_kind_gets_key_checks_cross_checks_and_docs(coin_kind):
    with pytest.raises(FedAuditError, match=r"^claim 'fair' \(#1\): key 'p' must be a number in \[0, 1\], got 2$"):
        load_plan(plan({**FAIR, "p": 2}))
    with pytest.raises(FedAuditError, match=r"^claim 'fair' \(#1\): unknown key 'flip' \(did you mean 'flips'\?\)"):
        load_plan(plan({**FAIR, "flip": 3}))
    with pytest.raises(FedAuditError, match=r"^claim 'fair' \(#1\): key 'max_rate' must be at least p/10"):
        load_plan(plan({**FAIR, "max_rate": 0.01}))
    text = markdown()
    assert "## Kind `coin`" in text and "Flip a biased coin" in text and "| `max_rate` |" in text


def test_a_kind_named_by_reference_runs_without_registration():
    report = run_plan(plan({**FAIR, "kind": f"{__name__}:Coin"}))
    (c,) = report.claims
    assert c.error is None and c.verdict == "PASS" and c.kind == f"{__name__}:Coin"


def test_unknown_and_broken_kinds_are_refused():
    with pytest.raises(FedAuditError, match=r"key 'kind' must be one of 'accounting', .*'convergence', .*'ldp', .*got 'cion'"):
        load_plan(plan({**FAIR, "kind": "cion"}))
    with pytest.raises(FedAuditError, match=r"key 'kind' names no usable claim kind: .*ClaimKind subclass"):
        load_plan(plan({**FAIR, "kind": "fedaudit.mechanisms.laplace:Laplace"}))

    class Pie(Coin):
        name = "pie"
        figures = ("pie_chart",)

    with pytest.raises(FedAuditError, match="plot type 'pie_chart', which the reports cannot render"):
        register_claim_kind(Pie)
    assert "pie" not in CLAIM_KINDS.names()


def test_verdict_follows_expect_and_inconclusive():
    ev = Evidence(holds=False, violated=True, evidence={}, summary="")
    assert verdict("pass", ev) == "FAIL" and verdict("violation", ev) == "PASS"
    weak = Evidence(holds=True, violated=False, evidence={}, summary="", inconclusive=True)
    assert verdict("pass", weak) == verdict("violation", weak) == "INCONCLUSIVE"


def test_builtin_kinds_declare_units_and_figures_the_reports_draw():
    from fedaudit.reports.model import PLOT_TYPES

    for name in ("ldp", "variance", "robustness", "stress", "convergence", "accounting", "dpsgd", "dp-fedavg"):
        kind = claim_kind(name)
        assert kind.name == name and kind.unit and set(kind.figures) <= set(PLOT_TYPES)


def laplace_factory(dim, epsilon, *, clip=1.0):
    """A user's mechanism factory, named "MODULE:laplace_factory" in a plan (MODULE: this one)."""
    return Laplace(dim, epsilon, clip=clip)


def test_module_attr_mechanism_and_aggregator_run_in_a_plan():
    ldp = {"id": "mine", "kind": "ldp", "mechanism": f"{__name__}:laplace_factory", "dim": 4,
           "samples": 4000, "curve": False}
    rob = {"id": "rule", "kind": "robustness", "aggregator": "fedaudit.defenses.aggregators:CWTM", "n": 7, "f": 1,
           "trials": 8, "attacks": ["alie"], "search_evals": 0}
    report = run_plan(plan(ldp, rob))
    mine, rule = report.claims
    assert [c.error for c in report.claims] == [None, None]
    assert mine.verdict == "PASS" and mine.evidence["mechanism"]["name"] == f"{__name__}:laplace_factory"
    assert rule.verdict == "PASS" and rule.evidence["nu_empirical"] >= 0
    with pytest.raises(FedAuditError, match=r"key 'mechanism' is not a mechanism: .*cannot import module 'nope'"):
        load_plan(plan({**ldp, "mechanism": "nope:factory"}))
    with pytest.raises(FedAuditError, match=r"key 'aggregator' is not a valid aggregator"):
        load_plan(plan({**rob, "aggregator": "fedaudit.defenses.aggregators:Nope"}))


def test_fmt_number_states_absent_and_infinite_values():
    from fedaudit.experiments.kind import fmt_number

    assert [fmt_number(v) for v in (None, float("inf"), -float("inf"), 0.123456, 3)] == \
        ["—", "∞", "−∞", "0.1235", "3"]
    assert fmt_number(2.0 / 3, ".3g") == "0.667"
