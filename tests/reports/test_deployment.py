"""Deployment facts (issue #26 §1): the plan's ``[deployment]`` table, its cross-checks against each
claim's kind, the "Deployment" section at the top of every rendering with the NIST SP 800-226
hazards left open, ``fedaudit export-registry`` and the report schema 1.5 (older reports verify).
"""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest

from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.experiments.deployment import report_deployment
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.rederive import rederive_claim
from fedaudit.experiments.runner import run_plan_to_dir
from fedaudit.reports import KEY_ENV, verify_report
from fedaudit.reports.deployment import LARGE_EPSILON, hazards, registry_export
from fedaudit.reports.canonical import canonical_json_bytes, digest
from fedaudit.reports.html import render_html
from fedaudit.reports.io import read_report, sign_report
from fedaudit.reports.markdown import render_markdown
from tests.helpers import REPO

PLANS = REPO / "fedaudit" / "plans"

DEPLOYMENT = {
    "curator": "test server", "data_product": "reports", "intended_use": "tests",
    "privacy_unit": "client", "privacy_unit_description": "one client's data", "neighbouring": "replace-one",
    "dp_flavour": "pure", "trust_model": "local", "population": 10**5, "epsilon_rationale": "small",
    "data_collection": "on device", "unprotected": [],
    "accounting": {"composed": "one report", "sampling": "none", "accountant": "pld"},
    "implementation": {"randomness": "csprng", "noise": "discrete-laplace", "dtype": "integer",
                       "float_mitigation": "integer noise", "clipping": "on-device", "timing": "constant time",
                       "security": "none needed"},
}
LDP = {"id": "lap", "kind": "ldp", "mechanism": "laplace", "dim": 2, "epsilon": 1.0, "samples": 4000, "curve": False}
DPSGD = {"id": "sgd", "kind": "dpsgd", "noise_multiplier": 2.0, "sample_rate": 0.1, "steps": 10,
         "claimed_epsilon": 3.0}
ACCOUNTING = {"id": "acc", "kind": "accounting", "mechanism": "rr", "dim": 2, "epsilon": 1.0, "rounds": 2,
              "accountant": "pld", "max_epsilon": 5.0, "target_delta": 1e-6}
ROBUST = {"id": "rob", "kind": "robustness", "aggregator": "cwtm", "n": 11, "f": 2, "attacks": ["alie"], "trials": 5}


def plan(*claims, deployment=None):
    data = {"plan": {"seed": 1, "title": "deployment test"}, "engine": {"backend": "serial"},
            "claim": [copy.deepcopy(c) for c in claims]}
    if deployment is not None:
        data["deployment"] = copy.deepcopy(deployment)
    return data


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


# ------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("table, message", [
    ({"neighbouring": "swap"}, "plan [deployment]: key 'neighbouring' must be one of 'add-remove', 'replace-one', "
                               "got 'swap'"),
    ({"dp_flavour": "approx"}, "key 'dp_flavour' must be one of 'pure', 'approximate', 'renyi', 'zcdp', 'gdp'"),
    ({"trust_model": "federated"}, "key 'trust_model' must be one of 'local', 'central', 'shuffled', "
                                   "'secure-aggregation'"),
    ({"privacy_units": "client"}, "plan [deployment]: unknown key 'privacy_units' (did you mean 'privacy_unit'?)"),
    ({"implementation": {"rng": "numpy"}}, "plan [deployment].implementation: unknown key 'rng'"),
    ({"implementation": {"dtype": "float8"}}, "key 'dtype' must be one of 'float64', 'float32'"),
    ({"accounting": {"accountant": "moments"}}, "key 'accountant' must be one of fedaudit's accountants (basic, "
                                                "advanced, pld"),
    ({"accounting": "pld"}, "plan [deployment].accounting: must be a table"),
    ({"population": 0}, "key 'population' must be an integer >= 1"),
    ({"unprotected": "counts"}, None),  # a string is one item, as every list[str] key reads it
])
def test_every_key_is_checked_with_a_one_line_error(table, message):
    if message is None:
        assert load_plan(plan(LDP, deployment=table)).deployment["unprotected"] == ["counts"]
        return
    with pytest.raises(FedAuditError) as info:
        load_plan(plan(LDP, deployment=table))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_known_external_accountants_and_free_text_units_are_accepted():
    p = load_plan(plan(LDP, deployment={"privacy_unit": "Patient-visit", "accounting": {"accountant": "Opacus-RDP"}}))
    assert p.deployment["accounting"]["accountant"] == "opacus-rdp" and p.deployment["privacy_unit"] == "Patient-visit"


@pytest.mark.parametrize("claim, table, message", [
    (LDP, {"trust_model": "central"}, "claim 'lap' (#1): key 'trust_model' of the plan's [deployment] must be 'local' or "
                                      "'shuffled' for kind 'ldp'"),
    (LDP, {"trust_model": "secure-aggregation"}, "for kind 'ldp' (a local randomizer"),
    (DPSGD, {"trust_model": "local"}, "must be 'central' or 'secure-aggregation' for kind 'dpsgd'"),
    (DPSGD, {"privacy_unit": "user-day"}, "key 'privacy_unit' of the plan's [deployment] is 'user-day' (client level), "
                                          "but kind 'dpsgd' is checked by an example-level accountant"),
    (DPSGD, {"privacy_unit": "example", "dp_flavour": "pure"}, "key 'dp_flavour' of the plan's [deployment] must be one "
                                                               "of 'approximate'"),
    (DPSGD, {"accounting": {"accountant": "rdp"}}, "[accounting] is 'rdp', but this claim computes its ε with "
                                                  "accountant 'pld'"),
    ({**ACCOUNTING, "shuffle_n": 1000, "accountant": "advanced"}, {"trust_model": "local"},
     "must be 'shuffled' for kind 'accounting' (its ε assumes the reports are shuffled"),
    (ACCOUNTING, {"dp_flavour": "pure"}, "key 'dp_flavour' of the plan's [deployment] must be one of 'approximate'"),
])
def test_cross_checks_refuse_facts_the_claim_contradicts(claim, table, message):
    with pytest.raises(FedAuditError) as info:
        load_plan(plan(claim, deployment=table))
    assert message in str(info.value)


def test_a_claim_overrides_the_plan_facts_and_non_privacy_claims_take_none():
    dpsgd = {**DPSGD, "deployment": {"privacy_unit": "example", "trust_model": "central", "dp_flavour": "gdp",
                                     "implementation": {"clipping": "per-example"}}}
    p = load_plan(plan(LDP, dpsgd, ROBUST, deployment=DEPLOYMENT))
    dep = report_deployment(p)
    assert [c["id"] for c in dep["claims"]] == ["lap", "sgd"]  # the robustness claim makes no DP claim
    sgd = dep["claims"][1]
    assert sgd["mechanism_trust"] == "central" and sgd["accountant_unit"] == "example" and sgd["epsilon"] == 3.0
    assert sgd["facts"]["privacy_unit"] == "example" and sgd["facts"]["implementation"]["clipping"] == "per-example"
    assert sgd["facts"]["implementation"]["noise"] == "discrete-laplace"  # merged key by key
    assert dep["plan"]["privacy_unit"] == "client"
    with pytest.raises(FedAuditError, match="key 'deployment' applies to privacy claims only; kind 'robustness'"):
        load_plan(plan({**ROBUST, "deployment": {"privacy_unit": "client"}}))
    with pytest.raises(FedAuditError, match=r"claim 'sgd' \(#1\) deployment: unknown key 'unit'"):
        load_plan(plan({**DPSGD, "deployment": {"unit": "example"}}))


def test_shipped_plans_declare_their_deployment():
    for name in ("demo", "accounting", "training-audits"):
        dep = report_deployment(load_plan(PLANS / f"{name}.toml"))
        assert dep is not None and all(c["facts"]["privacy_unit"] for c in dep["claims"]), name
    demo = report_deployment(load_plan(PLANS / "demo.toml"))
    assert demo["plan"]["trust_model"] == "local" and {c["mechanism_trust"] for c in demo["claims"]} == {"local"}
    training = report_deployment(load_plan(PLANS / "training-audits.toml"))
    units = {c["kind"]: c["facts"]["privacy_unit"] for c in training["claims"]}
    assert units == {"dpsgd": "example", "dp-fedavg": "client"}


# ------------------------------------------------------------------------------ hazards
def _deployment(facts, **claim):
    return {"plan": facts, "claims": [{"id": "c", "kind": "ldp", "expect": "pass", "mechanism_trust": "local",
                                       "accountant_unit": "client", "epsilon": 1.0, "delta": None, "facts": facts,
                                       **claim}]}


def test_hazards_map_to_missing_or_risky_facts():
    assert hazards(_deployment(DEPLOYMENT)) == []
    empty = {k: None for k in DEPLOYMENT}
    ids = [h.id for h in hazards(_deployment(empty))]
    assert ids == ["privacy-unit", "contribution-bound", "neighbouring", "flavour", "composition", "sampling",
                   "unprotected", "floating-point", "randomness", "timing", "trust", "data-collection"]
    assert all(h.text.startswith("not addressed by this plan: ") for h in hazards(_deployment(empty)))
    risky = {**DEPLOYMENT, "privacy_unit": "example", "population": 1000, "trust_model": "central",
             "epsilon_rationale": None,
             "implementation": {**DEPLOYMENT["implementation"], "randomness": "numpy-pcg64", "noise": "gaussian",
                                "dtype": "float32", "float_mitigation": None, "security": None}}
    found = {h.id: h.text for h in hazards(_deployment(risky, epsilon=LARGE_EPSILON + 1, delta=1e-3))}
    assert set(found) == {"unit-too-small", "large-epsilon", "delta-large", "floating-point", "randomness", "trust"}
    assert "gaussian noise is sampled in float32" in found["floating-point"]
    assert "'numpy-pcg64' is not a cryptographically secure generator" in found["randomness"]
    # regression cases (expect = "violation") are not deployed: no hazard is theirs
    assert hazards(_deployment(empty, expect="violation")) == []


# ------------------------------------------------------------------------------ report, renderings, export
@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A report folder of one LDP claim and one robustness-free accounting claim, with deployment facts."""
    root = tmp_path_factory.mktemp("deployment")
    facts = {**DEPLOYMENT, "unprotected": ["round count"],
             "implementation": {**DEPLOYMENT["implementation"], "timing": None}}
    acc = {**ACCOUNTING, "deployment": {"accounting": {"accountant": "pld"}, "privacy_unit": "user-day",
                                        "dp_flavour": "approximate"}}
    saved = os.environ.pop(KEY_ENV, None)
    try:
        run_plan_to_dir(plan(LDP, acc, deployment=facts), root / "report", formats=("json", "html", "md"))
    finally:
        if saved is not None:
            os.environ[KEY_ENV] = saved
    return root / "report"


def test_the_deployment_is_signed_content_and_rendered_first(written, tmp_path):
    data = json.loads((written / "report.json").read_text())
    assert data["schema_version"] == "1.5"
    assert data["deployment"]["plan"]["privacy_unit"] == "client"
    assert [c["facts"]["privacy_unit"] for c in data["deployment"]["claims"]] == ["client", "user-day"]
    res = verify_report(written, rederive=rederive_claim)
    assert res.ok, res.problems
    assert any(c.startswith("the deployment facts") for c in res.covers)
    signed = tmp_path / "signed"
    shutil.copytree(written, signed)
    outcome, after = sign_report(signed, b"a key", rederive=rederive_claim)
    assert outcome == "signed" and after.authenticated and after.content_digest == res.content_digest
    assert json.loads((signed / "report.json").read_text())["deployment"] == data["deployment"]
    html = (written / "report.html").read_text()
    assert html.index('<section id="deployment">') < html.index('<section id="summary">')
    assert "Privacy unit (whose data one ε protects)" in html and "replace one unit" in html
    assert "not addressed by this plan: timing side channels" in html
    md = (written / "report.md").read_text()
    assert md.index("## Deployment") < md.index("| # | claim |") and "| DP flavour | pure ε-DP (claims override it: see below) |" in md
    assert "per claim (see below)" not in md and "client (claims override it: see below)" in md
    assert "- not addressed by this plan: timing side channels" in md
    # an edited fact breaks the digest: the facts are covered
    forged = tmp_path / "forged"
    shutil.copytree(written, forged)
    data["deployment"]["plan"]["trust_model"] = "central"
    (forged / "report.json").write_text(json.dumps(data))
    assert not verify_report(forged).digest_ok


def test_export_registry_writes_the_tier_fields(written, tmp_path, capsys):
    assert main(["export-registry", str(written)]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["format"] == "fedaudit-dp-registry-export/1"
    assert entry["tier_1"]["curator"] == "test server" and entry["tier_1"]["publication_date"]
    assert entry["tier_2"]["deployment_model"] == "local" and entry["tier_2"]["dp_flavour"] == "pure"
    assert [(x["claim"], x["epsilon"], x["verdict"]) for x in entry["tier_2"]["privacy_loss"]] == \
        [("lap", 1.0, "PASS"), ("acc", 5.0, "PASS")]
    assert entry["tier_2"]["privacy_loss"][1]["differs_from_plan"] == {"privacy_unit": "user-day",
                                                                      "dp_flavour": "approximate"}
    assert entry["tier_3"]["unprotected_quantities"] == ["round count"]
    assert entry["tier"] == 2 and entry["missing"]["tier_3"] == ["implementation"]  # timing unstated
    assert [h["id"] for h in entry["hazards"]] == ["timing"]
    assert entry["source"]["verification"] == {
        "intact": True, "verdicts_rederived": True, "hmac_signature": "absent", "ed25519_signature": "not checked",
        "content_digest": verify_report(written).content_digest}
    out = tmp_path / "registry.json"
    assert main(["export-registry", str(written), "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == entry
    # a tampered report is refused, exit 2
    forged = tmp_path / "forged"
    shutil.copytree(written, forged)
    data = json.loads((forged / "report.json").read_text())
    data["deployment"]["plan"]["population"] = 1
    (forged / "report.json").write_text(json.dumps(data))
    assert main(["export-registry", str(forged)]) == 2
    err = capsys.readouterr().err
    assert "export-registry report" in err and "is not intact: digest" in err


def test_an_older_report_without_deployment_still_verifies_and_renders(written, tmp_path, capsys):
    folder = tmp_path / "old"
    shutil.copytree(written, folder)
    data = json.loads((folder / "report.json").read_text())
    data["schema_version"] = "1.4"
    del data["deployment"]
    for name in ("report.html", "report.md"):
        (folder / name).unlink()
    data["manifest"]["artifacts"] = None
    data["digest"] = digest(canonical_json_bytes(data))
    (folder / "report.json").write_text(json.dumps(data))
    assert verify_report(folder, rederive=rederive_claim).ok
    view = read_report(folder).rendering_view()
    assert "Deployment" not in render_html(view) and "## Deployment" not in render_markdown(view)
    assert main(["export-registry", str(folder)]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["tier"] == 0 and entry["tier_2"]["privacy_loss"] is None and entry["hazards"] == []
    assert registry_export(data)["source"]["schema_version"] == "1.4"
