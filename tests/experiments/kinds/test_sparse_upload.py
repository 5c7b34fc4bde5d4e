"""Claim kind ``sparse-upload``: the private gated upload within its stated ε (PASS), the plain
upload's leak and the wire bytes next to it; a byte budget below the packet fails the claim without
calling it a privacy violation; the stated ε may differ from the one the upload runs at; a claim that
the plain upload is 1-DP fails through ``fedaudit run`` (exit 1) on its certified bound, and passes as
an expected violation; bad keys are refused when the plan is loaded."""

from __future__ import annotations

import copy
import json
import math

import jsonschema
import pytest
from tests.helpers import UnitCounter, check_rederived

from fedaudit.audit.bounds import expected_epsilon_lower_bound
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan
from fedaudit.reports import load_schema

UP = {"id": "up", "kind": "sparse-upload", "samples": 200, "worst_samples": 4000}


def plan(*claims):
    return {"plan": {"title": "sparse", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


@pytest.fixture(scope="module")
def report():
    units = UnitCounter()
    tight = {**UP, "id": "tight", "max_bytes_ratio": 0.2, "samples": 100, "claimed_epsilon": 0.5}
    return run_plan(plan(UP, tight), progress=units), units


def test_private_upload_passes_next_to_the_plain_leak_and_the_bytes(report):
    rep, units = report
    ok, tight = rep.claims
    assert [c.error for c in rep.claims] == [None, None]
    ev = ok.evidence
    assert ok.verdict == "PASS" and not ev["violation"]
    assert ev["epsilon_private_lower"] <= ev["epsilon_stated"] == 1.0
    assert ev["epsilon_plain_lower"] > ev["epsilon_private_lower"]  # the plain index set leaks the record
    # documented wire format: 16 + m·(2 + 2·4) plain, 16 + m·(2 + 2·8) private; dense FedAvg 4·|θ|
    assert (ev["m"], ev["bytes_plain"], ev["bytes_private"], ev["bytes_dense"]) == (3, 46, 70, 256)
    assert ev["bytes_ratio"] == pytest.approx(70 / 256)
    assert ev["audits"]["plain"]["epsilon_claimed"] is None and ev["audits"]["private"]["epsilon_claimed"] == 1.0
    assert "within its stated ε = 1" in ok.summary and "dense FedAvg 256" in ok.summary
    assert ev["private_tightness"] == ev["epsilon_private_lower"] / 1.0 < 0.5
    # decided by the worst pair (exact loss at S0 0.984 at p = 64, m = 3), which shows more than the record
    assert ev["worst_mode"] == "likelihood-ratio" and ev["worst_samples"] == 4000 and not ev["worst_pair_exact"]
    assert ev["epsilon_worst_pair"] == pytest.approx(0.9841, abs=1e-4)
    assert ev["epsilon_private_lower"] <= ev["epsilon_private_worst_lower"] <= ev["epsilon_worst_pair"] <= 1.0
    assert ev["worst_tightness"] == pytest.approx(ev["epsilon_private_worst_lower"] / ev["epsilon_worst_pair"])
    assert ev["epsilon_private_worst_lower"] > 0.05 and not ev["private_data_violation"]
    shown = f"{ev['epsilon_private_worst_lower']:.3f}"
    assert f"worst-pair certified ε ≥ {shown} at 95% within its stated ε = 1" in ok.summary
    assert f"the worst-pair audit certified {ev['worst_claim_ratio']:.2f} of the stated ε" in ok.summary
    assert ev["audits"]["private"]["worst"]["pair"]["support"] == [0, 1, 2]
    assert units.total["up"] == (800 + 8000, "uploads") and units.done["up"] == 8800
    jsonschema.validate(json.loads(json.dumps(rep.seal().to_dict())), load_schema())


def test_a_byte_budget_below_the_packet_fails_without_a_privacy_violation(report):
    rep, _ = report
    tight = rep.claims[1]
    assert tight.verdict == "FAIL" and not tight.evidence["violation"]
    assert "ABOVE the maximum ratio 0.2" in tight.summary
    # run at ε = 1, claimed 0.5: the claim is what the audit holds the upload to
    ev = tight.evidence
    assert (ev["epsilon_run"], ev["epsilon_stated"]) == (1.0, 0.5) and ev["audits"]["private"]["epsilon_claimed"] == 0.5
    assert "stated ε = 0.5 (run at ε = 1)" in tight.summary


def test_sparse_upload_verdicts_rederive_from_the_bounds_and_the_bytes(report):
    """decide() of the recorded evidence gives each verdict: the worst-pair bound against the stated
    ε, a plain claim when one is stated, and the packet's share of the dense upload."""
    ok, tight = report[0].claims
    check_rederived(ok, flips=[(lambda e: e.update(epsilon_private_worst_lower=1.01), "FAIL"),
                               (lambda e: e.update(epsilon_plain_stated=e["epsilon_plain_lower"] * 0.99), "FAIL"),
                               (lambda e: e.update(max_bytes_ratio=0.2), "FAIL")],
                    missing=[lambda e: e.pop("epsilon_stated"), lambda e: e.pop("epsilon_plain_stated")])
    check_rederived(tight, flips=[(lambda e: e.update(bytes_private=51), "PASS"),  # 51/256 < 0.2
                                  (lambda e: e.update(max_bytes_ratio=None), "PASS")],
                    missing=[lambda e: e.pop("bytes_dense"), lambda e: e.update(bytes_private="70")])


def test_a_private_upload_run_at_four_times_its_stated_epsilon_fails_on_the_worst_pair():
    """Run at ε = 4, stated 1: the worst-pair audit refutes it (10 000 draws, measured ε_lb 1.50 on
    the audit's seed 0) where the data-level audit (200 draws) certifies nothing above 1."""
    rep = run_plan(plan({**UP, "id": "x4", "epsilon": 4.0, "claimed_epsilon": 1.0, "worst_samples": 10_000}))
    c = rep.claims[0]
    ev = c.evidence
    assert c.error is None and c.verdict == "FAIL" and ev["violation"] and ev["private_violation"]
    assert not ev["private_data_violation"] and ev["epsilon_private_lower"] <= 1.0
    assert 1.0 < ev["epsilon_private_worst_lower"] <= ev["epsilon_worst_pair"] <= 4.0
    assert "ABOVE its stated ε = 1 (run at ε = 4)" in c.summary


def test_digits_eflops_trains_well_above_chance_at_a_small_budget():
    """fedaudit sparse --method eflops --dataset digits: EFLoPS.for_networks (the class defaults
    stay at chance, 0.076); 20 rounds of 5 clients reach 0.78 (measured, seed 0), chance is 0.1."""
    from fedaudit.fl.sparse_training import train_sparse

    res = train_sparse("eflops", "digits", rounds=20, clients=5, seed=0)
    assert res.metric == "accuracy" and res.score >= 0.6
    assert res.density == pytest.approx(0.05, abs=0.005)
    method = res.run["params"]
    assert (method["local_optimizer"], method["temperature"], method["lr_dual"]) == ("adam", 1e-4, 1e-3)
    # an explicit temperature overrides the dataset's default
    res = train_sparse("eflops", "digits", rounds=1, clients=2, seed=0, temperature=0.0)
    assert res.run["params"]["temperature"] == 0.0


def _toml(path, *claims):
    def value(v):
        return json.dumps(v) if isinstance(v, str) else repr(v)

    lines = ['[plan]', 'title = "sparse claims"', 'seed = 0']
    for c in claims:
        lines += ["", "[[claim]]"] + [f"{k} = {value(v)}" for k, v in c.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


PLAIN_1DP = {**UP, "id": "plain-1dp", "plain_claimed_epsilon": 1.0}


def _claims(out):
    rep = json.loads((out / "report.json").read_text())
    return rep, {c["id"]: c for c in rep["claims"]}


def test_a_claim_that_the_plain_upload_is_1dp_fails_through_fedaudit_run(tmp_path, capsys):
    out = tmp_path / "fail"
    assert main(["run", str(_toml(tmp_path / "fail.toml", PLAIN_1DP)), "--out", str(out), "--quiet"]) == 1
    rep, claims = _claims(out)
    c = claims["plain-1dp"]
    ev = c["evidence"]
    assert rep["overall"] == "FAIL" and c["verdict"] == "FAIL"
    # decided by the certified bound alone: ε_lb > 1 on the plain upload, the private one within its ε
    assert ev["plain_violation"] and ev["violation"] and not ev["private_violation"]
    assert ev["epsilon_plain_stated"] == 1.0 and ev["audits"]["plain"]["epsilon_claimed"] == 1.0
    assert ev["epsilon_plain_lower"] == ev["audits"]["plain"]["epsilon_lower"] > 1.0
    # independent check of the size of the leak: the event {j* sent} has rates (≥ 0.5, ≤ 0.1)
    # (tests/audit/test_sparse_upload.py); its expected certified bound on the certification draws
    n = ev["audits"]["plain"]["ldp"]["certification_samples"]
    assert ev["epsilon_plain_lower"] >= expected_epsilon_lower_bound(0.5, 0.1, n) - 0.5
    shown = f"{ev['epsilon_plain_lower']:.3f}"
    assert f"plain upload: certified ε ≥ {shown} at 95% ABOVE its stated ε = 1" in c["summary"]
    md = (out / "report.md").read_text()
    assert "FAIL" in md and shown in md
    assert "FAIL" in capsys.readouterr().out


def test_the_private_claim_passes_and_the_plain_violation_is_an_expected_one(tmp_path):
    out = tmp_path / "pass"
    plan_file = _toml(tmp_path / "pass.toml", {**UP, "id": "private-1dp", "samples": 100},
                      {**PLAIN_1DP, "id": "plain-not-1dp", "expect": "violation"})
    assert main(["run", str(plan_file), "--out", str(out), "--quiet"]) == 0
    rep, claims = _claims(out)
    private, plain = claims["private-1dp"], claims["plain-not-1dp"]
    assert rep["overall"] == "PASS" and private["verdict"] == plain["verdict"] == "PASS"
    assert not private["evidence"]["violation"] and private["evidence"]["epsilon_plain_stated"] is None
    assert private["evidence"]["epsilon_private_lower"] <= 1.0
    assert plain["evidence"]["plain_violation"] and not plain["evidence"]["private_violation"]
    assert "expected a violation, detected" in plain["summary"]
    assert plain["title"].startswith("The plain gated upload is not 1-DP")
    assert math.isfinite(plain["evidence"]["epsilon_plain_lower"])


@pytest.mark.parametrize("overrides, pattern", [
    ({"density": 1.0}, r"key 'density' must be a number in \(0, 1\)"),
    ({"density": 0}, r"key 'density' must be a number in \(0, 1\)"),
    ({"temperature": -1}, r"key 'temperature' must be a number >= 0"),
    ({"samples": 50}, r"key 'samples' must be an integer in \[100, 10000000\]"),
    ({"epsilon": 0}, r"key 'epsilon' must be a number > 0"),
    ({"max_bytes_ratio": 1.5}, r"key 'max_bytes_ratio' must be a number in \(0, 1\]"),
    ({"plain_claimed_epsilon": 0}, r"key 'plain_claimed_epsilon' must be a number > 0"),
])
def test_bad_sparse_upload_claims_are_refused_when_the_plan_is_loaded(overrides, pattern):
    with pytest.raises(FedAuditError, match=r"^claim 'up' \(#1\): " + pattern):
        load_plan(plan({**UP, **overrides}))



def test_the_plan_engine_keys_reach_both_audits(monkeypatch):
    """backend/workers of the claim go to both audit_sparse_upload calls; that they give the serial
    bits is tests/audit/test_sparse_upload_engine.py's."""
    from fedaudit.audit import sparse_upload

    seen, real = [], sparse_upload.audit_sparse_upload

    def recording(upload, **kw):
        seen.append((upload, kw.get("backend"), kw.get("workers")))
        return real(upload, **kw)

    monkeypatch.setattr(sparse_upload, "audit_sparse_upload", recording)
    tiny = {"id": "tiny", "kind": "sparse-upload", "dim": 8, "density": 0.25, "records": 4, "local_steps": 1,
            "samples": 100, "worst_samples": 100, "backend": "serial", "workers": 3}
    (claim,) = run_plan(plan(tiny)).claims
    assert claim.error is None and seen == [("plain", "serial", 3), ("private", "serial", 3)]
    with pytest.raises(FedAuditError, match=r"key 'backend' must be one of"):
        load_plan(plan({**UP, "backend": "gpu"}))
