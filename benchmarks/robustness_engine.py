"""The (f, ν) audit on the engine: serial against 2 local worker processes, same answer.

GM at n = 10, f = 3, d = 10, 48 trials and an optimiser budget of 3000 evaluations over 4
restarts: the attack trials and the optimiser's local runs are engine chunks. Prints the wall
time of each backend (each twice, alternating; the first process run pays the pool start-up),
the optimiser's and the attack stage's share, the speed-up of the second runs and whether the
results are identical (every number of ``to_dict()`` but the timings; asserted).

Usage: ``python benchmarks/robustness_engine.py [--rule gm] [--workers 2]``. The 1-minute load
average is printed: other jobs on the machine slow the workers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from fedaudit.audit.robustness import audit_robustness


def numbers(res) -> str:
    """The audit's numbers without its timings, as canonical JSON."""
    d = res.to_dict()
    d.pop("runtime_s")
    d.pop("stage_runtime_s")
    d["search"].pop("runtime_s")
    return json.dumps(d, sort_keys=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rule", default="gm")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    call = dict(n=10, f=3, dim=10, trials=48, seed=0, search={"evals": 3000, "restarts": 4})
    print(f"{args.rule} n=10 f=3 d=10, 48 trials, optimiser 3000 evals x 4 restarts; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    seen, last = {}, {}
    for backend, workers in (("serial", None), ("process", args.workers)) * 2:
        t = time.perf_counter()
        res = audit_robustness(args.rule, backend=backend, workers=workers, **call)
        wall = time.perf_counter() - t
        print(f"  {backend:8s} {str(workers or ''):>2s}  {wall:6.1f} s  (optimiser {res.search['runtime_s']:.1f} s, "
              f"attack trials {res.stage_runtime_s['attack']:.1f} s)  nu {res.nu_empirical:.6g}")
        seen.setdefault(backend, numbers(res))
        assert numbers(res) == seen[backend]
        last[backend] = wall
    assert seen["serial"] == seen["process"], "the backends disagree"
    print(f"identical on both backends; speed-up (second runs) {last['serial'] / last['process']:.2f}x, "
          f"efficiency {last['serial'] / (args.workers * last['process']):.0%}; "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
