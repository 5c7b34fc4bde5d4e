"""The (f, ν) optimiser's local runs on the engine: one answer on every backend and worker count,
each run seeded by its place in the plan, and a checkpointed audit resumed (after a truncation or
a SIGKILL mid-optimiser) ends with the uninterrupted result."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.audit.test_robustness_engine import _numbers

from tests.helpers import reseal_checkpoint
from fedaudit.audit.robustness_search import staging
from fedaudit.audit.robustness import audit_robustness, progress_units
from fedaudit.audit.robustness_search import PHASE2_WIDTH, optimiser_checkpoint, optimiser_checkpoint_files
from fedaudit.errors import FedAuditError
from fedaudit.json import loads

# CWMed at n=15, f=5: C(15, 5) = 3003 subsets, so each chunk scores on its own working set of
# subsets (the path with state inside a local run); three families (d=1, d=2, embedded in d=4)
WIDE = dict(n=15, f=5, dim=4, trials=4, attacks="alie", search_evals=0, search={"evals": 120, "restarts": 1}, seed=4)
# Krum at n=9: forced selection, clusters, phase-1 runs and phase-2 rounds all on the engine
KRUM = dict(n=9, f=2, dim=3, trials=4, attacks="alie", search_evals=0, search={"evals": 200, "restarts": 2}, seed=1)


@pytest.fixture(scope="module")
def wide_serial():
    return audit_robustness("cwmed", backend="serial", **WIDE)


def test_working_set_path_on_two_workers_equals_serial(wide_serial):
    assert wide_serial.search["local_runs"] == 3 * 1 + 2 * 1  # phase 1: 1 per family; phase 2: 2·restarts
    pooled = audit_robustness("cwmed", backend="process", workers=2, **WIDE)
    assert _numbers(pooled) == _numbers(wide_serial)


def _records(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_checkpoint_records_every_stage_and_resume_gives_the_fresh_result(tmp_path, monkeypatch):
    ckpt = tmp_path / "audit.jsonl"
    serial = audit_robustness("krum", backend="serial", **KRUM)
    fresh = audit_robustness("krum", backend="serial", checkpoint=ckpt, **KRUM)
    assert _numbers(fresh) == _numbers(serial)
    files = optimiser_checkpoint_files(ckpt)
    # stage 1: forced selection for d=1, d=2 + clusters for 3 families; stage 2: ⌈2.5·2⌉ = 5 runs per
    # family (Krum is cheap at n=9); stages 3, …: the 2·5 runs of phase 2 in rounds of PHASE2_WIDTH
    rounds = [min(PHASE2_WIDTH, 10 - i) for i in range(0, 10, PHASE2_WIDTH)]
    assert files == [optimiser_checkpoint(ckpt, j) for j in range(1, 3 + len(rounds))]
    assert files[0].name == "audit.jsonl.opt1" and files[-1].name == f"audit.jsonl.opt{2 + len(rounds)}"
    counts = [1 + 5, 1 + 15] + [1 + w for w in rounds]  # each file: a header + one record per chunk
    assert [len(_records(p)) for p in files] == counts
    header = loads(_records(files[1])[0])
    assert header["key"]["run"].endswith("optimiser stage 2") and header["key"]["caller"]["seed"]["entropy"] == 1
    # killed in phase 1: part of stage 2 recorded, phase 2 never started
    files[1].write_text("\n".join(_records(files[1])[:7]) + "\n")
    for p in files[2:]:
        p.unlink()
    resumed = audit_robustness("krum", backend="serial", checkpoint=ckpt, resume=True, **KRUM)
    assert _numbers(resumed) == _numbers(serial)
    assert [len(_records(p)) for p in optimiser_checkpoint_files(ckpt)] == counts

    def boom(task):
        raise AssertionError("a complete checkpoint must not recompute any optimiser chunk")

    monkeypatch.setattr(staging, "_optimiser_chunk", boom)
    again = audit_robustness("krum", backend="serial", checkpoint=ckpt, resume=True, **KRUM)
    assert _numbers(again) == _numbers(serial)


def test_resume_reads_the_recorded_runs(tmp_path):
    """A resumed audit takes the optimiser's runs from the file: a tampered phase-1 run (resealed with
    the user's secret; its ν raised above anything phase 2 can reach) becomes the family's incumbent, and the value
    reported for the family is the rule's own ν on the tampered configuration."""
    import numpy as np

    from fedaudit.audit.robustness import robustness_ratio
    from fedaudit.defenses import make_aggregator

    ckpt = tmp_path / "audit.jsonl"
    call = dict(KRUM, search={"evals": 200, "restarts": 1, "dims": [1], "embedded": False})
    base = audit_robustness("krum", backend="serial", checkpoint=ckpt, **call)
    opt2 = optimiser_checkpoint(ckpt, 2)
    lines = _records(opt2)
    rec = loads(lines[1])
    Y = [[0.0], [0.1], [0.3], [0.35], [0.9], [1.0], [1.2], [0.2], [0.25]]
    rec["result"].update(nu=1e7, Y=Y)
    opt2.write_text("\n".join([lines[0], json.dumps(rec)] + lines[2:]) + "\n")
    reseal_checkpoint(opt2)  # unsealed, the changed record is refused (tests/experiments/test_checkpoint_integrity.py)
    for p in optimiser_checkpoint_files(ckpt)[2:]:  # phase 2 reruns from the tampered incumbent
        p.unlink()
    res = audit_robustness("krum", backend="serial", checkpoint=ckpt, resume=True, **call)
    X = np.zeros((9, 3))
    X[:, :1] = Y
    expected = robustness_ratio(X, make_aggregator("krum", 2)(X), 2)[0]
    assert res.search["per_subspace"]["d=1"] == expected != base.search["per_subspace"]["d=1"]


def test_an_existing_optimiser_checkpoint_is_refused_without_resume(tmp_path):
    ckpt = tmp_path / "audit.jsonl"
    optimiser_checkpoint(ckpt, 2).write_text("{}\n")
    with pytest.raises(FedAuditError, match=r"audit\.jsonl\.opt2 .*already exists: pass resume=True"):
        audit_robustness("krum", backend="serial", checkpoint=ckpt, **KRUM)
    assert not ckpt.exists()  # refused before any work


def test_progress_counts_every_run_of_the_engine_stages():
    calls = []
    audit_robustness("krum", backend="serial", progress=calls.append, **KRUM)
    assert len(calls) == progress_units(2, 4, 0, KRUM["search"], dim=3, aggregator="krum", n=9)


_CHILD = """
import sys
from fedaudit.audit.robustness import audit_robustness
audit_robustness("gm", n=9, f=2, dim=3, trials=4, attacks="alie", search_evals=0,
                 search={"evals": 2400, "restarts": 3}, seed=6, backend="serial", checkpoint=sys.argv[1])
"""
KILLED = dict(n=9, f=2, dim=3, trials=4, attacks="alie", search_evals=0, search={"evals": 2400, "restarts": 3}, seed=6)


@pytest.mark.slow  # 6–20 s (machine load): a child process runs GM's optimiser until phase-1 runs are recorded
def test_killed_mid_optimiser_then_resumed_gives_the_uninterrupted_result(tmp_path):
    ckpt = tmp_path / "audit.jsonl"
    opt2 = optimiser_checkpoint(ckpt, 2)
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(ckpt)], env={**os.environ, "FEDAUDIT_BACKEND": "serial"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if opt2.exists() and len(_records(opt2)) >= 3:
                break
            time.sleep(0.05)
        assert child.poll() is None, "the child finished before it could be killed: raise its budget"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    recorded = len(_records(opt2)) - 1
    assert 2 <= recorded < 9 and not optimiser_checkpoint(ckpt, 3).exists()  # killed in phase 1
    resumed = audit_robustness("gm", backend="serial", checkpoint=ckpt, resume=True, **KILLED)
    assert _numbers(resumed) == _numbers(audit_robustness("gm", backend="serial", **KILLED))


# ---- the plan keys `backend` and `workers` of the robustness claim kind
def _plan(**keys):
    # n = 17 is past the cheap class (n <= 16): the kind runs the optimiser's base budget
    claim = {"id": "cwtm", "kind": "robustness", "aggregator": "cwtm", "n": 17, "f": 1, "dim": 2, "trials": 4,
             "attacks": ["alie"], "search_evals": 0, **keys}
    return {"plan": {"title": "engine", "seed": 3}, "claim": [claim]}


def _evidence(plan):
    from fedaudit.experiments.runner import run_plan

    (claim,) = run_plan(plan).claims
    assert claim.error is None, claim.error
    ev = dict(claim.evidence)
    ev.pop("parameters")  # names backend and workers
    for k in ("runtime_s", "stage_runtime_s"):
        ev["audit"].pop(k)
    ev["audit"]["search"].pop("runtime_s")
    return ev


def test_plan_backend_and_workers_give_the_serial_evidence():
    serial = _evidence(_plan(backend="serial"))
    assert serial["audit"]["search"]["local_runs"] > 0
    assert _evidence(_plan(backend="process", workers=2)) == serial


def test_plan_engine_keys_are_checked_when_the_plan_loads():
    from fedaudit.experiments.plan import load_plan

    with pytest.raises(FedAuditError, match=r"key 'backend' must be one of 'process', 'serial', 'ray'"):
        load_plan(_plan(backend="nope"))
    with pytest.raises(FedAuditError, match=r"key 'workers' must be an integer in \[1, 1024\], got 0"):
        load_plan(_plan(workers=0))
