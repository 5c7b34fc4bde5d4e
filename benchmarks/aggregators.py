"""Aggregator speed, side by side with ByzFL 0.0.11 and ByzPy 0.1.4 when they can be imported.

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
``python benchmarks/aggregators.py [--repeat 3] [--quick] [--threads N] [--no-torch] [--no-byzfl]
[--no-byzpy] [--n 21|100] [--json FILE]``.
The torch table of a setting is timed after all its numpy timings.

ByzFL is not a dependency: ``pip install --no-deps byzfl==0.0.11`` brings it in. Its package
``__init__`` also imports its training benchmark (torchvision, seaborn); if those are missing,
the aggregator modules (which need only numpy, scipy and torch) are loaded without running that
``__init__`` — the rule code is the unmodified 0.0.11 wheel.

ByzPy 0.1.4 is not a dependency either: ``pip install --no-deps byzpy==0.1.4`` (its metadata
pins torch<2.6 and numpy<2.1; its aggregators need only torch and numpy, and run unmodified on
newer ones). When it is installed, a ByzPy table follows the torch table of each setting
(``--no-byzpy`` skips it): ByzPy's rule on the same float32 rows, given as ByzPy takes them (a
list of ``torch.from_numpy(X)`` row views — ByzPy computes with torch whatever the input, and
refuses numpy rows), its best-of-``--repeat`` time after one warm-up call, the speed-up of our
numpy and torch paths over it, the largest difference from our numpy result, and whether both
compute the same definition. ByzPy's parameters are chosen to match ours (Krum is built with
f + 1, which makes its n − f − 1 neighbours Blanchard's n − f − 2; centered clipping with our τ,
iteration count and median start; bucketing with the permutation ours draws from ``rng=0``).
Where the definitions still differ (Multi-Krum's neighbour count; the lower middle value that
ByzPy's torch.median takes at even n, in CWMed, Meamed and CC's start point) the row is timed
but marked "differs" and left out of the "ahead on every shared rule" verdict.
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
from fedaudit.rng import as_generator

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


def load_byzpy() -> tuple[Any, str]:
    """(namespace with ByzPy's rule classes and its torch module, description) or (None, reason)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("byzpy")
    except PackageNotFoundError:
        return None, "byzpy not installed (pip install --no-deps byzpy==0.1.4)"
    if found != "0.1.4":
        return None, f"byzpy not installed as 0.1.4 (found {found})"
    try:
        import torch
        from byzpy.aggregators.coordinate_wise import CoordinateWiseMedian, CoordinateWiseTrimmedMean, MeanOfMedians
        from byzpy.aggregators.geometric_wise import GeometricMedian, Krum, MinimumDiameterAveraging, MultiKrum
        from byzpy.aggregators.norm_wise import CenteredClipping
        from byzpy.pre_aggregators import ARC, Bucketing, Clipping, NearestNeighborMixing
    except Exception as exc:  # noqa: BLE001 - report, never fail the benchmark
        return None, f"byzpy 0.1.4 not importable ({exc})"
    ns = types.SimpleNamespace(
        torch=torch, CoordinateWiseMedian=CoordinateWiseMedian, CoordinateWiseTrimmedMean=CoordinateWiseTrimmedMean,
        MeanOfMedians=MeanOfMedians, GeometricMedian=GeometricMedian, Krum=Krum,
        MinimumDiameterAveraging=MinimumDiameterAveraging, MultiKrum=MultiKrum, CenteredClipping=CenteredClipping,
        ARC=ARC, Bucketing=Bucketing, Clipping=Clipping, NearestNeighborMixing=NearestNeighborMixing)
    return ns, "byzpy 0.1.4"


def byzpy_rule(bp: Any, name: str, rule: Any, n: int,
               f: int) -> tuple[str, Callable[[list], Any], bool, str] | None:
    """ByzPy's counterpart of our rule ``name`` (instance ``rule``, whose parameters it copies):
    (label, callable on the list of row tensors, same definition, note), or None when ByzPy has no
    such rule (mean, Bulyan)."""
    lower = "" if n % 2 else ("differs at even n: ByzPy's torch.median takes the lower middle value, ours the mean "
                              "of the two middle values")
    if name == "cwtm":
        return "CoordinateWiseTrimmedMean", bp.CoordinateWiseTrimmedMean(f).aggregate, True, ""
    if name == "cwmed":
        return "CoordinateWiseMedian", bp.CoordinateWiseMedian().aggregate, not lower, lower
    if name == "meamed":
        return "MeanOfMedians", bp.MeanOfMedians(f).aggregate, not lower, lower
    if name == "krum":
        return ("Krum(f+1)", bp.Krum(f + 1).aggregate, True,
                "built with f+1: ByzPy scores with n−f'−1 neighbours, so n−f−2 as Blanchard and ours")
    if name == "multikrum":
        return ("MultiKrum(q=n−f)", bp.MultiKrum(f, q=n - f).aggregate, False,
                "differs: ByzPy scores with n−f−1 neighbours (Blanchard, ours: n−f−2); built with f+1 it caps "
                "q at n−f−1")
    if name == "gm":
        return ("GeometricMedian", bp.GeometricMedian().aggregate, True,
                "same argmin from the same start; ByzPy stops at ‖Δz‖ ≤ 1e-6 (≤ 256 iterations), ours at "
                "‖Δz‖ ≤ 1e-8·r")
    if name == "mda":
        return "MinimumDiameterAveraging", bp.MinimumDiameterAveraging(f).aggregate, True, "both exact searches"
    if name == "cc":
        cc = bp.CenteredClipping(c_tau=rule.tau, M=rule.iters, init="median")
        return f"CenteredClipping(M={rule.iters})", cc.aggregate, not lower, lower
    if name == "nnm":
        return "NearestNeighborMixing", bp.NearestNeighborMixing(f).pre_aggregate, True, ""
    if name == "bucketing":
        perm = as_generator(0).permutation(n)  # the permutation our rule draws from rng=0
        return (f"Bucketing({rule.s})", bp.Bucketing(rule.s, perm=perm).pre_aggregate, True,
                "ByzPy given the permutation ours draws from rng=0")
    if name == "arc":
        return "ARC", bp.ARC(f).pre_aggregate, True, ""
    if name == "clipping":
        return f"Clipping({rule.c:g})", bp.Clipping(rule.c).pre_aggregate, True, ""
    if name in ("nnm+cwtm", "nnm+gm"):
        nnm = bp.NearestNeighborMixing(f)
        inner = bp.CoordinateWiseTrimmedMean(f) if name == "nnm+cwtm" else bp.GeometricMedian()
        label = "NNM+" + ("CoordinateWiseTrimmedMean" if name == "nnm+cwtm" else "GeometricMedian")
        note = "" if name == "nnm+cwtm" else ("on NNM's output ByzPy's float32 ‖Δz‖ stalls above 1e-6: it runs "
                                               "all 256 iterations (counted at n=21 and 100, d ≤ 10^5)")
        return label, lambda rows: inner.aggregate(nnm.pre_aggregate(rows)), True, note
    return None


def byzpy_table(rules: list[tuple[str, Any, np.ndarray, float]], X: np.ndarray, repeat: int, bp: Any, n: int,
                f: int, torch_s: dict[str, float]) -> dict[str, Any]:
    """ByzPy on the same rows, timed after every numpy and torch timing of the setting: per shared
    rule its time, the speed-up ByzPy time / ours of our numpy path and (``torch_s``) our torch
    path, the largest difference from our numpy result and whether the definitions agree."""
    torch = bp.torch
    rows_t = list(torch.from_numpy(X))  # ByzPy's input: a sequence of tensors (row views, no copy)
    print(f"ByzPy 0.1.4 on the same rows (a list of torch.from_numpy(X) rows), torch {torch.__version__}, "
          f"{torch.get_num_threads()} intra-op thread(s)")
    print(f"{'rule':<14} {'ByzPy rule':<28} {'ByzPy ms':>9} {'vs numpy':>9} {'vs torch':>9} {'max|Δ|':>9}  definition")
    rows, notes = [], []
    behind: dict[str, list[str]] = {"numpy": [], "torch": []}
    for name, rule, out, ours_s in rules:
        spec = byzpy_rule(bp, name, rule, n, f)
        if spec is None:
            continue
        label, fn, same, note = spec
        res = fn(rows_t)
        res = torch.stack(res) if isinstance(res, list) else res
        delta = float(np.max(np.abs(res.numpy().astype(np.float64) - np.asarray(out, dtype=np.float64))))
        t = best_time(lambda: fn(rows_t), repeat)
        row: dict[str, Any] = {"rule": name, "byzpy_rule": label, "byzpy_s": t, "speedup_numpy": t / ours_s,
                               "max_abs_diff": delta, "same_definition": same}
        line = f"{name:<14} {label:<28} {t * 1e3:>9.1f} {t / ours_s:>8.2f}×"
        if name in torch_s:
            row["speedup_torch"] = t / torch_s[name]
            line += f" {t / torch_s[name]:>8.2f}×"
        else:
            line += " " * 10
        line += f" {delta:>9.2e}  {'same' if same else 'differs'}"
        if note:
            row["note"] = note
            notes.append(f"  {name}: {note}")
        for path in ("numpy", "torch"):
            if same and row.get(f"speedup_{path}", math.inf) <= 1.0:
                behind[path].append(name)
        print(line)
        rows.append(row)
    verdict = [f"fedaudit's {path} path ahead of ByzPy on every shared rule: "
               + ("met" if not late else f"NOT met (not faster on {', '.join(late)})")
               for path, late in behind.items() if path == "numpy" or torch_s]
    print("\n".join(notes + verdict))
    return {"byzpy": "0.1.4", "rows": rows, "behind_numpy": behind["numpy"], "behind_torch": behind["torch"],
            "ahead_on_every_shared_rule": not (behind["numpy"] or behind["torch"])}


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


def torch_table(rules: list[tuple[str, Any, np.ndarray, float]], X: np.ndarray, repeat: int, bz: Any,
                torch: Any, f: int) -> dict[str, Any]:
    """The torch CPU path on ``torch.from_numpy(X)``, timed after every numpy timing (OpenBLAS
    threads that still spin after a numpy call would otherwise slow torch's threads down): per
    rule its time, ratio to torch's ``T.sum(0)`` floor, device/host path, the largest difference
    from the numpy result, and ByzFL on the same tensor."""
    T = torch.from_numpy(X)
    timings = []
    for name, rule, out, _ in rules:
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


def run_setting(n: int, f: int, d: int, repeat: int, bz: Any, torch: Any, bp: Any = None,
                bp_desc: str = "byzpy not installed") -> dict[str, Any]:
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
        t = best_time(lambda: rule(X, rng=0), repeat)
        timed.append((name, rule, out, t))
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
    torch_s: dict[str, float] = {}
    if torch is not None:
        result["torch_cpu"] = torch_table(timed, X, repeat, bz, torch, f)
        torch_s = {row["rule"]: row["torch_s"] for row in result["torch_cpu"]["rows"]}
    if bp is None:
        print(f"ByzPy: {bp_desc}")
        result["byzpy"] = {"not_run": bp_desc}
    else:
        result["byzpy"] = byzpy_table(timed, X, repeat, bp, n, f, torch_s)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="d ten times smaller (a smoke run)")
    ap.add_argument("--n", type=int, choices=[n for n, _, _ in SETTINGS], default=None,
                    help="run only the setting with this many rows")
    ap.add_argument("--no-byzfl", action="store_true", help="skip the ByzFL comparison")
    ap.add_argument("--no-byzpy", action="store_true", help="skip the ByzPy comparison")
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
    bp, bp_desc = (None, "byzpy not run (--no-byzpy)") if args.no_byzpy else load_byzpy()
    print(bp_desc)
    if bp is not None and args.threads is not None:
        bp.torch.set_num_threads(max(1, args.threads))
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
    results = [run_setting(n, f, d, args.repeat, bz, torch, bp, bp_desc)
               for n, f, d in (QUICK if args.quick else SETTINGS) if args.n in (None, n)]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"numpy": np.__version__, "machine": platform.machine(), "byzfl": desc, "byzpy": bp_desc,
                       "threads": threads,
                       "torch": None if torch is None else torch.__version__,
                       "repeat": args.repeat, "settings": results}, fh, indent=2)


if __name__ == "__main__":
    main()
