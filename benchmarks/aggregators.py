"""Aggregator speed, side by side with ByzFL 0.0.11 when it can be imported.

Two settings on float32 inputs: n=21, f=5, d=10^6 and n=100, f=20, d=10^5. For each: the
one-pass floor ``X.sum(0)``, ``np.sort(X, axis=0)`` as a reference row, then every fedaudit
rule and pre-aggregator (plus "nnm+cwtm" and "nnm+gm") as best-of-``--repeat`` time and ratio
to the floor; when ``byzfl`` 0.0.11 is importable, the matching ByzFL rules on the same input,
the speed-up of ours over theirs and the largest difference between the two outputs (0 up to
float32 rounding where both implement the same definition), and ByzFL's time on the torch tensor
against our torch path. When torch is importable, the torch
CPU path runs next to numpy on the same rows (``torch.from_numpy(X)``): its time, its ratio to
torch's own ``T.sum(0)`` floor measured in the same run, whether the rule is ``torch_native``
(aggregated by torch on the tensor's device) or copies the tensor to the host, and the largest
difference from the numpy result. Usage:
``python benchmarks/aggregators.py [--repeat 3] [--quick] [--threads N] [--no-torch] [--json FILE]``.
The torch table of a setting is timed after all its numpy timings.

ByzFL is not a dependency: ``pip install --no-deps byzfl==0.0.11`` brings it in. Its package
``__init__`` also imports its training benchmark (torchvision, seaborn); if those are missing,
the aggregator modules (which need only numpy, scipy and torch) are loaded without running that
``__init__`` — the rule code is the unmodified 0.0.11 wheel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import platform
import sys
import time
import types
from typing import Any, Callable

import numpy as np

import fedaudit.kernels as kernels
from fedaudit.defenses import AGGREGATORS, PREAGGREGATORS, make_aggregator
from fedaudit.kernels import centered_gram, cw_median, weiszfeld

SETTINGS = [(21, 5, 10**6), (100, 20, 10**5)]
QUICK = [(21, 5, 10**5), (100, 20, 10**4)]

#: ours -> (ByzFL rule, speed-up target, whether both implement the same definition)
BYZFL = {
    "cwtm": ("TrMean", None, True),
    "cwmed": ("Median", 2.5, True),
    "krum": ("Krum", 3.0, False),  # ByzFL scores with n−f−1 neighbours (Blanchard: n−f−2)
    "multikrum": ("MultiKrum", None, False),
    "meamed": ("Meamed", 3.0, True),
    "gm": ("GeometricMedian", None, False),  # ByzFL: 3 iterations from 0, ν = 0.1
    "nnm+cwtm": ("NNM+TrMean", {21: 4.0, 100: 10.0}, True),
}


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def load_byzfl() -> tuple[Any, str]:
    """(namespace with ByzFL's aggregator classes, description) or (None, reason)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("byzfl")
    except PackageNotFoundError:
        return None, "byzfl not importable (not installed; pip install --no-deps byzfl==0.0.11)"
    if found != "0.0.11":
        return None, f"byzfl not importable as 0.0.11 (found {found})"
    try:
        import byzfl

        return byzfl, "byzfl 0.0.11 (full import)"
    except ImportError as err:
        reason = str(err)
    try:  # aggregators only: skip byzfl/__init__.py, which imports the training benchmark
        for key in [k for k in sys.modules if k == "byzfl" or k.startswith("byzfl.")]:
            del sys.modules[key]
        spec = importlib.util.find_spec("byzfl")
        pkg = types.ModuleType("byzfl")
        pkg.__path__ = list(spec.submodule_search_locations)
        pkg.__spec__ = spec
        sys.modules["byzfl"] = pkg
        from byzfl.aggregators import aggregators, preaggregators

        ns = types.SimpleNamespace(**{k: getattr(aggregators, k) for k in dir(aggregators) if k[:1].isupper()})
        ns.NNM = preaggregators.NNM
        return ns, f"byzfl 0.0.11 (aggregator modules only; `import byzfl` fails: {reason})"
    except Exception as exc:  # noqa: BLE001 - report, never fail the benchmark
        return None, f"byzfl not importable ({reason}; aggregator modules: {exc})"


def byzfl_rule(bz: Any, name: str, f: int) -> Callable[[np.ndarray], np.ndarray]:
    if name == "NNM+TrMean":
        nnm, tr = bz.NNM(f=f), bz.TrMean(f=f)
        return lambda X: tr(nnm(X))
    cls = getattr(bz, name)
    return cls() if name in ("Median", "GeometricMedian") else cls(f=f)


def our_rules(n: int, f: int) -> list[tuple[str, Any, str]]:
    """(label, rule or None, note)."""
    rows = []
    for name in list(AGGREGATORS.names()) + list(PREAGGREGATORS.names()) + ["nnm+cwtm", "nnm+gm"]:
        kw: dict[str, Any] = {}
        if name == "mda":
            count = math.comb(n, f)
            if count > 10**6:
                rows.append((name, None, f"skipped: exact search over C({n},{f}) = {count:.2e} subsets"))
                continue
            kw["max_subsets"] = count
        if name == "bulyan" and n < 4 * f + 3:
            rows.append((name, None, f"n/a: Bulyan needs n >= 4f+3 = {4 * f + 3}"))
            continue
        if name == "bucketing":
            kw = {"s": 2}
        if name == "clipping":
            kw = {"c": 1.0}
        if name in PREAGGREGATORS.names():  # time the pre-aggregator alone
            rule = make_aggregator(name + "+mean", f, **kw).stages[0]
        else:
            rule = make_aggregator(name, f, **kw)
        rows.append((name, rule, ""))
    return rows


def gm_iterations(X: np.ndarray) -> int:
    z0 = cw_median(X)
    G, _ = centered_gram(X, z0)
    return weiszfeld(G, 1e-8, 1000, 1e-12)[1]


def torch_table(rules: list[tuple[str, Any, np.ndarray]], X: np.ndarray, repeat: int, bz: Any,
                torch: Any, f: int) -> dict[str, Any]:
    """The torch CPU path on ``torch.from_numpy(X)``, timed after every numpy timing (OpenBLAS
    threads that still spin after a numpy call would otherwise slow torch's threads down): per
    rule its time, ratio to torch's ``T.sum(0)`` floor, device/host path, the largest difference
    from the numpy result, and ByzFL on the same tensor."""
    T = torch.from_numpy(X)
    timings = []
    for name, rule, out in rules:
        res = rule(T, rng=0)
        t = best_time(lambda: rule(T, rng=0), repeat)
        delta = float(np.max(np.abs(res.numpy().astype(np.float64) - np.asarray(out, dtype=np.float64))))
        path = "device" if rule.torch_native else "host"
        tb = None
        if bz is not None and name in BYZFL:
            theirs = byzfl_rule(bz, BYZFL[name][0], f)
            theirs(T)
            tb = best_time(lambda: theirs(T), repeat)
        timings.append((name, t, path, delta, tb))
    # the floor after the rules (the first torch calls after numpy's can run slowed down)
    floor = best_time(lambda: T.sum(0), max(10, repeat))
    print(f"torch {torch.__version__} CPU path, same rows — floor T.sum(0) = {floor * 1e3:.2f} ms")
    print(f"{'rule':<14} {'torch ms':>9} {'× floor':>8} {'path':>7} {'max|Δ| np':>10}   {'ByzFL ms':>9} {'speed-up':>9}")
    rows = []
    for name, t, path, delta, tb in timings:
        row: dict[str, Any] = {"rule": name, "torch_s": t, "ratio": t / floor, "path": path, "max_abs_diff": delta}
        line = f"{name:<14} {t * 1e3:>9.1f} {t / floor:>8.1f} {path:>7} {delta:>10.2e}"
        if tb is not None:
            row.update({"byzfl_s": tb, "speedup": tb / t})
            line += f"   {tb * 1e3:>9.1f} {tb / t:>8.1f}×"
        print(line)
        rows.append(row)
    return {"torch": torch.__version__, "floor_s": floor, "rows": rows}


def run_setting(n: int, f: int, d: int, repeat: int, bz: Any, torch: Any) -> dict[str, Any]:
    X = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    X[:f] += 3.0  # f shifted rows, as a mild attack
    floor = best_time(lambda: X.sum(0), max(5, repeat))
    t_sort = best_time(lambda: np.sort(X, axis=0), repeat)
    print(f"\nn={n}, f={f}, d={d:,} float32 — floor X.sum(0) = {floor * 1e3:.2f} ms")
    print(f"{'rule':<14} {'ours ms':>9} {'× floor':>8}   {'ByzFL rule':<16} {'ByzFL ms':>9} {'speed-up':>9} "
          f"{'max|Δ|':>9}  target")
    print(f"{'np.sort(ref)':<14} {t_sort * 1e3:>9.1f} {t_sort / floor:>8.1f}")
    rows = [{"rule": "np.sort", "ours_s": t_sort, "ratio": t_sort / floor}]
    timed = []
    for name, rule, note in our_rules(n, f):
        if rule is None:
            print(f"{name:<14} {note}")
            rows.append({"rule": name, "note": note})
            continue
        out = rule(X, rng=0)
        timed.append((name, rule, out))
        t = best_time(lambda: rule(X, rng=0), repeat)
        row: dict[str, Any] = {"rule": name, "ours_s": t, "ratio": t / floor}
        line = f"{name:<14} {t * 1e3:>9.1f} {t / floor:>8.1f}"
        target_txt = ""
        if name == "cwtm":
            ok = t <= t_sort
            row["target"] = {"no_slower_than_np_sort": ok}
            target_txt = f"≤ np.sort: {'met' if ok else 'NOT met'} ({t / t_sort:.2f}× np.sort)"
        if name == "gm":
            iters = gm_iterations(X)
            row["gm_iterations"] = iters
            target_txt = (f"{iters} Weiszfeld iterations on the Gram matrix; passes over X: median + Gram + "
                          f"combination, independent of the iterations (≤ 2/iteration: met)")
        if bz is not None and name in BYZFL:
            bname, target, same = BYZFL[name]
            theirs = byzfl_rule(bz, bname, f)
            ref = np.asarray(theirs(X))
            tb = best_time(lambda: theirs(X), repeat)
            speedup = tb / t
            delta = float(np.max(np.abs(ref.astype(np.float64) - np.asarray(out, dtype=np.float64))))
            row.update({"byzfl_rule": bname, "byzfl_s": tb, "speedup": speedup, "max_abs_diff": delta,
                        "same_definition": same})
            line += f"   {bname:<16} {tb * 1e3:>9.1f} {speedup:>8.1f}× {delta:>9.2e}"
            if isinstance(target, dict):
                target = target.get(n)
            if target is not None:
                ok = speedup >= target
                row["target"] = {"speedup_at_least": target, "met": ok}
                target_txt = f"≥ {target:g}× ByzFL: {'met' if ok else 'NOT met'}"
        else:
            line += " " * 50
        print(line + ("  " + target_txt if target_txt else ""))
        rows.append(row)
    result = {"n": n, "f": f, "d": d, "dtype": "float32", "floor_s": floor, "rows": rows}
    if torch is not None:
        result["torch_cpu"] = torch_table(timed, X, repeat, bz, torch, f)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="d ten times smaller (a smoke run)")
    ap.add_argument("--no-byzfl", action="store_true", help="skip the ByzFL comparison")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch CPU column")
    ap.add_argument("--threads", type=int, default=None,
                    help="cap the threads of fedaudit's coordinate-wise kernels and torch's intra-op threads "
                         "(default: available cores, ≤ 8; torch's default)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads is not None:
        kernels.MAX_THREADS = max(1, args.threads)
    threads = kernels.max_threads()
    bz, desc = (None, "byzfl not importable (--no-byzfl)") if args.no_byzfl else load_byzfl()
    print(f"{platform.machine()}, numpy {np.__version__}, best of {args.repeat}, up to {threads} thread(s) for "
          f"fedaudit's coordinate-wise kernels (BLAS threads as configured); {desc}")
    if bz is None:
        print("byzfl not importable")
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch not importable: no torch column")
    if torch is not None:
        if args.threads is not None:
            torch.set_num_threads(max(1, args.threads))
        gpu = "a CUDA device is available but not timed here" if torch.cuda.is_available() else "no GPU available"
        print(f"torch {torch.__version__}, CPU tensors, {torch.get_num_threads()} intra-op thread(s); {gpu}")
    results = [run_setting(n, f, d, args.repeat, bz, torch) for n, f, d in (QUICK if args.quick else SETTINGS)]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"numpy": np.__version__, "machine": platform.machine(), "byzfl": desc, "threads": threads,
                       "torch": None if torch is None else torch.__version__,
                       "repeat": args.repeat, "settings": results}, fh, indent=2)


if __name__ == "__main__":
    main()
