"""Certified LDP audits against the issue-#3 targets (N = 10^6 per input, 95% unless noted), and
the issue-#9 event-selection target on finite-output randomizers.

Part 1 prints, for every target, the certified ε lower bound, the target, the white-box exact ε
of the pair, and the time spent drawing samples next to the audit's own work (total − drawing).

Part 2 (selection) compares, for randomizers with a finite output space, the certified ε_lb with
the best single-threshold bound of the exact likelihood ratio at the same certification size
(:func:`fedaudit.audit.bounds.best_threshold_epsilon`: outcomes sorted by their exact privacy
loss, every threshold event scored by its *expected* Clopper–Pearson-certified ε at n_cert draws
per input, the max taken; the plug-in value at the true rates is printed next to it). Per case:
the mean ε_lb over seeds ± its standard error, the smallest expected certified ε of the event the
audit selected (no certification noise), and the target gap ≤ 0.05.

Usage: ``python benchmarks/ldp_audit.py [--quick] [--part targets|selection|all] [--seeds 6]
[--json FILE]`` (``--quick`` divides N by 10; the targets are set for the full N).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import math

from scipy import stats

from fedaudit.audit.bounds import best_threshold_epsilon, threshold_event_epsilon
from fedaudit.audit.ldp import audit_ldp
from fedaudit.mechanisms import SSTQ, VQSGD, Gaussian, Laplace, RandomizedResponse, SSTQSketch
from fedaudit.testing.planted import UnsplitBudgetSSTQ, scaled_gaussian_sampler


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


def selection_cases():
    """(name, mechanism, x0, x1, p0, p1): exact pmfs of the pair over its outcomes (the 16-bit
    product aggregated by the number of bits agreeing with x0: the loss depends only on it)."""
    d, eps = 16, 4.0  # product of 16 RR bits at ε/16: the best event (≥ 15 agree) has mass 1.3e-3
    bits = SSTQ(d, d, 2, eps, rotate=False, bound=1 / math.sqrt(d))
    xb = np.ones(d) / math.sqrt(d)
    pb = 1 / (1 + math.exp(-eps / d))
    j = np.arange(d + 1)
    out = [("16 RR bits, ε=4 (SSTQ k=d s=2)", bits, xb, -xb, stats.binom.pmf(j, d, pb),
            stats.binom.pmf(j, d, 1 - pb))]

    def finite(name, m, x0, x1, outputs):
        o = np.asarray(outputs, dtype=float)[:, None]
        out.append((name, m, x0, x1, np.exp(m.log_prob(o, x0)), np.exp(m.log_prob(o, x1))))

    k = 1000
    finite("k-RR k=1000, ε=2", RandomizedResponse(k, 2.0), np.eye(k)[0], np.eye(k)[1], range(k))
    finite("vqSGD d=256, ε=4, ±e1", VQSGD(256, 4.0), np.eye(256)[0], -np.eye(256)[0], range(512))
    u = np.zeros(16)
    u[:4] = 0.5
    finite("vqSGD d=16, ε=1, e1 vs −flat4", VQSGD(16, 1.0), np.eye(16)[0], -u, range(32))
    return out


def event_value(p0, p1, result):
    """Expected certified ε of the event ``result`` certified, from the exact pmf."""
    ev = result.event
    return threshold_event_epsilon(p0, p1, result.certification_samples, threshold=ev["threshold"],
                                   upper=">=" in ev["event"], positive=int(ev["positive_input"][1]))


def run_selection(n: int, seeds: int) -> list[dict]:
    rows = []
    print(f"\nselection vs best single-threshold bound (N = {n:,} per input, {seeds} seeds, auto test)")
    print(f"{'case':<34} {'n_cert':>8} {'best E[ε]':>9} {'plug-in':>8} {'mean ε_lb':>9} {'± SE':>6} "
          f"{'gap':>7} {'min E[sel]':>10} {'mass':>8} {'s/run':>6}  ok")
    for name, m, x0, x1, p0, p1 in selection_cases():
        lbs, vals, masses, t0 = [], [], [], time.perf_counter()
        for seed in range(seeds):
            r = audit_ldp(m, x0, x1, samples=n, seed=seed)
            lbs.append(r.epsilon_lower)
            vals.append(event_value(p0, p1, r) if r.test == "likelihood-ratio" else float("nan"))
            masses.append(r.event["event_mass"])
        per_run = (time.perf_counter() - t0) / seeds
        best = best_threshold_epsilon(p0, p1, r.certification_samples)
        plug = best_threshold_epsilon(p0, p1, r.certification_samples, method="plug-in")
        mean, se = float(np.mean(lbs)), float(np.std(lbs, ddof=1) / math.sqrt(seeds)) if seeds > 1 else 0.0
        gap = best.epsilon - mean
        ok = bool(min(vals) >= best.epsilon - 0.05 and gap <= 0.05 + 2 * se)
        print(f"{name:<34} {r.certification_samples:>8,} {best.epsilon:>9.4f} {plug.epsilon:>8.4f} {mean:>9.4f} "
              f"{se:>6.3f} {gap:>+7.3f} {min(vals):>10.4f} {np.median(masses):>8.1e} {per_run:>6.2f}  "
              f"{'PASS' if ok else 'FAIL'}")
        rows.append({"case": name, "samples": n, "certification_samples": r.certification_samples, "seeds": seeds,
                     "best_expected": best.epsilon, "best_plug_in": plug.epsilon, "best_event": best.to_dict(),
                     "epsilon_lower_mean": mean, "epsilon_lower_se": se, "epsilon_lower": lbs,
                     "selected_event_expected": vals, "gap": gap, "pass": ok, "seconds_per_run": per_run})
    return rows


def run_targets(scale: float) -> list[dict]:
    rows = []
    print(f"{'target':<36} {'ε_lb':>7} {'exact':>7} {'goal':<30} {'ok':<4} {'total s':>8} {'draw s':>7} {'own/draw':>8}  test")
    for name, run, check, goal in targets(scale):
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
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N / 10 (targets are set for the full N)")
    ap.add_argument("--part", choices=("targets", "selection", "all"), default="all")
    ap.add_argument("--seeds", type=int, default=6, help="seeds per selection case")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    scale = 0.1 if args.quick else 1.0
    out = {}
    if args.part in ("targets", "all"):
        out["targets"] = run_targets(scale)
    if args.part in ("selection", "all"):
        out["selection"] = run_selection(int(1e6 * scale), args.seeds)
    if args.json:
        from fedaudit.json import write

        write(args.json, out)


if __name__ == "__main__":
    main()
