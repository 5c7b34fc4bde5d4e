"""Plan runs survive faults: checkpoints per claim, SIGKILL then --resume, one writer per report
directory, foreign checkpoints refused, no temporary stress directory left behind."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import fedaudit
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.locking import directory_lock
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import CHECKPOINT_DIR, WORK_DIR, Checkpoints, run_plan, run_plan_to_dir

VQ = """\
[[claim]]
id = "vq"
kind = "ldp"
mechanism = "vqsgd"
dim = 8
samples = 4000
"""

PLAN = """\
[plan]
title = "resume test"
seed = 3

[[claim]]
id = "rob"
kind = "robustness"
aggregator = "cwtm"
n = 7
f = 1
trials = 16
attacks = ["alie", "ipm"]
search_evals = 4
max_nu = 5.0

[[claim]]
id = "grid"
kind = "stress"
aggregators = ["cwtm", "nnm+cwtm"]
attacks = ["alie", "signflip"]
fs = [1]
rounds = 150
n_honest = 6
backend = "serial"
min_accuracy = 0.3

""" + VQ

QUICK = VQ + """
[[claim]]
id = "rr"
kind = "ldp"
mechanism = "rr"
dim = 4
samples = 4000
"""


def cli(*argv, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "fedaudit.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=env)


def _timeless(value):
    """``value`` without wall-clock fields (``runtime_s``, ``sampling_s``, ``stage_runtime_s``, …)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items()
                if not (k.endswith("_s") or "runtime" in k or k == "wall_time")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _wait_for(predicate, timeout, what, proc=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended (exit {proc.returncode}) before {what}: "
                                 f"{proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _cells(out):
    """The finished cells of the grid's ``cells.jsonl`` (its complete lines after the header)."""
    path = out / WORK_DIR / "grid" / "cells.jsonl"
    lines = path.read_text().splitlines(keepends=True)[1:] if path.is_file() else []
    return [line for line in lines if line.endswith("\n")]


@pytest.mark.slow  # 30 s; the normal suite keeps plan resume (experiments/test_checkpoint_integrity.py) and a SIGKILLed run's resume (engine/test_chunks.py)
def test_sigkill_then_resume_gives_the_uninterrupted_report(tmp_path):
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text(PLAN)
    out = tmp_path / "out"
    scratch = tmp_path / "tmp"  # the run's TMPDIR: nothing may be left in it
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "fedaudit.cli", "run", str(plan_file), "--out", str(out),
                             "--quiet"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _wait_for(lambda: (out / CHECKPOINT_DIR / "rob.json").is_file() and len(_cells(out)) >= 1, 240,
                  "the first checkpoint and a first stress cell", proc)
        os.killpg(proc.pid, signal.SIGSTOP)  # frozen mid-grid, still holding its lock
        # one writer: a second run into the same directory is refused while the first runs
        second = cli("run", plan_file, "--out", out, "--force", env=env)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another fedaudit run" in lines[0] and f"pid {proc.pid}" in lines[0]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    assert not (out / "report.json").exists()
    ckpt = json.loads((out / CHECKPOINT_DIR / "rob.json").read_text())
    assert ckpt["plan_sha256"] == hashlib.sha256(plan_file.read_bytes()).hexdigest()
    assert ckpt["fedaudit"] == fedaudit.__version__ and ckpt["claim"]["verdict"] == "PASS"
    assert not (out / CHECKPOINT_DIR / "grid.json").exists()
    partial = len(_cells(out))
    assert 1 <= partial < 4  # killed in the middle of the grid, whose cells live inside --out
    assert list(scratch.iterdir()) == []  # no temporary stress directory left behind

    resumed = cli("run", plan_file, "--out", out, "--resume", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "rob (robustness" in resumed.stderr and "from its checkpoint" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    report = json.loads((out / "report.json").read_text())
    rob = next(c for c in report["claims"] if c["id"] == "rob")
    assert rob["runtime_s"] == ckpt["claim"]["runtime_s"]  # loaded (its verdict re-derived), not recomputed
    assert {p.name for p in out.iterdir()} == {"report.json", "report.html", "report.md"}  # clean afterwards
    assert list(scratch.iterdir()) == []
    assert "--resume" in report["manifest"]["command"]

    reference, _ = run_plan_to_dir(plan_file, tmp_path / "ref")
    expected = reference.to_dict()
    assert [c["id"] for c in report["claims"]] == ["rob", "grid", "vq"]
    assert _timeless(report["claims"]) == _timeless(expected["claims"])
    assert report["overall"] == expected["overall"] and report["manifest"]["plan_sha256"] == ckpt["plan_sha256"]


def test_resume_refuses_checkpoints_of_another_plan(tmp_path, capsys):
    plan_a = tmp_path / "a.toml"
    plan_a.write_text(QUICK)
    plan_b = tmp_path / "b.toml"
    plan_b.write_text(QUICK.replace("samples = 4000\n\n", "samples = 5000\n\n", 1))
    out = tmp_path / "out"
    out.mkdir()
    plan = load_plan(plan_a)
    done = run_plan(plan).claims[0]
    Checkpoints(out, plan).save(done, time.time())  # as if a run of plan a was killed after one claim

    assert main(["run", str(plan_b), "--out", str(out), "--resume"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedaudit: error: ") and "different plan" in lines[0]
    assert "vq.json" in lines[0] and not (out / "report.json").exists()
    assert (out / CHECKPOINT_DIR / "vq.json").is_file()  # refused, not destroyed

    assert main(["run", str(plan_a), "--out", str(out), "--resume"]) == 0
    err = capsys.readouterr().err
    assert "vq (ldp" in err and "from its checkpoint" in err
    report = json.loads((out / "report.json").read_text())
    assert report["claims"][0]["runtime_s"] == done.runtime_s and [c["id"] for c in report["claims"]] == ["vq", "rr"]


def test_a_run_killed_inside_its_first_claim_resumes_only_with_its_own_plan(tmp_path, capsys):
    plan_a = tmp_path / "a.toml"
    plan_a.write_text(QUICK)
    plan_b = tmp_path / "b.toml"
    plan_b.write_text(QUICK + "\n")  # other bytes, other SHA-256
    out = tmp_path / "out"
    Checkpoints(out, load_plan(plan_a)).begin(123.0)  # what a run records before its first claim
    assert main(["run", str(plan_b), "--out", str(out), "--resume", "--quiet"]) == 2
    assert "_run.json belongs to a different plan" in capsys.readouterr().err
    report, _ = run_plan_to_dir(plan_a, out, resume=True)
    assert report.manifest.started.startswith("1970-01-01T00:02:03")  # the interrupted run's start


def test_checkpoint_of_another_version_or_a_tampered_claim_is_refused(tmp_path):
    plan_file = tmp_path / "a.toml"
    plan_file.write_text(QUICK)
    plan = load_plan(plan_file)
    claim = run_plan(plan).claims[0]
    ck = Checkpoints(tmp_path, plan)
    path = ck.save(claim, time.time())
    assert ck.load()[0]["vq"].to_dict() == claim.to_dict()
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "fedaudit": "0.0.0-other"}))
    with pytest.raises(FedAuditError, match="written by fedaudit 0.0.0-other"):
        ck.load()
    path.write_text(json.dumps({**record, "claim": {**record["claim"], "seed": record["claim"]["seed"] + 1}}))
    with pytest.raises(FedAuditError, match="vq.json fails its authentication"):  # tampered: the MAC breaks
        ck.load()
    path.write_text(json.dumps(record)[:-20])  # torn file (cannot happen with the atomic write, still refused)
    with pytest.raises(FedAuditError, match="cannot read checkpoint"):
        ck.load()
    path.write_text(json.dumps({**record, "claim": {**record["claim"], "runtime_s": float("nan")}}))
    with pytest.raises(FedAuditError, match="cannot read checkpoint.*not strict JSON"):  # a NaN token
        ck.load()
    path.write_text(json.dumps(record)[:-1] + ', "format": 1}')  # a duplicated key
    with pytest.raises(FedAuditError, match="cannot read checkpoint.*not strict JSON"):
        ck.load()
    (tmp_path / CHECKPOINT_DIR / ".vq.json.tmp").write_text("{")  # an interrupted write is ignored
    path.write_text(json.dumps(record))
    assert set(ck.load()[0]) == {"vq"}


def test_a_claim_that_errors_is_not_checkpointed_and_is_retried(tmp_path, monkeypatch):
    from fedaudit.experiments.kinds.ldp import LDP

    plan_file = tmp_path / "a.toml"
    plan_file.write_text(QUICK)
    calls = []
    real = LDP.run

    def flaky(self, spec, rng, progress, **kw):
        calls.append(spec.id)
        if spec.id == "rr" and calls.count("rr") == 1:
            raise RuntimeError("transient")
        return real(self, spec, rng, progress, **kw)

    monkeypatch.setattr(LDP, "run", flaky)
    out = tmp_path / "out"
    sequential = {"parallel_claims": False}  # the patch is in this process only (test_parallel_claims: workers)
    first = run_plan(load_plan(plan_file), checkpoints=Checkpoints(out, load_plan(plan_file)), engine=sequential)
    assert [c.verdict for c in first.claims] == ["PASS", "INCONCLUSIVE"]
    assert sorted(p.name for p in (out / CHECKPOINT_DIR).iterdir()) == ["_run.json", "vq.json"]
    report, _ = run_plan_to_dir(plan_file, out, resume=True, engine=sequential)
    assert [c.verdict for c in report.claims] == ["PASS", "PASS"] and calls == ["vq", "rr", "rr"]


def test_report_directory_rules(tmp_path, capsys):
    plan_file = tmp_path / "a.toml"
    plan_file.write_text(QUICK)
    out = tmp_path / "out"
    out.mkdir()
    (out / CHECKPOINT_DIR).mkdir()
    (out / CHECKPOINT_DIR / "vq.json").write_text("{}")
    # leftovers of an interrupted run: neither a silent mix nor a silent restart
    assert main(["run", str(plan_file), "--out", str(out), "--quiet"]) == 2
    assert "--resume" in capsys.readouterr().err
    # --force starts over: stale checkpoints are discarded, not loaded
    assert main(["run", str(plan_file), "--out", str(out), "--quiet", "--force"]) == 0
    assert not (out / CHECKPOINT_DIR).exists() and not (out / ".lock").exists()
    # a directory locked by another writer is refused before any claim runs
    with directory_lock(out):
        assert main(["run", str(plan_file), "--out", str(out), "--quiet", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is in use by another fedaudit run" in err and f"pid {os.getpid()}" in err
    assert main(["run", str(plan_file), "--out", str(out), "--quiet", "--resume"]) == 0  # released


def test_directory_lock_is_exclusive_and_released(tmp_path):
    with directory_lock(tmp_path) as path:
        assert path.read_text().strip() == str(os.getpid())
        with pytest.raises(FedAuditError, match="in use by another fedaudit run"):
            with directory_lock(tmp_path):
                pass
    assert not path.exists()
    with directory_lock(tmp_path):  # free again
        pass


def test_ctrl_c_keeps_finished_claims_and_says_how_to_resume(tmp_path):
    plan_file = tmp_path / "plan.toml"
    # claims one after the other (whatever FEDAUDIT_BACKEND says): the first is checkpointed before the second starts
    plan_file.write_text("[engine]\nparallel_claims = false\n\n"
                         + QUICK.replace('mechanism = "rr"\ndim = 4\nsamples = 4000',
                                         'mechanism = "rr"\ndim = 4\nsamples = 100000000\ncurve = false'))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "fedaudit.cli", "run", str(plan_file), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (out / CHECKPOINT_DIR / "vq.json").is_file(), 240, "the first checkpoint", proc)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == ("fedaudit: interrupted (finished claims are checkpointed: rerun "
                                               "with --resume)") and "Traceback" not in stderr
    assert (out / CHECKPOINT_DIR / "vq.json").is_file() and not (out / "report.json").exists()
    assert not (out / ".lock").exists()
