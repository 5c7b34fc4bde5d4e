"""Empirical (f, ν) of every rule next to its published bound, and how tight the auditor's ν̂ is.

Two modes.

* ``table`` (default): ν̂ of every rule at one (n, f) next to its published bound and the
  universal lower bound f/(n−2f), with the optimiser's budget and runtime.
  ``python benchmarks/robustness.py [--n 21] [--f 5] [--d 100] [--trials 200] [--backend B] [--workers W]
  [--json FILE]`` (the result does not depend on the backend or the workers)
* ``tightness``: ν̂ of :func:`audit_robustness` against an *independent* optimiser on held-out
  (n, f) pairs. The independent optimiser is scipy's differential evolution (Storn & Price
  1997; population-based, a different method from the auditor's multistart Nelder–Mead/Powell)
  over all n·k coordinates in [−1, 1]^{n×k}, k ∈ {1, 2}, with the subset S maximised exactly
  (:func:`fedaudit.audit.robustness.robustness_ratio`, exhaustive for these n), a much larger
  budget and its own seeds. It reports ν̂_audit / ν̂_independent per rule and (n, f).
  ``python benchmarks/robustness.py tightness [--rules cwmed,meamed,...] [--pairs 9:2,10:3]
  [--de-iters 150] [--de-time 40] [--workers 2] [--json FILE] [--reference FILE]``
  (``--reference`` reuses the independent values of an earlier run's JSON and reruns only the auditor;
  each row's audit runs serially, the rows on ``--workers`` processes)

ν is invariant under a common translation and scaling of the inputs for every rule compared
here except GM's smoothing, so the box [−1, 1] loses nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from fedaudit.audit.robustness import audit_robustness, robustness_ratio
from fedaudit.audit.robustness_search import SearchBudget, call_rule
from fedaudit.defenses.registry import make_aggregator

RULES = ("mean", "cwtm", "cwmed", "gm", "krum", "multikrum", "mda", "cc", "meamed", "bulyan",
         "nnm+cwtm", "nnm+cwmed", "nnm+gm", "nnm+krum", "arc+cwtm", "bucketing+cwtm")
#: keyword arguments a rule needs beyond f
EXTRA = {"mda": {"max_subsets": 100_000}, "bucketing+cwtm": {"s": 2}}
TIGHTNESS_RULES = ("cwmed", "meamed", "gm", "krum", "cwtm", "multikrum", "nnm+cwtm")
HELD_OUT = ((9, 2), (10, 3), (11, 3), (12, 2), (13, 4))


def independent_nu(rule: str, n: int, f: int, k: int, *, iters: int, time_limit: float, seed: int
                   ) -> tuple[float, int, float]:
    """max ν found by differential evolution over X ∈ [−1, 1]^{n×k}: (ν, evaluations, seconds)."""
    from scipy.optimize import differential_evolution

    agg = make_aggregator(rule, f)
    count = [0]
    best = [0.0]

    def objective(v: np.ndarray) -> float:
        count[0] += 1
        X = v.reshape(n, k)
        nu = robustness_ratio(X, call_rule(agg, X, 0), f)[0]
        nu = min(nu, 1e8)
        best[0] = max(best[0], nu)
        return -nu

    t0 = time.perf_counter()
    differential_evolution(objective, [(-1.0, 1.0)] * (n * k), maxiter=iters, popsize=15, tol=1e-12,
                           mutation=(0.5, 1.0), recombination=0.9, seed=seed, polish=True, init="sobol",
                           callback=lambda *a, **kw: time.perf_counter() - t0 > time_limit)
    return best[0], count[0], time.perf_counter() - t0


def _tightness_row(args: tuple) -> dict:
    rule, n, f, d, trials, budget, de_iters, de_time, seed, reference = args
    t0 = time.perf_counter()
    # serial: the rows themselves run in parallel (--workers), so no engine pool per row
    res = audit_robustness(rule, n=n, f=f, dim=d, trials=trials, seed=seed, search=budget, backend="serial")
    audit_s = time.perf_counter() - t0
    if reference is not None:  # the independent optimiser's result from an earlier run (same seeds)
        ind = [(reference["independent_per_k"][f"k={k}"], reference["independent_evals"] // 2,
                reference["independent_s"] / 2) for k in (1, 2)]
    else:
        ind = [independent_nu(rule, n, f, k, iters=de_iters, time_limit=de_time, seed=1000 + seed + k)
               for k in (1, 2)]
    nu_ind = max(r[0] for r in ind)
    return {"rule": rule, "n": n, "f": f, "d": d, "nu_audit": res.nu_empirical, "nu_before_optimiser":
            res.search.get("nu_before"), "nu_independent": nu_ind,
            "ratio": res.nu_empirical / nu_ind if nu_ind > 0 else math.inf,
            "worst_stage": res.worst.get("stage"), "worst": res.worst_attack,
            "audit_s": audit_s, "optimiser_s": res.search.get("runtime_s"), "optimiser_evals": res.search.get("evals"),
            "independent_evals": sum(r[1] for r in ind), "independent_s": sum(r[2] for r in ind),
            "independent_per_k": {f"k={k}": r[0] for k, r in zip((1, 2), ind)}}


def tightness(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description="ν̂ of the auditor against an independent optimiser")
    ap.add_argument("--rules", default=",".join(TIGHTNESS_RULES))
    ap.add_argument("--pairs", default=",".join(f"{n}:{f}" for n, f in HELD_OUT))
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--evals", type=int, default=SearchBudget().evals,
                    help="auditor's base optimiser budget (cheap rules get more: robustness_search.effective_budget)")
    ap.add_argument("--restarts", type=int, default=SearchBudget().restarts)
    ap.add_argument("--de-iters", type=int, default=150, help="differential-evolution generations per k")
    ap.add_argument("--de-time", type=float, default=40.0, help="seconds per k before DE is stopped")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--reference", default=None,
                    help="JSON of an earlier tightness run: reuse its independent-optimiser values (only the auditor reruns)")
    args = ap.parse_args(argv)
    pairs = [tuple(int(x) for x in p.split(":")) for p in args.pairs.split(",")]
    refs = {}
    if args.reference:
        with open(args.reference) as fh:
            refs = {(r["rule"], r["n"], r["f"]): r for r in json.load(fh)}
    budget = {"evals": args.evals, "restarts": args.restarts}
    jobs = [(r, n, f, args.d, args.trials, budget, args.de_iters, args.de_time, args.seed, refs.get((r, n, f)))
            for r in args.rules.split(",") for n, f in pairs]
    print(f"auditor: d={args.d}, {args.trials} trials, optimiser {budget} (base; 'opt evals' = spent); independent: differential evolution, "
          f"popsize 15, ≤ {args.de_iters} generations or {args.de_time:g} s per k ∈ {{1, 2}}")
    print(f"{'rule':<10} {'n':>3} {'f':>2} {'ν̂ before':>9} {'ν̂ audit':>9} {'ν̂ indep':>9} {'ratio':>6} "
          f"{'audit s':>8} {'opt evals':>9} {'DE evals':>9} {'DE s':>7}  worst")
    rows = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for row in pool.map(_tightness_row, jobs):
            rows.append(row)
            print(f"{row['rule']:<10} {row['n']:>3} {row['f']:>2} {row['nu_before_optimiser']:>9.4g} "
                  f"{row['nu_audit']:>9.4g} {row['nu_independent']:>9.4g} {row['ratio']:>6.3f} {row['audit_s']:>8.2f} "
                  f"{row['optimiser_evals']:>9} {row['independent_evals']:>9} {row['independent_s']:>7.1f}  "
                  f"{row['worst_stage']}: {row['worst']}", flush=True)
    ratios = [r["ratio"] for r in rows]
    print(f"min ratio {min(ratios):.3f}, median {float(np.median(ratios)):.3f}; "
          f"{sum(r >= 0.95 for r in ratios)}/{len(ratios)} configurations at ≥ 0.95")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)
    return rows


def table(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=21)
    ap.add_argument("--f", type=int, default=5)
    ap.add_argument("--d", type=int, default=100)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--evals", type=int, default=SearchBudget().evals, help="optimiser budget (0 disables)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default=None, help="engine backend of each audit (default: the engine's default)")
    ap.add_argument("--workers", type=int, default=None, help="engine workers of each audit")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = []
    print(f"n={args.n}, f={args.f}, d={args.d}, {args.trials} trials, optimiser {args.evals} evaluations; "
          f"f/(n−2f) = {args.f / (args.n - 2 * args.f):.4f}")
    print(f"{'rule':<16} {'ν̂':>10} {'bound':>10} {'reaches f/(n−2f)':>17} {'violation':>9} {'s':>6} "
          f"{'opt s':>6} {'breakdown':>9}  worst configuration")
    for rule in RULES:
        try:
            agg = make_aggregator(rule, args.f, **EXTRA.get(rule, {}))
            agg.name = rule
            r = audit_robustness(agg, n=args.n, f=args.f, dim=args.d, trials=args.trials, seed=args.seed,
                                 search=args.evals, backend=args.backend, workers=args.workers)
        except Exception as exc:  # a rule whose requirement (e.g. Bulyan n ≥ 4f+3) fails at this (n, f)
            print(f"{rule:<16} skipped: {exc}")
            continue
        fmt = lambda v: "—" if v is None else ("inf" if math.isinf(v) else f"{v:.4g}")
        print(f"{rule:<16} {fmt(r.nu_empirical):>10} {fmt(r.nu_bound):>10} {str(r.reaches_lower_bound):>17} "
              f"{str(r.violation):>9} {r.runtime_s:>6.2f} {r.search['runtime_s']:>6.2f} "
              f"{(r.breakdown or {}).get('count', 0):>9}  {r.worst['stage']}: {r.worst_attack}")
        rows.append({k: v for k, v in r.to_dict().items() if k not in ("config", "per_configuration")})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


def main() -> None:
    import sys

    if len(sys.argv) > 1 and sys.argv[1] == "tightness":
        tightness(sys.argv[2:])
    else:
        table(sys.argv[1:])


if __name__ == "__main__":
    main()
