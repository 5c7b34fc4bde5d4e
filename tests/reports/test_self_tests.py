"""Auditor self-tests inside every report (issue #26 §5): a null test and a planted violation per
claim, run with the claim's auditor settings, recorded in report.json, counted in the verdict and
re-derived by ``fedaudit verify``.

A correct auditor passes both; a broken one (a positive bound on identical inputs, or one that
never detects) makes its self-test fail, the claim INCONCLUSIVE and the report say so; an edited
self-test record is caught by verify; a report written before self-tests existed still verifies.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from fedaudit.audit import pairs
from fedaudit.audit.self_tests import ldp_self_test, one_run_self_test, planted_samples, self_test_samples
from fedaudit.experiments.kind import SelfTest, run_self_tests
from fedaudit.experiments.rederive import rederive_claim
from fedaudit.experiments.runner import run_plan, run_plan_to_dir
from fedaudit.mechanisms.registry import make_mechanism
from fedaudit.reports.integrity import verify_report
from fedaudit.reports.model import Report
from fedaudit.reports.self_tests import (SelfTestError, check_self_test, self_test_line, self_test_record,
                                         verdict_after_self_tests)

LAPLACE = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 2, "epsilon": 1.0, "samples": 4000,
           "curve": False, "backend": "serial"}


def _plan(*claims):
    return {"plan": {"title": "self-tests", "seed": 5}, "engine": {"backend": "serial"}, "claim": list(claims)}


def _ev(value, rule, threshold, statistic="ε"):
    return {"statistic": statistic, "bound": "lower", "value": value, "rule": rule, "threshold": threshold}


# ------------------------------------------------------------------------------ the record and its rule
def test_the_outcome_is_a_function_of_the_evidence():
    null = self_test_record("null", "null", _ev(0.0, "at_most", 0.0))
    assert (null["passed"], null["expected"], null["observed"]) == (True, "ε ≤ 0", "ε ≥ 0.000")
    assert not self_test_record("null", "null", _ev(0.02, "at_most", 0.0))["passed"]
    planted = self_test_record("planted", "planted", _ev(3.2, "above", 1.0))
    assert planted["passed"] and planted["expected"] == "ε > 1"
    assert not self_test_record("planted", "planted", _ev(1.0, "above", 1.0))["passed"]  # at the claim: not caught
    unbounded = self_test_record("planted", "planted", _ev("inf", "above", None, "ν̂"))
    assert unbounded["passed"] and unbounded["observed"] == "ν̂ ≥ ∞"
    assert not self_test_record("planted", "planted", _ev(1e300, "above", None, "ν̂"))["passed"]
    assert self_test_line([null, planted]) == "null ε ≥ 0.000 ✓, planted ε ≥ 3.200 > 1 ✓"
    for bad in ({"kind": "other", "evidence": _ev(0, "at_most", 0)}, {"kind": "null", "evidence": _ev("x", "at_most", 0)},
                {"kind": "null", "evidence": _ev(0, "below", 0)}, {"kind": "null", "evidence": _ev(0, "at_most", None)}):
        with pytest.raises(SelfTestError):
            check_self_test(bad)


def test_a_failed_self_test_takes_away_the_verdicts_it_undermines():
    ok_null = self_test_record("n", "null", _ev(0.0, "at_most", 0.0))
    bad_null = self_test_record("n", "null", _ev(0.3, "at_most", 0.0))
    ok_planted = self_test_record("p", "planted", _ev(5.0, "above", 1.0))
    bad_planted = self_test_record("p", "planted", _ev(0.0, "above", 1.0))
    assert verdict_after_self_tests("PASS", "pass", [ok_null, ok_planted]) == "PASS"
    for verdict in ("PASS", "FAIL"):  # an auditor that certifies ε > 0 on identical inputs decides nothing
        assert verdict_after_self_tests(verdict, "pass", [bad_null, ok_planted]) == "INCONCLUSIVE"
    # an auditor that misses a planted violation cannot vouch for "no violation detected"...
    assert verdict_after_self_tests("PASS", "pass", [ok_null, bad_planted]) == "INCONCLUSIVE"
    assert verdict_after_self_tests("FAIL", "violation", [ok_null, bad_planted]) == "INCONCLUSIVE"
    # ...but a violation it did certify stands
    assert verdict_after_self_tests("FAIL", "pass", [ok_null, bad_planted]) == "FAIL"
    assert verdict_after_self_tests("PASS", "violation", [ok_null, bad_planted]) == "PASS"


def test_a_self_test_that_raises_is_recorded_as_failed():
    def boom():
        raise RuntimeError("no draws")

    (record,) = run_self_tests([SelfTest("null: boom", "null", boom)])
    assert not record["passed"] and "RuntimeError: no draws" in record["evidence"]["error"]


# ------------------------------------------------------------------------------ the auditors
def test_a_correct_ldp_auditor_passes_both_self_tests():
    mech = make_mechanism("laplace", 2, 1.0)
    common = dict(dim=None, clip=1.0, epsilon=1.0, delta=0.0, confidence=0.95, distinguisher="auto",
                  engine={"backend": "serial"})
    null = ldp_self_test("null", mech, "antipodal", samples=self_test_samples(4000), seed=1, **common)
    planted = ldp_self_test("planted", mech, "antipodal", samples=planted_samples(4000, 1.0, 0.0, 0.95), seed=2,
                            **common)
    assert null["samples"] == 400 and null["value"] == 0.0 and check_self_test({"kind": "null", "evidence": null})[0]
    assert planted["value"] > 1.0 and check_self_test({"kind": "planted", "evidence": planted})[0]


def test_the_planted_ldp_test_draws_more_only_when_ten_percent_could_not_catch_it():
    assert planted_samples(200_000, 1.0, 0.0, 0.95) == 20_000
    assert planted_samples(2_000, 3.0, 0.0, 0.95) == 200  # 100 certification draws certify up to ε ≈ 3.28
    assert planted_samples(2_000, 4.0, 0.0, 0.95) == 800  # 400 certification draws: up to ε ≈ 4.6
    assert planted_samples(1_000, 50.0, 0.0, 0.95) == 1_000  # never more than the claim's own samples


def test_a_correct_one_run_auditor_passes_both_self_tests():
    common = dict(canaries=200, delta=1e-5, confidence=0.95, claimed_epsilon=2.0)
    null, planted = one_run_self_test("null", seed=3, **common), one_run_self_test("planted", seed=4, **common)
    assert null["value"] == 0.0 and check_self_test({"kind": "null", "evidence": null})[0]
    assert planted["value"] > 2.0 and check_self_test({"kind": "planted", "evidence": planted})[0]


# ------------------------------------------------------------------------------ in a plan's report
@pytest.fixture(scope="module")
def honest():
    return run_plan(_plan(LAPLACE))


def test_every_ldp_claim_records_passing_self_tests(honest):
    (claim,) = honest.claims
    assert claim.verdict == "PASS" and [t["kind"] for t in claim.self_tests] == ["null", "planted"]
    assert all(t["passed"] for t in claim.self_tests) and honest.overall == "PASS"
    null, planted = (t["evidence"] for t in claim.self_tests)
    # the claim's auditor settings, on seeds of their own
    assert null["confidence"] == planted["confidence"] == claim.evidence["confidence"]
    assert null["distinguisher"] == claim.evidence["distinguisher"] and planted["threshold"] == 1.0
    assert len({null["seed"], planted["seed"], claim.seed}) == 3
    assert claim.self_test_line().startswith("self-tests: null ε ≥ 0.000 ✓, planted ε ≥ ")


def _broken(monkeypatch, how):
    """Replace the LDP auditor (``audit_pair``) by one that adds 0.6 to every certified bound
    (``"positive"``) or never certifies anything (``"blind"``)."""
    real = pairs.audit_pair

    def audit_pair(*args, **kwargs):
        res, x0, x1, label = real(*args, **kwargs)
        eps = res.epsilon_lower + 0.6 if how == "positive" else 0.0
        return dataclasses.replace(res, epsilon_lower=eps, violation=eps > kwargs["epsilon"]), x0, x1, label

    monkeypatch.setattr(pairs, "audit_pair", audit_pair)


@pytest.mark.parametrize("how, failed", [("positive", "null"), ("blind", "planted")])
def test_a_broken_auditor_fails_its_self_test_and_the_report_says_so(monkeypatch, how, failed):
    _broken(monkeypatch, how)
    report = run_plan(_plan(LAPLACE))
    (claim,) = report.claims
    assert [t["kind"] for t in claim.failed_self_tests] == [failed]
    assert claim.verdict == "INCONCLUSIVE"  # the honest mechanism's PASS does not stand on a broken auditor
    assert "auditor self-test failed" in claim.summary and any("auditor self-test failed" in c for c in claim.caveats)
    assert report.overall == "INCONCLUSIVE" and "auditor self-test failed: lap: " in report.overall_label
    assert "✗" in claim.self_test_line()


def test_a_detected_violation_stands_when_only_the_planted_test_fails():
    claim = {"id": "x", "kind": "ldp", "title": "x", "expect": "violation", "verdict": "PASS", "summary": "",
             "evidence": {}, "plots": [], "runtime_s": 0.0, "seed": 1, "error": None,
             "self_tests": [self_test_record("p", "planted", _ev(0.0, "above", 1.0))]}
    report = Report.from_dict({"schema_version": "1.5", "manifest": _MANIFEST, "claims": [claim]})
    assert report.claims[0].verdict == "PASS" and report.overall == "INCONCLUSIVE"
    assert report.overall_label == "auditor self-test failed: x: p"


_MANIFEST = {"fedaudit": "0", "numpy": "0", "scipy": "0", "torch": None, "python": "3", "platform": "x",
             "plan_sha256": None, "seed_entropy": None, "started": "2026-01-01T00:00:00.000Z",
             "finished": "2026-01-01T00:00:00.000Z", "git_commit": None}


# ------------------------------------------------------------------------------ verify
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("selftests") / "report"
    run_plan_to_dir(_plan(LAPLACE), out, formats=("json",), key=b"k" * 32)
    return out


def _reseal(out, edit):
    """Edit report.json and seal it again with the key: a forger who holds it (or an unsigned
    report, whose digest anyone recomputes) passes every integrity check; only the re-derivation
    can catch the edit."""
    data = json.loads((out / "report.json").read_text())
    edit(data)
    report = Report.from_dict(data)
    data["manifest"]["artifacts"]["rendered_from"] = report.content_digest()  # no rendering was written
    report = Report.from_dict(data).seal(b"k" * 32)
    (out / "report.json").write_text(report.to_json())


def test_verify_rederives_the_self_tests(written):
    res = verify_report(written, key=b"k" * 32, rederive=rederive_claim)
    assert res.ok and res.rederived == 1


def test_the_renderings_show_one_line_of_self_tests_per_claim(honest, monkeypatch):
    from fedaudit.reports.html import render_html
    from fedaudit.reports.markdown import render_markdown

    monkeypatch.setattr("fedaudit.reports.html.render_png", lambda spec: b"")  # no figures needed here
    line = honest.claims[0].self_test_line()
    md = render_markdown(honest)
    assert "null ε ≥ 0.000 ✓, planted ε ≥ " in md and " &gt; 1 ✓" in md and "auditor self-test failed" not in md
    assert f'<p class="self-tests passed">{line.replace(">", "&gt;")}</p>' in render_html(honest)
    failed = dataclasses.replace(honest.claims[0], self_tests=[self_test_record("null", "null", _ev(0.2, "at_most", 0))])
    broken = dataclasses.replace(honest, claims=[failed])
    assert "❌ **auditor self-test failed** — self" in render_markdown(broken)
    assert "null ε ≥ 0.200 ✗" in render_markdown(broken)
    assert '<p class="self-tests failed">' in render_html(broken)


@pytest.mark.parametrize("edit, says", [
    (lambda t: t[0].update(passed=False), "records passed=False"),
    (lambda t: t[1]["evidence"].update(value=0.5), "its evidence gives passed=False"),
    (lambda t: t[0]["evidence"].update(threshold=-1.0), "its evidence gives passed=False"),
    (lambda t: t[1].update(observed="ε ≥ 99.000"), "records passed=True, 'ε ≥ 99.000'"),
])
def test_verify_detects_an_edited_self_test_record(written, tmp_path, edit, says):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(written, out)
    _reseal(out, lambda d: edit(d["claims"][0]["self_tests"]))
    res = verify_report(out, key=b"k" * 32, rederive=rederive_claim)
    assert not res.ok and any(says in p for p in res.problems), res.problems


def test_a_failed_self_test_with_a_stored_pass_is_caught(written, tmp_path):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(written, out)

    def fail_null_keep_pass(d):
        null = d["claims"][0]["self_tests"][0]
        null["evidence"]["value"] = 0.4
        null.update(self_test_record(null["name"], "null", null["evidence"]))  # a consistent, failed record

    _reseal(out, fail_null_keep_pass)
    res = verify_report(out, key=b"k" * 32, rederive=rederive_claim)
    assert not res.ok and any("gives INCONCLUSIVE" in p for p in res.problems), res.problems


def test_a_report_without_self_tests_still_verifies(written, tmp_path):
    import shutil

    out = tmp_path / "old"
    shutil.copytree(written, out)

    def as_schema_1_4(d):
        d["schema_version"] = "1.4"
        for c in d["claims"]:
            c.pop("self_tests")

    _reseal(out, as_schema_1_4)
    data = json.loads((out / "report.json").read_text())
    assert data["schema_version"] == "1.4" and "self_tests" not in data["claims"][0]
    res = verify_report(out, key=b"k" * 32, rederive=rederive_claim)
    assert res.ok and res.rederived == 1, res.problems


# ------------------------------------------------------------------------------ sparse-upload, flower-local-dp, library-mechanism
SPARSE = {"id": "up", "kind": "sparse-upload", "samples": 100, "worst_samples": 2000}
PLANTED_BITVEC = {"id": "bitvec", "kind": "library-mechanism", "library": "planted", "mechanism": "bitvec-pre-0.15",
                  "mode": "blackbox", "params": {"f": 0.99, "nbits": 8}, "samples": 2000, "expect": "violation"}


def _declared(claim, evidence=None):
    """The self-test records the claim's kind declares for ``claim`` (as loaded from a plan), run."""
    from fedaudit.experiments.kinds import claim_kind
    from fedaudit.experiments.plan import load_plan

    (spec,) = load_plan(_plan(claim)).claims
    return run_self_tests(claim_kind(claim["kind"]).self_tests(spec, evidence or {}))


def _shifted(module, name, how):
    """``module.name`` (an auditor returning a result with ``epsilon_lower``) broken: +0.6 on every
    certified bound (``"positive"``) or 0 always (``"blind"``)."""
    real = getattr(module, name)

    def broken(*args, **kwargs):
        res = real(*args, **kwargs)
        return dataclasses.replace(res, epsilon_lower=res.epsilon_lower + 0.6 if how == "positive" else 0.0)

    return broken


def test_a_correct_worst_pair_auditor_passes_both_self_tests():
    null, planted = _declared(SPARSE)
    assert (null["kind"], planted["kind"]) == ("null", "planted") and null["passed"] and planted["passed"]
    assert null["evidence"]["value"] == 0.0 and planted["evidence"]["value"] > 1.0 == planted["evidence"]["threshold"]
    assert null["evidence"]["distinguisher"] == "likelihood-ratio" and null["evidence"]["samples"] == 200
    assert null["evidence"]["pair"] == "worst" and null["evidence"]["seed"] != planted["evidence"]["seed"]


@pytest.mark.parametrize("how, failed", [("positive", "null"), ("blind", "planted")])
def test_a_broken_worst_pair_auditor_fails_its_self_test(monkeypatch, how, failed):
    from fedaudit.audit import sparse_upload

    monkeypatch.setattr(sparse_upload, "audit_ldp", _shifted(sparse_upload, "audit_ldp", how))
    records = _declared(SPARSE)
    assert [r["kind"] for r in records if not r["passed"]] == [failed]
    assert verdict_after_self_tests("PASS", "pass", records) == "INCONCLUSIVE"


def test_a_correct_projection_auditor_passes_both_flower_self_tests():
    pytest.importorskip("flwr")
    claim = {"id": "mod", "kind": "flower-local-dp", "epsilon": 1.0, "sensitivity": 2.0, "samples": 20_000,
             "real_calls": 100}
    null, planted = _declared(claim)
    assert null["passed"] and null["evidence"]["value"] == 0.0 and null["evidence"]["samples"] == 2000
    assert planted["passed"] and planted["evidence"]["value"] > 1.0
    assert "projection" in planted["evidence"]["distinguisher"] and planted["evidence"]["delta"] == 1e-5


def test_a_library_calibration_declares_no_self_test():
    assert _declared({**PLANTED_BITVEC, "library": "opendp", "mechanism": "laplace", "mode": "calibration",
                      "params": {"scale": 2.0}}, {"installed": True, "calibration": {}}) == []


@pytest.fixture(scope="module")
def library():
    return run_plan(_plan(PLANTED_BITVEC))


def test_a_library_black_box_claim_records_passing_self_tests_and_renders_them(library):
    from fedaudit.reports.markdown import render_markdown

    (claim,) = library.claims
    assert claim.verdict == "PASS" and all(t["passed"] for t in claim.self_tests)  # the planted bug is caught
    null, planted = (t["evidence"] for t in claim.self_tests)
    bb = claim.evidence["blackbox"]
    assert null["value"] == 0.0 and planted["threshold"] == bb["epsilon_claimed"] < planted["value"]
    assert null["samples"] == 200 and null["confidence"] == planted["confidence"] == bb["confidence"]
    line = claim.self_test_line()
    assert line.startswith("self-tests: null ε ≥ 0.000 ✓, planted ε ≥ ") and line.endswith(" ✓")
    assert line in render_markdown(library).replace("&gt;", ">")


def test_a_broken_library_auditor_makes_the_detected_violation_inconclusive(monkeypatch):
    from fedaudit.targets import base

    monkeypatch.setattr(base, "audit_ldp", _shifted(base, "audit_ldp", "positive"))
    (claim,) = run_plan(_plan(PLANTED_BITVEC)).claims
    assert [t["kind"] for t in claim.failed_self_tests] == ["null"] and claim.verdict == "INCONCLUSIVE"
