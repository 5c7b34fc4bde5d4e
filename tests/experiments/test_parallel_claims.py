"""Independent claims of a plan run in parallel (issue #14): the plan's [engine] table and its
overrides, the same claims number for number on serial, process x2 and Ray whatever the other
claims and their order, errors and dead workers as INCONCLUSIVE claims, checkpoints as claims
finish, and the claims that must run alone in the driver."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedaudit.engine import BACKENDS, default_backend
from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence
from fedaudit.experiments.keys import Key
from fedaudit.experiments.kinds import claim_kind
from fedaudit.experiments.plan import ENGINE_KEYS, engine_options, load_plan
from fedaudit.experiments.plan_reference import markdown
from fedaudit.experiments.runner import CHECKPOINT_DIR, Checkpoints, PlanProgress, run_plan, run_plan_to_dir
from fedaudit.reports import verify_report
from fedaudit.reports.canonical import canonical_json_bytes
from tests.helpers import REPO

VQ = {"id": "vq", "kind": "ldp", "mechanism": "vqsgd", "dim": 8, "samples": 4000}
RR = {"id": "rr", "kind": "ldp", "mechanism": "rr", "dim": 4, "samples": 4000}
ACC = {"id": "acc", "kind": "accounting", "mechanism": "rr", "dim": 4, "epsilon": 0.5, "rounds": 10,
       "max_epsilon": 8.0, "curve_points": 5}
PARALLEL = {"backend": "process", "workers": 2}
WHERE = f"{__name__}:Where"


def plan(*claims, engine=None, seed=1):
    data = {"plan": {"title": "parallel claims", "seed": seed}, "claim": [copy.deepcopy(c) for c in claims]}
    if engine is not None:
        data["engine"] = dict(engine)
    return data


def timeless(value):
    """``value`` without wall-clock fields (``runtime_s``, ``sampling_s``, ...)."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if not (k.endswith("_s") or "runtime" in k)}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def canonical_claims(report):
    """Canonical JSON of each claim without its timings, by claim id."""
    return {c.id: canonical_json_bytes(timeless(c.to_dict())) for c in report.claims}


class Events(PlanProgress):
    """Every hook call, in order: ("started", id, total, unit), ("advance", n), ("finished", id)."""

    def __init__(self):
        self.calls = []

    def claim_started(self, spec, total, unit):
        self.calls.append(("started", spec.id, total, unit))

    def advance(self, n):
        self.calls.append(("advance", n))

    def claim_finished(self, spec, claim):
        self.calls.append(("finished", spec.id))

    def units(self):
        """{claim id: units advanced while it was the current claim}."""
        out, current = {}, None
        for call in self.calls:
            if call[0] == "started":
                current = call[1]
                out[current] = 0
            elif call[0] == "advance":
                out[current] += call[1]
        return out


class Where(ClaimKind):
    """A test kind: where the claim ran (process id, the engine's default backend there) and the
    mean of ``draws`` uniforms from its seed; ``fail`` makes it raise, die in an engine worker
    (``os._exit``), or raise (``once``) or hang for ten minutes (``hang``) until ``marker`` exists."""

    name = "where"
    unit = "draws"

    def keys(self):
        return {"draws": Key("int", 10, low=1), "backend": Key("str", None, choices=BACKENDS),
                "fail": Key("str", None, choices=("raise", "die", "once", "hang")), "marker": Key("str", None)}

    def default_title(self, params, expect):
        return "where the claim ran"

    def work_units(self, params):
        return params["draws"]

    def run(self, spec, rng, progress, *, workdir=None):
        p = spec.params
        if p["fail"] == "raise":
            raise RuntimeError("machinery broke")
        if p["fail"] == "die" and os.environ.get("FEDAUDIT_ENGINE_WORKER") == "1":
            os._exit(3)
        if p["fail"] in ("once", "hang") and not Path(p["marker"]).exists():
            Path(p["marker"]).write_text("failed once")
            if p["fail"] == "hang":
                time.sleep(600)
            raise RuntimeError("transient")
        x = rng.random(p["draws"])
        progress(p["draws"])
        return Evidence(holds=True, violated=False, summary="ran",
                        evidence={"pid": os.getpid(), "default_backend": default_backend(), "mean": float(x.mean())})

    def decide(self, evidence, expect):
        """Every run that ends holds (a checkpointed claim of this kind may be reused on resume)."""
        return Decision(holds=True, violated=False)


class Alone(Where):
    """A test kind that must run in the driver."""

    name = "where-alone"
    runs_alone = True


# ----------------------------------------------------------------------------- [engine] table
@pytest.mark.parametrize("engine, pattern", [
    ({"backend": "dask"}, r"^plan \[engine\]: key 'backend' must be one of 'process', 'serial', 'ray', got 'dask'$"),
    ({"workers": 0}, r"^plan \[engine\]: key 'workers' must be an integer in \[1, 1024\], got 0$"),
    ({"workers": 2.5}, r"^plan \[engine\]: key 'workers' must be an integer in \[1, 1024\], got 2.5$"),
    ({"parallel_claims": "yes"}, r"^plan \[engine\]: key 'parallel_claims' must be true or false, got 'yes'$"),
    ({"worker": 2}, r"^plan \[engine\]: unknown key 'worker' \(did you mean 'workers'\?\); valid keys in \[engine\]: "
                    r"backend, workers, address, parallel_claims$"),
    ({"address": "127.0.0.1:6379"}, r"^plan \[engine\]: key 'address' needs backend = 'ray' .*got backend = 'process'$"),
    ({"backend": "serial", "address": "auto"}, r"key 'address' needs backend = 'ray' .*got backend = 'serial'$"),
    ({"backend": "ray", "address": "localhost"}, r"^plan \[engine\]: key 'address' must be 'auto' or a Ray cluster "
                                                  r"address '\[ray://\]host:port'.*got 'localhost'$"),
    ({"backend": "ray", "address": "h:70000"}, r"key 'address' must be .*port in \[1, 65535\].*got 'h:70000'$"),
])
def test_engine_table_errors_name_the_key_and_the_allowed_values(engine, pattern):
    with pytest.raises(FedAuditError, match=pattern):
        load_plan(plan(VQ, engine=engine))


def test_engine_table_defaults_toml_and_top_level_keys(tmp_path):
    assert load_plan(plan(VQ)).engine == {"backend": None, "workers": None, "address": None, "parallel_claims": True}
    path = tmp_path / "plan.toml"
    path.write_text('[engine]\nbackend = "Ray"\naddress = "127.0.0.1:6379"\nworkers = 3e0\nparallel_claims = false\n\n'
                    '[[claim]]\nid = "vq"\nkind = "ldp"\nmechanism = "vqsgd"\ndim = 8\n')
    assert load_plan(path).engine == {"backend": "ray", "workers": 3, "address": "127.0.0.1:6379",
                                      "parallel_claims": False}
    with pytest.raises(FedAuditError, match=r"unknown key 'engines' \(did you mean 'engine'\?\).*\[plan\], \[engine\]"):
        load_plan({"engines": {}, "claim": [VQ]})
    with pytest.raises(FedAuditError, match=r"^plan: \[engine\] must be a table"):
        load_plan({"engine": "ray", "claim": [VQ]})


def test_overrides_replace_the_table_key_by_key_and_are_checked_the_same_way():
    ray_plan = load_plan(plan(VQ, engine={"backend": "ray", "address": "10.0.0.1:6379", "workers": 4}))
    assert engine_options(ray_plan) == dict(ray_plan.engine)
    assert engine_options(ray_plan, {"workers": 2, "backend": None}) == {
        "backend": "ray", "workers": 2, "address": "10.0.0.1:6379", "parallel_claims": True}
    # another backend drops the plan's Ray address; an explicit address with it is refused
    assert engine_options(ray_plan, {"backend": "process"})["address"] is None
    with pytest.raises(FedAuditError, match=r"^engine: key 'address' needs backend = 'ray'"):
        engine_options(ray_plan, {"backend": "process", "address": "auto"})
    with pytest.raises(FedAuditError, match=r"^engine: key 'workers' must be an integer in \[1, 1024\], got 0$"):
        engine_options(ray_plan, {"workers": 0})
    with pytest.raises(FedAuditError, match=r"^engine: unknown key 'chunks'"):
        engine_options(ray_plan, {"chunks": 3})
    with pytest.raises(FedAuditError, match=r"^engine: key 'backend' must be one of"):
        run_plan(plan(VQ), engine={"backend": "gpu"})  # refused before any claim runs


def test_ray_without_ray_installed_is_refused_before_any_claim(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    for call in (lambda: run_plan(plan(VQ, RR), engine={"backend": "ray"}),
                 lambda: run_plan_to_dir(plan(VQ, RR, engine={"backend": "ray"}), tmp_path / "out")):
        with pytest.raises(FedAuditError, match=r"^backend='ray' needs Ray, which is not "
                                                r"installed: pip install fedaudit\[ray\]"):
            call()
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("FEDAUDIT_BACKEND", "ray")  # the machine's default counts as well
    with pytest.raises(FedAuditError, match="needs Ray"):
        run_plan(plan(VQ))


def test_the_reference_documents_every_engine_key():
    text = markdown()
    section = text.split("## `[engine]`\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("`")[1]: line for line in section.splitlines() if line.startswith("| `")}
    assert set(rows) == set(ENGINE_KEYS)
    for name, key in ENGINE_KEYS.items():
        assert key.describe() in rows[name] and " ".join(key.help.split()) in rows[name]
    assert "progress is reported per finished claim" in " ".join(section.split())


# ----------------------------------------------------------------------------- same claims everywhere
@pytest.fixture(scope="module")
def serial_report():
    events = Events()
    return run_plan(plan(VQ, RR, ACC, engine={"backend": "serial"}), progress=events), events


def test_parallel_claims_are_the_serial_ones_whatever_the_other_claims_and_their_order(serial_report):
    serial, serial_events = serial_report
    assert [c.error for c in serial.claims] == [None] * 3
    events = Events()
    # reversed order, the process pool: the same claims, number for number, listed in plan order
    parallel = run_plan(plan(ACC, RR, VQ), engine=PARALLEL, progress=events)
    assert [c.id for c in parallel.claims] == ["acc", "rr", "vq"]
    assert canonical_claims(parallel) == canonical_claims(serial)
    # each finished claim: started, the units it reported in its worker, finished; as in serial
    assert events.units() == serial_events.units() and set(events.units()) == {"vq", "rr", "acc"}
    assert [c[0] for c in events.calls if c[0] != "advance"] == ["started", "finished"] * 3


def test_claims_run_in_workers_and_alone_ones_in_the_driver():
    claims = [{"id": "a", "kind": WHERE}, {"id": "b", "kind": WHERE}, {"id": "own", "kind": WHERE, "backend": "process"},
              {"id": "solo", "kind": f"{__name__}:Alone"}]
    report = run_plan(plan(*claims), engine=PARALLEL)
    ev = {c.id: c.evidence for c in report.claims}
    assert [c.verdict for c in report.claims] == ["PASS"] * 4
    for cid in ("a", "b"):  # in a worker, whose own default is serial (no nested pools)
        assert ev[cid]["pid"] != os.getpid() and ev[cid]["default_backend"] == "serial"
    for cid in ("own", "solo"):  # in the driver, under the plan's engine defaults
        assert ev[cid]["pid"] == os.getpid() and ev[cid]["default_backend"] == "process"
    serial = run_plan(plan(*claims), engine={"backend": "serial"})
    assert [c.evidence["mean"] for c in serial.claims] == [ev[c["id"]]["mean"] for c in claims]
    assert [c.evidence["default_backend"] for c in serial.claims] == ["serial"] * 4
    # parallel_claims = false: every claim in the driver, each audit on the plan's backend
    off = run_plan(plan(*claims[:2], engine={"parallel_claims": False}), engine=PARALLEL)
    assert {c.evidence["pid"] for c in off.claims} == {os.getpid()}
    assert {c.evidence["default_backend"] for c in off.claims} == {"process"}
    assert claim_kind("flower").runs_alone and not claim_kind("ldp").runs_alone


def test_an_error_in_a_parallel_claim_is_the_serial_error_claim():
    claims = [{"id": "boom", "kind": WHERE, "fail": "raise"}, {"id": "ok", "kind": WHERE}]
    serial = run_plan(plan(*claims), engine={"backend": "serial"})
    parallel = run_plan(plan(*claims), engine=PARALLEL)
    boom_s, boom_p = serial.claims[0], parallel.claims[0]
    assert boom_p.verdict == "INCONCLUSIVE" and boom_p.error.startswith("RuntimeError: machinery broke (at test_")
    assert timeless(boom_p.to_dict()) == timeless(boom_s.to_dict())
    assert parallel.claims[1].verdict == "PASS" and parallel.claims[1].evidence["pid"] != os.getpid()


def test_finished_parallel_claims_are_checkpointed_and_a_resume_retries_only_the_failed_one(tmp_path):
    marker = tmp_path / "marker"
    p = load_plan(plan({"id": "flaky", "kind": WHERE, "fail": "once", "marker": str(marker)},
                       {"id": "a", "kind": WHERE}, {"id": "b", "kind": WHERE}))
    out = tmp_path / "out"
    first = run_plan(p, engine=PARALLEL, checkpoints=Checkpoints(out, p))  # as a run killed after its claims
    assert [c.verdict for c in first.claims] == ["INCONCLUSIVE", "PASS", "PASS"] and marker.exists()
    assert sorted(f.name for f in (out / CHECKPOINT_DIR).iterdir()) == ["_run.json", "a.json", "b.json"]
    resumed, _ = run_plan_to_dir(p, out, resume=True, engine=PARALLEL)
    assert [c.verdict for c in resumed.claims] == ["PASS", "PASS", "PASS"]
    assert [c.runtime_s for c in resumed.claims[1:]] == [c.runtime_s for c in first.claims[1:]]  # loaded
    assert not (out / CHECKPOINT_DIR).exists() and verify_report(out).ok


def test_each_claim_is_saved_as_it_finishes(tmp_path):
    seen = []

    class Watch(PlanProgress):
        def claim_finished(self, spec, claim):  # the checkpoint is written before the hook
            seen.append(sorted(p.stem for p in (tmp_path / CHECKPOINT_DIR).glob("[!_]*.json")))

    p = load_plan(plan(*({"id": cid, "kind": WHERE, "draws": 10**6 * (3 - i)} for i, cid in enumerate("zyx"))))
    report = run_plan(p, engine=PARALLEL, checkpoints=Checkpoints(tmp_path, p), progress=Watch())
    assert [len(s) for s in seen] == [1, 2, 3] and seen[-1] == ["x", "y", "z"]
    assert [c.id for c in report.claims] == ["z", "y", "x"]


def test_plan_engine_table_is_recorded_by_the_plan_hash_and_the_report_verifies(tmp_path):
    claims = ({"id": "a", "kind": WHERE}, {"id": "b", "kind": WHERE})
    a = load_plan(plan(*claims))
    b = load_plan(plan(*claims, engine=PARALLEL))
    assert a.sha256 != b.sha256  # the [engine] table is part of the plan's recorded bytes
    report, _ = run_plan_to_dir(b, tmp_path / "out", engine={"backend": "serial"})
    assert report.manifest.plan_sha256 == b.sha256 and verify_report(tmp_path / "out").ok


def test_a_dead_worker_makes_its_claims_inconclusive_not_a_crashed_run(tmp_path):
    claims = [{"id": "die", "kind": WHERE, "fail": "die"}, {"id": "ok", "kind": WHERE}]
    report, _ = run_plan_to_dir(plan(*claims), tmp_path / "out", engine=PARALLEL)
    die, ok = report.claims
    assert die.verdict == "INCONCLUSIVE" and "a worker process died" in die.error
    assert ok.verdict == "PASS" or "a worker process died" in ok.error
    assert verify_report(tmp_path / "out").ok
    # the next run gets a fresh pool
    again = run_plan(plan({"id": "a", "kind": WHERE}, {"id": "b", "kind": WHERE}), engine=PARALLEL)
    assert [c.verdict for c in again.claims] == ["PASS", "PASS"]


@pytest.mark.slow  # a CLI run killed mid-plan, then resumed (~20 s on 2 cores)
def test_a_run_killed_while_claims_run_in_parallel_resumes_with_the_finished_ones(tmp_path):
    marker = tmp_path / "marker"
    plan_file = tmp_path / "plan.toml"
    plan_file.write_text('[engine]\nbackend = "process"\nworkers = 2\n\n'
                         f'[[claim]]\nid = "hang"\nkind = "{WHERE}"\nfail = "hang"\nmarker = "{marker}"\n\n'
                         + "".join(f'[[claim]]\nid = "{c}"\nkind = "{WHERE}"\n\n' for c in ("a", "b")))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    cmd = [sys.executable, "-m", "fedaudit.cli", "run", str(plan_file), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not all((out / CHECKPOINT_DIR / f"{c}.json").is_file() for c in "ab") and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoints of the quick claims"
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()  # still running: the hanging claim holds it
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert marker.exists() and not (out / "report.json").exists()
    saved = {c: (out / CHECKPOINT_DIR / f"{c}.json").read_text() for c in "ab"}
    run_plan_to_dir(plan_file, out, resume=True)  # the CLI's --resume: test_runner_resume.py
    report = json.loads((out / "report.json").read_text())
    assert [c["id"] for c in report["claims"]] == ["hang", "a", "b"]
    assert [c["verdict"] for c in report["claims"]] == ["PASS"] * 3
    for c in report["claims"][1:]:  # loaded from their checkpoints, not recomputed
        assert c["runtime_s"] == json.loads(saved[c["id"]])["claim"]["runtime_s"]
    assert verify_report(out).ok


# ----------------------------------------------------------------------------- Ray
@pytest.mark.slow  # ~10 s on 2 cores once the session's Ray runs (the process pool is compared in the fast suite)
def test_claims_on_ray_are_the_serial_ones(ray_local, serial_report):
    serial, _ = serial_report
    report = run_plan(plan(VQ, RR, ACC), engine={"backend": "ray"})
    assert [c.error for c in report.claims] == [None] * 3
    assert canonical_claims(report) == canonical_claims(serial)
    assert ray_local.is_initialized()  # the caller's Ray is left running
