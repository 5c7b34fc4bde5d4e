"""Empirical (f, ν) of every rule next to its published bound and the universal lower bound.

Usage: ``python benchmarks/robustness.py [--n 21] [--f 5] [--d 100] [--trials 200] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math

from fedaudit.audit.robustness import audit_robustness
from fedaudit.defenses.registry import make_aggregator

RULES = ("mean", "cwtm", "cwmed", "gm", "krum", "multikrum", "mda", "cc", "meamed", "bulyan",
         "nnm+cwtm", "nnm+cwmed", "nnm+gm", "nnm+krum", "arc+cwtm", "bucketing+cwtm")
#: keyword arguments a rule needs beyond f
EXTRA = {"mda": {"max_subsets": 100_000}, "bucketing+cwtm": {"s": 2}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=21)
    ap.add_argument("--f", type=int, default=5)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    print(f"n={args.n}, f={args.f}, d={args.d}, {args.trials} trials; f/(n−2f) = {args.f / (args.n - 2 * args.f):.4f}")
    print(f"{'rule':<16} {'ν̂':>10} {'bound':>10} {'reaches f/(n−2f)':>17} {'violation':>9} {'s':>6}  worst configuration")
    for rule in RULES:
        try:
            agg = make_aggregator(rule, args.f, **EXTRA.get(rule, {}))
            agg.name = rule
            r = audit_robustness(agg, n=args.n, f=args.f, d=args.d, trials=args.trials, seed=args.seed)
        except Exception as exc:  # a rule whose requirement (e.g. Bulyan n ≥ 4f+3) fails at this (n, f)
            print(f"{rule:<16} skipped: {exc}")
            continue
        fmt = lambda v: "—" if v is None else ("inf" if math.isinf(v) else f"{v:.4g}")
        print(f"{rule:<16} {fmt(r.nu_empirical):>10} {fmt(r.nu_bound):>10} {str(r.reaches_lower_bound):>17} "
              f"{str(r.violation):>9} {r.runtime_s:>6.2f}  {r.worst_attack}")
        rows.append({k: v for k, v in r.to_dict().items() if k not in ("config", "per_configuration")})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
