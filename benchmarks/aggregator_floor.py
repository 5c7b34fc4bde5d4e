"""Issue #14's aggregator speed targets, each rule against the floors measured in the same run.

Floors, on the same float32 rows: ``X.sum(0)`` (one pass over X) for the coordinate-wise rules
(target: CWTM, CWMed, Meamed ≤ 4× it), and one float32 Gram product ``X @ X.T`` plus one pass
for the distance-based rules (target: Krum, NNM ≤ 1.5× it). Every figure is the best of
``--repeat`` calls of the rule as users call it (``rule(X)``: validation, the non-finite screen
and the final clamp included), as wall time and as CPU time of the process (all threads): on a
machine shared with other jobs the wall time of a multi-threaded call is inflated by waiting
for a core, and the CPU time is the figure that does not depend on the load; the load average
is printed with the table. ``--jit`` also times, in fresh subprocesses, the first call of the
compiled selection kernel with an empty numba cache (compilation) and with the cache the first
run wrote (loading). ``--select-bytes B`` sizes the selection kernel's column blocks for this run
(``fedaudit.kernels._SELECT_BYTES``: B bytes of n · width values; default the library's). Usage:
``python benchmarks/aggregator_floor.py [--repeat 5] [--quick] [--large] [--jit] [--select-bytes B] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

from fedaudit.defenses import make_aggregator

COORDINATE = ["cwtm", "cwmed", "meamed"]
DISTANCE = ["krum", "nnm", "multikrum", "nnm+cwtm"]
TARGETS = {"cwtm": 4.0, "cwmed": 4.0, "meamed": 4.0, "krum": 1.5, "nnm": 1.5}


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of the process) over ``repeat`` calls."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w), min(cpu, time.process_time() - c)
    return wall, cpu


def rule(name: str, f: int) -> Any:
    if name == "nnm":
        return make_aggregator("nnm+mean", f).stages[0]
    return make_aggregator(name, f)


def run(n: int, f: int, d: int, repeat: int) -> dict[str, Any]:
    X = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    X[:f] += 3.0  # f shifted rows, as in benchmarks/aggregators.py
    floor = [float("inf")] * 2
    gram = [float("inf")] * 2
    rows = []
    for name in COORDINATE + DISTANCE:
        r = rule(name, f)
        r(X)  # warm-up (and the kernel's compilation or cache load)
        for acc, fn in ((floor, lambda: X.sum(0)), (gram, lambda: X @ X.T)):
            w, c = best(fn, repeat)
            acc[0], acc[1] = min(acc[0], w), min(acc[1], c)
        w, c = best(lambda: r(X), repeat)
        rows.append({"rule": name, "wall_s": w, "cpu_s": c})
    for row in rows:
        base = floor if row["rule"] in COORDINATE else [g + p for g, p in zip(gram, floor)]
        row["ratio_wall"], row["ratio_cpu"] = row["wall_s"] / base[0], row["cpu_s"] / base[1]
        row["floor"] = "X.sum(0)" if row["rule"] in COORDINATE else "X@X.T + X.sum(0)"
        if row["rule"] in TARGETS:
            row["target"] = TARGETS[row["rule"]]
    print(f"\nn={n}, f={f}, d={d:,} float32; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"floor X.sum(0): {floor[0] * 1e3:.1f} ms wall, {floor[1] * 1e3:.1f} ms CPU;  "
          f"X@X.T: {gram[0] * 1e3:.1f} ms wall, {gram[1] * 1e3:.1f} ms CPU")
    print(f"{'rule':<10} {'wall ms':>8} {'× floor':>8} {'CPU ms':>8} {'× floor':>8}  floor             target")
    for row in rows:
        tgt = f"≤ {row['target']:g}×" if "target" in row else ""
        print(f"{row['rule']:<10} {row['wall_s'] * 1e3:>8.1f} {row['ratio_wall']:>8.2f} {row['cpu_s'] * 1e3:>8.1f} "
              f"{row['ratio_cpu']:>8.2f}  {row['floor']:<17} {tgt}")
    return {"n": n, "f": f, "d": d, "load": os.getloadavg()[0], "floor_s": floor, "gram_s": gram, "rows": rows}


_FIRST_CALL = (
    "import time, numpy as np; t0 = time.perf_counter(); import fedaudit.kernels as K; "
    "X = np.ones((21, 1000), np.float32); t1 = time.perf_counter(); K.cw_median(X); "
    "K.cw_median(X.astype(np.float64)); print(time.perf_counter() - t1)"
)


def jit_cost() -> dict[str, float]:
    """First calls (float32 and float64) in a fresh process: with an empty cache, then cached."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        times = [float(subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, check=True,
                                      capture_output=True, text=True).stdout) for _ in range(2)]
    print(f"\nselection kernel, first calls (float32 + float64) in a fresh process: compile {times[0]:.2f} s, "
          f"from the on-disk cache {times[1]:.2f} s")
    return {"compile_s": times[0], "cached_s": times[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="d = 10^5 (a smoke run)")
    ap.add_argument("--large", action="store_true", help="also n = 100, f = 20, d = 10^5")
    ap.add_argument("--jit", action="store_true", help="time the kernel's compilation and cache load")
    ap.add_argument("--select-bytes", type=int, default=None,
                    help="bytes per column block of the selection kernel (default: the library's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.select_bytes is not None:
        import fedaudit.kernels as kernels

        if args.select_bytes < 64:
            ap.error("--select-bytes must be at least 64")
        kernels._SELECT_BYTES = args.select_bytes
    settings = [(21, 5, 10**5 if args.quick else 10**6)] + ([(100, 20, 10**5)] if args.large else [])
    out: dict[str, Any] = {"numpy": np.__version__, "select_bytes": args.select_bytes, "settings": [run(n, f, d, args.repeat) for n, f, d in settings]}
    if args.jit:
        out["jit"] = jit_cost()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
