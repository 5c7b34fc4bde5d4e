"""Compiled column-wise order statistics: the selection kernel of CWTM, CWMed, Meamed and Bulyan.

One pass over the (n, d) input, column block by column block: a block of w columns (n·w values,
sized to stay in the L1 cache) is copied once into a buffer with a fixed row stride, every
column of it is sorted by a comparator network applied to whole rows of the block (each
comparator (a, b) is an elementwise min/max of rows a and b, vectorised over the w columns), and
the rule's statistic is read off the sorted rows while they are still in cache. The network is
Batcher's odd–even merge sort cut to n inputs (:func:`fedaudit.kernels.batcher_pairs`), pruned
to the comparators that feed the output positions the rule reads. Its first four levels sort
each aligned group of 16 rows, and from n = 32 on the fifth merges them into groups of 32 (for
17 … 24 rows, when the pruned network has at least 32 comparators left, a 24-row merge
finishes the sort); these run in registers (:func:`_sort16`, :func:`_sort8` for a last group
of at most 8 rows, :func:`_merge32`, :func:`_merge24`; missing rows are padded with the dtype's
largest finite value, which stays at the top of its group and is never read), each row loaded
and stored once per group pass, and the 16-row sorts check every value on the way (x − x is
NaN exactly for NaN and ±inf). The remaining comparators run row pair by row pair. The outputs
are exactly the order statistics ``np.sort`` returns (a sorting network's comparators only
ever exchange values), and each statistic adds them in float64 in the order the numpy
reference does, so the results are bit-identical to it.

Statistics (S_1 ≤ … ≤ S_n one sorted column):

* :data:`TRIM` (k): (S_{k+1} + … + S_{n−k}) / (n − 2k), added left to right;
* :data:`MEDIAN`: S_{h+1} for odd n, 0.5·S_h + 0.5·S_{h+1} for even n (h = ⌊n/2⌋);
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
def _sum_rows(S, a, b, w, out):
    """out[j] = S[a, j] + S[a+1, j] + … + S[b−1, j] in float64, added in that order (b > a),
    four rows per pass over out."""
    for j in range(w):
        out[j] = S[a, j]
    i = a + 1
    while i + 4 <= b:
        r0, r1, r2, r3 = S[i], S[i + 1], S[i + 2], S[i + 3]
        for j in range(w):
            out[j] = (((out[j] + r0[j]) + r1[j]) + r2[j]) + r3[j]
        i += 4
    while i < b:
        r0 = S[i]
        for j in range(w):
            out[j] += r0[j]
        i += 1


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
                out[j] = 0.5 * np.float64(S[h - 1, j]) + 0.5 * np.float64(S[h, j])
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
            _sum_rows(S, g, k, w, out)
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
    _sum_rows(S, lo, hi, w, out)
    m = hi - lo
    for j in range(w):
        out[j] /= m
    if mode == WINDOW:
        for j in range(w):
            two_med[j] = 0.0


#: Row stride (elements) of the kernel's block buffer: a compile-time constant, so the compiler
#: sees fixed distances between the rows of a group and vectorises the in-register group sorts
#: (1600 bytes for float32: consecutive rows fall on different L1 cache sets).
_STRIDE = 400
#: Offsets of the rows of a group in the flat buffer, unsigned: with constant offsets and no
#: negative-index wraparound the group sorts vectorise over the columns.
_ROW = tuple(np.uint64(t * _STRIDE) for t in range(32))
#: Most columns per block (a multiple of 64 below _STRIDE).
_MAX_WIDTH = 384


@njit(nogil=True, cache=True)
def _cx(x, y):
    """One comparator: (x if x < y else y, y if x < y else x), a permutation of (x, y)."""
    return min(y, x), max(x, y)


@njit(nogil=True, cache=True)
def _net8(x0, x1, x2, x3, x4, x5, x6, x7):
    """Batcher's network for 8 values (19 comparators; the first three levels of batcher_pairs)."""
    x0, x1 = _cx(x0, x1); x2, x3 = _cx(x2, x3); x4, x5 = _cx(x4, x5); x6, x7 = _cx(x6, x7)  # noqa: E702
    x0, x2 = _cx(x0, x2); x1, x3 = _cx(x1, x3); x4, x6 = _cx(x4, x6); x5, x7 = _cx(x5, x7)  # noqa: E702
    x1, x2 = _cx(x1, x2); x5, x6 = _cx(x5, x6)  # noqa: E702
    x0, x4 = _cx(x0, x4); x1, x5 = _cx(x1, x5); x2, x6 = _cx(x2, x6); x3, x7 = _cx(x3, x7)  # noqa: E702
    x2, x4 = _cx(x2, x4); x3, x5 = _cx(x3, x5)  # noqa: E702
    x1, x2 = _cx(x1, x2); x3, x4 = _cx(x3, x4); x5, x6 = _cx(x5, x6)  # noqa: E702
    return x0, x1, x2, x3, x4, x5, x6, x7


@njit(nogil=True, cache=True)
def _sort8(B, i0, w):
    """Sort rows i0 … i0+7 of the block buffer B (flat, row stride _STRIDE) column by column in
    registers. Returns the number of columns holding a NaN or ±inf (x − x is NaN exactly for
    those; any other value gives 0)."""
    base = np.uint64(i0) * _ROW[1]
    bad = 0
    for j in range(w):
        b = base + np.uint64(j)
        x0 = B[b]; x1 = B[b + _ROW[1]]; x2 = B[b + _ROW[2]]; x3 = B[b + _ROW[3]]  # noqa: E702
        x4 = B[b + _ROW[4]]; x5 = B[b + _ROW[5]]; x6 = B[b + _ROW[6]]; x7 = B[b + _ROW[7]]  # noqa: E702
        bad += ((x0 - x0) + (x1 - x1) + (x2 - x2) + (x3 - x3)) + ((x4 - x4) + (x5 - x5) + (x6 - x6) + (x7 - x7)) != 0.0
        x0, x1, x2, x3, x4, x5, x6, x7 = _net8(x0, x1, x2, x3, x4, x5, x6, x7)
        B[b] = x0; B[b + _ROW[1]] = x1; B[b + _ROW[2]] = x2; B[b + _ROW[3]] = x3  # noqa: E702
        B[b + _ROW[4]] = x4; B[b + _ROW[5]] = x5; B[b + _ROW[6]] = x6; B[b + _ROW[7]] = x7  # noqa: E702
    return bad


@njit(nogil=True, cache=True)
def _sort16(B, i0, w):
    """:func:`_sort8` for rows i0 … i0+15: two 8-sorters, then Batcher's merge of the two halves
    (25 comparators; the fourth level of batcher_pairs)."""
    base = np.uint64(i0) * _ROW[1]
    bad = 0
    for j in range(w):
        b = base + np.uint64(j)
        x0 = B[b]; x1 = B[b + _ROW[1]]; x2 = B[b + _ROW[2]]; x3 = B[b + _ROW[3]]  # noqa: E702
        x4 = B[b + _ROW[4]]; x5 = B[b + _ROW[5]]; x6 = B[b + _ROW[6]]; x7 = B[b + _ROW[7]]  # noqa: E702
        x8 = B[b + _ROW[8]]; x9 = B[b + _ROW[9]]; x10 = B[b + _ROW[10]]; x11 = B[b + _ROW[11]]  # noqa: E702
        x12 = B[b + _ROW[12]]; x13 = B[b + _ROW[13]]; x14 = B[b + _ROW[14]]; x15 = B[b + _ROW[15]]  # noqa: E702
        bad += ((((x0 - x0) + (x1 - x1)) + ((x2 - x2) + (x3 - x3)))
                + (((x4 - x4) + (x5 - x5)) + ((x6 - x6) + (x7 - x7)))
                + (((x8 - x8) + (x9 - x9)) + ((x10 - x10) + (x11 - x11)))
                + (((x12 - x12) + (x13 - x13)) + ((x14 - x14) + (x15 - x15)))) != 0.0
        x0, x1, x2, x3, x4, x5, x6, x7 = _net8(x0, x1, x2, x3, x4, x5, x6, x7)
        x8, x9, x10, x11, x12, x13, x14, x15 = _net8(x8, x9, x10, x11, x12, x13, x14, x15)
        x0, x8 = _cx(x0, x8); x1, x9 = _cx(x1, x9); x2, x10 = _cx(x2, x10); x3, x11 = _cx(x3, x11)  # noqa: E702
        x4, x12 = _cx(x4, x12); x5, x13 = _cx(x5, x13); x6, x14 = _cx(x6, x14); x7, x15 = _cx(x7, x15)  # noqa: E702
        x4, x8 = _cx(x4, x8); x5, x9 = _cx(x5, x9); x6, x10 = _cx(x6, x10); x7, x11 = _cx(x7, x11)  # noqa: E702
        x2, x4 = _cx(x2, x4); x3, x5 = _cx(x3, x5); x6, x8 = _cx(x6, x8); x7, x9 = _cx(x7, x9)  # noqa: E702
        x10, x12 = _cx(x10, x12); x11, x13 = _cx(x11, x13)  # noqa: E702
        x1, x2 = _cx(x1, x2); x3, x4 = _cx(x3, x4); x5, x6 = _cx(x5, x6); x7, x8 = _cx(x7, x8)  # noqa: E702
        x9, x10 = _cx(x9, x10); x11, x12 = _cx(x11, x12); x13, x14 = _cx(x13, x14)  # noqa: E702
        B[b] = x0; B[b + _ROW[1]] = x1; B[b + _ROW[2]] = x2; B[b + _ROW[3]] = x3  # noqa: E702
        B[b + _ROW[4]] = x4; B[b + _ROW[5]] = x5; B[b + _ROW[6]] = x6; B[b + _ROW[7]] = x7  # noqa: E702
        B[b + _ROW[8]] = x8; B[b + _ROW[9]] = x9; B[b + _ROW[10]] = x10; B[b + _ROW[11]] = x11  # noqa: E702
        B[b + _ROW[12]] = x12; B[b + _ROW[13]] = x13; B[b + _ROW[14]] = x14; B[b + _ROW[15]] = x15  # noqa: E702
    return bad


@njit(nogil=True, cache=True)
def _merge32(B, i0, w):
    """Merge the sorted row groups i0 … i0+15 and i0+16 … i0+31 of the block buffer in registers
    (the fifth level of batcher_pairs: 65 comparators)."""
    base = np.uint64(i0) * _ROW[1]
    for j in range(w):
        b = base + np.uint64(j)
        x0 = B[b]; x1 = B[b + _ROW[1]]; x2 = B[b + _ROW[2]]; x3 = B[b + _ROW[3]]  # noqa: E702
        x4 = B[b + _ROW[4]]; x5 = B[b + _ROW[5]]; x6 = B[b + _ROW[6]]; x7 = B[b + _ROW[7]]  # noqa: E702
        x8 = B[b + _ROW[8]]; x9 = B[b + _ROW[9]]; x10 = B[b + _ROW[10]]; x11 = B[b + _ROW[11]]  # noqa: E702
        x12 = B[b + _ROW[12]]; x13 = B[b + _ROW[13]]; x14 = B[b + _ROW[14]]; x15 = B[b + _ROW[15]]  # noqa: E702
        x16 = B[b + _ROW[16]]; x17 = B[b + _ROW[17]]; x18 = B[b + _ROW[18]]; x19 = B[b + _ROW[19]]  # noqa: E702
        x20 = B[b + _ROW[20]]; x21 = B[b + _ROW[21]]; x22 = B[b + _ROW[22]]; x23 = B[b + _ROW[23]]  # noqa: E702
        x24 = B[b + _ROW[24]]; x25 = B[b + _ROW[25]]; x26 = B[b + _ROW[26]]; x27 = B[b + _ROW[27]]  # noqa: E702
        x28 = B[b + _ROW[28]]; x29 = B[b + _ROW[29]]; x30 = B[b + _ROW[30]]; x31 = B[b + _ROW[31]]  # noqa: E702
        x0, x16 = _cx(x0, x16); x1, x17 = _cx(x1, x17); x2, x18 = _cx(x2, x18); x3, x19 = _cx(x3, x19)  # noqa: E702
        x4, x20 = _cx(x4, x20); x5, x21 = _cx(x5, x21); x6, x22 = _cx(x6, x22); x7, x23 = _cx(x7, x23)  # noqa: E702
        x8, x24 = _cx(x8, x24); x9, x25 = _cx(x9, x25); x10, x26 = _cx(x10, x26); x11, x27 = _cx(x11, x27)  # noqa: E702
        x12, x28 = _cx(x12, x28); x13, x29 = _cx(x13, x29); x14, x30 = _cx(x14, x30)  # noqa: E702
        x15, x31 = _cx(x15, x31)  # noqa: E702
        x8, x16 = _cx(x8, x16); x9, x17 = _cx(x9, x17); x10, x18 = _cx(x10, x18); x11, x19 = _cx(x11, x19)  # noqa: E702
        x12, x20 = _cx(x12, x20); x13, x21 = _cx(x13, x21); x14, x22 = _cx(x14, x22)  # noqa: E702
        x15, x23 = _cx(x15, x23)  # noqa: E702
        x4, x8 = _cx(x4, x8); x5, x9 = _cx(x5, x9); x6, x10 = _cx(x6, x10); x7, x11 = _cx(x7, x11)  # noqa: E702
        x12, x16 = _cx(x12, x16); x13, x17 = _cx(x13, x17); x14, x18 = _cx(x14, x18)  # noqa: E702
        x15, x19 = _cx(x15, x19)  # noqa: E702
        x20, x24 = _cx(x20, x24); x21, x25 = _cx(x21, x25); x22, x26 = _cx(x22, x26)  # noqa: E702
        x23, x27 = _cx(x23, x27)  # noqa: E702
        x2, x4 = _cx(x2, x4); x3, x5 = _cx(x3, x5); x6, x8 = _cx(x6, x8); x7, x9 = _cx(x7, x9)  # noqa: E702
        x10, x12 = _cx(x10, x12); x11, x13 = _cx(x11, x13); x14, x16 = _cx(x14, x16)  # noqa: E702
        x15, x17 = _cx(x15, x17)  # noqa: E702
        x18, x20 = _cx(x18, x20); x19, x21 = _cx(x19, x21); x22, x24 = _cx(x22, x24)  # noqa: E702
        x23, x25 = _cx(x23, x25)  # noqa: E702
        x26, x28 = _cx(x26, x28); x27, x29 = _cx(x27, x29); x1, x2 = _cx(x1, x2); x3, x4 = _cx(x3, x4)  # noqa: E702
        x5, x6 = _cx(x5, x6); x7, x8 = _cx(x7, x8); x9, x10 = _cx(x9, x10); x11, x12 = _cx(x11, x12)  # noqa: E702
        x13, x14 = _cx(x13, x14); x15, x16 = _cx(x15, x16); x17, x18 = _cx(x17, x18)  # noqa: E702
        x19, x20 = _cx(x19, x20)  # noqa: E702
        x21, x22 = _cx(x21, x22); x23, x24 = _cx(x23, x24); x25, x26 = _cx(x25, x26)  # noqa: E702
        x27, x28 = _cx(x27, x28)  # noqa: E702
        x29, x30 = _cx(x29, x30)  # noqa: E702
        B[b] = x0; B[b + _ROW[1]] = x1; B[b + _ROW[2]] = x2; B[b + _ROW[3]] = x3  # noqa: E702
        B[b + _ROW[4]] = x4; B[b + _ROW[5]] = x5; B[b + _ROW[6]] = x6; B[b + _ROW[7]] = x7  # noqa: E702
        B[b + _ROW[8]] = x8; B[b + _ROW[9]] = x9; B[b + _ROW[10]] = x10; B[b + _ROW[11]] = x11  # noqa: E702
        B[b + _ROW[12]] = x12; B[b + _ROW[13]] = x13; B[b + _ROW[14]] = x14; B[b + _ROW[15]] = x15  # noqa: E702
        B[b + _ROW[16]] = x16; B[b + _ROW[17]] = x17; B[b + _ROW[18]] = x18; B[b + _ROW[19]] = x19  # noqa: E702
        B[b + _ROW[20]] = x20; B[b + _ROW[21]] = x21; B[b + _ROW[22]] = x22; B[b + _ROW[23]] = x23  # noqa: E702
        B[b + _ROW[24]] = x24; B[b + _ROW[25]] = x25; B[b + _ROW[26]] = x26; B[b + _ROW[27]] = x27  # noqa: E702
        B[b + _ROW[28]] = x28; B[b + _ROW[29]] = x29; B[b + _ROW[30]] = x30; B[b + _ROW[31]] = x31  # noqa: E702


@njit(nogil=True, cache=True)
def _merge24(B, i0, w):
    """Merge the sorted row groups i0 … i0+15 and i0+16 … i0+23 of the block buffer in registers
    (the fifth level of batcher_pairs (24): 45 comparators)."""
    base = np.uint64(i0) * _ROW[1]
    for j in range(w):
        b = base + np.uint64(j)
        x0 = B[b]; x1 = B[b + _ROW[1]]; x2 = B[b + _ROW[2]]; x3 = B[b + _ROW[3]]  # noqa: E702
        x4 = B[b + _ROW[4]]; x5 = B[b + _ROW[5]]; x6 = B[b + _ROW[6]]; x7 = B[b + _ROW[7]]  # noqa: E702
        x8 = B[b + _ROW[8]]; x9 = B[b + _ROW[9]]; x10 = B[b + _ROW[10]]; x11 = B[b + _ROW[11]]  # noqa: E702
        x12 = B[b + _ROW[12]]; x13 = B[b + _ROW[13]]; x14 = B[b + _ROW[14]]; x15 = B[b + _ROW[15]]  # noqa: E702
        x16 = B[b + _ROW[16]]; x17 = B[b + _ROW[17]]; x18 = B[b + _ROW[18]]; x19 = B[b + _ROW[19]]  # noqa: E702
        x20 = B[b + _ROW[20]]; x21 = B[b + _ROW[21]]; x22 = B[b + _ROW[22]]; x23 = B[b + _ROW[23]]  # noqa: E702
        x0, x16 = _cx(x0, x16); x1, x17 = _cx(x1, x17); x2, x18 = _cx(x2, x18); x3, x19 = _cx(x3, x19)  # noqa: E702
        x4, x20 = _cx(x4, x20); x5, x21 = _cx(x5, x21); x6, x22 = _cx(x6, x22); x7, x23 = _cx(x7, x23)  # noqa: E702
        x8, x16 = _cx(x8, x16); x9, x17 = _cx(x9, x17); x10, x18 = _cx(x10, x18); x11, x19 = _cx(x11, x19)  # noqa: E702
        x12, x20 = _cx(x12, x20); x13, x21 = _cx(x13, x21); x14, x22 = _cx(x14, x22)  # noqa: E702
        x15, x23 = _cx(x15, x23)  # noqa: E702
        x4, x8 = _cx(x4, x8); x5, x9 = _cx(x5, x9); x6, x10 = _cx(x6, x10); x7, x11 = _cx(x7, x11)  # noqa: E702
        x12, x16 = _cx(x12, x16); x13, x17 = _cx(x13, x17); x14, x18 = _cx(x14, x18)  # noqa: E702
        x15, x19 = _cx(x15, x19)  # noqa: E702
        x2, x4 = _cx(x2, x4); x3, x5 = _cx(x3, x5); x6, x8 = _cx(x6, x8); x7, x9 = _cx(x7, x9)  # noqa: E702
        x10, x12 = _cx(x10, x12); x11, x13 = _cx(x11, x13); x14, x16 = _cx(x14, x16)  # noqa: E702
        x15, x17 = _cx(x15, x17)  # noqa: E702
        x18, x20 = _cx(x18, x20); x19, x21 = _cx(x19, x21); x1, x2 = _cx(x1, x2); x3, x4 = _cx(x3, x4)  # noqa: E702
        x5, x6 = _cx(x5, x6); x7, x8 = _cx(x7, x8); x9, x10 = _cx(x9, x10); x11, x12 = _cx(x11, x12)  # noqa: E702
        x13, x14 = _cx(x13, x14); x15, x16 = _cx(x15, x16); x17, x18 = _cx(x17, x18)  # noqa: E702
        x19, x20 = _cx(x19, x20)  # noqa: E702
        x21, x22 = _cx(x21, x22)  # noqa: E702
        B[b] = x0; B[b + _ROW[1]] = x1; B[b + _ROW[2]] = x2; B[b + _ROW[3]] = x3  # noqa: E702
        B[b + _ROW[4]] = x4; B[b + _ROW[5]] = x5; B[b + _ROW[6]] = x6; B[b + _ROW[7]] = x7  # noqa: E702
        B[b + _ROW[8]] = x8; B[b + _ROW[9]] = x9; B[b + _ROW[10]] = x10; B[b + _ROW[11]] = x11  # noqa: E702
        B[b + _ROW[12]] = x12; B[b + _ROW[13]] = x13; B[b + _ROW[14]] = x14; B[b + _ROW[15]] = x15  # noqa: E702
        B[b + _ROW[16]] = x16; B[b + _ROW[17]] = x17; B[b + _ROW[18]] = x18; B[b + _ROW[19]] = x19  # noqa: E702
        B[b + _ROW[20]] = x20; B[b + _ROW[21]] = x21; B[b + _ROW[22]] = x22; B[b + _ROW[23]] = x23  # noqa: E702


@njit(nogil=True, cache=True)
def _sort_rows(S, w, pairs, p0):
    """Apply the comparators pairs[p0:] to the first w columns of S (n, ≥ w) in place, each an
    elementwise min/max of two rows."""
    for p in range(p0, pairs.shape[0]):
        ra = S[pairs[p, 0]]
        rb = S[pairs[p, 1]]
        for j in range(w):
            x = ra[j]
            y = rb[j]
            ra[j] = x if x < y else y
            rb[j] = y if x < y else x


@njit(nogil=True, cache=True)
def cw_select(X, pairs, lo, hi, mode, k, width, down, up, out):
    """out[lo:hi] = the statistic ``mode`` (parameter k) of the columns lo … hi−1 of X.

    X: (n, d) C-contiguous float32 or float64; pairs: (c, 2) int64 comparators (a < b) of
    :func:`fedaudit.kernels.batcher_pairs` (n) pruned to the positions the statistic reads, in
    order; width: columns per block (rounded down to a multiple of 64 from 64 on, at most
    _MAX_WIDTH); down, up: 2^−s and 2^s for the rescaled recomputation of an overflowed column;
    out: (d,) float64. Returns False, or True as soon as a block holds a NaN or ±inf (out is
    then incomplete: the caller drops the non-finite rows and starts again)."""
    n = X.shape[0]
    G = 32 if n >= 32 else 16  # rows per group sorted in registers (_merge32 pays from 32 rows on)
    npad = (n + G - 1) // G * G
    W = _STRIDE
    B = np.empty(npad * W, X.dtype)
    big = np.finfo(X.dtype).max
    B[n * W:] = big  # pad rows: above every finite value, so they stay at the top of their group
    S = B[:n * W].reshape((n, W))
    p0 = 0  # the leading comparators within aligned groups of G: done by the group sorts
    while p0 < pairs.shape[0] and pairs[p0, 0] // G == pairs[p0, 1] // G:
        p0 += 1
    # 17 … 24 rows: the in-register merge (45 comparators) finishes the sort; it pays when it
    # replaces at least 32 remaining row-pair comparators (measured break-even ≈ 30 at n = 21)
    merge24 = 16 < n <= 24 and pairs.shape[0] - p0 >= 32
    if merge24:
        p0 = pairs.shape[0]
    w_max = max(1, min(width if width < 64 else width // 64 * 64, _MAX_WIDTH))  # whole vector loops
    two_med = np.empty(w_max)
    acc = np.empty(w_max)
    col = np.empty((n, 1))
    col_out = np.empty(1)
    col_med = np.empty(1)
    col_acc = np.empty(1)
    for s in range(lo, hi, w_max):
        w = min(w_max, hi - s)
        for i in range(n):
            src = X[i, s:s + w]
            dst = S[i]
            for j in range(w):
                dst[j] = src[j]
        bad = 0
        for i0 in range(0, n, 16):
            bad += _sort16(B, i0, w) if n - i0 > 8 else _sort8(B, i0, w)
        if bad:
            return True
        if merge24:
            _merge24(B, 0, w)
        elif G == 32:
            for i0 in range(0, n - 16, 32):
                _merge32(B, i0, w)
        _sort_rows(S, w, pairs, p0)
        o = out[s:s + w]
        _statistic(S, w, mode, k, o, two_med, acc)
        for j in range(w):
            if not (np.isfinite(o[j]) and (mode != WINDOW or np.isfinite(two_med[j]))):
                for i in range(n):
                    col[i, 0] = np.float64(S[i, j]) * down
                _statistic(col, 1, mode, k, col_out, col_med, col_acc)
                o[j] = col_out[0] * up
    return False
