"""Robust aggregation rules: (n, d) → (d,).

Every rule subclasses :class:`~fedaudit.defenses.base.Aggregator`: it accepts numpy arrays and
torch tensors (same type, dtype and device come back; integer/bool inputs come back as float64),
never mutates its input, drops non-finite rows as Byzantine up to its tolerance (see
:mod:`fedaudit.defenses.base`: f, or ⌈n/2⌉ − 1 for rules without f and rules built with f = 0)
and is stateless: the same input gives the same output on every call.

Numerics shared by the distance-based rules (Krum, Multi-Krum, MDA, Bulyan and the NNM
pre-aggregator): squared distances come from one Gram matrix,
‖x_i − x_j‖² = G_ii + G_jj − 2 G_ij, accumulated in float64 (also for float32 input) over column
chunks of rows centred by their mean; no (n, n, d) intermediate is ever formed. When the
centred norms dwarf the nearest-neighbour distances (an outlier drags the mean away, so the
subtraction would cancel), the Gram matrix is recomputed once, centred on the most central row.

Extreme magnitudes. Squared distances of finite rows can exceed float64's range (a row of
1e308, one coordinate of 1e306, float32 max next to unit rows) or underflow (subnormal data).
When the direct pass overflows or its largest diagonal entry leaves [2^-900, 2^900], the Gram
matrix is rebuilt by :class:`_Geometry` around the coordinate-wise median: every row is
expressed in units of a robust reference length (the median deviation) with exact powers of
two, and rows beyond 2^400 reference lengths are drawn in radially to that radius. Distances
among rows within that radius stay exact, so a rule's decisions are exact whenever the honest
rows are within 2^400 median deviations of the median; any farther row is only ever seen as
"farther than every honest row". GM and CC combine rows in the same units (a far row then
exerts its unit Weiszfeld / clipped pull, as it does in exact arithmetic, instead of
overflowing). Column-wise means recompute a block on scaled values when its sum overflows.
Every result is finite. Sums over rows of float32 inputs are accumulated in float64; linear
combinations of rows use BLAS in the input dtype.

Coordinate-wise kernels (mean, trimmed mean, median, mean around the median) run on cache-sized
column blocks; inputs of at least 2^22 elements spread the blocks over up to
min(8, available cores) threads. Each column is computed by the same code whatever the split,
so results are bit-identical for any number of threads.

Notation: n inputs x_1 … x_n ∈ ℝ^d, at most f of them Byzantine.
"""

from __future__ import annotations

import math
import os
import threading
from functools import cmp_to_key
from itertools import chain, combinations
from typing import Any, Callable

import numpy as np

from fedaudit.defenses.base import Aggregator
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive, check_vector

__all__ = [
    "Mean",
    "CWTM",
    "CWMed",
    "GeometricMedian",
    "Krum",
    "MultiKrum",
    "MDA",
    "CenteredClipping",
    "Meamed",
    "Bulyan",
]

#: Elements per column block of the column-wise kernels (sorts, medians, sums).
_BLOCK = 1 << 17
#: Inputs with at least this many elements run the column-wise kernels on several threads.
_PARALLEL = 1 << 22
#: Upper bound on those threads (the available cores bound them as well).
_MAX_THREADS = 8
#: float64 elements per column chunk of the Gram pass (2 MiB: stays in cache, keeps BLAS efficient).
_CHUNK = 1 << 18
#: Recentre the Gram matrix when the median centred squared norm exceeds this many times the
#: median nearest-neighbour squared distance (relative cancellation error ≈ ratio · 1e-16).
_ILL_CONDITIONED = 1e6
#: Range of the largest diagonal entry of a direct Gram pass that is used as is (outside it the
#: overflow-free :class:`_Geometry` takes over).
_GRAM_LOW, _GRAM_HIGH = 2.0 ** -900, 2.0 ** 900
#: log2 of the radius (in reference lengths) beyond which _Geometry draws a row in radially.
_FAR_LOG2 = 400


# --------------------------------------------------------------------------------------------
# shared numerical kernels (also used by preaggregators.py)
# --------------------------------------------------------------------------------------------

def _max_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(_MAX_THREADS, cores))


def _run(tasks: list[Callable[[], Any]], parallel: bool) -> list[Any]:
    """Results of ``tasks`` in order; with ``parallel``, contiguous groups of tasks run on up
    to _max_threads() threads (numpy's sorts, ufuncs and BLAS calls release the GIL)."""
    threads = min(_max_threads(), len(tasks)) if parallel else 1
    if threads <= 1:
        return [t() for t in tasks]
    results: list[Any] = [None] * len(tasks)
    errors: list[BaseException] = []

    def work(idx: np.ndarray) -> None:
        try:
            for i in idx:
                results[i] = tasks[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)

    groups = np.array_split(np.arange(len(tasks)), threads)
    pool = [threading.Thread(target=work, args=(g,)) for g in groups[1:]]
    for t in pool:
        t.start()
    work(groups[0])
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return results


def _by_columns(X: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """(d,) float64 result of a column-wise kernel, evaluated block by block.

    ``fn`` maps an (n, w) column block (a view of X: copy before writing) to its (w,) result.
    Blocks of about _BLOCK elements keep a kernel's temporaries in cache; an odd block width
    keeps the rows of a copied block off 4 KiB-aliasing strides. Inputs of ≥ _PARALLEL elements
    are split over threads; every column is computed by the same code whatever the split, so
    the result does not depend on the number of threads. A block whose result overflowed (sums
    of values near the dtype's largest finite value) is recomputed on the block scaled by
    2^(−⌈log2 n⌉−1) and scaled back, exactly (powers of two; order statistics are unchanged).
    """
    n, d = X.shape
    width = max(1, _BLOCK // n) | 1
    out = np.empty(d)
    shrink = n.bit_length() + 1  # 2^shrink > 2n: sums of n scaled values cannot overflow

    def task(a: int) -> Callable[[], None]:
        def run() -> None:
            B = X[:, a:a + width]
            with np.errstate(over="ignore", invalid="ignore"):
                r = fn(B)
            if not np.isfinite(r).all():  # sums of values near the dtype's max overflowed
                r = np.ldexp(fn(np.ldexp(B, -shrink)), shrink)
            out[a:a + width] = r
        return run

    _run([task(a) for a in range(0, d, width)], X.size >= _PARALLEL)
    return out


def _sum_rows(X: np.ndarray) -> np.ndarray:
    """Σ_i x_i in float64, (d,)."""
    return np.add.reduce(X, axis=0, dtype=np.float64)


def _mean(X: np.ndarray) -> np.ndarray:
    """(1/n) Σ_i x_i accumulated in float64."""
    n = X.shape[0]
    return _by_columns(X, lambda B: np.add.reduce(B, axis=0, dtype=np.float64) / n)


def _lincomb(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    """Σ_i w_i x_i with BLAS in X's dtype (one pass over X)."""
    return np.asarray(w, dtype=X.dtype) @ X


def _cw_median(X: np.ndarray) -> np.ndarray:
    """Coordinate-wise median in float64 (mean of the two middle values for even n)."""
    return _by_columns(X, _cw_median_block)


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
    return 0.5 * lower + 0.5 * upper


def _fast_ok(G: np.ndarray) -> bool:
    """Whether a Gram matrix from the direct (unscaled) pass can be used: finite, and its
    largest diagonal entry in [2^-900, 2^900] (no overflow in the quadratic forms that follow,
    no underflow of the squares)."""
    if not np.isfinite(G).all():
        return False
    top = float(np.max(np.diag(G)))
    return _GRAM_LOW <= top <= _GRAM_HIGH


def _gram(X: np.ndarray, center: np.ndarray | None = None) -> np.ndarray:
    """float64 Gram matrix of x_i − c: c = row mean (None) or the given (d,) point.

    One pass over X in column chunks: each chunk is cast to float64, centred and multiplied
    (a syrk, multi-threaded by BLAS when n is large enough), so float32 inputs accumulate in
    float64 and memory stays bounded.
    """
    n, d = X.shape
    step = max(8, _CHUNK // n // 8 * 8)  # whole cache lines per row keep the syrk fast
    G = np.zeros((n, n))
    buf = np.empty((n, min(step, d)))
    inv_n = np.full(n, 1.0 / n)
    for j in range(0, d, step):
        xb = X[:, j:j + step]
        b = buf[:, :xb.shape[1]]
        np.copyto(b, xb)  # cast to float64
        b -= (inv_n @ b) if center is None else center[j:j + step]
        G += b @ b.T
    return G


class _Geometry:
    """Overflow-free geometry of the rows around a centre c (the slow path of the Gram kernels).

    Used when the direct pass overflows or underflows (a row of 1e308, one coordinate of 1e306,
    float32 max next to ordinary rows, subnormal data). With t_i = x_i/2 − c/2 (never
    overflows), the deviation δ_i = ‖x_i − c‖ is computed exactly as 2ν_i·2^(−P_i), where
    2^(P_i) normalises max_k |t_ik| into [1, 2) and ν_i = ‖2^(P_i) t_i‖. The reference length
    δ_ref is the upper median of the δ_i (the smallest positive one if that is 0; at least
    ``floor_log2``): a majority of rows lies within it, so it is at most the largest honest
    deviation whenever a majority is honest. Every row is then expressed in units of
    2^(−E) ≈ δ_ref: y_i = 2^E (x_i − c), and a row with ‖y_i‖ > R = 2^400 (δ_i > 2^400 δ_ref) is
    drawn in radially to ‖y_i‖ = R (its direction is kept; the row itself is never modified).
    G = Y Yᵀ then has entries ≤ R² (no overflow) and distances between rows within 2^400 δ_ref
    of c are exact to rounding down to 2^(−500) δ_ref (no underflow). Decisions of the
    distance-based rules are therefore exact whenever the honest rows lie within 2^400 δ_ref of
    c; a Byzantine row farther out is only ever compared as "farther than every honest row".
    All powers of two are applied with ``ldexp`` (exact barring underflow).
    """

    def __init__(self, X: np.ndarray, center: np.ndarray, floor_log2: float = -math.inf):
        n, d = X.shape
        self.X = X
        self.half_c = 0.5 * np.asarray(center, dtype=np.float64)
        self.step = max(1, _CHUNK // n)
        m = np.zeros(n)
        for j in range(0, d, self.step):
            np.maximum(m, np.abs(self._t(j)).max(axis=1), out=m)
        self.P = (1 - np.frexp(m)[1]).astype(np.int64)  # 2^P · max|t_i| ∈ [1, 2) (P = 1 for m = 0)
        nu2 = np.zeros(n)
        for j in range(0, d, self.step):
            u = np.ldexp(self._t(j), self.P[:, None])
            nu2 += np.einsum("ij,ij->i", u, u)
        self.nu = np.sqrt(nu2)
        with np.errstate(divide="ignore"):
            ldev = np.log2(self.nu) + 1.0 - self.P  # log2 ‖x_i − c‖ (−inf: the row is c)
        srt = np.sort(ldev)
        ref = float(srt[n // 2])
        if ref == -math.inf:
            pos = srt[np.isfinite(srt)]
            ref = float(pos[0]) if pos.size else 0.0
        ref = max(ref, floor_log2)
        self.E = -int(math.floor(ref))
        self.far = ldev + self.E > _FAR_LOG2
        # far rows: y_i = 2^P t_i · (R / ν_i), of norm R
        self.far_factor = np.where(self.far, 2.0 ** _FAR_LOG2 / np.where(self.nu > 0, self.nu, 1.0), 0.0)

    def _t(self, j: int) -> np.ndarray:
        return self.X[:, j:j + self.step].astype(np.float64) * 0.5 - self.half_c[j:j + self.step]

    def _y(self, j: int) -> np.ndarray:
        t = self._t(j)
        with np.errstate(over="ignore"):
            y = np.ldexp(t, self.E + 1)
        if self.far.any():
            rows = self.far
            y[rows] = np.ldexp(t[rows], self.P[rows][:, None]) * self.far_factor[rows][:, None]
        return y

    def gram(self) -> np.ndarray:
        n, d = self.X.shape
        G = np.zeros((n, n))
        for j in range(0, d, self.step):
            y = self._y(j)
            G += y @ y.T
        return G

    def scaled(self, length: float) -> float:
        """A length in the units of :meth:`gram` (capped at 2^1000)."""
        return float(min(np.ldexp(length, self.E), 2.0 ** 1000))

    def combine(self, beta: np.ndarray) -> np.ndarray:
        """c + Σ_i β_i ỹ_i in the input units (ỹ_i = x_i − c, drawn in for far rows), float64;
        computed as 2·(c/2 + 2^(−E−1) Σ β_i y_i), so no intermediate overflows."""
        d = self.X.shape[1]
        out = np.empty(d)
        for j in range(0, d, self.step):
            acc = np.ldexp(beta @ self._y(j), -self.E - 1)
            with np.errstate(over="ignore"):
                out[j:j + self.step] = np.ldexp(self.half_c[j:j + self.step] + acc, 1)
        big = np.finfo(np.float64).max
        return np.clip(out, -big, big)


def _row_norms(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row norms as (ν, P) with ‖x_i‖ = ν_i · 2^(−P_i), exact to rounding for every finite row.

    One direct pass (squares summed in float64 over column chunks, P = 0); rows whose squared
    norm overflowed or fell below 2^-960 are recomputed after normalising their largest entry
    into [1, 2) by a power of two (so huge and subnormal rows get their true norm)."""
    n, d = X.shape
    step = max(1, _CHUNK // n)
    sqn = np.zeros(n)
    buf = np.empty((n, min(step, d)))
    with np.errstate(over="ignore", under="ignore"):
        for j in range(0, d, step):
            xb = X[:, j:j + step]
            b = buf[:, :xb.shape[1]]
            np.copyto(b, xb)
            sqn += np.einsum("ij,ij->i", b, b)
    nu = np.sqrt(sqn)
    P = np.zeros(n, dtype=np.int64)
    bad = np.flatnonzero(~np.isfinite(sqn) | (sqn < _GRAM_LOW))
    rows_per = max(1, _CHUNK // d)
    for a in range(0, bad.size, rows_per):
        rows = bad[a:a + rows_per]
        B = X[rows].astype(np.float64)
        p = (1 - np.frexp(np.abs(B).max(axis=1))[1]).astype(np.int64)
        U = np.ldexp(B, p[:, None])
        nu[rows], P[rows] = np.sqrt(np.einsum("ij,ij->i", U, U)), p
    return nu, P


def _sqdist_from_gram(G: np.ndarray) -> np.ndarray:
    g = np.diag(G)
    D = g[:, None] + g[None, :] - 2.0 * G
    D = 0.5 * (D + D.T)  # exactly symmetric, so tied scores stay tied
    np.maximum(D, 0.0, out=D)
    np.fill_diagonal(D, 0.0)
    return D


def _ill_conditioned(G: np.ndarray, D: np.ndarray) -> int | None:
    """Index of a central row to recentre on when cancellation threatens D, else None.

    The relative error of D_ij is ≈ 1e-16 · G_ii / D_ij; when the median centred squared norm
    exceeds _ILL_CONDITIONED times the median nearest-neighbour squared distance, return the
    row with the smallest median distance (a row in the densest region)."""
    n = D.shape[0]
    off = D + np.diag(np.full(n, np.inf))
    if np.median(np.diag(G)) > _ILL_CONDITIONED * np.median(off.min(axis=1)):
        return int(np.argmin(np.median(off, axis=1)))
    return None


def _tiny_pairs_are_duplicates(X: np.ndarray, D: np.ndarray) -> bool:
    """Whether every pair i ≠ j with D_ij < 2^-900 holds identical rows (so D_ij = 0 is exact
    and not an underflow). Each row is compared with one representative: O(n·d) at most."""
    n = D.shape[0]
    i_idx, j_idx = np.nonzero(np.triu(D < _GRAM_LOW, 1))
    if i_idx.size == 0:
        return True
    rep = np.arange(n)
    for j in np.unique(j_idx):
        r = rep[int(i_idx[j_idx == j].min())]
        if not np.array_equal(X[j], X[r]):
            return False
        rep[j] = r
    return bool(np.all(rep[i_idx] == rep[j_idx]))


def _tiny_rows_are_center(X: np.ndarray, G: np.ndarray, center: np.ndarray) -> bool:
    """Whether every row whose squared deviation G_ii is below 2^-900 equals the centre."""
    return all(np.array_equal(X[i], center) for i in np.flatnonzero(np.diag(G) < _GRAM_LOW))


def _pairwise_sqdist(X: np.ndarray) -> np.ndarray:
    """(n, n) squared Euclidean distances, float64, via a centred Gram matrix.

    Direct pass (rows centred by their mean; recentred once on the most central row when
    cancellation threatens). When that pass overflows or underflows (its largest diagonal
    entry outside [2^-900, 2^900], or a squared distance below 2^-900 between rows that are not
    identical), the overflow-free
    :class:`_Geometry` around the coordinate-wise median is used instead: the result is then in
    units of 2^(−2E) with rows beyond 2^400 reference lengths drawn in radially, which never
    changes a comparison among rows within that radius (callers only compare distances).
    """
    n = X.shape[0]
    if n == 1:
        return np.zeros((1, 1))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = _gram(X)
        if _fast_ok(G):
            D = _sqdist_from_gram(G)
            c = _ill_conditioned(G, D)
            if c is not None:
                G = _gram(X, center=X[c].astype(np.float64))
                D = _sqdist_from_gram(G) if _fast_ok(G) else None
            # a squared distance below 2^-900 is exact only between identical rows; otherwise it
            # may have underflowed (rows closer than ~1e-135 next to ordinary ones)
            if D is not None and _tiny_pairs_are_duplicates(X, D):
                return D
    geo = _Geometry(X, _cw_median(X))
    G = geo.gram()
    D = _sqdist_from_gram(G)
    c = _ill_conditioned(G, D)
    if c is not None:
        D = _sqdist_from_gram(_Geometry(X, X[c].astype(np.float64)).gram())
    return D


def _centered_gram(X: np.ndarray, z0: np.ndarray,
                   floor_log2: float = -math.inf) -> tuple[np.ndarray, "_Geometry | None"]:
    """Gram matrix of the rows centred at z0 and, when the direct pass over- or underflowed,
    the :class:`_Geometry` it came from (its units are 2^(−E); None: input units)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = _gram(X, center=z0)
    if _fast_ok(G) and _tiny_rows_are_center(X, G, z0):
        return G, None
    geo = _Geometry(X, z0, floor_log2)
    return geo.gram(), geo


def _krum_scores(D: np.ndarray, f: int) -> np.ndarray:
    """score_i = Σ of the n − f − 2 smallest D_ij over j ≠ i (at least 0 neighbours)."""
    n = D.shape[0]
    k = max(0, n - f - 2)
    if k == 0:
        return np.zeros(n)
    off = D + np.diag(np.full(n, np.inf))
    return np.partition(off, k - 1, axis=1)[:, :k].sum(axis=1)


def _krum_order(D: np.ndarray, f: int, X: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Positions 0 … m−1 of D (rows ``rows`` of X, default all) by increasing Krum score, ties
    broken without looking at the row order.

    Ties are structural (mutual nearest neighbours have equal scores when n − f − 2 = 1): they
    go to the smaller total Σ_j D_ij; rows still tied (symmetric configurations) are ordered
    lexicographically by value, and identical rows by index (which one is chosen then does not
    change the result).
    """
    score, total = _krum_scores(D, f), D.sum(axis=1)
    order = np.lexsort((total, score))
    s, t = score[order], total[order]
    tied = (s[1:] == s[:-1]) & (t[1:] == t[:-1])
    if not tied.any():
        return order
    group = np.concatenate([[0], np.cumsum(~tied)])
    for g in np.unique(group[1:][tied]):  # only exactly tied groups, usually none
        pos = np.flatnonzero(group == g)
        ids = np.arange(D.shape[0]) if rows is None else rows
        order[pos] = sorted(order[pos], key=cmp_to_key(lambda a, b: _lex_cmp(X[ids[a]], X[ids[b]])))
    return order


def _lex_cmp(a: np.ndarray, b: np.ndarray) -> int:
    diff = np.flatnonzero(a != b)
    if diff.size == 0:
        return 0
    j = diff[0]
    return -1 if a[j] < b[j] else 1


def _mean_closest_to_median(S: np.ndarray, k: int) -> np.ndarray:
    """Per column of the column-sorted S (m, d): mean of the k values closest to the median.

    In sorted order the k values closest to a point form a window S_s … S_{s+k−1}. Sliding
    the window from s to s + 1 trades S_s for S_{s+k}, which is closer to the median μ iff
    P_s: S_s + S_{s+k} < 2μ; P_s is monotone in s, so the best start is s* = Σ_s P_s (ties
    keep the lower window). When k > m − k, rows m − k … k − 1 are in every window and the
    window sum is Σ_{always} + Σ_{s<m−k} (P_s ? S_{s+k} : S_s). Sums are float64 additions of
    selected values only (no differences of prefix sums, so Byzantine magnitudes cannot cancel
    honest digits).
    """
    m = S.shape[0]
    g = m - k
    if g == 0:
        return _sum_rows(S) / m
    h = m // 2
    with np.errstate(over="ignore"):
        two_med = 2.0 * S[h].astype(np.float64) if m % 2 else S[h - 1].astype(np.float64) + S[h]
        P = S[:g].astype(np.float64) + S[k:k + g] < two_med  # (g, w): move the window right
    if k > g:
        chosen = np.where(P, S[k:], S[:g])
        return (_sum_rows(S[g:k]) + _sum_rows(chosen)) / k
    start = P.sum(axis=0)
    idx = np.arange(m)[:, None]
    sel = (idx >= start) & (idx < start + k)
    return _sum_rows(np.where(sel, S, 0)) / k


# --------------------------------------------------------------------------------------------
# aggregators
# --------------------------------------------------------------------------------------------

class Mean(Aggregator):
    """Arithmetic mean (1/n) Σ_i x_i — not robust (one Byzantine row moves it arbitrarily).

    ``f`` only sets how many non-finite rows may be dropped (and what a composition passes on).
    """

    name = "mean"
    needs_f = False

    def __init__(self, f: int = 0):
        super().__init__(f)

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return _mean(X)


class CWTM(Aggregator):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018).

    Per coordinate k: sort x_1[k] ≤ … ≤ x_n[k], drop the f smallest and the f largest, return
    the mean of the n − 2f in the middle. (f, κ)-robust with κ = (6f/(n−2f))(1 + f/(n−2f))
    (Allouah et al., AISTATS 2023). Needs n > 2f.

    Implementation: per cache-sized column block, one ``np.sort`` along axis 0 and a float64 sum
    of the middle rows. Measured on numpy 2.x (SIMD sorts), a single-kth ``np.partition`` of a
    column costs as much as its full sort (the per-column gather dominates) and a two-kth
    partition is ~5× slower, so one sort is the cheapest way to both tails.
    """

    name = "cwtm"

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        if f == 0:
            return _mean(X)
        return _by_columns(X, lambda B: _sum_rows(np.sort(B, axis=0)[f:n - f]) / (n - 2 * f))


class CWMed(Aggregator):
    """Coordinate-wise median (Yin et al., ICML 2018); the mean of the two middle values when
    n is even. (f, κ)-robust with κ = 4(1 + f/(n−2f))² (Allouah et al. 2023).

    ``f`` only sets how many non-finite rows may be dropped. Implementation: per column block,
    one single-kth ``np.partition`` along axis 0 (+ a max over the lower half for even n).
    """

    name = "cwmed"
    needs_f = False

    def __init__(self, f: int = 0):
        super().__init__(f)

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return _cw_median(X)


class GeometricMedian(Aggregator):
    """Geometric median argmin_z Σ_i ‖x_i − z‖ by the Weiszfeld iteration.

    z_{t+1} = Σ_i w_i x_i / Σ_i w_i, w_i = 1/‖x_i − z_t‖ (Weiszfeld 1937), started from the
    coordinate-wise median and run until ‖z_{t+1} − z_t‖ ≤ tol · r or ``max_iter`` iterations;
    r is the median distance of the rows to the start point (a relative tolerance that is
    invariant to translation and scale and that Byzantine magnitudes cannot inflate). Rows
    within ν of the iterate (smoothing as in Pillutla, Kakade & Harchaoui, IEEE TSP 2022) count
    as coinciding with it and get the Vardi–Zhang (PNAS 2000) step z ← (1 − γ)T̃ + γz,
    γ = min(1, η/‖R̃‖) (η coinciding rows, T̃ the Weiszfeld map and R̃ = Σ w_i (x_i − z) over
    the others), so an iterate sitting on an input row moves on unless that row is optimal.
    Since Weiszfeld only creeps towards a minimiser located at an input row, every row is first
    tested for optimality (Vardi–Zhang: ‖R̃(x_k)‖ ≤ η_k) and returned exactly when it passes
    (several passing rows — collinear data — give their centroid). (f, κ)-robust with
    κ = 4(1 + f/(n−2f))² (Allouah et al. 2023). ``f`` only sets how many non-finite rows may be
    dropped.

    Cost: iterates are affine combinations of the start point z0 and the rows, so the
    iteration runs on the (n, n) float64 Gram matrix of the rows centred at z0: the median
    (one partition), one chunked pass for the Gram matrix and one for the final combination —
    a constant number of passes over the data whatever the number of iterations (each costs
    O(n²)). Gram-based distances carry an absolute error ≈ 1e-8 · ‖x_i − z0‖, so ν is raised
    to 1e-7 · √(‖x_i − z0‖² + ‖z − z0‖²) per row where it is smaller.
    """

    name = "gm"
    needs_f = False

    def __init__(self, tol: float = 1e-8, max_iter: int = 1000, nu: float = 1e-12, f: int = 0):
        super().__init__(f)
        self.tol = check_positive("tol", tol)
        self.max_iter = check_int("max_iter", max_iter, low=1)
        self.nu = check_positive("nu", nu)

    def params(self) -> dict[str, Any]:
        return {"tol": self.tol, "max_iter": self.max_iter, "nu": self.nu, "f": self.f}

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        z0 = _cw_median(X)
        if n <= 2:  # every point of the segment is a minimiser; the midpoint = the median
            return z0
        # far rows are drawn in at 2^400 reference lengths, the reference at least 2^-300·ν, so
        # they never count as coinciding with the iterate
        G, geo = _centered_gram(X, z0, math.log2(self.nu) - 300)
        nu = self.nu if geo is None else geo.scaled(self.nu)
        beta, _ = _weiszfeld(G, self.tol, self.max_iter, nu)
        return _affine_point(beta, X, z0) if geo is None else geo.combine(beta)


def _affine_point(beta: np.ndarray, X: np.ndarray, z0: np.ndarray) -> np.ndarray:
    """z0 + Σ_i β_i (x_i − z0) in float64 (one BLAS pass over X)."""
    return (1.0 - beta.sum()) * z0 + _lincomb(beta, X).astype(np.float64)


def _dist_to(G: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, float]:
    """Distances from the rows to z = z0 + Σ β_j (x_j − z0), and ‖z − z0‖², from the Gram."""
    Gb = G @ beta
    bGb = float(beta @ Gb)
    return np.sqrt(np.maximum(np.diag(G) - 2.0 * Gb + bGb, 0.0)), bGb


def _weiszfeld(G: np.ndarray, tol: float, max_iter: int, nu: float) -> tuple[np.ndarray, int]:
    """Weiszfeld / Vardi–Zhang iteration on the coefficients β of z = z0 + Σ β_i (x_i − z0).

    Returns β and the number of iterations run (0 when an input row is optimal)."""
    n = G.shape[0]
    g = np.diag(G)
    r = float(np.median(np.sqrt(g)))  # robust scale: median distance of the rows to z0
    if r == 0.0:  # more than half of the rows sit on z0 (a point of multiplicity > n/2 is the GM)
        r = float(np.sqrt(g.max()))
        if r == 0.0:
            return np.zeros(n), 0
    vertices = _optimal_vertices(G, nu)
    if vertices.size:
        beta = np.zeros(n)
        beta[vertices] = 1.0 / vertices.size
        return beta, 0
    thr = (tol * r) ** 2
    beta = np.zeros(n)
    it = 0
    for it in range(1, max_iter + 1):
        dist, bGb = _dist_to(G, beta)
        # Gram-based distances carry an absolute error ≈ 1e-8·√(G_ii + ‖z − z0‖²)
        coincide = dist <= np.maximum(nu, 1e-7 * np.sqrt(g + bGb))
        w = np.where(coincide, 0.0, 1.0 / np.where(coincide, 1.0, dist))
        W = float(w.sum())
        if W == 0.0:  # every row coincides with the iterate
            break
        new = w / W
        eta = int(np.count_nonzero(coincide))
        if eta:
            diff = new - beta
            R = W * math.sqrt(max(float(diff @ G @ diff), 0.0))
            if R <= eta:  # the coinciding input row is the minimiser: land on it exactly
                new = np.zeros(n)
                new[int(np.argmax(coincide))] = 1.0
            else:
                gamma = eta / R
                new = (1.0 - gamma) * new + gamma * beta
        step = new - beta
        beta = new
        if float(step @ G @ step) <= thr:
            break
    return beta, it


def _optimal_vertices(G: np.ndarray, nu: float) -> np.ndarray:
    """Input rows that minimise Σ_i ‖x_i − z‖ (Vardi & Zhang 2000, Theorem 1).

    x_k is a minimiser iff ‖Σ_{i: x_i ≠ x_k} (x_i − x_k)/‖x_i − x_k‖‖ ≤ η_k, η_k the number of
    rows equal to x_k. Weiszfeld only creeps towards such a vertex, so it is tested for all rows
    at once on the Gram matrix (O(n³), no pass over the data). Several distinct minimising rows
    only occur for collinear data (the minimisers then form a segment); the caller returns their
    centroid, which is a minimiser and does not depend on the row order (the median in 1-D).
    """
    n = G.shape[0]
    dist = np.sqrt(_sqdist_from_gram(G))
    same = dist <= np.maximum(nu, 1e-7 * np.sqrt(np.diag(G)))[:, None]
    np.fill_diagonal(same, True)
    U = np.where(same, 0.0, 1.0 / np.where(same, 1.0, dist))  # U_ki = 1/‖x_i − x_k‖
    M = U - np.diag(U.sum(axis=1))  # row k: coefficients of R̃(x_k) = Σ_i U_ki (x_i − x_k)
    R = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", M, G, M, optimize=True), 0.0))
    return np.flatnonzero(R <= same.sum(axis=1) * (1.0 + 1e-9))


class Krum(Aggregator):
    """Krum (Blanchard et al., NeurIPS 2017).

    score_i = Σ_{j ∈ N_i} ‖x_i − x_j‖², N_i the n − f − 2 nearest neighbours of x_i (j ≠ i);
    returns x_{i*} with i* = argmin_i score_i. Ties (structural when n − f − 2 = 1: mutual
    nearest neighbours) go to the smaller Σ_j ‖x_i − x_j‖², then to the lexicographically
    smaller row, so the rule is invariant to the order of the rows. Needs n ≥ 2f + 3.
    (f, κ)-robust with κ = 6(1 + f/(n−2f)) (Allouah et al. 2023).
    """

    name = "krum"

    def min_n(self, f: int) -> int:
        return 2 * f + 3

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return X[int(_krum_order(_pairwise_sqdist(X), f, X)[0])].copy()


class MultiKrum(Aggregator):
    """Multi-Krum (Blanchard et al., NeurIPS 2017), non-iterative variant.

    Scores every row once as in :class:`Krum` and returns the mean of the m rows with the lowest
    scores (ties as in :class:`Krum`); m defaults to n − f (the common choice, e.g. Allouah et al.
    2023), must satisfy 1 ≤ m ≤ n − f. (The iterative variant, which re-scores after each
    selection, is what :class:`Bulyan` uses.) Needs n ≥ 2f + 3.
    """

    name = "multikrum"

    def __init__(self, f: int = 0, m: int | None = None):
        super().__init__(f)
        self.m = None if m is None else check_int("m", m, low=1)

    def min_n(self, f: int) -> int:
        return max(2 * f + 3, (self.m or 0) + f)

    def _check_n(self, n: int) -> None:
        if self.m is not None and self.m > n - self.f:
            raise FedAuditError(f"{self.name} averages m <= n - f rows: got m={self.m} with n={n}, f={self.f}")
        super()._check_n(n)

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "m": self.m}

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        m = n - f if self.m is None else min(self.m, n - f)
        chosen = _krum_order(_pairwise_sqdist(X), f, X)[:m]
        w = np.zeros(n)
        w[chosen] = 1.0 / m
        return _lincomb(w, X)


class MDA(Aggregator):
    """Minimum-diameter averaging (El-Mhamdi et al., "Genuinely distributed Byzantine machine
    learning", PODC 2020).

    Returns the mean of a subset S* ⊆ [n], |S*| = n − f, of minimum diameter
    max_{i,j∈S} ‖x_i − x_j‖. Ties are common (removing different rows can leave the same
    farthest pair) and are broken by the smaller Σ_{i,j∈S} ‖x_i − x_j‖², which keeps the rule
    invariant to the order of the rows (then by lexicographic order of the removed rows).
    Exact search: all C(n, f) subsets are evaluated, vectorised over the (n, n) distance matrix
    (O(n²) per subset, no d-dimensional work). When C(n, f) > ``max_subsets`` the rule raises
    :class:`FedAuditError` rather than silently switching to an approximation, since an audit
    must know which rule it measures; pass a larger ``max_subsets`` (None: no limit) to accept
    the cost. Needs n > 2f.
    """

    name = "mda"

    def __init__(self, f: int = 0, max_subsets: int | None = 20000):
        super().__init__(f)
        self.max_subsets = None if max_subsets is None else check_int("max_subsets", max_subsets, low=1)

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "max_subsets": self.max_subsets}

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        if f == 0:
            return _mean(X)
        count = math.comb(n, f)
        if self.max_subsets is not None and count > self.max_subsets:
            raise FedAuditError(
                f"{self.name}: exact minimum-diameter search over C(n={n}, f={f}) = {count:,} subsets exceeds "
                f"max_subsets={self.max_subsets:,}; pass a larger max_subsets (cost grows as C(n, f)·n²) "
                "or use a polynomial-time rule such as nnm+cwtm")
        removed = _removal_sets(n, f)
        D = _pairwise_sqdist(X)
        best, best_key = 0, (np.inf, np.inf)
        chunk = max(1, (1 << 21) // (n * n))
        for a in range(0, removed.shape[0], chunk):
            rem = removed[a:a + chunk]
            keep = np.ones((rem.shape[0], n), dtype=bool)
            keep[np.arange(rem.shape[0])[:, None], rem] = False
            diam = np.where(keep[:, :, None] & keep[:, None, :], D, -1.0).max(axis=(1, 2))
            K = keep.astype(np.float64)
            spread = np.einsum("bj,bj->b", K @ D, K)
            i = int(np.lexsort((spread, diam))[0])
            if (diam[i], spread[i]) < best_key:
                best, best_key = a + i, (float(diam[i]), float(spread[i]))
        w = np.full(n, 1.0 / (n - f))
        w[removed[best]] = 0.0
        return _lincomb(w, X)


def _removal_sets(n: int, f: int) -> np.ndarray:
    """All f-subsets of range(n) in lexicographic order, as a (C(n, f), f) int array."""
    count = math.comb(n, f)
    flat = np.fromiter(chain.from_iterable(combinations(range(n), f)), dtype=np.intp, count=count * f)
    return flat.reshape(count, f)


class CenteredClipping(Aggregator):
    """Centered clipping (Karimireddy, He & Jaggi, ICML 2021), stateless form.

    v_0 = ``center`` or, by default (``center=None``), the coordinate-wise median of the inputs;
    then ``iters`` times  v ← v + (1/n) Σ_i clip_τ(x_i − v),  clip_τ(u) = u · min(1, τ/‖u‖).
    The paper centres at the previous round's aggregate (a momentum buffer); keeping that state
    belongs to the training loop, so this rule never stores anything between calls — pass the
    previous aggregate as ``center`` to reproduce the paper. ``f`` only sets how many non-finite
    rows may be dropped. Iterates are affine combinations of v_0 and the rows, so the iteration
    runs on the Gram matrix of the rows centred at v_0: the median (when ``center`` is None),
    one Gram pass and one final combination, whatever ``iters``.
    """

    name = "cc"
    needs_f = False

    def __init__(self, tau: float = 10.0, iters: int = 3, center: Any = None, f: int = 0):
        super().__init__(f)
        self.tau = check_positive("tau", tau)
        self.iters = check_int("iters", iters, low=1)
        self.center = None if center is None else check_vector("center", center)

    def params(self) -> dict[str, Any]:
        c = None if self.center is None else f"<vector d={self.center.shape[0]}>"
        return {"tau": self.tau, "iters": self.iters, "center": c, "f": self.f}

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n, d = X.shape
        if self.center is None:
            v0 = _cw_median(X)
        else:
            if self.center.shape[0] != d:
                raise FedAuditError(f"{self.name}: center has length {self.center.shape[0]}, inputs have d={d}")
            v0 = self.center
        # far rows are drawn in at 2^400 reference lengths, with the reference at least
        # 2^-300·iters·τ, so they stay ≫ every clipping radius the iteration can see
        G, geo = _centered_gram(X, v0, math.log2(self.iters * self.tau) - 300)
        tau = self.tau if geo is None else geo.scaled(self.tau)
        beta = np.zeros(n)
        for _ in range(self.iters):
            dist, _ = _dist_to(G, beta)
            far = dist > tau
            w = np.where(far, tau / np.where(far, dist, 1.0), 1.0)  # min(1, τ/‖·‖) without 0-division
            beta = beta * (1.0 - w.sum() / n) + w / n
        return _affine_point(beta, X, v0) if geo is None else geo.combine(beta)


class Meamed(Aggregator):
    """Mean around the median (Xie, Koyejo & Gupta, "Generalized Byzantine-tolerant SGD", 2018).

    Per coordinate k: the mean of the n − f values x_i[k] closest to the coordinate-wise median
    (ties keep the lower values). Needs n > 2f. Implementation: per column block, one sort
    along axis 0, then the best window of n − f consecutive order statistics.
    """

    name = "meamed"

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        if f == 0:
            return _mean(X)
        return _by_columns(X, lambda B: _mean_closest_to_median(np.sort(B, axis=0), n - f))


class Bulyan(Aggregator):
    """Bulyan over Krum (El Mhamdi, Guerraoui & Rouault, ICML 2018).

    1. Selection: θ = n − 2f rounds; each round applies Krum (same f, scores over the rows not
       yet selected, n_t − f − 2 neighbours, at least 0) and moves the chosen row to the
       selection set.
    2. Per coordinate, the mean of the β = θ − 2f selected values closest to their median.
    Needs n ≥ 4f + 3.
    """

    name = "bulyan"

    def min_n(self, f: int) -> int:
        return 4 * f + 3

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        theta = n - 2 * f
        D = _pairwise_sqdist(X)
        remaining = np.arange(n)
        chosen = []
        for _ in range(theta):
            sub = D[np.ix_(remaining, remaining)]
            i = int(_krum_order(sub, f, X, remaining)[0])
            chosen.append(remaining[i])
            remaining = np.delete(remaining, i)
        rows = np.sort(np.asarray(chosen))
        return _by_columns(X, lambda B: _mean_closest_to_median(np.sort(B[rows], axis=0), theta - 2 * f))
