"""The contract of a robust aggregation rule: :func:`check_aggregator`.

The contract is the one :mod:`fedaudit.defenses.base` documents and ``tests/defenses/test_aggregators_extreme.py``
tests for the built-ins: rows holding NaN/±inf are Byzantine, dropped up to ``rule.tolerance(n)``
and past it an :class:`~fedaudit.errors.AggregatorBreakdown`; finite rows of any magnitude
(1e308, the largest float32) give a finite result without an overflow warning; the dtype of the
input is kept; the input is never mutated; ``rng`` is the only source of randomness. A rule that
subclasses :class:`~fedaudit.defenses.Aggregator` and implements only ``_aggregate`` inherits
most of it; the check catches a core that overflows, an order-dependent core declared invariant,
hidden random state, and an overridden ``__call__`` that lets NaN through.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedaudit.defenses.base import Aggregator, PreAggregator
from fedaudit.errors import AggregatorBreakdown
from fedaudit.testing.contract import Checks, ContractReport

__all__ = ["check_aggregator"]

F64_MAX = float(np.finfo(np.float64).max)
F32_MAX = float(np.finfo(np.float32).max)


def check_aggregator(rule: Aggregator | PreAggregator, *, n: int | None = None, d: int = 3,
                     seed: int = 0) -> ContractReport:
    """Check that ``rule`` (an :class:`~fedaudit.defenses.Aggregator` or
    :class:`~fedaudit.defenses.PreAggregator`) keeps the contract of :mod:`fedaudit.defenses.base`.

    Properties, in order (the first that fails raises :class:`~fedaudit.testing.ContractError`):

    * **interface** — an Aggregator/PreAggregator with an int ``f`` ≥ 0, ``min_n(f)`` ≥ 1 and
      ``tolerance(n)`` in [0, n);
    * **strict JSON** — ``params()`` is strict JSON (:mod:`fedaudit.json`);
    * **shapes and dtypes** — (n, d) float64 gives a (d,) float64 result ((n', d) rows for a
      pre-aggregator), float32 stays float32 and integers give float64; the input is not mutated;
    * **determinism under a seed** — the same ``rng`` seed gives the same bits; a rule with
      ``uses_rng = False`` ignores ``rng``;
    * **permutation invariance** (where ``permutation_invariant`` is declared) — permuted rows
      give the same result (permuted output rows for a pre-aggregator), to 1e-9 relative;
    * **non-finite rows** — up to ``tolerance(n)`` rows with NaN/±inf give a finite result (the
      result on the finite rows alone, for a rule built with f = 0 or not needing f); one more
      raises :class:`~fedaudit.errors.AggregatorBreakdown` with the rule's name, n, the count and
      the tolerance;
    * **overflow** — finite rows at ±1e308 and the largest float64 (float32 for float32 input)
      among ordinary ones, and all rows scaled to 1e300 or 1e-300, give a finite result without
      a numpy overflow/invalid warning.

    ``n``: rows per call (default ``rule.min_n(rule.f) + 2``); ``d``: columns; ``seed`` fixes the
    data and every ``rng``. Returns a :class:`~fedaudit.testing.ContractReport`.
    """
    checks = Checks(f"aggregation rule {rule!r}")
    checks.require(isinstance(rule, (Aggregator, PreAggregator)), "interface",
                   f"{type(rule).__name__} is not a fedaudit Aggregator or PreAggregator subclass")
    with checks.step("interface"):
        f = rule.f
        checks.require(isinstance(f, int) and not isinstance(f, bool) and f >= 0, "interface",
                       f"f must be an int >= 0, got {f!r}")
        need = rule.min_n(f)
        checks.require(isinstance(need, int) and need >= 1, "interface", f"min_n(f) must be an int >= 1, got {need!r}")
        n = need + 2 if n is None else int(n)
        checks.require(n >= need, "interface", f"n={n} is below min_n(f={f}) = {need}")
        tol = rule.tolerance(n)
        checks.require(isinstance(tol, int) and 0 <= tol < n, "interface",
                       f"tolerance({n}) must be an int in [0, {n}), got {tol!r}")
    checks.strict_json("params()", rule.params())
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[0] += 2.0  # no exact ties between rows or distances
    pre = isinstance(rule, PreAggregator)
    _shapes(checks, rule, X, seed, pre)
    _determinism(checks, rule, X, seed)
    _permutation(checks, rule, X, seed, pre)
    _non_finite(checks, rule, X, tol, seed, pre)
    _overflow(checks, rule, X, seed)
    return checks.report()


def _shape_ok(out: Any, X: np.ndarray, pre: bool) -> bool:
    if not isinstance(out, np.ndarray):
        return False
    if pre:
        return out.ndim == 2 and out.shape[0] >= 1 and out.shape[1] == X.shape[1]
    return out.shape == (X.shape[1],)


def _shapes(checks: Checks, rule: Any, X: np.ndarray, seed: int, pre: bool) -> None:
    prop = "shapes and dtypes"
    want = f"({X.shape[0]}', {X.shape[1]}) rows" if pre else f"shape ({X.shape[1]},)"
    with checks.step(prop):
        for data, dtype in ((X, np.float64), (X.astype(np.float32), np.float32),
                            (np.rint(X * 3).astype(np.int64), np.float64)):
            before = data.copy()
            out = rule(data, rng=seed)
            checks.require(np.array_equal(data, before), prop, f"the rule mutated its {data.dtype} input")
            checks.require(_shape_ok(out, data, pre), prop,
                           f"{data.dtype} input {data.shape} gave {type(out).__name__} of shape "
                           f"{getattr(out, 'shape', None)}, want a numpy array of {want}")
            checks.require(out.dtype == dtype, prop, f"{data.dtype} input gave a {out.dtype} result, want {np.dtype(dtype)}")
            checks.require(np.isfinite(out).all(), prop, f"finite {data.dtype} input gave a non-finite result")


def _determinism(checks: Checks, rule: Any, X: np.ndarray, seed: int) -> None:
    prop = "determinism under a seed"
    with checks.step(prop):
        a = rule(X, rng=np.random.default_rng(seed))
        b = rule(X, rng=np.random.default_rng(seed))
        checks.require(a.tobytes() == b.tobytes(), prop, "the same rng seed gave different results (hidden random state)")
        checks.require(rule(X, rng=seed).tobytes() == a.tobytes(), prop,
                       "an int seed and a Generator of that seed gave different results")
        if not getattr(rule, "uses_rng", False):
            checks.require(rule(X, rng=seed + 1).tobytes() == a.tobytes(), prop,
                           "uses_rng is False, yet another rng seed changed the result")


def _rows_sorted(Y: np.ndarray) -> np.ndarray:
    return Y[np.lexsort(Y.T[::-1])]


def _permutation(checks: Checks, rule: Any, X: np.ndarray, seed: int, pre: bool) -> None:
    prop = "permutation invariance"
    if not getattr(rule, "permutation_invariant", False):
        checks.skip(prop, "permutation_invariant is False")
        return
    with checks.step(prop):
        ref = rule(X, rng=seed)
        for k, perm in enumerate((np.arange(X.shape[0])[::-1], np.random.default_rng(seed + 7).permutation(X.shape[0]))):
            out = rule(X[perm], rng=seed)
            a, b = (_rows_sorted(ref), _rows_sorted(out)) if pre else (ref, out)
            scale = float(np.max(np.abs(X)))
            ok = a.shape == b.shape and np.allclose(a, b, rtol=1e-9, atol=1e-12 * scale)
            checks.require(ok, prop, f"{'reversed' if k == 0 else 'shuffled'} rows changed the result "
                                     f"(max difference {float(np.max(np.abs(a - b))) if a.shape == b.shape else 'shape'}); "
                                     f"set permutation_invariant = False if the row order matters")


def _non_finite(checks: Checks, rule: Any, X: np.ndarray, tol: int, seed: int, pre: bool) -> None:
    prop = "non-finite rows"
    n = X.shape[0]
    rng = np.random.default_rng(seed + 1)
    values = (np.nan, np.inf, -np.inf)
    with checks.step(prop, strict_warnings=True):
        order = rng.permutation(n)
        for r in range(0, tol + 1):
            Y = X.copy()
            bad = order[:r]
            for j, i in enumerate(bad):
                Y[i, j % X.shape[1]] = values[j % 3]
            out = rule(Y, rng=seed)
            checks.require(_shape_ok(out, Y, pre) and np.isfinite(out).all(), prop,
                           f"{r} non-finite row(s) of {n} (tolerance {tol}) gave a non-finite or misshapen result")
            same_f = not getattr(rule, "needs_f", True) or rule.f == 0
            if r and same_f and not pre and n - r >= rule.min_n(rule.f):
                alone = rule(np.delete(Y, bad, axis=0), rng=seed)
                checks.require(np.array_equal(out, alone), prop,
                               f"{r} non-finite row(s) were not simply dropped: the result differs from the rule "
                               f"on the finite rows alone")
        r = tol + 1
        if r <= n:
            Y = X.copy()
            Y[order[:r], 0] = np.nan
            try:
                rule(Y, rng=seed)
            except AggregatorBreakdown as exc:
                got = (exc.rule, exc.n, exc.nonfinite, exc.tolerated)
                checks.require(got == (rule.name, n, r, tol), prop,
                               f"AggregatorBreakdown(rule, n, nonfinite, tolerated) = {got}, want "
                               f"{(rule.name, n, r, tol)}")
            else:
                checks.fail(prop, f"{r} non-finite rows of {n} (past the tolerance {tol}) raised no AggregatorBreakdown")


def _overflow(checks: Checks, rule: Any, X: np.ndarray, seed: int) -> None:
    prop = "overflow"
    n, d = X.shape
    b = max(1, min(rule.f, rule.tolerance(n)))  # rows an adversary controls (one for rules without f)
    cases = []
    for value in (1e308, -F64_MAX):
        Y = X.copy()
        Y[1:1 + b] = value
        cases.append((f"{b} row(s) at {value:g}", Y))
    Y = X.copy()
    Y[1, 0] = 1e306
    cases.append(("one coordinate at 1e306", Y))
    Y = X.astype(np.float32)
    Y[1:1 + b] = F32_MAX
    cases.append((f"{b} float32 row(s) at the largest float32", Y))
    cases += [("every row scaled by 1e300", X * 1e300), ("every row scaled by 1e-300", X * 1e-300)]
    for what, Y in cases:
        try:
            with checks.step(prop, strict_warnings=True):
                out = rule(Y, rng=seed)
                checks.require(np.isfinite(out).all() and out.dtype == Y.dtype, prop,
                               f"{what}: the result is not finite {Y.dtype}")
        except AssertionError as exc:
            detail = getattr(exc, "detail", str(exc))
            checks.fail(prop, f"{what}: {detail}" if not detail.startswith(what) else detail)
