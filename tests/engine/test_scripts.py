"""The default backend from every place a user runs Python (issue #22): a script without an
``if __name__ == "__main__":`` guard, ``python - < file``, ``python -m``, ``python -c`` and a
Jupyter kernel, each with a sampler defined as a closure in ``__main__``; every heavy entry point
from an unguarded script (a rule class and a lambda of ``__main__``); one line when a worker
cannot start or dies, with the resume hint only when a checkpoint holds finished chunks.

Each form runs in a real subprocess on the engine's default backend (``FEDAUDIT_BACKEND`` unset,
so ``process``; ``FEDAUDIT_WORKERS=2``) and must give the serial bits, on a pool of 2 workers."""

import functools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fedaudit
from fedaudit import engine
from fedaudit.engine import WorkerError, run_chunks
from fedaudit.errors import FedAuditError
from fedaudit.registry import user_registrations

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

#: a user's first script: the tutorial's audit with its sampler built as a closure in __main__
AUDIT = textwrap.dedent('''
    import numpy as np

    from fedaudit import engine
    from fedaudit.audit import audit_ldp


    def make_sampler(p):
        def sample(x, size, rng):  # a closure of __main__: it can only travel by value
            keep = rng.random(size) < p
            bit = 1.0 if x[0] >= 0 else 0.0
            return np.where(keep, bit, 1.0 - bit).reshape(size, 1)
        return sample


    x0 = np.zeros(4)
    x0[0] = 1.0
    res = audit_ldp(make_sampler(0.7), x0, -x0, epsilon=1.0, samples=6000, seed=0, chunk=1024)
    print("RESULT", repr(res.epsilon_lower), repr(res.test))
    if engine.default_backend() == "process":
        print("WORKERS", len(engine.pool.POOL.pool._processes))
''')

#: the other heavy entry points, from an unguarded script: a rule of __main__ holding a lambda,
#: the variance measurement and curve, a plan whose claims (parallel, in workers) use a mechanism
#: registered by the script (the accountant curves run on the same engine calls but import torch
#: and dp-accounting in each worker: seconds)
ENTRY_POINTS = textwrap.dedent('''
    import json

    import numpy as np

    from fedaudit import engine
    from fedaudit.audit import audit_robustness
    from fedaudit.audit.variance import measure_mse, variance_vs_dk
    from fedaudit.defenses.base import Aggregator
    from fedaudit.experiments.runner import run_plan
    from fedaudit.mechanisms import RandomizedResponse, register_mechanism
    from fedaudit.mechanisms import Laplace


    class Combine(Aggregator):  # a rule defined in __main__, configured with a lambda
        name = "combine"

        def __init__(self, f, combine):
            super().__init__(f)
            self.combine = combine

        def _aggregate(self, X, f):
            return self.combine(X)


    rob = audit_robustness(Combine(1, lambda X: np.median(X, axis=0)), n=5, f=1, dim=3, trials=64,
                           attacks="signflip", search=0, search_evals=4)
    mse = measure_mse(Laplace(dim=4, epsilon=1.0, clip=1.0), np.full(4, 0.5), samples=3000, chunk=1000)
    curve = variance_vs_dk(8, [2, 4], 2.0, samples=400)


    def my_rr(dim, epsilon):  # registered here: the claims' workers must know it too
        """Randomized response, as a user's own mechanism."""
        return RandomizedResponse(dim, epsilon)


    register_mechanism("my-rr", my_rr, replace=True)
    plan = run_plan({"plan": {"title": "mine", "seed": 0},
                     "claim": [{"id": f"rr{i}", "kind": "ldp", "mechanism": "my-rr", "dim": 4, "epsilon": 1.0,
                                "pair": "antipodal", "samples": 4000} for i in range(2)]})
    print("RESULT", json.dumps({"robustness": rob.nu_empirical, "mse": mse.mse,
                                "curve": [r.mse for r in (*curve.sstq, curve.vqsgd, curve.privunitg)],
                                "plan": [[c.verdict, c.error, c.evidence.get("epsilon_lower")] for c in plan.claims]}))
    if engine.default_backend() == "process":
        print("WORKERS", len(engine.pool.POOL.pool._processes))
''')


def _env(tmp_path) -> dict:
    """The user's environment: fedaudit importable, the default backend (no FEDAUDIT_BACKEND)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FEDAUDIT_BACKEND", "FEDAUDIT_ENGINE_WORKER")}
    root = str(Path(fedaudit.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["FEDAUDIT_WORKERS"] = "2"
    return env


def _run(args, tmp_path, stdin=None) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=tmp_path, env=_env(tmp_path), input=stdin,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bootstrapping phase" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout


def _lines(stdout: str, tag: str) -> list[str]:
    return [line.split(" ", 1)[1] for line in stdout.splitlines() if line.startswith(tag + " ")]


@functools.cache
def _serial(source: str) -> list[str]:
    """What ``source`` prints as RESULT when run in this process on the serial backend."""
    import contextlib
    import io

    from fedaudit.mechanisms import MECHANISMS

    out, before = io.StringIO(), set(MECHANISMS.names())
    try:
        with engine.engine_defaults(backend="serial"), contextlib.redirect_stdout(out):
            exec(compile(source, "<user script>", "exec"), {"__name__": "user_script"})
    finally:  # the script's registrations ("my-rr") must not outlive it in this test process
        for name in set(MECHANISMS.names()) - before:
            MECHANISMS.unregister(name)
    return _lines(out.getvalue(), "RESULT")


def _check(stdout: str, source: str) -> None:
    """The run used a pool of 2 workers and printed the serial result, bit for bit."""
    assert _lines(stdout, "WORKERS") == ["2"], stdout
    assert _lines(stdout, "RESULT") == _serial(source), stdout


@pytest.mark.parametrize("form", ["script", "stdin", "module", "command"])
def test_an_unguarded_user_script_runs_on_the_default_process_backend(tmp_path, form):
    # Before issue #22, "script", "stdin" and "module" failed: each spawned worker re-ran the main
    # module (Python's "bootstrapping phase" RuntimeError, or no file "<stdin>") and the engine
    # said "a worker process died".
    (tmp_path / "audit_mine.py").write_text(AUDIT)
    args, stdin = {"script": (["audit_mine.py"], None), "stdin": (["-"], AUDIT),
                   "module": (["-m", "audit_mine"], None), "command": (["-c", AUDIT], None)}[form]
    _check(_run(args, tmp_path, stdin), AUDIT)


def test_every_heavy_entry_point_runs_from_an_unguarded_script(tmp_path):
    (tmp_path / "entry_points.py").write_text(ENTRY_POINTS)
    _check(_run(["entry_points.py"], tmp_path), ENTRY_POINTS)


def test_a_jupyter_kernel_runs_a_closure_sampler_on_the_default_process_backend(tmp_path):
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env=_env(tmp_path), cwd=str(tmp_path))
    out: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    try:
        reply = kc.execute_interactive(AUDIT, timeout=240, output_hook=hook)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", "".join(out)
    _check("".join(out), AUDIT)


# --------------------------------------------------------------------------- a worker that dies
def _kill_self(task):
    """A chunk that dies as the out-of-memory killer ends a process: SIGKILL, no clean-up."""
    if task == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return task


def _slow_unless_dying(task):
    import time

    if task != "die":
        return task
    time.sleep(1.5)  # the other chunks finish (and are recorded) first
    os.kill(os.getpid(), signal.SIGKILL)


def _assert_one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and exc.__cause__ is None and exc.__suppress_context__
    return text


def test_a_worker_killed_before_any_chunk_finished_is_one_line_without_resume(tmp_path):
    with pytest.raises(WorkerError) as err:
        run_chunks(_kill_self, ["die", "die"], backend="process", workers=2, checkpoint=tmp_path / "run.ckpt",
                   key={"run": "oom"})
    text = _assert_one_line(err.value)
    assert "SIGKILL" in text and "out-of-memory" in text and "workers" in text, text
    assert "resume" not in text, text  # nothing finished: there is nothing to resume


def test_a_worker_killed_after_chunks_finished_says_how_to_resume_the_checkpoint(tmp_path):
    ck = tmp_path / "run.ckpt"
    with pytest.raises(WorkerError) as err:
        run_chunks(_slow_unless_dying, [0, 1, 2, "die"], backend="process", workers=2, checkpoint=ck,
                   key={"run": "oom-late"})
    text = _assert_one_line(err.value)
    assert "SIGKILL" in text and f"checkpoint {ck}" in text and "resume=True" in text, text
    finished = len(ck.read_text().splitlines()) - 1
    assert finished == 3 and text.count("the 3 finished chunks are saved") == 1, text


def test_a_worker_that_cannot_start_is_one_line_naming_the_exit_status(tmp_path, monkeypatch):
    # a worker whose start-up ends the process: here its initializer exits with status 3
    (tmp_path / "dies_at_start.py").write_text("import os\n\n\ndef init(parent_pid, log_levels=None):\n    os._exit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import dies_at_start

    monkeypatch.setattr(engine.pool, "worker_init", dies_at_start.init)  # the pool's initializer
    engine.shutdown()
    try:
        with pytest.raises(WorkerError) as err:
            run_chunks(_kill_self, [0, 1], backend="process", workers=2)
    finally:
        engine.shutdown()
    text = _assert_one_line(err.value)
    assert "could not start" in text and "status 3" in text and "backend='serial'" in text, text
    assert "resume" not in text


def test_a_function_the_worker_cannot_import_is_one_line_naming_the_module(monkeypatch):
    import types

    phantom = types.ModuleType("fedaudit_phantom_module")  # importable here only, as a file deleted after import
    exec("def fn(task):\n    return task\n", phantom.__dict__)
    monkeypatch.setitem(sys.modules, "fedaudit_phantom_module", phantom)
    with pytest.raises(WorkerError) as err:
        run_chunks(phantom.fn, [0, 1], backend="process", workers=2)
    text = _assert_one_line(err.value)
    assert "No module named 'fedaudit_phantom_module'" in text and "backend='serial'" in text, text


def test_a_task_that_cannot_be_pickled_is_one_line(tmp_path):
    import threading

    lock = threading.Lock()
    with pytest.raises(FedAuditError, match=r"cannot send the task to a worker process \(TypeError: .*lock") as err:
        run_chunks(lambda task: task is lock, [0, 1], backend="process", workers=2)
    _assert_one_line(err.value)


def test_a_result_of_a_class_known_by_value_comes_back_from_a_worker():
    # cloudpickle sends a class of a module the workers cannot import (as every class of __main__)
    # by value; the worker's copy cannot be named by plain pickle, so its instances come back by
    # value too, as instances of the caller's class
    namespace: dict = {"__name__": "fedaudit_test_by_value"}
    exec("class Point:\n    def __init__(self, x):\n        self.x = x\n", namespace)
    point = namespace["Point"]
    out = run_chunks(lambda task: point(task * 2), [1, 2, 3], backend="process", workers=2)
    assert [p.x for p in out] == [2, 4, 6] and all(type(p) is point for p in out)


def test_a_caller_that_stops_after_the_last_result_keeps_the_shared_pool():
    # zip(owner, iter_chunks(...)) stops at the end of owner, leaving the generator suspended at its
    # last result; its close must not terminate the kept pool (nothing runs), or every later call
    # pays the workers' start-up again (measure_mse, variance_vs_dk and audit_ldp fold this way)
    engine.shutdown()
    try:
        assert list(zip(range(3), engine.iter_chunks(abs, [-1, -2, -3], backend="process", workers=2))) == \
            [(0, 1), (1, 2), (2, 3)]
        pool = engine.pool.POOL.pool
        assert pool is not None and len(pool._processes) == 2
        assert run_chunks(abs, [-4, -5], backend="process", workers=2) == [4, 5]
        assert engine.pool.POOL.pool is pool
    finally:
        engine.shutdown()


def test_the_callers_registrations_reach_the_workers():
    # a mechanism registered by the caller, its factory known only by value (as one of __main__):
    # a worker, which never runs the caller's main module, resolves its name all the same
    from fedaudit.mechanisms import MECHANISMS, register_mechanism

    namespace: dict = {"__name__": "fedaudit_test_by_value"}
    exec("def factory(dim, epsilon):\n    from fedaudit.mechanisms import Laplace\n"
         "    return Laplace(dim, epsilon, 1.0)\n", namespace)
    register_mechanism("by-value-laplace", namespace["factory"])
    try:
        out = run_chunks(_make_named_mechanism, ["by-value-laplace", "laplace"], backend="process", workers=2)
    finally:
        MECHANISMS.unregister("by-value-laplace")
    assert out == ["Laplace", "Laplace"]
    assert all(e.name != "by-value-laplace" for _, _, entries in user_registrations() for e in entries)


def _make_named_mechanism(name):
    from fedaudit.mechanisms import make_mechanism

    return type(make_mechanism(name, 4, 1.0)).__name__


def test_a_registry_made_inside_a_function_is_not_sent_to_workers():
    # a worker could not make it again (only importing a module makes its global registries)
    from fedaudit.registry import Registry

    local = Registry("local gadget")
    local.register("thing", lambda: 1)
    assert all(kind != "local gadget" for _, kind, _ in user_registrations())
    assert run_chunks(abs, [-1, -2], backend="process", workers=2) == [1, 2]
