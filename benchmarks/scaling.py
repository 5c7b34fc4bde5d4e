"""Scaling of an LDP audit on the engine: 1 and 2 local worker processes and a local Ray instance.

A black-box audit of ``Laplace(1, ε=1)`` on the pair (1, −1) with ``--samples`` draws per input
(default 10^7). Its certification stage (all but the ≤ 2·10^5 selection draws per input) runs as
chunks of ``--chunk`` reports on :func:`fedaudit.engine.run_chunks`; everything else stays in
the driver, so by Amdahl's law the efficiency is bounded by the selection stage's share.

Printed:

* wall time on ``serial``, ``process`` with 1 and 2 workers and ``ray`` (2 CPUs, started before
  the timing), and that every backend gives the same ε_lb and counts (asserted);
* parallel efficiency T1 / (2·T2) against ``process`` with 1 worker, for ``process`` (2 workers)
  and ``ray``;
* the start-up and the per-task overhead of each backend, from ``--empty`` and 3× as many
  empty tasks on 2 workers (worker-seconds per task), next to the work of one certification chunk
  (serial certification time / chunks), their ratio, and the smallest chunk that keeps the
  overhead under 5 % of the work.

Usage: ``python benchmarks/scaling.py [--samples N] [--chunk R] [--empty N] [--no-ray] [--json FILE]``.
The machine's other load changes the figures; the core count and the 1-minute load average
before and after are printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from fedaudit.audit.ldp import CERT_CHUNK, audit_ldp
from fedaudit.engine import run_tasks
from fedaudit.json import jsonable
from fedaudit.mechanisms import Laplace


def empty(_):
    """An empty task: what a backend costs per task."""
    return None


def task_overhead(backend: str, n: int) -> tuple[float, float]:
    """(start-up seconds, worker-seconds per task) of ``backend`` on 2 workers, from the wall
    times of ``n`` and ``3n`` empty tasks: per task 2·(T(3n) − T(n))/(2n), start-up the rest."""
    def wall(m: int) -> float:
        t = time.perf_counter()
        for _ in run_tasks(empty, range(m), backend=backend, workers=2):
            pass
        return time.perf_counter() - t

    t1, t3 = wall(n), wall(3 * n)
    per_task = max(0.0, (t3 - t1) / n)  # 2 workers, 2n extra tasks: (t3 - t1) / (2n) wall each, x2 workers
    return max(0.0, t1 - per_task * n / 2), per_task


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=1e7, help="draws per input (default 10^7)")
    ap.add_argument("--chunk", type=int, default=CERT_CHUNK, help=f"reports per chunk (default {CERT_CHUNK})")
    ap.add_argument("--empty", type=int, default=400, help="empty tasks for the overhead (default 400)")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray measurements")
    ap.add_argument("--json", help="write the figures to this JSON file")
    args = ap.parse_args(argv)
    samples = int(args.samples)
    mech = Laplace(1, 1.0)

    def audit(backend, workers=None):
        t = time.perf_counter()
        r = audit_ldp(mech.sample, np.ones(1), -np.ones(1), epsilon=1.0, samples=samples, seed=0, distinguisher="black-box",
                      chunk=args.chunk, backend=backend, workers=workers)
        return r, time.perf_counter() - t

    out: dict = {"command": " ".join([os.path.basename(sys.argv[0]), *(argv or sys.argv[1:])]),
                 "cpus": os.cpu_count(), "samples": samples, "chunk": args.chunk,
                 "load_before": round(os.getloadavg()[0], 2)}
    runs = {"serial": audit("serial"), "process-1": audit("process", 1), "process-2": audit("process", 2)}
    if not args.no_ray:
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            runs["ray-2"] = audit("ray")
            ray_overhead = task_overhead("ray", args.empty)
        finally:
            ray.shutdown()
    ref = runs["serial"][0]
    for name, (r, _) in runs.items():  # the determinism contract, on the benchmark's own runs
        assert (r.epsilon_lower, r.event["tp"], r.event["fp"]) == (ref.epsilon_lower, ref.event["tp"], ref.event["fp"]), name
    t1 = runs["process-1"][1]
    n_chunks = 2 * -(-ref.certification_samples // args.chunk)
    cert_s = runs["serial"][1] * ref.certification_samples / ref.samples  # certification share, approx.
    work = cert_s / n_chunks
    measured = {"process": task_overhead("process", args.empty)}
    if not args.no_ray:
        measured["ray"] = ray_overhead
    overheads = {k: v[1] for k, v in measured.items()}
    out.update({
        "epsilon_lower": ref.epsilon_lower, "tp": ref.event["tp"], "fp": ref.event["fp"],
        "wall_s": {name: round(t, 3) for name, (_, t) in runs.items()},
        "efficiency": {name: round(t1 / (2 * t), 3) for name, (_, t) in runs.items() if name.endswith("-2")},
        "chunks": n_chunks, "work_per_chunk_s": round(work, 5),
        "startup_s": {k: round(v[0], 3) for k, v in measured.items()},
        "overhead_per_task_s": {k: round(v, 5) for k, v in overheads.items()},
        "overhead_share": {k: round(v / work, 4) for k, v in overheads.items()},
        "min_chunk_for_5pct": {k: int(np.ceil(v / (0.05 * work / args.chunk))) for k, v in overheads.items()},
    })
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(f"LDP audit, Laplace(eps=1) black box, {samples:.3g} draws per input, chunk {args.chunk} "
          f"({n_chunks} certification chunks), {out['cpus']} CPUs, 1-min load average "
          f"{out['load_before']} before, {out['load_after']} after (other jobs slow the workers)")
    print(f"  eps_lb {ref.epsilon_lower:.4f} (tp {ref.event['tp']}, fp {ref.event['fp']}) on every backend")
    for name, t in out["wall_s"].items():
        eff = out["efficiency"].get(name)
        print(f"  {name:10s} {t:8.2f} s" + (f"   efficiency T1/(2*T2) = {eff:.0%}" if eff is not None else ""))
    for k in overheads:
        print(f"  {k:7s} start-up {out['startup_s'][k]:.2f} s; overhead {out['overhead_per_task_s'][k] * 1e3:7.2f} ms per task = "
              f"{out['overhead_share'][k]:.1%} of a chunk's work ({work * 1e3:.1f} ms); under 5 % from "
              f"{out['min_chunk_for_5pct'][k]} reports per chunk")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(jsonable(out), fh, indent=2)
    return out


if __name__ == "__main__":
    main()
