"""Flower's LocalDpMod(clipping_norm=1, sensitivity=1, ε, δ=1e-5) against its claimed ε (issue #13).

Per claimed ε ∈ {0.5, 1, 4}: Flower's σ/C; the exact ε under local DP (analytic Gaussian mechanism, L2
sensitivity 2C); the certified lower bound (95 %) from ``--real-calls`` calls of Flower's real mod per
input; the one from ``--samples`` draws per input of its vectorised equivalent (bit-identical to every real
call, checked); the σ/C and the ``sensitivity`` setting that would deliver the claim; δ at the claimed ε.
(:func:`fedaudit.integrations.flower.local_dp_audit.audit_local_dp_mod`, pair ±u with ‖u‖ = C, projection
distinguisher.)

Usage: ``python benchmarks/flower_local_dp.py [--quick] [--real-calls 20000] [--samples 10000000] [--seed 0]
[--json FILE]`` (``--quick``: 2,000 real calls and 10^6 vectorised draws per input).
"""

from __future__ import annotations

import argparse
import time

from fedaudit.integrations.flower.local_dp_audit import audit_local_dp_mod
from fedaudit.json import write

EPSILONS = (0.5, 1.0, 4.0)
DELTA = 1e-5
HEADER = (f"{'claimed ε':>9} {'σ/C':>8} {'true ε':>8} {'ε_lb real':>10} {'ε_lb vect':>10} {'σ/C needed':>10} "
          f"{'sens/C':>7} {'δ at ε':>9} {'equal':>13} {'calls/s':>8} {'s':>6}")


def row(eps: float, real_calls: int, samples: int, seed: int) -> dict:
    res = audit_local_dp_mod(1.0, 1.0, eps, DELTA, real_calls=real_calls, samples=samples, seed=seed)
    cal = res.calibration
    return {"epsilon_claimed": eps, "delta": DELTA, "sigma_over_c": cal.sigma, "epsilon_true": cal.epsilon_true,
            "epsilon_lower_real": res.epsilon_lower_real, "real_calls": real_calls,
            "epsilon_lower_vectorised": res.epsilon_lower_vectorised, "samples": samples,
            "sigma_needed_over_c": cal.sigma_needed, "sensitivity_needed_over_c": cal.sensitivity_needed,
            "delta_at_claimed_epsilon": cal.delta_at_epsilon, "epsilon_if_sensitivity": cal.epsilon_if_sensitivity,
            "equivalence_calls": res.equivalence_calls, "equivalence_mismatches": res.equivalence_mismatches,
            "mod_calls_per_second": res.mod_calls_per_second, "seconds": res.seconds,
            "real_seconds": res.real.runtime_s,
            "vectorised_seconds": None if res.vectorised is None else res.vectorised.runtime_s,
            "violation": res.violation, "certified_violation": res.certified_violation}


def line(r: dict) -> str:
    vec = "—" if r["epsilon_lower_vectorised"] is None else f"{r['epsilon_lower_vectorised']:.3f}"
    equal = f"{r['equivalence_calls'] - r['equivalence_mismatches']}/{r['equivalence_calls']}"
    return (f"{r['epsilon_claimed']:>9g} {r['sigma_over_c']:>8.4f} {r['epsilon_true']:>8.4f} "
            f"{r['epsilon_lower_real']:>10.3f} {vec:>10} {r['sigma_needed_over_c']:>10.4f} "
            f"{r['sensitivity_needed_over_c']:>7.4f} {r['delta_at_claimed_epsilon']:>9.3g} {equal:>13} "
            f"{r['mod_calls_per_second']:>8.0f} {r['seconds']:>6.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 real calls and 10^6 vectorised draws per input")
    parser.add_argument("--real-calls", type=int, default=None, help="real LocalDpMod calls per input (20,000)")
    parser.add_argument("--samples", type=int, default=None, help="vectorised draws per input (10^7)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="write the rows to this file (strict JSON)")
    args = parser.parse_args(argv)
    real_calls = args.real_calls or (2_000 if args.quick else 20_000)
    samples = args.samples or (1_000_000 if args.quick else 10_000_000)
    print(f"Flower LocalDpMod(clipping_norm=1, sensitivity=1, ε, δ={DELTA:g}); certified at 95 %, "
          f"{real_calls:,} real calls and {samples:,} vectorised draws per input")
    print(HEADER)
    start = time.perf_counter()
    rows = []
    for eps in EPSILONS:
        rows.append(row(eps, real_calls, samples, args.seed))
        print(line(rows[-1]), flush=True)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.1f} s")
    if args.json:
        write(args.json, {"rows": rows, "real_calls": real_calls, "samples": samples, "seed": args.seed,
                          "seconds": total})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
