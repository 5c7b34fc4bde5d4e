"""Compiled column-wise order statistics: the selection kernel of CWTM, CWMed, Meamed and Bulyan.

One pass over the (n, d) input, column block by column block: a block of w columns (n·w values,
sized by the caller to stay in cache) is copied once, every column of it is sorted by a comparator
network applied to whole rows of the block (each comparator (a, b) is an elementwise min/max of
rows a and b, vectorised over the w columns), and the rule's statistic is read off the sorted
rows while they are still in cache. The network is Batcher's odd–even merge sort cut to n
inputs (:func:`fedaudit.kernels.batcher_pairs`), pruned to the comparators that feed the output
positions the rule reads; its outputs are exactly the order statistics ``np.sort`` returns, and
each statistic adds them in float64 in the order the numpy reference does, so the results are
bit-identical to it.

Statistics (S_1 ≤ … ≤ S_n one sorted column):

* :data:`TRIM` (k): (S_{k+1} + … + S_{n−k}) / (n − 2k), added left to right;
* :data:`MEDIAN`: S_{h+1} for odd n, (S_h + S_{h+1})·0.5 for even n (h = ⌊n/2⌋): the exact
  midpoint rounded once, within [S_h, S_{h+1}] also for subnormal values;
* :data:`WINDOW` (k): the mean of the k values closest to the median, the best window
  S_{s+1} … S_{s+k} with s = Σ_{t<n−k} [S_{t+1} + S_{t+1+k} < 2μ] (see
  ``fedaudit.defenses.aggregators``), summed as the reference sums it.

A column whose statistic overflowed (sums of values near the dtype's largest finite value), or
whose 2μ overflowed (a WINDOW decision), is recomputed on its values scaled by ``down`` = 2^−s
and the result scaled back by ``up`` = 2^s (exact powers of two; the order is unchanged).

The kernel is compiled by numba on first use for each input dtype (float32, float64) and cached
on disk (``cache=True``), so later processes load it instead of compiling. It releases the GIL:
callers split the columns over threads, and every column is computed by the same code whatever
the split.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["TRIM", "MEDIAN", "WINDOW", "cw_select"]

#: Trimmed mean of the order statistics k+1 … n−k.
TRIM = 0
#: Median (mean of the two middle values for even n).
MEDIAN = 1
#: Mean of the k values closest to the median.
WINDOW = 2


@njit(nogil=True, cache=True)
def _statistic(S, w, mode, k, out, two_med, acc):
    """The statistic of each of the first w sorted columns of S (n, ≥ w) into out[:w] (float64);
    for WINDOW, 2μ into two_med[:w]. ``acc`` (≥ w, float64) is scratch."""
    n = S.shape[0]
    if mode == MEDIAN:
        h = n // 2
        if n % 2:
            for j in range(w):
                out[j] = S[h, j]
        else:
            for j in range(w):
                # add, then halve: the sum of two subnormals is exact, so this is the exact
                # midpoint rounded once (halving each value first rounds 0.5·2^-1074 to 0); a sum
                # that overflows is redone on the scaled column
                out[j] = (np.float64(S[h - 1, j]) + S[h, j]) * 0.5
        return
    if mode == WINDOW and k < n:
        g = n - k
        h = n // 2
        for j in range(w):
            if n % 2:
                two_med[j] = 2.0 * np.float64(S[h, j])
            else:
                two_med[j] = np.float64(S[h - 1, j]) + S[h, j]
        if k > g:
            # rows g … k−1 are in every window; the others enter by the window's move P_t
            for j in range(w):
                out[j] = S[g, j]
            for i in range(g + 1, k):
                for j in range(w):
                    out[j] += S[i, j]
            for t in range(g):
                for j in range(w):
                    move = np.float64(S[t, j]) + S[t + k, j] < two_med[j]
                    v = S[t + k, j] if move else S[t, j]
                    if t == 0:
                        acc[j] = v
                    else:
                        acc[j] += v
            for j in range(w):
                out[j] = (out[j] + acc[j]) / k
            return
        # k ≤ g: the window starts at s = Σ_t P_t; the rows outside it add zeros
        for j in range(w):
            acc[j] = 0.0
        for t in range(g):
            for j in range(w):
                if np.float64(S[t, j]) + S[t + k, j] < two_med[j]:
                    acc[j] += 1.0
        for i in range(n):
            for j in range(w):
                inside = acc[j] <= i < acc[j] + k
                v = np.float64(S[i, j]) if inside else 0.0
                if i == 0:
                    out[j] = v
                else:
                    out[j] += v
        for j in range(w):
            out[j] /= k
        return
    # TRIM, and WINDOW with k = n (the window is the whole column: its mean, in sorted order)
    lo = k if mode == TRIM else 0
    hi = n - k if mode == TRIM else n
    for j in range(w):
        out[j] = S[lo, j]
    for i in range(lo + 1, hi):
        for j in range(w):
            out[j] += S[i, j]
    m = hi - lo
    for j in range(w):
        out[j] /= m
    if mode == WINDOW:
        for j in range(w):
            two_med[j] = 0.0


@njit(nogil=True, cache=True)
def _sort_block(B, w, pairs):
    """Sort the first w columns of B (n, ≥ w) in place with the comparator network ``pairs``."""
    for p in range(pairs.shape[0]):
        ra = B[pairs[p, 0]]
        rb = B[pairs[p, 1]]
        for j in range(w):
            x = ra[j]
            y = rb[j]
            ra[j] = x if x < y else y
            rb[j] = y if x < y else x


@njit(nogil=True, cache=True)
def cw_select(X, pairs, lo, hi, mode, k, width, down, up, out):
    """out[lo:hi] = the statistic ``mode`` (parameter k) of the columns lo … hi−1 of X.

    X: (n, d) C-contiguous float32 or float64; pairs: (c, 2) int64 comparators (a < b) of a
    network that sorts the positions the statistic reads; width: columns per block; down, up:
    2^−s and 2^s for the rescaled recomputation of an overflowed column; out: (d,) float64.
    Returns False, or True as soon as a block holds a NaN or ±inf (out is then incomplete:
    the caller drops the non-finite rows and starts again)."""
    n = X.shape[0]
    B = np.empty((n, width), X.dtype)
    two_med = np.empty(width)
    acc = np.empty(width)
    col = np.empty((n, 1))
    col_out = np.empty(1)
    col_med = np.empty(1)
    col_acc = np.empty(1)
    for s in range(lo, hi, width):
        w = min(width, hi - s)
        bad = False
        for i in range(n):
            src = X[i, s:s + w]
            dst = B[i]
            for j in range(w):
                v = src[j]
                dst[j] = v
                bad |= v - v != 0.0  # v − v is NaN exactly for NaN and ±inf
        if bad:
            return True
        _sort_block(B, w, pairs)
        o = out[s:s + w]
        _statistic(B, w, mode, k, o, two_med, acc)
        for j in range(w):
            if not (np.isfinite(o[j]) and (mode != WINDOW or np.isfinite(two_med[j]))):
                for i in range(n):
                    col[i, 0] = np.float64(B[i, j]) * down
                _statistic(col, 1, mode, k, col_out, col_med, col_acc)
                o[j] = col_out[0] * up
    return False
