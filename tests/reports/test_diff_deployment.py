"""``fedaudit diff`` compares deployment facts and self-tests (issue #26 §4 with §1 and §5).

Real reports: a small accounting plan (the fastest claim kind) with a ``[deployment]`` table,
run three times: as it is, with the privacy unit changed from client to example (a smaller
unit: a privacy regression, exit 1, naming the fact, and the hazard it opens), and with only
neutral facts changed (the curator, what is composed: exit 0, reported). A tampered report is
still refused (exit 2). The order of the facts' values (:data:`fedaudit.reports.deployment.FACT_ORDER`)
and the self-test rule (passed → failed is worse, a record that disappears is changed) are
checked on their own, and report strings in the new rows are escaped in every format.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from tests.helpers import run_diff, run_report_plans
from fedaudit.experiments.rederive import tracked_of
from fedaudit.reports import KEY_ENV, read_report
from fedaudit.reports.deployment import fact_change
from fedaudit.reports.diff import compare_reports
from fedaudit.reports.diff_render import render_diff
from fedaudit.reports.self_tests import self_test_record

PLAN = """
[plan]
title = "diff deployment"
seed = 1

[deployment]
curator = "{curator}"
privacy_unit = "{unit}"
neighbouring = "replace-one"
dp_flavour = "approximate"
trust_model = "local"
unprotected = []

[deployment.accounting]
composed = "{composed}"
sampling = "none"
accountant = "basic"

[deployment.implementation]
randomness = "csprng"
noise = "laplace"
dtype = "float64"
float_mitigation = "snapping"
clipping = "on-device"

[[claim]]
id = "lap-budget"
kind = "accounting"
mechanism = "laplace"
dim = 1
epsilon = 1.0
rounds = 10
accountant = "basic"
max_epsilon = 20.0
curve_points = 2
"""
BASE = {"curator": "team a", "unit": "client", "composed": "10 rounds of one report per client"}
PLANS = {
    "base": PLAN.format(**BASE),
    "example": PLAN.format(**{**BASE, "unit": "example"}),
    "neutral": PLAN.format(**{**BASE, "curator": "team b", "composed": "10 rounds; no other release"}),
}


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: report folder} of the three plans, each run for real (report.json and report.md)."""
    return run_report_plans(tmp_path_factory.mktemp("diffdep"), PLANS)


diff = run_diff


def test_a_smaller_privacy_unit_is_a_privacy_regression_naming_the_fact(runs, capsys):
    code, out, _ = diff(capsys, runs["base"], runs["example"])
    assert code == 1
    first = out.splitlines()[0]
    assert "deployment: 2 worse (deployment privacy_unit client → example; deployment hazard unit-too-small " \
           "newly present)" in first
    assert "(deployment)  deployment privacy_unit" in out and "worse: a smaller privacy unit" in out
    assert out.rstrip().splitlines()[-1] == (
        "regression (a deployment fact got worse, --fail-on privacy): deployment privacy_unit, "
        "deployment hazard unit-too-small")
    assert diff(capsys, runs["base"], runs["example"], "--fail-on", "none")[0] == 0
    # the reverse is better: exit 0
    code, out, _ = diff(capsys, runs["example"], runs["base"])
    assert code == 0 and "deployment: 2 better" in out.splitlines()[0]
    data = json.loads(diff(capsys, runs["base"], runs["example"], "--format", "json")[1])
    assert data["regressions"] == ["deployment privacy_unit", "deployment hazard unit-too-small"]
    unit = data["deployment"][0]
    assert (unit["key"], unit["old"], unit["new"], unit["assessment"]) == ("privacy_unit", "client", "example",
                                                                         "worse")
    md = diff(capsys, runs["base"], runs["example"], "--format", "markdown")[1]
    assert "| (deployment) | deployment privacy\\_unit | client | example | 🔺 worse: a smaller privacy unit" in md
    page = diff(capsys, runs["base"], runs["example"], "--format", "html")[1]
    assert '<tr class="worse"><td>(deployment)</td><td>deployment privacy_unit</td>' in page


def test_a_neutral_change_of_facts_is_reported_and_exit_0(runs, capsys):
    code, out, _ = diff(capsys, runs["base"], runs["neutral"])
    assert code == 0
    first = out.splitlines()[0]
    assert "deployment: 2 changed (deployment curator team a → team b; deployment accounting.composed 10 rounds " \
           "of one report per client → 10 rounds; no other release)" in first
    assert out.rstrip().splitlines()[-1] == "no regression under --fail-on privacy"


def test_a_tampered_fact_is_still_exit_2(runs, tmp_path, capsys):
    forged = tmp_path / "forged"
    shutil.copytree(runs["example"], forged)
    path = forged / "report.json"
    text = path.read_text(encoding="utf-8")
    assert text.count('"privacy_unit": "example"') >= 1
    path.write_text(text.replace('"privacy_unit": "example"', '"privacy_unit": "client"'), encoding="utf-8")
    code, out, err = diff(capsys, runs["base"], forged)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert f"NEW report {forged} is not intact: digest" in err


# ------------------------------------------------------------------------------ the rules
@pytest.mark.parametrize("key, old, new, expected", [
    ("privacy_unit", "client", "example", "worse"),
    ("privacy_unit", "user-day", "record", "worse"),
    ("privacy_unit", "example", "user", "better"),
    ("privacy_unit", "patient-visit", "example", "changed"),  # a unit fedaudit cannot classify
    ("privacy_unit", None, "example", "changed"),  # stated now: the hazards judge the unstated side
    ("neighbouring", "replace-one", "add-remove", "changed"),
    ("neighbouring", "add-remove", "replace-one", "changed"),
    ("dp_flavour", "pure", "approximate", "worse"),
    ("dp_flavour", "zcdp", "pure", "better"),
    ("dp_flavour", "renyi", "zcdp", "changed"),
    ("trust_model", "local", "central", "worse"),
    ("trust_model", "shuffled", "central", "worse"),
    ("trust_model", "central", "secure-aggregation", "better"),
    ("trust_model", "shuffled", "secure-aggregation", "changed"),
    ("unprotected", [], ["round count"], "worse"),
    ("unprotected", ["round count", "loss"], ["loss"], "better"),
    ("unprotected", None, ["loss"], "changed"),
    ("unprotected", ["loss", "count"], ["count", "loss"], "changed"),
    ("implementation.randomness", "csprng", "numpy-pcg64", "worse"),
    ("implementation.randomness", "torch", "os-urandom", "better"),
    ("implementation.randomness", "numpy", "torch", "changed"),
    ("max_contributions", 5, 50, "worse"),
    ("accounting.accountant", "rdp", "pld", "changed"),
    ("accounting.sampling", "poisson", "none", "changed"),
])
def test_the_declared_order_of_fact_values(key, old, new, expected):
    assessment, why = fact_change(key, old, new)
    assert assessment == expected
    if key == "neighbouring":
        assert "review" in why
    if expected == "worse":
        assert why


def _with(report, claim_id, **changes):
    return dataclasses.replace(report, claims=[dataclasses.replace(c, **changes) if c.id == claim_id else c
                                               for c in report.claims])


def _null(value):
    return self_test_record("null", "null", {"statistic": "ε", "bound": "lower", "value": value, "rule": "at_most",
                                              "threshold": 0.0})


def test_a_self_test_that_broke_is_worse_and_one_that_disappeared_changed(runs):
    base = read_report(runs["base"])
    passing, failing = _with(base, "lap-budget", self_tests=[_null(0.0)]), \
        _with(base, "lap-budget", self_tests=[_null(0.4)])
    d = compare_reports(passing, failing, tracked=tracked_of)
    claim = d.claims[0]
    assert claim.status == "worse" and claim.self_tests[0].assessment == "worse" and d.exit_code() == 1
    assert "1 worse (lap-budget: self-test null passed (ε ≥ 0.000) → failed (ε ≥ 0.400))" in d.summary()
    md = render_diff(d, "markdown")
    assert "| lap-budget | self-test null | passed (ε ≥ 0.000) | failed (ε ≥ 0.400) | 🔺 worse: the auditor" in md
    assert compare_reports(failing, passing, tracked=tracked_of).claims[0].status == "better"
    # another observation with the same outcome is not a change (the self-test's rule judges it)
    assert compare_reports(failing, _with(base, "lap-budget", self_tests=[_null(0.9)]), tracked=tracked_of).unchanged
    gone = compare_reports(passing, _with(base, "lap-budget", self_tests=[]), tracked=tracked_of)
    assert gone.claims[0].status == "changed" and gone.exit_code() == 0
    assert gone.claims[0].self_tests[0].to_dict()["new_set"] is False
    assert "no longer recorded" in render_diff(gone, "text")


def test_a_claim_override_is_its_own_row_and_a_plan_change_is_one_row(runs):
    base = read_report(runs["base"])
    dep = json.loads(json.dumps(base.deployment))
    dep["claims"][0]["facts"]["trust_model"] = "shuffled"  # the claim's own fact moved, the plan's did not
    d = compare_reports(base, dataclasses.replace(base, deployment=dep), tracked=tracked_of)
    assert [(f.key, f.assessment) for f in d.claims[0].deployment] == [("trust_model", "worse")]
    assert d.deployment == () and d.regressions() == ["lap-budget"]
    example = read_report(runs["example"])
    d = compare_reports(base, example, tracked=tracked_of)
    assert d.claims[0].deployment == ()  # moved as the plan's: shown once, as the plan's
    # an older report without the deployment object: one "changed" row, no regression by itself
    older = compare_reports(dataclasses.replace(base, deployment=None), base, tracked=tracked_of)
    assert [(f.key, f.assessment) for f in older.deployment] == [("deployment facts", "changed")]


def test_report_strings_in_the_new_rows_are_escaped(runs):
    base = read_report(runs["base"])
    dep = json.loads(json.dumps(base.deployment))
    dep["plan"]["curator"] = "x\x1b[2J<script>alert(1)</script>"
    evil = dict(_null(0.4), name="n\x1b]8;;<img src=x onerror=alert(1)>")
    d = compare_reports(_with(base, "lap-budget", self_tests=[_null(0.0)]),
                        _with(dataclasses.replace(base, deployment=dep), "lap-budget", self_tests=[evil]),
                        tracked=tracked_of)
    for fmt in ("text", "markdown", "html", "json"):
        text = render_diff(d, fmt)
        assert "\x1b" not in text, fmt
        if fmt in ("markdown", "html"):
            assert "<script>" not in text and "<img" not in text, fmt
