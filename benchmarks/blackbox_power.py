"""Black-box LDP audits against the best single-threshold test (issue #22, section 7).

For every member of :func:`fedaudit.testing.blackbox.product_family` — d-fold binary and k-ary
randomized response (equal and unequal ε_j), per-coordinate Laplace and Gaussian, and rare-event
members (a flag column one input produces with probability p, the other never or far more
rarely) — the audit sees a plain ``sampler(x, size, rng)`` (no ``log_prob``) and certifies ε_lb
at 95 % from N draws per input. The reference is
:func:`fedaudit.audit.bounds.best_threshold_epsilon` at the *same total* N per input: the mean
certified ε of the best threshold event of the exact privacy loss, an oracle that knows the
likelihood ratio and spends no draws on training or selection.

Columns: ``before`` = the black-box families of the previous release (column, projection,
classifier, frequency; their fitting and selection are unchanged, so this reproduces the old
black-box path), ``after`` = today's ``test="black-box"`` (adds the naive-Bayes per-coordinate
log-ratio family, its events selected from importance-weighted rates). Each is the mean over
``--seeds`` seeds (± its standard error); ratio = after / best. A ratio above 1 is possible: the
fitted score splits outcomes of equal privacy loss (a randomized threshold), which no
deterministic threshold of L can do.

Usage: ``python benchmarks/blackbox_power.py [--samples 200000] [--seeds 6] [--quick] [--json FILE]``
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from fedaudit.audit.bounds import best_threshold_epsilon
from fedaudit.audit.ldp import audit_ldp
from fedaudit.testing.blackbox import product_family

BEFORE = "column,projection,classifier,frequency"


def mean_se(values: list[float]) -> tuple[float, float]:
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return float(np.mean(values)), se


def run(samples: int, seeds: int, before: bool) -> list[dict]:
    rows = []
    print(f"black-box ε_lb vs the best single-threshold test (N = {samples:,} per input, 95 %, {seeds} seeds)")
    print(f"{'mechanism':<40} {'N':>8} {'best ε':>7} {'before':>13} {'after':>13} {'ratio':>6}  test")
    for m in product_family():
        p0, p1 = m.pmfs()
        best = best_threshold_epsilon(p0, p1, samples)
        out = {}
        t0 = time.perf_counter()
        for label, test in (("before", BEFORE), ("after", "black-box")):
            if label == "before" and not before:
                continue
            res = [audit_ldp(m.sampler, m.x0, m.x1, epsilon=m.epsilon, samples=samples, seed=s, distinguisher=test,
                             backend="serial") for s in range(seeds)]
            out[label] = ([r.epsilon_lower for r in res], sorted({r.test for r in res}))
        after, se = mean_se(out["after"][0])
        b = f"{mean_se(out['before'][0])[0]:>7.3f}±{mean_se(out['before'][0])[1]:.3f}" if "before" in out else "—"
        ratio = after / best.epsilon
        print(f"{m.name:<40} {samples:>8,} {best.epsilon:>7.3f} {b:>13} {after:>7.3f}±{se:.3f} {ratio:>6.3f}  "
              f"{','.join(out['after'][1])}")
        rows.append({"mechanism": m.name, "samples": samples, "seeds": seeds, "best_threshold": best.to_dict(),
                     "before": out.get("before", (None,))[0], "after": out["after"][0], "after_mean": after,
                     "after_se": se, "ratio": ratio, "tests": out["after"][1],
                     "seconds": time.perf_counter() - t0})
    worst = min(r["ratio"] for r in rows)
    print(f"smallest ratio {worst:.3f} (goal ≥ 0.95)")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=200_000, help="draws per input (train + select + certify)")
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--quick", action="store_true", help="3 seeds, no 'before' column")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = run(args.samples, 3 if args.quick else args.seeds, before=not args.quick)
    if args.json:
        from fedaudit.json import write

        write(args.json, {"blackbox_power": rows})


if __name__ == "__main__":
    main()
