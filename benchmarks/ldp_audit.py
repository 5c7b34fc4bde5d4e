"""Certified LDP audits against the issue-#3 targets (N = 10^6 per input, 95% unless noted).

Prints, for every target, the certified ε lower bound, the target, the white-box exact ε of
the pair, and the time spent drawing samples next to the audit's own work (total − drawing).
Usage: ``python benchmarks/ldp_audit.py [--quick] [--json FILE]`` (``--quick`` divides N by 10).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from fedaudit.audit.ldp import audit_ldp
from fedaudit.mechanisms import SSTQ, Gaussian, Laplace, RandomizedResponse, SSTQSketch
from fedaudit.mechanisms.planted import UnsplitBudgetSSTQ, scaled_gaussian_sampler


def spike(d: int) -> np.ndarray:
    e = np.zeros(d)
    e[0] = 1.0
    return e


def targets(scale: float):
    n6, n7 = int(1e6 * scale), int(1e7 * scale)
    u = np.random.default_rng(2026).normal(size=32)
    u /= np.linalg.norm(u)
    g = Gaussian(32, 1.0, 1e-5)
    e64 = spike(64)
    return [
        ("binary RR ε=1", lambda: audit_ldp(RandomizedResponse(2, 1.0), [1, 0], [0, 1], samples=n6, seed=1),
         lambda r: r.epsilon_lower >= 0.97, "ε_lb ≥ 0.97"),
        ("Laplace ε=1", lambda: audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], samples=n6, seed=2),
         lambda r: r.epsilon_lower >= 0.95, "ε_lb ≥ 0.95"),
        ("Laplace ε=0.1 (N=1e7)", lambda: audit_ldp(Laplace(1, 0.1), [1.0], [-1.0], samples=n7, seed=3),
         lambda r: r.epsilon_lower >= 0.095, "ε_lb ≥ 0.095"),
        ("Gaussian d=32 (1, 1e-5)", lambda: audit_ldp(g, u, -u, samples=n6, seed=4),
         lambda r: not r.violation, "no violation"),
        ("Gaussian d=32, σ/3 (black box)", lambda: audit_ldp(scaled_gaussian_sampler(g.sigma, 3.0), u, -u,
                                                             epsilon=1.0, delta=1e-5, samples=n6, seed=5),
         lambda r: r.violation, "violation"),
        ("SSTQ d=64 k=8 s=8 ε=1", lambda: audit_ldp(SSTQ(64, 8, 8, 1.0), e64, -e64, samples=n6, seed=6),
         lambda r: (not r.violation) and r.epsilon_lower <= r.epsilon_exact <= 1.0, "no violation, lb ≤ exact ≤ ε"),
        ("SSTQ sketch (seed) d=64 k=8", lambda: audit_ldp(SSTQSketch(64, 8, 8, 1.0), e64, -e64, samples=n6, seed=7),
         lambda r: r.violation and r.epsilon_lower > 3.0, "violation, ε_lb > 3"),
        ("SSTQ ε split over k (d=16 k=4 s=2)", lambda: audit_ldp(SSTQ(16, 4, 2, 1.0, rotate=False, bound=0.5),
                                                                0.5 * np.ones(16) / 2, -0.5 * np.ones(16) / 2,
                                                                samples=n6, seed=8),
         lambda r: not r.violation, "no violation"),
        ("SSTQ ε NOT split (d=16 k=4 s=2)", lambda: audit_ldp(UnsplitBudgetSSTQ(16, 4, 2, 1.0, rotate=False, bound=0.5),
                                                             0.5 * np.ones(16) / 2, -0.5 * np.ones(16) / 2,
                                                             samples=n6, seed=8),
         lambda r: r.violation, "violation"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N / 10 (targets are set for the full N)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    print(f"{'target':<36} {'ε_lb':>7} {'exact':>7} {'goal':<30} {'ok':<4} {'total s':>8} {'draw s':>7} {'own/draw':>8}  test")
    for name, run, check, goal in targets(0.1 if args.quick else 1.0):
        t0 = time.perf_counter()
        r = run()
        total = time.perf_counter() - t0
        ok = bool(check(r))
        own = total - r.sampling_s
        exact = "—" if r.epsilon_exact is None else f"{r.epsilon_exact:.4f}"
        print(f"{name:<36} {r.epsilon_lower:>7.4f} {exact:>7} {goal:<30} {'PASS' if ok else 'FAIL':<4} "
              f"{total:>8.2f} {r.sampling_s:>7.2f} {own / r.sampling_s:>8.2f}  {r.test}")
        rows.append({"target": name, "goal": goal, "pass": ok, "total_s": total, "own_over_draw": own / r.sampling_s,
                     **{k: v for k, v in r.to_dict().items() if k not in ("x0", "x1", "candidates")}})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2, default=str)


if __name__ == "__main__":
    main()
