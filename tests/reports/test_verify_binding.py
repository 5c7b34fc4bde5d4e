"""``verify`` re-derives, and says what a signature binds (issue #23 §2).

* every verdict is re-derived from its recorded evidence (only kinds registered by name: a kind a
  report names is never imported), a contradiction fails ``verify`` and ``sign``;
* the manifest (schema 1.4) embeds the plan's text, the source hash of every ``module:attr`` the
  plan named, the dependencies' versions and the provenance of the fedaudit code that ran, where a
  planted ``.pyc`` shows as stale bytecode and fails ``verify``; 1.2 and 1.3 reports still verify;
* ``verify --plan`` refuses a report made from another plan, and prints the plan hash and what the
  signature covers;
* the report key: its bytes as the environment holds them (non-UTF-8 accepted), an empty one is
  an error, and no worker process inherits it.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import fedaudit
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Evidence
from fedaudit.experiments.kinds import CLAIM_KINDS, register_claim_kind
from fedaudit.experiments.rederive import rederive_claim
from fedaudit.experiments.runner import run_plan, run_plan_to_dir
from fedaudit.reports import KEY_ENV, Report, verify_report, write_report
from fedaudit.reports.integrity import signing_key
from fedaudit.reports.io import sign_report
from fedaudit.reports.provenance import DEPENDENCIES

PLAN = """[plan]
title = "verify binding"
seed = 3

[[claim]]
id = "lap"
kind = "ldp"
mechanism = "laplace"
dim = 2
epsilon = 1.0
samples = 4000
curve = false
"""
KEY = b"a report key"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A report folder of :data:`PLAN` (one LDP claim, PASS) and its plan file."""
    root = tmp_path_factory.mktemp("binding")
    (root / "plan.toml").write_text(PLAN, encoding="utf-8")
    saved = os.environ.pop(KEY_ENV, None)
    try:
        run_plan_to_dir(root / "plan.toml", root / "report", formats=("json",))
    finally:
        if saved is not None:
            os.environ[KEY_ENV] = saved
    return root


@pytest.fixture
def report(written, tmp_path):
    """A fresh copy of the written report folder; returns (folder, plan file)."""
    shutil.copytree(written / "report", tmp_path / "report")
    shutil.copy(written / "plan.toml", tmp_path / "plan.toml")
    return tmp_path / "report", tmp_path / "plan.toml"


def _data(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def _forge(folder: Path, data: dict) -> None:
    """What anyone can do to an unsigned report: write edited data as a sealed report (digest,
    artifact table, overall and counts recomputed)."""
    write_report(Report.from_dict(data), folder, force=True, formats=("json",))


# ------------------------------------------------------------------------------ re-derivation
def test_a_verdict_that_contradicts_its_evidence_fails_verify_and_sign(report, capsys, tmp_path):
    folder, _ = report
    data = _data(folder)
    assert data["claims"][0]["verdict"] == "PASS" and rederive_claim(data["claims"][0]) is None
    # a forger turns the PASS into a FAIL and makes overall, counts and digest follow
    data["claims"][0]["verdict"] = "FAIL"
    _forge(folder, data)
    assert _data(folder)["overall"] == "FAIL"
    assert verify_report(folder).ok  # the library's default: integrity only, no re-derivation
    res = verify_report(folder, rederive=rederive_claim)
    assert not res.ok and res.digest_ok and res.schema_ok and res.rederived == 0
    assert "verdict: claim 'lap': stored verdict FAIL, but its recorded evidence gives PASS (kind ldp, expect pass)" \
        in res.problems
    capsys.readouterr()
    assert main(["verify", str(folder)]) == 1
    text = capsys.readouterr().out
    assert "a verdict contradicts its evidence" in text and "NOT verified" in text
    (tmp_path / "k").write_bytes(KEY)
    assert main(["sign", str(folder), "--key-file", str(tmp_path / "k")]) == 2
    assert "refusing to sign" in capsys.readouterr().err


def test_evidence_that_cannot_decide_fails(report):
    folder, _ = report
    data = _data(folder)
    del data["claims"][0]["evidence"]["epsilon_lower"]
    _forge(folder, data)
    res = verify_report(folder, rederive=rederive_claim)
    assert not res.ok and any(p.startswith("verdict: claim 'lap': its evidence cannot decide") and "epsilon_lower" in p
                              for p in res.problems)


class NoDecide(ClaimKind):
    """A kind without decide(): its verdicts cannot be re-derived. Its claims hold and record the
    process that ran them."""

    name = "no-decide-test"

    def keys(self):
        return {}

    def default_title(self, params, expect):
        return self.name

    def run(self, spec, rng, progress, *, workdir=None):
        return Evidence(holds=True, violated=False, evidence={"pid": os.getpid()}, summary="ok")


@pytest.fixture
def no_decide():
    register_claim_kind(NoDecide)
    yield
    CLAIM_KINDS.unregister(NoDecide.name)


def test_kinds_that_cannot_rederive_are_notes_and_errors_must_be_inconclusive(no_decide, tmp_path):
    claim = {"id": "c", "kind": NoDecide.name, "expect": "pass", "verdict": "PASS", "evidence": {}, "error": None}
    finding = rederive_claim(claim)
    assert not finding.fails and finding.text == "claim 'c': verdict not re-derived (kind no-decide-test has no decide())"
    errored = {**claim, "kind": "ldp", "verdict": "INCONCLUSIVE", "error": "RuntimeError: boom"}
    assert rederive_claim(errored) is None
    finding = rederive_claim({**errored, "verdict": "PASS"})
    assert finding.fails and "records an error but its verdict is PASS" in finding.text


def test_verify_never_imports_a_kind_the_report_names(report, tmp_path, monkeypatch, capsys):
    folder, _ = report
    marker = tmp_path / "imported"
    (tmp_path / "planted_kind_xyz.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass K: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    data = _data(folder)
    data["claims"][0]["kind"] = "planted_kind_xyz:K"
    _forge(folder, data)
    capsys.readouterr()
    assert main(["verify", str(folder)]) == 0  # a note, not a failure
    text = capsys.readouterr().out
    assert "verdict not re-derived (kind 'planted_kind_xyz:K' is not a registered claim kind" in text
    assert not marker.exists() and "planted_kind_xyz" not in sys.modules


# ------------------------------------------------------------------------------ manifest 1.4
class Echo(NoDecide):
    """A kind named by reference in a plan, so its module is a plugin the manifest hashes."""

    name = "echo-test"


def test_the_manifest_binds_plan_text_plugins_dependencies_and_provenance(written):
    data = _data(written / "report")
    manifest = data["manifest"]
    assert data["schema_version"] == "1.5"
    assert manifest["plan_text"] == PLAN and manifest["plan_sha256"] == hashlib.sha256(PLAN.encode()).hexdigest()
    assert manifest["plugins"] == {}
    assert list(manifest["dependencies"]) == list(DEPENDENCIES) and manifest["dependencies"]["numpy"]
    prov = manifest["provenance"]
    assert prov["modules"] > 10 and prov["stale_bytecode"] == [] and len(prov["sources_sha256"]) == 64

    me = Path(__file__)
    plan = {"plan": {"seed": 1}, "claim": [{"id": "e", "kind": f"{__name__}:Echo"}]}
    manifest = run_plan(plan).manifest
    assert manifest.plugins == {f"{__name__}:Echo": {"sha256": hashlib.sha256(me.read_bytes()).hexdigest(),
                                                            "file": me.name}}


def test_the_embedded_plan_text_must_hash_to_plan_sha256(report):
    folder, _ = report
    data = _data(folder)
    data["manifest"]["plan_text"] = PLAN.replace("epsilon = 1.0", "epsilon = 4.0")
    _forge(folder, data)
    res = verify_report(folder)
    assert not res.ok and any(p.startswith("plan: the embedded plan text hashes to") for p in res.problems)


@pytest.mark.parametrize("version", ["1.2", "1.3", "1.4"])
def test_older_reports_still_verify_and_sign_without_new_fields(report, version, tmp_path):
    folder, _ = report
    data = _data(folder)
    data["schema_version"] = version
    data.pop("deployment")  # schema 1.5
    for name in ("plan_text", "plugins", "dependencies", "provenance"):
        del data["manifest"][name]
    _forge(folder, data)
    res = verify_report(folder, rederive=rederive_claim)
    assert res.ok and res.rederived == 1, res.problems
    assert any("SHA-256 only" in c and "not embedded" in c for c in res.covers)
    outcome, signed = sign_report(folder, KEY, rederive=rederive_claim)
    assert outcome == "signed" and signed.authenticated and signed.content_digest == res.content_digest
    assert "plan_text" not in _data(folder)["manifest"] and _data(folder)["schema_version"] == version


def test_a_planted_pyc_is_named_in_the_report_and_refused(tmp_path, capsys):
    """A .pyc compiled from a modified audit/bounds.py, planted in __pycache__ with a header that
    matches the real source (its mtime and size): Python runs it, the checkout looks clean, and
    the report's provenance must name it. The package is a copy in tmp_path (never the worktree's)."""
    site = tmp_path / "site"
    shutil.copytree(Path(fedaudit.__file__).parent, site / "fedaudit", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in (KEY_ENV, "PYTHONDONTWRITEBYTECODE")}
    env.update(PYTHONPATH=str(site), FEDAUDIT_BACKEND="serial")
    probe = ("import json, fedaudit.experiments.runner, fedaudit.audit.bounds as b; "
             "from fedaudit.reports.provenance import code_provenance; "
             "print(json.dumps([b.__file__, getattr(b, 'PLANTED', False), code_provenance()['stale_bytecode']]))")

    def run_probe() -> list:
        proc = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    run_probe()  # writes genuine bytecode for every module it imports
    path, planted, stale = run_probe()  # and reads it back: genuine bytecode is not stale
    assert path.startswith(str(site)) and not planted and stale == []

    source = site / "fedaudit" / "audit" / "bounds.py"
    modified = tmp_path / "bounds_modified.py"
    modified.write_text(source.read_text(encoding="utf-8") + "\nPLANTED = True\n", encoding="utf-8")
    pyc = Path(importlib.util.cache_from_source(str(source)))
    py_compile.compile(str(modified), cfile=str(pyc), dfile=str(source), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    st = source.stat()
    blob = bytearray(pyc.read_bytes())
    blob[8:16] = struct.pack("<II", int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF)
    pyc.write_bytes(bytes(blob))
    _, planted, stale = run_probe()
    assert planted and stale == ["fedaudit.audit.bounds"]  # Python ran the planted code, and it is named

    (tmp_path / "plan.toml").write_text(PLAN, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "fedaudit.cli", "run", "plan.toml", "--out", "out", "--quiet"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "fedaudit.audit.bounds" in warnings[0] and "planted .pyc" in warnings[0]
    data = _data(tmp_path / "out")
    assert data["manifest"]["provenance"]["stale_bytecode"] == ["fedaudit.audit.bounds"]
    capsys.readouterr()
    assert main(["verify", str(tmp_path / "out")]) == 1
    assert "provenance: the run executed bytecode that is not compiled from its source" in capsys.readouterr().out


# ------------------------------------------------------------------------------ verify --plan
def test_verify_plan_matches_the_report_and_prints_what_the_signature_covers(report, tmp_path, capsys):
    folder, plan = report
    sha = hashlib.sha256(plan.read_bytes()).hexdigest()
    capsys.readouterr()
    assert main(["verify", str(folder), "--plan", str(plan)]) == 0
    text = capsys.readouterr().out
    assert f"plan SHA-256 {sha}: it matches" in text
    covers = next(line for line in text.splitlines() if "covers" in line)
    for phrase in ("1 claim(s) with their verdicts and evidence", "the plan's full text", "0 plugin source(s)",
                   "dependencies", "fedaudit provenance"):
        assert phrase in covers

    other = tmp_path / "other.toml"
    other.write_text(PLAN.replace("seed = 3", "seed = 4"), encoding="utf-8")
    assert main(["verify", str(folder), "--plan", str(other)]) == 1
    text = capsys.readouterr().out
    assert "plan: the report was made from the plan with SHA-256" in text and "does NOT match" in text
    assert main(["verify", str(folder), "--plan", str(tmp_path / "missing.toml")]) == 2
    assert "--plan" in capsys.readouterr().err


def test_a_signed_report_replayed_for_another_plan_is_refused(report, tmp_path, capsys):
    folder, plan = report
    (tmp_path / "k").write_bytes(KEY)
    assert main(["sign", str(folder), "--key-file", str(tmp_path / "k")]) == 0
    other = tmp_path / "other.toml"
    other.write_text(PLAN + "\n# another plan\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["verify", str(folder), "--key-file", str(tmp_path / "k"), "--plan", str(plan)]) == 0
    assert "the signature covers:" in capsys.readouterr().out
    assert main(["verify", str(folder), "--key-file", str(tmp_path / "k"), "--plan", str(other)]) == 1


# ------------------------------------------------------------------------------ the key
def test_an_empty_key_is_an_error_in_the_commands_that_read_it(report, tmp_path, monkeypatch, capsys):
    folder, plan = report
    monkeypatch.setenv(KEY_ENV, "")
    with pytest.raises(FedAuditError, match="set but empty"):
        signing_key()
    capsys.readouterr()
    assert main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{KEY_ENV} is set but empty" in err
    assert main(["run", str(plan), "--out", str(tmp_path / "never")]) == 2
    assert not (tmp_path / "never").exists()
    assert main(["list", "kinds"]) == 0  # a command that does not read the key
    assert os.environ[KEY_ENV] == ""  # main() leaves the environment as it found it


def test_a_key_that_is_not_utf8_is_its_raw_bytes(report, tmp_path, monkeypatch, capsys):
    folder, plan = report
    raw = b"\xff\xfe not utf-8 \x80"
    monkeypatch.setitem(os.environb, KEY_ENV.encode(), raw)
    assert signing_key() == raw
    assert main(["run", str(plan), "--out", str(tmp_path / "signed"), "--backend", "serial"]) == 0
    assert os.environb[KEY_ENV.encode()] == raw
    (tmp_path / "k").write_bytes(raw)
    monkeypatch.delitem(os.environb, KEY_ENV.encode())
    assert main(["verify", str(tmp_path / "signed"), "--key-file", str(tmp_path / "k"), "--require-signature"]) == 0
    assert verify_report(tmp_path / "signed", key=raw).authenticated


class Probe(NoDecide):
    """Records whether the report key is in the environment of the process that runs it."""

    name = "key-probe-test"

    def run(self, spec, rng, progress, *, workdir=None):
        block = Path("/proc/self/environ")
        initial = block.read_bytes() if block.exists() else b""
        return Evidence(holds=True, violated=False, summary="probe",
                        evidence={"pid": os.getpid(), "in_environ": KEY_ENV in os.environ,
                                  "in_initial_environment": KEY_ENV.encode() + b"=" in initial})


PROBES = [{"id": f"p{i}", "kind": f"{__name__}:Probe"} for i in range(2)]


def test_process_workers_never_inherit_the_key(tmp_path, monkeypatch):
    from fedaudit.engine import PRIVATE_ENV, shutdown

    assert KEY_ENV in PRIVATE_ENV  # the engine cannot import the reports: it names the variable itself
    monkeypatch.setenv(KEY_ENV, KEY.decode())

    shutdown()  # workers started before this test inherited whatever the environment held then
    report, _ = run_plan_to_dir({"plan": {"seed": 1}, "engine": {"backend": "process", "workers": 2},
                                 "claim": copy.deepcopy(PROBES)}, tmp_path / "lib", formats=("json",))
    assert os.environ[KEY_ENV] == KEY.decode()  # the caller's environment is left alone
    for claim in report.claims:
        assert claim.error is None and claim.evidence["pid"] != os.getpid()
        assert claim.evidence["in_environ"] is False and claim.evidence["in_initial_environment"] is False
    assert report.signature is not None and verify_report(tmp_path / "lib", key=KEY).authenticated

    shutdown()
    plan = tmp_path / "probes.toml"
    plan.write_text("".join(f'[[claim]]\nid = "{c["id"]}"\nkind = "{c["kind"]}"\n\n' for c in PROBES))
    assert main(["run", str(plan), "--out", str(tmp_path / "cli"), "--backend", "process", "--workers", "2"]) == 0
    data = _data(tmp_path / "cli")
    assert all(c["evidence"]["pid"] != os.getpid() and not c["evidence"]["in_environ"]
               and not c["evidence"]["in_initial_environment"] for c in data["claims"])
    assert verify_report(tmp_path / "cli", key=KEY).authenticated
    shutdown()
