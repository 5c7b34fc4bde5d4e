"""Claim kind ``sparse-upload``: the private gated upload within its stated ε (PASS), the plain
upload's leak and the wire bytes next to it; a byte budget below the packet fails the claim without
calling it a privacy violation; the stated ε may differ from the one the upload runs at; bad keys are refused when the plan is loaded."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from conftest import UnitCounter

from fedaudit.errors import FedAuditError
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_plan
from fedaudit.reports import load_schema

UP = {"id": "up", "kind": "sparse-upload", "samples": 200}


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
    assert units.total["up"] == (800, "uploads") and units.done["up"] == 800
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


@pytest.mark.parametrize("overrides, pattern", [
    ({"density": 1.0}, r"key 'density' must be a number in \(0, 1\)"),
    ({"density": 0}, r"key 'density' must be a number in \(0, 1\)"),
    ({"temperature": -1}, r"key 'temperature' must be a number >= 0"),
    ({"samples": 50}, r"key 'samples' must be an integer in \[100, 10000000\]"),
    ({"epsilon": 0}, r"key 'epsilon' must be a number > 0"),
    ({"max_bytes_ratio": 1.5}, r"key 'max_bytes_ratio' must be a number in \(0, 1\]"),
])
def test_bad_sparse_upload_claims_are_refused_when_the_plan_is_loaded(overrides, pattern):
    with pytest.raises(FedAuditError, match=r"^claim 'up' \(#1\): " + pattern):
        load_plan(plan({**UP, **overrides}))
