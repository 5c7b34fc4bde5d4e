"""Compiled row products: the float64 Gram matrix of Krum, NNM and the other distance rules, and
the nearest-neighbour mixing of NNM (means of chosen rows).

Both read an (n, d) float32 or float64 input, C-contiguous, once, block by block of ``width``
columns, and run over a column range [lo, hi) so that callers can split the columns over
threads (they release the GIL).

* :func:`gram_range` adds to G the lower triangle of Σ_k (x_ik − c_k)(x_jk − c_k) over the
  columns of [lo, hi): a block is cast to float64 and centred into a scratch buffer (c the given
  centre, or the block's column means (1/n) Σ_i x_ik, added in row order), then every 3 × 3 tile
  of row pairs is multiplied with nine float64 accumulators (each block row loaded once per tile,
  so a tile does 9 multiply-adds per 6 loads); it checks every value as it casts it and stops
  at a NaN or ±inf (the rules then drop those rows and call again). The products of float32
  values are exact in float64; the sums carry float64 rounding only. The accumulation order is
  fixed by the compiled code (its vector width is the CPU's) and by (lo, hi, width): the same
  column range gives the same bits on every call, whatever the thread that runs it.
  ``reassoc`` and ``contract`` are the only fast-math flags (lanes and fused multiply-adds): NaN
  and ±inf propagate as in IEEE arithmetic, so an overflowed Gram matrix is seen as such.
* :func:`mix_range` writes Y[t, k] = (Σ_{j ∈ rows r} x_jk) · (1/m), r = target[t], for the
  columns of [lo, hi): the m chosen rows added in float64 in the order given (four rows per sweep
  of the float64 accumulators, still one after the other), multiplied by the float64 1/m (a
  division costs a third of the whole sum here) and rounded to Y's dtype; each distinct subset is
  summed once, however many output rows take its mean (NNM's honest rows often share one
  neighbourhood). A column whose sum overflowed (float64 values near the largest finite one)
  is summed again on the values scaled by ``down`` = 2^−s and the mean scaled back by ``up`` =
  2^s (exact powers of two). No difference of sums is ever formed (a 1e30 row outside a
  neighbourhood cannot cancel honest digits).

The kernels are compiled by numba on first use for each dtype and cached on disk.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["TILE", "gram_range", "mix_range"]

#: Rows per side of a Gram tile: G's rows are padded to a multiple of it (zero rows).
TILE = 3


@njit(nogil=True, cache=True, fastmath={"reassoc", "contract"})
def _tile(a0, a1, a2, b0, b1, b2, w, out):
    """out[3p + q] += Σ_{k < w} a_p[k] · b_q[k] for p, q in 0 … 2 (nine float64 accumulators)."""
    s00 = 0.0
    s01 = 0.0
    s02 = 0.0
    s10 = 0.0
    s11 = 0.0
    s12 = 0.0
    s20 = 0.0
    s21 = 0.0
    s22 = 0.0
    for k in range(w):
        x0 = a0[k]
        x1 = a1[k]
        x2 = a2[k]
        y0 = b0[k]
        y1 = b1[k]
        y2 = b2[k]
        s00 += x0 * y0
        s01 += x0 * y1
        s02 += x0 * y2
        s10 += x1 * y0
        s11 += x1 * y1
        s12 += x1 * y2
        s20 += x2 * y0
        s21 += x2 * y1
        s22 += x2 * y2
    out[0] = s00
    out[1] = s01
    out[2] = s02
    out[3] = s10
    out[4] = s11
    out[5] = s12
    out[6] = s20
    out[7] = s21
    out[8] = s22


@njit(nogil=True, cache=True)
def _centre(src, c, dst, w):
    """dst[:w] = float64(src[:w]) − c[:w]; whether src[:w] holds NaN or ±inf."""
    bad = False
    for k in range(w):
        v = np.float64(src[k])
        dst[k] = v - c[k]
        bad |= v - v != 0.0  # v − v is NaN exactly for NaN and ±inf
    return bad


@njit(nogil=True, cache=True)
def gram_range(X, center, mean, lo, hi, width, G):
    """G[i, j] += Σ_{lo ≤ k < hi} (x_ik − c_k)(x_jk − c_k) for j ≤ i (the lower triangle).

    X: (n, d) C-contiguous float32/float64; center: (d,) float64, used when ``mean`` is False
    (True: c_k is the column mean (1/n) Σ_i x_ik); G: (m, m) float64, m ≥ n a multiple of
    :data:`TILE` (rows n … m−1 add zeros). Returns False, or True as soon as a block holds NaN or
    ±inf (G is then incomplete: the caller drops the non-finite rows and starts again)."""
    n = X.shape[0]
    m = G.shape[0]
    buf = np.zeros((m, width))
    cm = np.empty(width)
    out = np.empty(TILE * TILE)
    for s in range(lo, hi, width):
        w = min(width, hi - s)
        if mean:
            bad = False
            for i in range(n):  # cast, and the column sums in row order
                src = X[i, s:s + w]
                dst = buf[i]
                for k in range(w):
                    v = np.float64(src[k])
                    dst[k] = v
                    cm[k] = v if i == 0 else cm[k] + v
                    bad |= v - v != 0.0
            if bad:
                return True
            for k in range(w):
                cm[k] /= n
            for i in range(n):
                row = buf[i]
                for k in range(w):
                    row[k] -= cm[k]
        else:
            c = center[s:s + w]
            bad = False
            for i in range(n):
                bad |= _centre(X[i, s:s + w], c, buf[i], w)
            if bad:
                return True
        for i in range(0, m, TILE):
            for j in range(0, i + 1, TILE):
                _tile(buf[i], buf[i + 1], buf[i + 2], buf[j], buf[j + 1], buf[j + 2], w, out)
                for p in range(TILE):
                    for q in range(TILE):
                        G[i + p, j + q] += out[TILE * p + q]
    return False


@njit(nogil=True, cache=True)
def mix_range(X, rows, target, lo, hi, width, down, up, Y):
    """Y[t, lo:hi] = (Σ_u X[rows[r, u], lo:hi]) · (1/m) for every output row t with target[t] = r
    (m = rows.shape[1]), summed in float64 in the order of rows[r], rounded once to Y's dtype;
    an overflowed column sum is redone on the values scaled by ``down`` and scaled back by
    ``up``.

    X: (n, d) C-contiguous float32/float64; rows: (q, m) int64 row indices; target: (p,) int64
    in [0, q); Y: (p, d) of X's dtype, C-contiguous."""
    q, m = rows.shape
    acc = np.empty(width)
    inv = 1.0 / m
    for s in range(lo, hi, width):
        w = min(width, hi - s)
        for r in range(q):
            first = X[rows[r, 0], s:s + w]
            for k in range(w):
                acc[k] = np.float64(first[k])
            t = 1
            while t + 4 <= m:  # four rows per sweep of acc, still added one after the other
                x1 = X[rows[r, t], s:s + w]
                x2 = X[rows[r, t + 1], s:s + w]
                x3 = X[rows[r, t + 2], s:s + w]
                x4 = X[rows[r, t + 3], s:s + w]
                for k in range(w):
                    acc[k] = (((acc[k] + x1[k]) + x2[k]) + x3[k]) + x4[k]
                t += 4
            while t < m:
                src = X[rows[r, t], s:s + w]
                for k in range(w):
                    acc[k] += src[k]
                t += 1
            bad = False
            for k in range(w):
                bad |= acc[k] - acc[k] != 0.0  # NaN exactly when the sum overflowed (finite inputs)
            for p in range(target.shape[0]):
                if target[p] == r:
                    dst = Y[p, s:s + w]
                    for k in range(w):
                        dst[k] = acc[k] * inv
                    if bad:
                        for k in range(w):
                            if acc[k] - acc[k] != 0.0:
                                v = 0.0
                                for t in range(m):
                                    v += np.float64(X[rows[r, t], s + k]) * down
                                dst[k] = v * inv * up
