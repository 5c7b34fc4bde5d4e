"""The accountant curves and the convergence runs on the engine: serial, 1 and 2 local workers.

Workloads (each asserted bit-identical on every backend):

* ``prv-curve`` — :func:`fedaudit.accounting.curves.epsilon_dpsgd_curve` by Opacus's PRV
  accountant, σ = 1, q = 0.01, 1000 steps, ``--points`` points (default 60): the ε(steps) figure
  of a ``dpsgd`` claim with ``accountant = "prv"`` (its points are independent chunks);
* ``accounting`` — claim ``laplace-over-budget`` of ``fedaudit/plans/accounting.toml`` (Laplace
  ε = 1, 200 rounds, PLD): the composed ε and its references in the driver, the ε(rounds) curve
  (30 points, each a PLD self-composition) as chunks;
* ``convergence`` — claim ``nag-vs-gd`` of ``fedaudit/plans/demo.toml`` (D-GD and D-NAG, 60 rounds):
  one chunk per optimizer, so at most 2 workers are busy.

Each workload runs on ``serial``, then ``process`` with 1 and with 2 workers; a process pool is
started (and kept by the engine) before its timed run, so the times exclude the pool's start-up
(printed separately) but include each worker's first imports. Printed: the times, the speed-up
T_serial / T_2 and the parallel efficiency T_1 / (2·T_2). The machine's 1-minute load average is
printed before and after: other jobs on the cores move every figure.

Usage: ``python benchmarks/engine_curves.py [--points N] [--only NAME] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

from fedaudit.engine import run_chunks
from fedaudit.accounting.curves import epsilon_dpsgd_curve
from fedaudit.experiments.plan import load_plan
from fedaudit.experiments.runner import run_claim
from fedaudit.json import jsonable

BACKENDS = (("serial", None), ("process", 1), ("process", 2))


def _noop(x: int) -> int:
    return x


def _claim(plan: str, claim_id: str):
    (spec,) = [s for s in load_plan(plan).claims if s.id == claim_id]

    def run(backend: str, workers: int | None):
        claim = run_claim(dataclasses.replace(spec, params={**spec.params, "backend": backend, "workers": workers}))
        assert claim.error is None, claim.error
        ev = jsonable(claim.evidence)
        ev.pop("parameters", None)
        for per in ev.get("per_optimizer", {}).values():  # wall-clock optimizer time differs run to run
            per.pop("runtime_s")
        return json.dumps(ev, sort_keys=True)

    return run


def workloads(points: int) -> dict:
    def prv(backend: str, workers: int | None):
        return epsilon_dpsgd_curve(1.0, 0.01, 1000, 1e-5, "prv", points, 0.0, lambda n: None, backend=backend,
                                   workers=workers)

    return {"prv-curve": prv, "accounting": _claim("fedaudit/plans/accounting.toml", "laplace-over-budget"),
            "convergence": _claim("fedaudit/plans/demo.toml", "nag-vs-gd")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=60, help="points of the PRV curve")
    ap.add_argument("--only", default=None, help="run one workload: prv-curve, accounting or convergence")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}")
    out = {}
    for name, fn in workloads(args.points).items():
        if args.only not in (None, name):
            continue
        times, results = {}, []
        for backend, workers in BACKENDS:
            if backend == "process":
                t0 = time.perf_counter()
                run_chunks(_noop, range(2 * workers), backend="process", workers=workers)  # start the pool
                print(f"  (process pool of {workers} started in {time.perf_counter() - t0:.2f} s)")
            t0 = time.perf_counter()
            results.append(fn(backend, workers))
            times[f"{backend}{'' if workers is None else f' x{workers}'}"] = time.perf_counter() - t0
        assert all(r == results[0] for r in results), f"{name}: the backends disagree"
        t_s, t_1, t_2 = times["serial"], times["process x1"], times["process x2"]
        out[name] = {**times, "speedup_2": t_s / t_2, "efficiency_2": t_1 / (2 * t_2)}
        print(f"{name:12s} serial {t_s:6.2f} s | process x1 {t_1:6.2f} s | process x2 {t_2:6.2f} s | "
              f"speed-up T_serial/T_2 {t_s / t_2:4.2f} | efficiency T_1/(2 T_2) {t_1 / (2 * t_2):4.0%} | "
              f"identical on every backend", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
