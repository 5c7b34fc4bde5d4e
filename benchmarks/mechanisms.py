"""Encode + decode throughput of every mechanism.

d = 2^16, k = d/16, 1,000 reports (defaults), clip 1, ε = 4. Prints reports/s and the time as
a ratio to one ``np.copy`` of the same (n, d) float64 input measured in the same run (the
memory-bandwidth floor). Usage: ``python benchmarks/mechanisms.py [--dim 65536] [--n 1000]
[--repeat 3] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=2**16)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    d, n = args.dim, args.n
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    onehot = np.zeros((n, d))
    onehot[np.arange(n), rng.integers(0, d, size=n)] = 1.0
    floor = best_time(lambda: np.copy(X), max(5, args.repeat))
    rows = []
    print(f"d={d}, k={d // 16}, n={n} reports, ε={args.epsilon:g}; np.copy floor = {floor * 1e3:.2f} ms "
          f"({platform.machine()}, numpy {np.__version__})")
    print(f"{'mechanism':<12} {'bits/report':>12} {'encode s':>9} {'decode s':>9} {'reports/s':>11} {'× copy':>9}")
    for name in MECHANISMS.names():
        m = make_mechanism(name, d, args.epsilon, k=d // 16, levels=4, clip=1.0)
        inputs = onehot if name == "rr" else X
        reports = m.encode(inputs, rng=1)
        t_enc = best_time(lambda: m.encode(inputs, rng=1), args.repeat)
        t_dec = best_time(lambda: m.decode(reports), args.repeat)
        total = t_enc + t_dec
        rows.append({"mechanism": name, "bits_per_report": m.bits_per_report, "encode_s": t_enc,
                     "decode_s": t_dec, "reports_per_s": n / total, "ratio_to_copy": total / floor})
        print(f"{name:<12} {m.bits_per_report:>12,} {t_enc:>9.3f} {t_dec:>9.3f} {n / total:>11,.0f} {total / floor:>9.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dim": d, "n": n, "epsilon": args.epsilon, "copy_s": floor, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
