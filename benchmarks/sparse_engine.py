"""The sparse-upload audit on the engine: serial against local worker processes, same answer.

The plain gated upload at its defaults (|θ| = 64, m = 3; each report is one local E-FLoPS
training run of 5 steps), ``--samples`` uploads per dataset, seed 0: every split of the audit
(training, selection, certification) is drawn in engine chunks. Prints the wall time of each
backend (the process pool is started and warmed before timing), the speed-up and the parallel
efficiency T_serial / (workers · T_process), and whether the audits are identical (every number
of ``to_dict()`` but the timings; asserted).

Usage: ``python benchmarks/sparse_engine.py [--samples 12000] [--workers 2]``. The 1-minute load
average is printed: other jobs on the machine slow the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from fedaudit.audit.sparse_upload import audit_sparse_upload


def numbers(data):
    """``data`` without its wall-clock fields (``*_s``)."""
    if isinstance(data, dict):
        return {k: numbers(v) for k, v in data.items() if not k.endswith("_s")}
    return [numbers(v) for v in data] if isinstance(data, list) else data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=12_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    print(f"plain upload, |θ| = 64, m = 3, {args.samples} uploads per dataset; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    audit_sparse_upload("plain", samples=100, backend="process", workers=args.workers)  # start the pool
    times, results = {}, {}
    for backend in ("serial", "process"):
        t0 = time.perf_counter()
        res = audit_sparse_upload("plain", samples=args.samples, seed=0, backend=backend, workers=args.workers)
        times[backend] = time.perf_counter() - t0
        results[backend] = json.dumps(numbers(res.to_dict()), sort_keys=True)
        print(f"{backend:8s} {times[backend]:7.1f} s  {res.summary()}", flush=True)
    assert results["serial"] == results["process"], "the backends disagree"
    speedup = times["serial"] / times["process"]
    print(f"identical: True; speed-up {speedup:.2f}x on {args.workers} workers, efficiency "
          f"{speedup / args.workers:.0%}; load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
