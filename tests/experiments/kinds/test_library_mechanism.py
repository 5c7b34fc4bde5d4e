"""Library mechanisms from plans and the command line (issue #25 §4 last bullet, §5): the claim kind
``library-mechanism`` on an under-calibrated mechanism (diffprivlib's GaussianAnalytic at δ = 1e-20,
the planted pre-0.15 OpenDP bit vector) and on correct ones, its verdict re-derived from the recorded
evidence and INCONCLUSIVE without the library; ``fedaudit check diffprivlib|opendp`` through the same
calibration check, with a fix that meets the claim; the shipped ``ecosystem`` plan validates."""

from __future__ import annotations

import json

import pytest

from fedaudit.errors import FedAuditError
from tests.helpers import REPO


def _lib(name: str):
    return pytest.importorskip(name, reason=f"{name} is not installed (pip install 'fedaudit[targets]')")


def _run(claims):
    from fedaudit.experiments.runner import run_plan

    return run_plan({"claim": claims}, engine={"backend": "serial"})


def test_the_kind_fails_an_under_calibrated_mechanism_and_passes_a_correct_one():
    _lib("diffprivlib")
    _lib("opendp")
    from tests.helpers import check_rederived

    report = _run([
        {"id": "ga-tiny", "kind": "library-mechanism", "library": "diffprivlib", "mechanism": "GaussianAnalytic",
         "mode": "calibration", "params": {"epsilon": 1.0, "delta": 1e-20, "sensitivity": 1.0}},
        {"id": "ga-ok", "kind": "library-mechanism", "library": "diffprivlib", "mechanism": "GaussianAnalytic",
         "mode": "calibration", "params": {"epsilon": 1.0, "delta": 1e-6, "sensitivity": 1.0}},
        {"id": "planted", "kind": "library-mechanism", "library": "planted", "mechanism": "bitvec-pre-0.15",
         "mode": "blackbox", "params": {"f": 0.99, "nbits": 16}, "samples": 1000, "expect": "violation"},
        {"id": "bitvec", "kind": "library-mechanism", "library": "opendp", "mechanism": "bitvec",
         "params": {"f": 0.99, "nbytes": 2}, "samples": 300}])
    by_id = {c.id: c for c in report.claims}
    assert [by_id[i].verdict for i in ("ga-tiny", "ga-ok", "planted", "bitvec")] == ["FAIL", "PASS", "PASS", "PASS"]
    tiny = by_id["ga-tiny"].evidence
    assert tiny["version"].startswith("diffprivlib ") and tiny["calibration_points"][0]["epsilon_true"] > 1.07

    def within(ev):  # the under-calibrated point's achieved δ moved under its claim
        ev["calibration_points"][0]["delta_achieved"] = 1e-21

    def above(ev):
        ev["calibration_points"][0]["delta_achieved"] = 2e-6

    def drop(ev):
        del ev["calibration_points"][0]["delta_achieved"]

    check_rederived(by_id["ga-tiny"], flips=[(within, "PASS")], missing=[drop])
    check_rederived(by_id["ga-ok"], flips=[(above, "FAIL")])

    def lower(ev):
        ev["blackbox"]["epsilon_lower"] = 0.0

    check_rederived(by_id["planted"], flips=[(lower, "FAIL")])
    assert by_id["planted"].evidence["blackbox"]["epsilon_lower"] > by_id["planted"].evidence["blackbox"]["epsilon_claimed"]
    check_rederived(by_id["bitvec"])


def test_a_missing_library_is_inconclusive_with_the_install_command(monkeypatch):
    from fedaudit.targets import catalog

    monkeypatch.setattr(catalog, "library_version", lambda dist: "not installed")
    report = _run([{"id": "x", "kind": "library-mechanism", "library": "nvflare", "mechanism": "SVTPrivacy",
                    "mode": "blackbox", "params": {"fraction": 0.25}}])
    claim = report.claims[0]
    assert claim.verdict == "INCONCLUSIVE" and claim.error is None
    assert "pip install 'fedaudit[nvflare]'" in claim.evidence["reason"]
    from tests.helpers import check_rederived

    check_rederived(claim)


def test_bad_library_claims_are_one_line_errors():
    _lib("diffprivlib")
    from fedaudit.experiments.plan import load_plan

    with pytest.raises(FedAuditError, match="library 'planted' has no calibration mode here"):
        load_plan({"claim": [{"id": "a", "kind": "library-mechanism", "library": "planted",
                              "mechanism": "bitvec-pre-0.15", "params": {"f": 0.5}}]})
    with pytest.raises(FedAuditError, match="'Exponential' is not audited"):
        load_plan({"claim": [{"id": "a", "kind": "library-mechanism", "library": "diffprivlib",
                              "mechanism": "Exponential", "params": {"epsilon": 1.0}}]})
    with pytest.raises(FedAuditError, match="the library refuses it"):
        load_plan({"claim": [{"id": "a", "kind": "library-mechanism", "library": "diffprivlib",
                              "mechanism": "GaussianAnalytic", "params": {"epsilon": 1.0}}]})


def test_check_diffprivlib_reports_the_true_epsilon_and_a_fix_that_meets_the_claim():
    _lib("diffprivlib")
    from fedaudit.integrations.check import check_target

    r = check_target("diffprivlib", mechanism="GaussianAnalytic", epsilon=1.0, delta=1e-20, sensitivity=1.0)
    assert not r.meets and r.epsilon_true == pytest.approx(1.0736, abs=1e-3) and r.delta == 1e-20
    assert "true ε = 1.074 at δ = 1e-20" in r.line() and "set epsilon = " in r.line()
    e = float(r.fix.split("set epsilon = ")[1].split()[0])
    fixed = check_target("diffprivlib", mechanism="GaussianAnalytic", epsilon=e, delta=1e-20, sensitivity=1.0,
                         claimed_epsilon=1.0)
    assert fixed.meets and fixed.epsilon_true > 0.999
    ok = check_target("diffprivlib", mechanism="Geometric", epsilon=1.0, sensitivity=1.0)
    assert ok.meets and ok.delta == 0.0 and "meets the claim" in ok.line()


def test_check_opendp_against_its_map_and_a_stricter_claim():
    _lib("opendp")
    from fedaudit.integrations.check import check_target

    rr = check_target("opendp", constructor="randomized_response_bool", prob=0.9)
    assert rr.meets and rr.epsilon_true == pytest.approx(2.1972245773, rel=1e-9)
    strict = check_target("opendp", constructor="randomized_response_bool", prob=0.9, claimed_epsilon=1.0)
    assert not strict.meets and "set prob = 0.7310" in strict.line()  # e/(1 + e): ε = 1 exactly
    with pytest.raises(FedAuditError, match="needs key 'scale'"):
        check_target("opendp", constructor="laplace")


def test_the_check_command_on_a_library_target(tmp_path, capsys):
    _lib("diffprivlib")
    from fedaudit.cli import main

    out = tmp_path / "c.json"
    assert main(["check", "diffprivlib", "--mechanism", "GaussianAnalytic", "--epsilon", "1", "--delta", "1e-20",
                 "--sensitivity", "1", "--json", str(out)]) == 1
    claim = json.loads(out.read_text(encoding="utf-8"))
    assert claim["verdict"] == "FAIL" and "claimed ε = 1 per report" in claim["summary"]
    assert "to meet the claim, set epsilon = 0.93" in claim["summary"]
    assert main(["check", "diffprivlib", "--mechanism", "Gaussian", "--epsilon", "0.5", "--delta", "1e-6",
                 "--sensitivity", "1"]) == 0
    assert main(["check", "diffprivlib", "--mechanism", "Bogus", "--epsilon", "1"]) == 2
    assert "diffprivlib mechanism 'Bogus' is not supported" in capsys.readouterr().err


def test_the_ecosystem_plan_validates_with_every_library_and_expectation():
    from fedaudit import plans
    from fedaudit.experiments.plan import load_plan

    with plans.plan_path("ecosystem") as path:
        plan = load_plan(path)
    kinds = {c.kind for c in plan.claims}
    assert kinds == {"config-check", "library-mechanism"} and len(plan.claims) == 13
    libraries = {c.params.get("library") or c.params.get("target") for c in plan.claims}
    assert {"diffprivlib", "opendp", "planted", "local-dp-mod", "flower-central", "nvflare-svt", "opacus"} <= libraries
    assert {c.id for c in plan.claims if c.expect == "violation"} == {
        "flower-localdpmod-sensitivity-eq-clip", "flower-central-fixed", "nvflare-svt-defaults",
        "diffprivlib-gaussiananalytic-tiny-delta", "diffprivlib-gaussiandiscrete-eps50", "diffprivlib-laplace-float",
        "planted-bitvec-pre-0.15"}


def test_the_draft_maintainer_reproduction_runs_without_fedaudit_and_prints_what_the_page_shows(capsys):
    """docs/findings.md's GaussianAnalytic reproduction (diffprivlib + mpmath only) prints its output block."""
    _lib("diffprivlib")
    import re

    text = (REPO / "docs" / "findings.md").read_text(encoding="utf-8")
    section = text.split("## Draft report: diffprivlib GaussianAnalytic", 1)[1]
    code, shown = re.findall(r"```python\n(.*?)```", section, re.S)[0], re.findall(r"```text\n(.*?)```", section, re.S)[0]
    assert "fedaudit" not in code
    exec(compile(code, "findings.md", "exec"), {})
    assert capsys.readouterr().out == shown
