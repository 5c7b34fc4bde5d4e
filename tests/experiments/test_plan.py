"""Declarative plans (issue #6): validation up front, one runner per kind, verdict semantics,
`fedaudit run` exit codes and --force, claim seeds that do not depend on the claims' order."""

import copy
import json
import subprocess
import sys

import pytest

from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.experiments.kinds import CLAIM_KINDS
from fedaudit.experiments.kinds.robustness import Robustness
from fedaudit.reports.io import write_report
from fedaudit.experiments.plan import claim_seed, load_plan
from fedaudit.experiments.runner import PlanProgress, run_plan
from tests.helpers import REPO


# one cheap claim of every kind (a few seconds in all)
SKETCH = {"id": "sketch", "kind": "ldp", "mechanism": "sstq-sketch", "dim": 16, "k": 4, "samples": 4000,
          "expect": "violation"}
VQSGD = {"id": "vq", "kind": "ldp", "mechanism": "vqsgd", "dim": 8, "samples": 4000}
VARIANCE = {"id": "var", "kind": "variance", "dim": 64, "ks": [4, 8, 16], "samples": 300, "max_slope": 0.0}
ROBUST = {"id": "rob", "kind": "robustness", "aggregator": "cwtm", "n": 7, "f": 1, "trials": 16,
          "attacks": ["alie", "ipm"], "search_evals": 4, "max_nu": 5.0}
STRESS = {"id": "stress", "kind": "stress", "aggregators": ["cwtm"], "attacks": ["alie"], "rounds": 5,
          "n_honest": 6, "backend": "serial", "min_accuracy": 0.3}
CONV = {"id": "conv", "kind": "convergence", "optimizers": ["dgd", "dnag"], "rounds": 12, "n_honest": 6,
        "max_final_loss": 10.0, "min_speedup": {"dnag": 0.5}}


def plan(*claims, seed=0, title="test plan"):
    return {"plan": {"title": title, "seed": seed}, "claim": [copy.deepcopy(c) for c in claims]}


def toml_value(v):
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)  # strings, numbers, booleans and lists coincide with TOML here


def write_toml(path, data):
    lines = ["[plan]"] + [f"{k} = {toml_value(v)}" for k, v in data["plan"].items()]
    for c in data["claim"]:
        lines += ["", "[[claim]]"] + [f"{k} = {toml_value(v)}" for k, v in c.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("claim, pattern", [
    ({**VQSGD, "sample": 100}, r"^claim 'vq' \(#2\): unknown key 'sample' \(did you mean 'samples'\?\); valid keys"),
    ({**VQSGD, "samples": "abc"}, r"^claim 'vq' \(#2\): key 'samples' must be an integer in \[100, 1000000000000\], got 'abc'$"),
    ({**VQSGD, "samples": 50}, r"^claim 'vq' \(#2\): key 'samples' must be an integer in \[100, 1000000000000\], got 50$"),
    ({**VQSGD, "samples": 1.5e3 + 0.5}, r"key 'samples' must be an integer in \[100, 1000000000000\], got 1500.5"),
    ({**VQSGD, "confidence": 1.0}, r"^claim 'vq' \(#2\): key 'confidence' must be a number in \(0, 1\), got 1.0$"),
    ({**VQSGD, "curve": "yes"}, r"^claim 'vq' \(#2\): key 'curve' must be true or false, got 'yes'$"),
    ({**VQSGD, "mechanism": "sstq2"}, r"^claim 'vq' \(#2\): key 'mechanism' is not a mechanism: unknown mechanism 'sstq2' \(did you mean 'sstq'\?\)"),
    ({**VQSGD, "kind": "privacy"}, r"^claim 'vq' \(#2\): key 'kind' must be one of 'accounting', .*'convergence', .*'ldp', .*got 'privacy'"),
    ({**VQSGD, "id": "sketch"}, r"^claim 'sketch' \(#2\): key 'id' duplicates claim #1"),
    ({**VQSGD, "expect": "fail"}, r"^claim 'vq' \(#2\): key 'expect' must be one of 'pass', 'violation'"),
    ({**VQSGD, "sampler": "numpy:sort"}, r"^claim 'vq' \(#2\): key 'sampler' audits a black-box sampler instead of "
                                         r"a mechanism: give mechanism or sampler, not both"),
    ({"id": "rb", "kind": "robustness", "d": 10, "dim": 10}, r"^claim 'rb' \(#2\): key 'd' is the deprecated name of 'dim'"),
    ({k: v for k, v in VQSGD.items() if k != "id"}, r"^claim #2: missing required key 'id'"),
    ({**VQSGD, "mechanism": "sstq", "k": 9}, r"^claim 'vq' \(#2\): key 'k' must be an integer in \[1, dim=8\], got 9"),
    ({**VARIANCE, "ks": [4, 128]}, r"^claim 'var' \(#2\): key 'ks' must list integers in \[1, dim=64\], got 128"),
    ({**VARIANCE, "ks": []}, r"^claim 'var' \(#2\): key 'ks' must be a list of integers >= 1, got \[\]"),
    ({**ROBUST, "f": 4}, r"^claim 'rob' \(#2\): key 'f' must satisfy n > 2f \(n=7\), got f=4"),
    ({**ROBUST, "aggregator": "median"}, r"^claim 'rob' \(#2\): key 'aggregator' is not a valid aggregator: unknown"),
    ({**ROBUST, "attacks": ["alie", "nope"]}, r"^claim 'rob' \(#2\): key 'attacks' names unknown attack 'nope'"),
    ({**ROBUST, "max_nu": -1}, r"^claim 'rob' \(#2\): key 'max_nu' must be a number > 0, got -1"),
    ({**STRESS, "fs": [6]}, r"^claim 'stress' \(#2\): key 'fs' must list integers in \[0, n_honest - 1 = 5\]"),
    ({k: v for k, v in STRESS.items() if k != "min_accuracy"}, r"^claim 'stress' \(#2\): set 'min_accuracy' or 'max_loss'"),
    ({**CONV, "optimizers": ["dgd", "adam"]}, r"^claim 'conv' \(#2\): key 'optimizers' must be a list of strings from"),
    ({**CONV, "max_rounds": {"pigs": 3}}, r"^claim 'conv' \(#2\): key 'max_rounds' names optimizer 'pigs'"),
    ({**VARIANCE, "max_slope": None, "expect": "violation"},
     r"^claim 'var' \(#2\): expect = 'violation' needs a bound to violate"),
])
def test_validation_errors_name_the_claim_and_the_key(claim, pattern):
    with pytest.raises(FedAuditError, match=pattern):
        load_plan(plan(SKETCH, claim))


def test_validation_errors_at_plan_level(tmp_path):
    with pytest.raises(FedAuditError, match=r"^plan: key 'seed' must be an integer >= 0, got -1$"):
        load_plan({"plan": {"seed": -1}, "claim": [VQSGD]})
    with pytest.raises(FedAuditError, match=r"^plan: unknown key 'sed' \(did you mean 'seed'\?\)"):
        load_plan({"plan": {"sed": 1}, "claim": [VQSGD]})
    with pytest.raises(FedAuditError, match=r"^plan file: unknown key 'claims' \(did you mean 'claim'\?\)"):
        load_plan({"claims": [VQSGD]})
    with pytest.raises(FedAuditError, match=r"^plan: no claims"):
        load_plan({"plan": {"title": "empty"}})
    with pytest.raises(FedAuditError, match=r"^plan file not found: "):
        load_plan(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[claim]\nid = 1\n")
    with pytest.raises(FedAuditError, match=r"is not valid TOML"):
        load_plan(bad)


def test_toml_plan_parses_whole_floats_and_inline_tables(tmp_path):
    path = write_toml(tmp_path / "p.toml", plan(SKETCH, {**VQSGD, "samples": 2e4}, CONV))
    p = load_plan(path)
    assert [c.id for c in p.claims] == ["sketch", "vq", "conv"]
    assert p.claims[1].params["samples"] == 20000 and isinstance(p.claims[1].params["samples"], int)
    assert p.claims[2].params["min_speedup"] == {"dnag": 0.5} and p.claims[2].params["baseline"] == "dgd"
    import hashlib

    assert p.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert set(CLAIM_KINDS.names()) >= {"ldp", "variance", "robustness", "stress", "convergence"}


def test_demo_plan_is_valid():
    p = load_plan(REPO / "examples" / "plans" / "demo.toml")
    kinds = [c.kind for c in p.claims]
    assert {"ldp", "variance", "robustness", "stress"} <= set(kinds)
    assert any(c.expect == "violation" and c.params.get("mechanism") == "sstq-sketch" for c in p.claims)


# ------------------------------------------------------------------------------- seeds
def test_claim_seeds_do_not_depend_on_order():
    a = load_plan(plan(SKETCH, VQSGD, ROBUST, seed=7))
    b = load_plan(plan(ROBUST, VQSGD, SKETCH, seed=7))
    seeds_a = {c.id: c.seed for c in a.claims}
    assert seeds_a == {c.id: c.seed for c in b.claims}
    assert seeds_a["rob"] == claim_seed(7, "rob") and len(set(seeds_a.values())) == 3
    assert load_plan(plan(ROBUST, seed=8)).claims[0].seed != seeds_a["rob"]
    assert load_plan(plan({**ROBUST, "seed": 123}, seed=7)).claims[0].seed == 123
    # and so are the results
    rob = copy.deepcopy(ROBUST)
    first = run_plan(plan(rob, {**rob, "id": "other"}, seed=7)).claim("rob")
    second = run_plan(plan({**rob, "id": "other"}, rob, seed=7)).claim("rob")
    assert first.seed == second.seed
    assert first.evidence["nu_empirical"] == second.evidence["nu_empirical"]
    assert first.evidence["audit"]["per_configuration"] == second.evidence["audit"]["per_configuration"]


# ------------------------------------------------------------------------------- running
class Recorder(PlanProgress):
    def __init__(self):
        self.events = []

    def claim_started(self, spec, total, unit):
        self.events.append(("start", spec.id, total, unit))

    def advance(self, n):
        self.events.append(("advance", n))

    def claim_finished(self, spec, claim):
        self.events.append(("finish", spec.id, claim.verdict))


def test_one_claim_of_each_kind(tmp_path):
    rec = Recorder()
    report = run_plan(plan(SKETCH, VQSGD, VARIANCE, ROBUST, STRESS, CONV, seed=3), progress=rec)
    assert [c.id for c in report.claims] == ["sketch", "vq", "var", "rob", "stress", "conv"]
    assert all(c.error is None for c in report.claims), [c.error for c in report.claims]
    by = {c.id: c for c in report.claims}

    sk = by["sketch"].evidence  # the published sketch is not LDP: the violation is certified
    assert sk["violation"] and sk["epsilon_lower"] > sk["epsilon_claimed"] and by["sketch"].verdict == "PASS"
    vq = by["vq"].evidence
    assert not vq["violation"] and vq["epsilon_lower"] <= vq["epsilon_claimed"] and by["vq"].verdict == "PASS"
    plot_types = [p["type"] for p in by["vq"].plots]
    assert plot_types == ["epsilon_vs_samples", "privacy_region"]
    assert by["vq"].plots[0]["samples"] == [250, 1000, 4000]

    var = by["var"].evidence
    (check,) = var["checks"]
    # at fixed total ε SSTQ's private MSE falls like k/d (slope −1 on d/k): the bound 0 holds
    assert check["check"] == "max_slope" and check["holds"] and not check["violated"]
    assert -1.1 < var["slope_private_ci"][0] <= var["slope_private_ci"][1] < -0.9
    assert by["var"].verdict == "PASS"
    assert by["var"].plots[0]["type"] == "mse_vs_dk"

    rob = by["rob"].evidence
    assert 0.99 * rob["nu_lower"] <= rob["nu_empirical"] <= 5.0 and not rob["bound_violation"]
    assert by["rob"].verdict == "PASS" and by["rob"].plots[0]["type"] == "nu_vs_bound"
    assert isinstance(rob["audit"]["config"]["inputs"], dict)  # the raw 7×100 inputs are trimmed

    st = by["stress"].evidence
    # 5 rounds of D-GD on digits under ALIE reach far above 0.3 (chance is 0.1)
    assert [c["meets"] for c in st["per_cell"]] == [True] and st["per_cell"][0]["final_accuracy"] > 0.6
    assert by["stress"].verdict == "PASS"
    assert st["cells"] == 1 and {p["type"] for p in by["stress"].plots} == {"heatmap", "curves"}

    cv = by["conv"].evidence
    # D-NAG is faster than D-GD here (speedup > 1 ≥ 0.5) and 12 rounds keep both losses far below 10
    assert cv["per_optimizer"]["dnag"]["speedup"] > 1.0 and all(c["holds"] for c in cv["checks"])
    assert by["conv"].verdict == "PASS"
    assert {c["check"] for c in cv["checks"]} == {"min_speedup[dnag]", "max_final_loss[dgd]", "max_final_loss[dnag]"}

    starts = [e for e in rec.events if e[0] == "start"]
    assert [e[1] for e in starts] == [c.id for c in report.claims]
    assert starts[0][2] == 2 * 4000 + 2 * (250 + 1000) and starts[0][3] == "samples"
    assert sum(e[1] for e in rec.events if e[0] == "advance") > 0

    m = report.manifest
    assert m.seed_entropy == "3" and m.plan_sha256 is not None
    paths = write_report(report, tmp_path / "out")  # the schema accepts every claim and plot
    data = json.loads(paths["json"].read_text())
    assert data["overall"] == report.overall and len(data["claims"]) == 6


def test_expect_violation_semantics():
    sketch_pass = {**SKETCH, "id": "sketch-claimed-ldp", "expect": "pass"}
    vq_violation = {**VQSGD, "expect": "violation"}
    r = run_plan(plan(SKETCH, sketch_pass, vq_violation))
    assert [c.verdict for c in r.claims] == ["PASS", "FAIL", "FAIL"]
    assert r.overall == "FAIL"
    assert "NOT detected" in r.claim("vq").summary


def test_robustness_below_universal_lower_bound_fails():
    r = run_plan(plan({**ROBUST, "max_nu": 0.1}))
    c = r.claims[0]
    assert c.verdict == "FAIL" and c.evidence["nu_empirical"] > 0.1 >= 0
    assert c.evidence["nu_lower"] > 0.1 and "below the universal lower bound" in c.summary


def test_a_claim_that_raises_is_inconclusive(monkeypatch):
    def boom(self, spec, rng, progress, workdir=None):
        raise RuntimeError("machinery broke")

    monkeypatch.setattr(Robustness, "run", boom)
    r = run_plan(plan(ROBUST, VQSGD), engine={"parallel_claims": False})  # the patch is in this process only
    assert [c.verdict for c in r.claims] == ["INCONCLUSIVE", "PASS"]
    assert r.claims[0].error.startswith("RuntimeError: machinery broke")
    assert r.overall == "INCONCLUSIVE"


# ------------------------------------------------------------------------------- CLI
def fedaudit(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "fedaudit.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)


def test_cli_run_exit_codes_and_force(tmp_path):
    good = write_toml(tmp_path / "good.toml", plan(ROBUST, VQSGD))
    failing = write_toml(tmp_path / "failing.toml", plan(VQSGD, {**ROBUST, "max_nu": 0.1}))
    bad = write_toml(tmp_path / "bad.toml", plan({**VQSGD, "samples": "abc"}))
    out = tmp_path / "report"

    proc = fedaudit("run", good, "--out", out, "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html", "report.md"}
    assert "PASS" in proc.stdout and proc.stderr == ""
    first = json.loads((out / "report.json").read_text())
    assert first["overall"] == "PASS" and first["manifest"]["command"].startswith("fedaudit run ")

    proc = fedaudit("run", failing, "--out", out)  # the directory is not empty: refused before running
    assert proc.returncode == 2 and "--force" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert json.loads((out / "report.json").read_text())["digest"] == first["digest"]

    proc = fedaudit("run", failing, "--out", out, "--force")
    assert proc.returncode == 1, proc.stderr
    assert json.loads((out / "report.json").read_text())["overall"] == "FAIL"
    assert "rob" in proc.stdout and "FAIL" in proc.stdout

    for argv in (("run", bad, "--out", tmp_path / "x"), ("run", tmp_path / "nope.toml", "--out", tmp_path / "y")):
        proc = fedaudit(*argv)
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("fedaudit: error: ") and "Traceback" not in proc.stderr
    assert "claim 'vq' (#1): key 'samples' must be an integer in [100, 1000000000000], got 'abc'" in fedaudit(
        "run", bad, "--out", tmp_path / "x").stderr
    assert not (tmp_path / "x").exists()  # a bad plan creates nothing


def test_demo_showcase_still_available(capsys):
    assert main(["demo", "--showcase", "--dim", "32", "--n", "100", "--quiet"]) == 0
    assert "sstq-sketch" in capsys.readouterr().out


def test_toml_plan_with_bucketing_and_its_s(tmp_path):
    path = tmp_path / "bucketing.toml"
    path.write_text('''[plan]
seed = 4

[[claim]]
id = "bucketing-rob"
kind = "robustness"
aggregator = "bucketing+cwtm"
aggregator_params = { s = 2 }
n = 11
f = 2
trials = 8
attacks = ["alie"]
search_evals = 2
max_nu = 5.0

[[claim]]
id = "bucketing-stress"
kind = "stress"
aggregators = ["cwtm", "bucketing+cwtm"]
aggregator_params = { "bucketing+cwtm" = { s = 2 } }
attacks = ["alie"]
rounds = 3
n_honest = 6
backend = "serial"
min_accuracy = 0.3
''')
    p = load_plan(path)
    assert p.claims[0].params["aggregator_params"] == {"s": 2}
    assert p.claims[1].params["aggregator_params"] == {"bucketing+cwtm": {"s": 2}}
    report = run_plan(p)
    assert [c.error for c in report.claims] == [None, None]
    rob, stress = report.claims
    assert rob.evidence["aggregator_params"]["s"] == 2 and rob.verdict == "PASS"
    assert stress.evidence["config"]["aggregator_params"]["bucketing+cwtm"]["s"] == 2
    assert stress.evidence["cells"] == 2
    # without s the plan is refused before anything runs, naming the claim and the key
    path.write_text(path.read_text().replace("aggregator_params = { s = 2 }\n", ""))
    with pytest.raises(FedAuditError, match=r"^claim 'bucketing-rob' \(#1\): key 'aggregator_params' is rejected by "
                                            r"'bucketing\+cwtm': bucketing needs the keyword\(s\) s"):
        load_plan(path)


def test_robustness_d_is_read_as_dim_with_one_deprecation_note(tmp_path, capsys):
    """Plans before this release said ``d``: still read, as ``dim``, with one DeprecationWarning that
    the CLI prints as one ``fedaudit: note:`` line (as for every renamed key, ClaimKind.renamed_keys)."""
    claim = {"id": "rb", "kind": "robustness", "aggregator": "cwtm", "n": 7, "f": 1, "d": 4, "trials": 2,
             "search_evals": 0, "attacks": ["alie"]}
    with pytest.warns(DeprecationWarning, match=r"^claim 'rb' \(#1\): key 'd' is deprecated; use 'dim'$"):
        spec = load_plan({"claim": [claim]}).claims[0]
    assert spec.params["dim"] == 4 and "d" not in spec.params
    path = write_toml(tmp_path / "old.toml", plan(claim))
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedaudit: note:")]
    assert notes == ["fedaudit: note: claim 'rb' (#1): key 'd' is deprecated; use 'dim'"]
