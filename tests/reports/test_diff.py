"""``fedaudit diff OLD NEW`` (issue #26 §4): privacy regressions between two reports, in CI.

Real reports: a small accounting plan (the fastest claim kind) run twice as it is, once with
the per-report ε doubled (the client's accountant ε doubles and the claim fails its budget), and
once with one claim replaced by another. The comparison must

* say "no change" of two runs of one plan (exit 0);
* name the claim that regressed and the number that moved, first line, exit 1 (0 with
  ``--fail-on none``); an improvement is exit 0; added and removed claims are listed;
* refuse a tampered report (edited number, edited rendering, a verdict resealed against its
  evidence) with one line and exit 2, as ``verify`` would;
* judge a move against the recorded intervals, else against ``--rel-tol``/``--abs-tol``, in the
  direction that is worse for the number (a larger certified lower bound on ε, a smaller accuracy);
* escape what a report holds (ESC sequences, ``<script>``) in text, Markdown and HTML.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest

from tests.helpers import run_diff, run_report_plans
from fedaudit.errors import FedAuditError
from fedaudit.experiments.rederive import tracked_of
from fedaudit.reports import KEY_ENV, Claim, read_report, write_report
from fedaudit.reports.canonical import canonical_json_bytes, digest
from fedaudit.reports.diff import Tolerance, Tracked, assess, compare_reports
from fedaudit.reports.diff_render import render_diff
from fedaudit.reports.io import sign_report
from fedaudit.reports.signatures import generate_keypair, load_signing_key, sign_folder

KRR = """
[[claim]]
id = "krr"
kind = "accounting"
mechanism = "rr"
dim = 4
epsilon = {eps}
rounds = 50
accountant = "advanced"
max_epsilon = 30.0
curve_points = 2
"""
OTHER = """
[[claim]]
id = "{id}"
kind = "accounting"
mechanism = "laplace"
dim = 1
epsilon = 1.0
rounds = 10
accountant = "basic"
max_epsilon = 20.0
curve_points = 2
"""
HEAD = '[plan]\ntitle = "diff"\nseed = 1\n'
PLANS = {
    "base": HEAD + KRR.format(eps=0.5) + OTHER.format(id="lap-budget"),
    "same": HEAD + KRR.format(eps=0.5) + OTHER.format(id="lap-budget"),
    "worse": HEAD + KRR.format(eps=1.0) + OTHER.format(id="lap-budget"),
    "reshaped": HEAD + KRR.format(eps=0.5) + OTHER.format(id="lap-new"),
}


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: report folder} of the four plans, each run for real (report.json and report.md)."""
    return run_report_plans(tmp_path_factory.mktemp("diff"), PLANS)


diff = run_diff


def test_two_runs_of_one_plan_are_no_change(runs, capsys):
    code, out, _ = diff(capsys, runs["base"], runs["same"])
    assert code == 0
    assert out.splitlines()[0].startswith("no change: 2 claim(s) compared")


def test_a_privacy_regression_is_exit_1_naming_the_claim_and_the_number(runs, capsys):
    code, out, _ = diff(capsys, runs["base"], runs["worse"])
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith("1 claim(s) changed: 1 worse (krr: PASS → FAIL, accountant ε ≤ 20.")
    assert "plan changed (krr: epsilon 0.5 → 1)" in first
    assert "beyond ±1.02 (point values, --rel-tol 0.05, --abs-tol 0.01)" in out  # the rule is said
    assert "-epsilon = 0.5\n  +epsilon = 1.0" in out  # the plan's unified diff
    assert out.rstrip().splitlines()[-1] == "regression (a privacy claim got worse, --fail-on privacy): krr"
    assert diff(capsys, runs["base"], runs["worse"], "--fail-on", "none")[0] == 0
    # a tolerance wider than the move: the verdict still got worse
    code, out, _ = diff(capsys, runs["base"], runs["worse"], "--rel-tol", "5")
    assert code == 1 and "1 worse (krr: PASS → FAIL)" in out


def test_an_improvement_is_exit_0(runs, capsys):
    code, out, _ = diff(capsys, runs["worse"], runs["base"] / "report.json")
    assert code == 0
    assert out.splitlines()[0].startswith("1 claim(s) changed: 1 better; plan changed (krr: epsilon 1 → 0.5)")


def test_added_and_removed_claims(runs, capsys):
    code, out, _ = diff(capsys, runs["base"], runs["reshaped"])
    assert code == 0  # no privacy claim got worse
    first = out.splitlines()[0]
    assert "1 added (lap-new)" in first and "1 removed (lap-budget)" in first
    assert diff(capsys, runs["base"], runs["reshaped"], "--fail-on", "any")[0] == 1


def _reseal(folder, edit):
    """Edit report.json's data and recompute its digest (a forger's edit that the digest misses)."""
    path = folder / "report.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    data["digest"] = digest(canonical_json_bytes(data))
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


@pytest.mark.parametrize("tamper", ["number", "rendering", "resealed verdict"])
def test_a_tampered_report_is_exit_2_in_one_line(runs, tmp_path, capsys, tamper):
    folder = tmp_path / "old"
    shutil.copytree(runs["base"], folder)
    if tamper == "number":
        path = folder / "report.json"
        path.write_text(path.read_text(encoding="utf-8").replace('"epsilon": 20.', '"epsilon": 10.', 1),
                        encoding="utf-8")
    elif tamper == "rendering":
        with open(folder / "report.md", "a", encoding="utf-8") as fh:
            fh.write("\nall good\n")
    else:  # the accountant ε made smaller and the digest recomputed: the verdict no longer follows
        _reseal(folder, lambda d: d["claims"][0]["evidence"].update(epsilon=1e6))
    code, out, err = diff(capsys, folder, runs["same"])
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert f"OLD report {folder} is not intact" in err
    assert {"number": "digest", "rendering": "report.md", "resealed verdict": "verdict"}[tamper] in err
    assert diff(capsys, runs["same"], tmp_path / "missing")[0] == 2


def test_signatures_are_checked_with_a_key(runs, tmp_path, capsys):
    signed = tmp_path / "signed"
    shutil.copytree(runs["base"], signed)
    (tmp_path / "k").write_text("a key\n", encoding="utf-8")
    sign_report(signed, b"a key")
    assert diff(capsys, signed, runs["same"])[0] == 0  # without a key: not checked
    code, _, err = diff(capsys, signed, runs["same"], "--key-file", tmp_path / "k")
    assert code == 2 and "NEW report" in err and "unsigned but a key was given" in err
    (tmp_path / "other").write_text("another key\n", encoding="utf-8")
    code, _, err = diff(capsys, signed, signed, "--key-file", tmp_path / "other")
    assert code == 2 and "HMAC-SHA256 does not match" in err
    # Ed25519: both reports must be signed by the public key given
    private, public = tmp_path / "ed.pem", tmp_path / "ed.pub.pem"
    generate_keypair(private, public)
    ed = tmp_path / "ed"
    shutil.copytree(runs["base"], ed)
    sign_folder(ed, load_signing_key(private))
    assert diff(capsys, ed, ed, "--public-key", public)[0] == 0
    code, _, err = diff(capsys, ed, runs["same"], "--public-key", public)
    assert code == 2 and "NEW report" in err and "holds no Ed25519 signature" in err


@pytest.mark.parametrize("flag", ["--rel-tol", "--abs-tol"])
def test_a_negative_tolerance_is_refused(runs, capsys, flag):
    code, _, err = diff(capsys, runs["base"], runs["same"], flag, "-1")
    assert code == 2 and flag in err


def test_formats_and_out_file(runs, tmp_path, capsys):
    target = tmp_path / "diff.json"
    code, out, _ = diff(capsys, runs["base"], runs["worse"], "--format", "json", "--out", target)
    assert code == 1 and out.splitlines()[-1] == f"json: {target}"
    data = json.loads(target.read_text(encoding="utf-8"))
    assert data["exit_code"] == 1 and data["regressions"] == ["krr"]
    krr = data["claims"][0]
    assert krr["verdict_change"] == "worse" and krr["quantities"][0]["assessment"] == "worse"
    assert {"key": "epsilon", "old": 0.5, "new": 1.0, "old_set": True, "new_set": True} in krr["config"]
    code, md, _ = diff(capsys, runs["base"], runs["worse"], "--format", "markdown")
    assert md.startswith("### fedaudit diff: 🔺 regression")
    assert "| krr | verdict | PASS | FAIL | 🔺 worse |" in md and "```diff" in md
    code, page, _ = diff(capsys, runs["base"], runs["worse"], "--format", "html")
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "<script" not in page


# ------------------------------------------------------------------------------ the rules
def test_assess_uses_intervals_then_tolerances_in_the_worse_direction():
    tol = Tolerance(rel=0.05, abs=0.01)
    assert assess(10.0, 10.4, None, None, "higher", tol)[0] == "within noise"
    assert assess(10.0, 10.6, None, None, "higher", tol)[0] == "worse"
    assert assess(10.0, 10.6, None, None, "lower", tol)[0] == "better"  # accuracy: higher is better
    assert assess(0.0, 0.02, None, None, "higher", tol)[0] == "worse"  # abs-tol 0.01 near zero
    assert assess(0.0, 0.005, None, None, "higher", tol)[0] == "within noise"
    # intervals on both sides decide instead of the tolerance
    assert assess(1.0, 1.3, (0.8, 1.2), (1.1, 1.5), "higher", tol)[0] == "within noise"
    worse, basis = assess(1.0, 1.6, (0.8, 1.2), (1.3, 1.9), "higher", tol)
    assert worse == "worse" and "do not overlap" in basis
    assert assess(1.0, math.inf, None, None, "higher", tol)[0] == "worse"
    assert assess(1.0, math.nan, None, None, "higher", tol)[0] == "not comparable"
    assert assess(2.0, 2.0, None, None, "higher", tol)[0] == "same"
    with pytest.raises(FedAuditError, match="--rel-tol"):
        Tolerance(rel=math.inf)


def _with_claims(report, claims):
    return dataclasses.replace(report, claims=claims)


def _ldp(lower, verdict="PASS", ci=None, **extra):
    evidence = {"epsilon_claimed": 2.0, "epsilon_lower": lower, **extra}
    return Claim(id="ldp-sstq", kind="ldp", title="t", expect="pass", verdict=verdict, evidence=evidence,
                 guarantee="privacy")


def test_a_larger_certified_lower_bound_is_worse(runs):
    base = read_report(runs["base"])
    old, new = _with_claims(base, [_ldp(1.40)]), _with_claims(base, [_ldp(1.92)])
    d = compare_reports(old, new, tracked=tracked_of)
    assert d.exit_code() == 1
    assert d.summary().startswith("1 claim(s) changed: 1 worse (ldp-sstq: certified ε ≥ 1.4 → ≥ 1.92)")
    assert compare_reports(new, old, tracked=tracked_of).exit_code() == 0
    assert compare_reports(old, _with_claims(base, [_ldp(1.45)]), tracked=tracked_of).claims[0].status == \
        "within noise"
    # a robustness number that got worse fails only --fail-on any
    nu = [Tracked("nu", "ν̂")]
    robust = [Claim(id="krum", kind="robustness", title="t", expect="pass", verdict="PASS", evidence={"nu": v},
                    guarantee="robustness") for v in (1.0, 3.0)]
    d = compare_reports(_with_claims(base, robust[:1]), _with_claims(base, robust[1:]), tracked=lambda c: nu)
    assert d.claims[0].status == "worse" and d.exit_code() == 0
    assert dataclasses.replace(d, fail_on="any").exit_code() == 1
    # a kind not registered here: verdict and configuration only, with a note
    d = compare_reports(old, new, tracked=lambda c: None)
    assert d.claims[0].status == "unchanged" and "not a claim kind registered here" in d.claims[0].notes[0]
    assert d.summary().endswith("the numbers of 1 claim(s) of kinds not registered here were not compared (ldp-sstq)")
    assert "| ldp-sstq | note |  |  | ℹ️ note: kind 'ldp' is not a claim kind" in render_diff(d, "markdown")


def test_malicious_strings_are_escaped_in_every_format(runs, tmp_path, capsys):
    base = read_report(runs["base"])
    evil = "krr\x1b[2J\x1b]8;;http://x\x07<script>alert(1)</script>"
    claims = [dataclasses.replace(c, id=evil) if c.id == "krr" else c for c in base.claims]
    manifest = dataclasses.replace(base.manifest, dependencies={**base.manifest.dependencies,
                                                                "numpy": "2\x1b[31m<img src=x onerror=alert(1)>"})
    write_report(dataclasses.replace(base, claims=claims, manifest=manifest), tmp_path / "evil", formats=("json",))
    changed = dataclasses.replace(base, claims=[dataclasses.replace(c, verdict="FAIL") if c.id == "krr" else c
                                                for c in claims])
    d = compare_reports(base, changed, tracked=tracked_of, old_label="a", new_label="b\x1b[2J")
    for fmt in ("text", "markdown", "html", "json"):
        text = render_diff(d, fmt)
        assert "\x1b" not in text and "\x07" not in text, fmt
        if fmt in ("markdown", "html"):
            assert "<script>" not in text and "<img" not in text, fmt
    code, out, _ = diff(capsys, runs["base"], tmp_path / "evil", "--format", "html")
    assert "\x1b" not in out and "<script>" not in out and "&lt;script&gt;" in out and "\\x1b" in out
    code, out, _ = diff(capsys, runs["base"], tmp_path / "evil")
    assert "\x1b" not in out and "\\x1b[2J" in out and "1 added" in out and "1 removed" in out
