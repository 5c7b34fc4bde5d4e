"""Order statistics per column: trimmed mean, median and the mean of the k values closest to the
median (CWTM, CWMed, Meamed), by the compiled comparator-network kernel of
:mod:`fedaudit.kernels.selection` for up to 160 rows of float16/32/64, else by ``sort_columns``.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from fedaudit.arrays import is_torch
from fedaudit.kernels.columns import (
    PARALLEL, NonFiniteInput, by_columns, cpu_array, run_tasks, sort_columns, sum_rows, to_float64,
)

__all__ = ["batcher_pairs", "cw_trimmed_mean", "cw_median", "cw_window_mean"]

@lru_cache(maxsize=None)
def batcher_pairs(n: int) -> tuple[tuple[int, int], ...]:
    """Comparators (a, b), a < b, of Batcher's odd–even merge sort for n inputs, in order
    (Batcher 1968; Knuth, TAOCP vol. 3, §5.3.4). The network for the next power of two is cut
    to n: a comparator touching a position ≥ n would compare with a +inf pad and never move."""
    p2 = 1 << max(0, (n - 1).bit_length())
    pairs = []
    p = 1
    while p < p2:
        k = p
        while k >= 1:
            for j in range(k % p, p2 - k, 2 * k):
                for i in range(min(k, p2 - j - k)):
                    a, b = i + j, i + j + k
                    if a // (2 * p) == b // (2 * p) and b < n:
                        pairs.append((a, b))
            k //= 2
        p *= 2
    return tuple(pairs)


#: numpy inputs with at most this many rows (and float16/32/64 values) take the compiled
#: selection kernel (:mod:`fedaudit.kernels.selection`); more rows, or other dtypes, ``np.sort``
#: (one thread, 2·10^6 float32 values, CPU ms, trimmed mean kernel vs np.sort: n = 21: 2.8 vs 9.7;
#: n = 100: 5.3 vs 7.7; n = 150: 6.7 vs 7.3; n = 200: 10.6 vs 6.3).
_SELECT_ROWS = 160
#: Bytes of one column block of the selection kernel (n · width values stay in the L2 cache;
#: one thread, CPU ms per 10^5 float32 columns at n = 100, CWTM/CWMed/Meamed: 13.5/10.9/14.2 with
#: 32 KiB blocks, 11.1/9.2/11.9 with 128 KiB; n = 21 unchanged).
_SELECT_BYTES = 1 << 17
#: Columns per task when the selection kernel's columns are split over threads.
_SELECT_TASK = 1 << 16


@lru_cache(maxsize=None)
def _select_network(n: int, mode: int, k: int) -> np.ndarray:
    """:func:`batcher_pairs` (n) pruned to the comparators that feed the positions the statistic
    reads (walking the network backwards, a comparator is kept iff one of its outputs is still
    needed; then both its inputs are). TRIM reads positions k … n−k−1, MEDIAN the middle one(s),
    WINDOW all of them."""
    from fedaudit.kernels.selection import MEDIAN, TRIM

    if mode == TRIM:
        live = set(range(k, n - k))
    elif mode == MEDIAN:
        live = {n // 2} if n % 2 else {n // 2 - 1, n // 2}
    else:
        live = set(range(n))
    kept = []
    for a, b in reversed(batcher_pairs(n)):
        if a in live or b in live:
            kept.append((a, b))
            live |= {a, b}
    return np.array(kept[::-1], dtype=np.int64).reshape(-1, 2)


def _selects(X: np.ndarray) -> bool:
    """Whether a numpy X goes through the compiled selection kernel."""
    return X.dtype in (np.float16, np.float32, np.float64) and X.shape[0] <= _SELECT_ROWS


def _selection_input(X: Any) -> np.ndarray | None:
    """The numpy array the compiled selection kernel reads for X — X itself, or a CPU tensor's own
    memory (:func:`cpu_array`: no copy for float32/float64) — or None when X takes the
    ``sort_columns`` path (more than _SELECT_ROWS rows, other numpy dtypes, tensors on other
    devices)."""
    A = cpu_array(X) if is_torch(X) else X
    return A if A is not None and _selects(A) else None


def _on(out: np.ndarray, X: Any) -> Any:
    """The (d,) float64 numpy result ``out`` of a column statistic as X's kind: a CPU tensor (on
    ``out``'s memory) when X is a tensor."""
    if not is_torch(X):
        return out
    import torch

    return torch.from_numpy(out)


def _select(X: np.ndarray, mode: int, k: int) -> np.ndarray:
    """The (d,) float64 column statistic ``mode`` of X by :func:`fedaudit.kernels.selection.cw_select`:
    float16 is widened to float32 (exact), columns are split over threads on large inputs;
    :class:`NonFiniteInput` when X holds NaN or ±inf."""
    from fedaudit.kernels.selection import cw_select

    if X.dtype == np.float16:
        X = X.astype(np.float32)
    X = np.ascontiguousarray(X)
    n, d = X.shape
    pairs = _select_network(n, mode, k)
    width = max(16, _SELECT_BYTES // (n * X.itemsize) // 16 * 16)
    shrink = n.bit_length() + 1  # 2^shrink > 2n: sums of n scaled values cannot overflow
    down, up = math.ldexp(1.0, -shrink), math.ldexp(1.0, shrink)
    out = np.empty(d)

    def task(a: int) -> Callable[[], None]:
        return lambda: cw_select(X, pairs, a, min(d, a + _SELECT_TASK), mode, k, width, down, up, out)

    if any(run_tasks([task(a) for a in range(0, d, _SELECT_TASK)], X.size >= PARALLEL)):
        raise NonFiniteInput("the columns hold NaN or ±inf")
    return out


def _screen(X: Any) -> None:
    """:class:`NonFiniteInput` when a numpy X holds NaN or ±inf (torch inputs are screened by
    the rules' entry point)."""
    if not is_torch(X) and not np.isfinite(X).all():
        raise NonFiniteInput("the columns hold NaN or ±inf")


def cw_trimmed_mean(X: Any, f: int) -> Any:
    """Per column, the mean of the sorted values f+1 … n−f: (S_{f+1} + … + S_{n−f}) / (n − 2f),
    added left to right in float64 (CWTM; needs n > 2f). The column statistics of a numpy X
    (this, :func:`cw_median`, :func:`cw_window_mean`) raise :class:`NonFiniteInput` for NaN or
    ±inf values."""
    n = X.shape[0]
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import TRIM

        return _on(_select(A, TRIM, f), X)
    _screen(X)
    return by_columns(X, lambda B: sum_rows(sort_columns(B)[f:n - f]) / (n - 2 * f))


def cw_median(X: Any) -> Any:
    """Coordinate-wise median in float64 (for even n the two middle values added, then halved: the
    exact midpoint rounded once, within [lower, upper] also for subnormals)."""
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import MEDIAN

        return _on(_select(A, MEDIAN, 0), X)
    if is_torch(X):
        return by_columns(X, _cw_median_torch)
    _screen(X)
    return by_columns(X, _cw_median_block)


def cw_window_mean(X: Any, k: int) -> Any:
    """Per column, the mean of the k values closest to the median (ties keep the lower values;
    Meamed, Bulyan's last step; 1 ≤ k ≤ n)."""
    A = _selection_input(X)
    if A is not None:
        from fedaudit.kernels.selection import WINDOW

        return _on(_select(A, WINDOW, k), X)
    _screen(X)
    return by_columns(X, lambda B: _mean_closest_to_median(sort_columns(B), k))


def _mean_closest_to_median(S: Any, k: int) -> Any:
    """Per column of the column-sorted S (m, d): mean of the k values closest to the median.

    In sorted order the k values closest to a point form a window S_s … S_{s+k−1}. Sliding
    the window from s to s + 1 trades S_s for S_{s+k}, which is closer to the median μ iff
    P_s: S_s + S_{s+k} < 2μ; P_s is monotone in s, so the best start is s* = Σ_s P_s (ties
    keep the lower window). When k > m − k, rows m − k … k − 1 are in every window and the
    window sum is Σ_{always} + Σ_{s<m−k} (P_s ? S_{s+k} : S_s). Sums are float64 additions of
    selected values only (no differences of prefix sums, so Byzantine magnitudes cannot cancel
    honest digits). S may be a torch tensor (the same steps in torch, on its device).
    """
    m = S.shape[0]
    g = m - k
    if g == 0:
        return sum_rows(S) / m
    if is_torch(S):
        return _mean_closest_to_median_torch(S, k)
    h = m // 2
    with np.errstate(over="ignore"):
        two_med = 2.0 * S[h].astype(np.float64) if m % 2 else S[h - 1].astype(np.float64) + S[h]
        P = S[:g].astype(np.float64) + S[k:k + g] < two_med  # (g, w): move the window right
    if k > g:
        chosen = np.where(P, S[k:], S[:g])
        return (sum_rows(S[g:k]) + sum_rows(chosen)) / k
    start = P.sum(axis=0)
    idx = np.arange(m)[:, None]
    sel = (idx >= start) & (idx < start + k)
    return sum_rows(np.where(sel, S, 0)) / k


def _mean_closest_to_median_torch(S: Any, k: int) -> Any:
    """:func:`_mean_closest_to_median` with torch operations (S column-sorted, m > k)."""
    import torch

    m = S.shape[0]
    g = m - k
    h = m // 2
    two_med = 2.0 * to_float64(S[h]) if m % 2 else to_float64(S[h - 1]) + S[h]
    P = to_float64(S[:g]) + S[k:k + g] < two_med
    if k > g:
        chosen = torch.where(P, S[k:], S[:g])
        return (sum_rows(S[g:k]) + sum_rows(chosen)) / k
    start = P.sum(dim=0)
    idx = torch.arange(m, device=S.device)[:, None]
    sel = (idx >= start) & (idx < start + k)
    return sum_rows(torch.where(sel, S, torch.zeros((), dtype=S.dtype, device=S.device))) / k


def _cw_median_torch(X: Any) -> Any:
    """The middle value (odd n) or the mean of the two middle values (even n) of the sorted
    columns (:func:`sort_columns`: faster than torch.median on CPU)."""
    n = X.shape[0]
    h = n // 2
    S = sort_columns(X)
    if n % 2:
        return to_float64(S[h])
    return (to_float64(S[h - 1]) + to_float64(S[h])) * 0.5  # as _cw_median_block


def _cw_median_block(X: np.ndarray) -> np.ndarray:
    """One single-kth np.partition along axis 0 (numpy's multi-kth partition is ~5× slower);
    for even n the lower middle value is the max of the rows left of the kth position."""
    n = X.shape[0]
    h = n // 2
    if n == 1:
        return X[0].astype(np.float64)
    P = np.partition(X, h, axis=0)
    upper = P[h].astype(np.float64)
    if n % 2:
        return upper
    lower = P[:h].max(axis=0).astype(np.float64)
    # add, then halve: the exact midpoint rounded once, within [lower, upper] (halving each value
    # first rounds half of the smallest subnormal to 0); an overflowed sum is redone scaled by by_columns
    return (lower + upper) * 0.5
