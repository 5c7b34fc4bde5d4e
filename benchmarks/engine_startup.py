"""The process backend's workers before and after issue #22: start-up, throughput, one audit.

Before, the pool used the stdlib ``spawn`` start method as it is: every worker re-ran the
caller's main module (this script, as ``__mp_main__``) before its first task, which broke every
script without an ``if __name__ == "__main__":`` guard. Now the workers are
:class:`fedaudit.engine.workers._EngineWorker` processes: ``spawn`` without the main module, the caller's
functions sent by value. Both paths are measured in the same run, alternately, each on a fresh
pool of ``--workers`` processes (the engine's initializer: parent watchdog, one BLAS thread):

* ``start-up`` — from creating the pool to every worker having answered one task (a sleep of
  0.2 s, so that each task lands on its own worker): what the first call of a program pays;
* ``throughput`` — ``--tasks`` tiny tasks through a warm pool, at most 2 × workers in flight as
  the engine keeps them, each sent as a cloudpickle payload ``(fn, task)``; the old path returns
  the result as it is, the new one pickles it in the worker (plain pickle, cloudpickle for what
  only the worker knows by value) and unpickles it in the driver. Tasks per second, and the
  driver's CPU microseconds per task; ``call+decode`` times the part that differs alone, in this
  process (the worker function and the driver's decoding of one tiny result), which other jobs
  on the machine move far less;
* ``audit_ldp`` — the tutorial's black-box audit (its ``mymod`` sampler, 200 000 samples,
  defaults otherwise) on a cold pool, end to end, as ``python audit_mine.py`` runs it; only the
  start method differs (the worker function is today's on both).

Printed: the median of ``--repeats`` runs of each, and the ratio new / old (below 1: the new path
is faster). The old path re-imports this script in each worker, which imports numpy and
:mod:`fedaudit.audit` at the top like a user's script. The machine's 1-minute load average is
printed before and after: other jobs on the cores move every figure.

Usage: ``python benchmarks/engine_startup.py [--workers N] [--tasks N] [--repeats N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import pickle
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import numpy as np

from fedaudit import engine
from fedaudit.engine import inflight
from fedaudit.engine import pool as engine_pool
from fedaudit.engine import workers as engine_workers
from fedaudit.audit import audit_ldp

EPSILON = 1.0


def sample(x, size, rng):
    """The tutorial's sampler: one private bit per report, the sign of x[0] kept w.p. e^ε/(1+e^ε)."""
    keep = rng.random(size) < np.exp(EPSILON) / (1 + np.exp(EPSILON))
    bit = 1.0 if x[0] >= 0 else 0.0
    return np.where(keep, bit, 1.0 - bit).reshape(size, 1)


def old_call_pickled(payload: bytes):
    """The worker function before issue #22: unpickle ``(fn, task)``, return ``fn(task)`` as it is."""
    fn, task = pickle.loads(payload)
    return fn(task)


def old_pool(workers: int) -> ProcessPoolExecutor:
    """The pool before issue #22: the stdlib spawn context, which re-runs ``__main__`` in each worker."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=engine_workers.worker_init, initargs=(os.getpid(),))


PATHS = {
    # name: (pool factory, worker function, result decoder)
    "old": (old_pool, old_call_pickled, lambda r: r),
    "new": (engine_pool._new_pool, engine_workers.call_pickled, pickle.loads),
}


def start_up(path: str, workers: int) -> float:
    factory, call, decode = PATHS[path]
    dumps = engine_workers.cloudpickle_module().dumps
    t0 = time.perf_counter()
    pool = factory(workers)
    try:
        futures = [pool.submit(call, dumps((time.sleep, 0.2))) for _ in range(workers)]
        for f in futures:
            decode(f.result())
        return time.perf_counter() - t0 - 0.2
    finally:
        pool.shutdown(wait=True)


def throughput(path: str, workers: int, tasks: int) -> tuple[float, float]:
    """Tasks per second through a warm pool (the engine's bounded window), and the driver's CPU
    microseconds per task (less moved by other jobs on the machine than the wall time)."""
    factory, call, decode = PATHS[path]
    dumps = engine_workers.cloudpickle_module().dumps
    pool = factory(workers)
    try:
        for f in [pool.submit(call, dumps((abs, -1))) for _ in range(4 * workers)]:  # warm every worker
            decode(f.result())
        t0, c0 = time.perf_counter(), time.process_time()
        done = 0
        for _, result in inflight.bounded(range(tasks), workers, lambda t: pool.submit(call, dumps((abs, -t))),
                                          lambda hs: wait(hs, return_when=FIRST_COMPLETED)[0],
                                          lambda f: decode(f.result()), lambda f: f.cancel(), lambda n: None):
            done += result >= 0
        assert done == tasks
        return tasks / (time.perf_counter() - t0), 1e6 * (time.process_time() - c0) / tasks
    finally:
        pool.shutdown(wait=True)


def call_cost(path: str, number: int = 20_000) -> float:
    """Microseconds per call of the path's worker function plus the driver's decoding of its
    result, in this process, on a tiny task: the part of the per-task cost that differs."""
    import timeit

    _, call, decode = PATHS[path]
    payload = engine_workers.cloudpickle_module().dumps((abs, -5))
    return 1e6 * min(timeit.repeat(lambda: decode(call(payload)), number=number, repeat=5)) / number


def audit(path: str, workers: int) -> tuple[float, float]:
    """Seconds of the tutorial's audit on a cold pool of ``path``'s start method (the engine as it
    is otherwise, its worker function included); its certified bound."""
    engine.shutdown()
    saved = engine_pool._new_pool
    engine_pool._new_pool = PATHS[path][0]
    try:
        x0 = np.zeros(8)
        x0[0] = 1.0
        t0 = time.perf_counter()
        res = audit_ldp(sample, x0, -x0, epsilon=0.5, samples=200_000, seed=0, backend="process", workers=workers)
        return time.perf_counter() - t0, res.epsilon_lower
    finally:
        engine.shutdown()
        engine_pool._new_pool = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}   workers={args.workers}", flush=True)
    figures: dict[str, dict[str, list[float]]] = {"start-up s": {}, "throughput tasks/s": {},
                                                  "driver CPU us/task": {}, "call+decode us": {}, "audit_ldp s": {}}
    eps = {}
    for r in range(args.repeats):
        for path in (("old", "new") if r % 2 == 0 else ("new", "old")):  # alternate, so that load hits both
            figures["start-up s"].setdefault(path, []).append(start_up(path, args.workers))
            rate, cpu = throughput(path, args.workers, args.tasks)
            figures["throughput tasks/s"].setdefault(path, []).append(rate)
            figures["driver CPU us/task"].setdefault(path, []).append(cpu)
            figures["call+decode us"].setdefault(path, []).append(call_cost(path))
            seconds, eps[path] = audit(path, args.workers)
            figures["audit_ldp s"].setdefault(path, []).append(seconds)
    assert eps["old"] == eps["new"], eps  # the same bits on both paths
    out = {}
    for name, per in figures.items():
        old, new = statistics.median(per["old"]), statistics.median(per["new"])
        out[name] = {"old": old, "new": new, "ratio": new / old, "runs": per}
        print(f"{name:20s} old {old:9.3f}   new {new:9.3f}   new/old {new / old:6.3f}", flush=True)
    print(f"audit_ldp eps_lb (both paths): {eps['new']!r}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    sys.exit(main())
