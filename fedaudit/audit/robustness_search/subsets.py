"""The exact subset ratio: ν(x) = max over S of ‖F(x) − x̄_S‖² / var_S by enumerating the subset
indicators (difference forms, full relative precision), a swap local search past the exhaustive
limit, and the working-set scorer of the optimiser's inner loop."""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from fedaudit.audit.robustness_search.budget import EXHAUSTIVE_LIMIT, WORKING_LIMIT
from fedaudit.errors import FedAuditError

__all__ = [
    "subset_masks", "subset_ratios", "exact_ratio", "robustness_ratio", "best_subset_ratio", "SubsetScorer",
]


# --------------------------------------------------------------------------- exact subset max
def _indicators(rows: np.ndarray, n: int, m: int) -> np.ndarray:
    """(C(len(rows), m), n) float 0/1 indicators of every m-subset of ``rows``."""
    combos = np.array(list(itertools.combinations(rows, m)), dtype=np.int64).reshape(-1, m)
    M = np.zeros((combos.shape[0], n))
    np.put_along_axis(M, combos, 1.0, axis=1)
    return M


@lru_cache(maxsize=8)
def subset_masks(n: int, f: int) -> np.ndarray:
    """(C(n, f), n) indicators of every S with |S| = n − f (read-only, cached)."""
    M = _indicators(np.arange(n), n, n - f)
    M.setflags(write=False)
    return M


def subset_ratios(M: np.ndarray, X: np.ndarray, z: np.ndarray, offset: float = 0.0) -> np.ndarray:
    """err_S / var_S for every indicator row of M (s, n), X (n, d) and z (d,) finite.

    Computed from differences only, so no cancellation between large centred terms:
    var_S = 1_Sᵀ D 1_S / (2m²) with D_ij = ‖x_i − x_j‖², and err_S = 1_Sᵀ E 1_S / m² with
    E_ij = ⟨x_i − z, x_j − z⟩ (its rounding error is relative to Σ_S ‖x_i − z‖² ≤ 2m(var_S + err_S),
    so the ratio keeps full relative precision even for a tight S far from the other rows).
    ``offset`` is added to every error (the squared distance of F(x) from the subspace when x
    and F(x) are given in the coordinates of an orthonormal frame). Inputs are halved and, if
    their differences would overflow or underflow a square, scaled by a power of two (ν is
    invariant under a common scaling). A zero-variance S with a positive error gives inf.
    """
    Xh, zh = 0.5 * X, 0.5 * z  # halves: differences of entries up to the float64 maximum stay finite
    # not kernels.pairwise_sqdist: the differences are rescaled by a power of two before they are
    # squared (so no square overflows or underflows), and R shares that scale; the kernel's
    # result is only comparison-exact in its own units (see its docstring), ν needs the values
    Dx = Xh[:, None, :] - Xh[None, :, :]
    R = Xh - zh
    scale = max(float(np.max(np.abs(Dx), initial=0.0)), float(np.max(np.abs(R), initial=0.0)))
    offset = 0.25 * offset
    if scale == 0.0:
        return np.full(M.shape[0], np.inf if offset > 0 else 0.0)
    if scale > 1e150 or scale < 1e-150:
        p2 = 2.0 ** -math.frexp(scale)[1]
        Dx, R, offset = Dx * p2, R * p2, offset * p2 * p2
    D = np.einsum("ijk,ijk->ij", Dx, Dx)
    E = R @ R.T
    m = float(M[0].sum()) if M.shape[0] else 1.0
    var = np.einsum("sn,sn->s", M @ D, M) / (2.0 * m * m)
    err = np.maximum(np.einsum("sn,sn->s", M @ E, M) / (m * m), 0.0) + offset
    big = max(float(D.max()), float(np.diag(E).max()), offset, 1e-300)
    ok = var > 1e-24 * big
    return np.where(ok, err / np.where(ok, var, 1.0), np.where(err > 1e-18 * big, np.inf, 0.0))


def exact_ratio(X: np.ndarray, z: np.ndarray, f: int, allowed: np.ndarray | None = None
                ) -> tuple[float, np.ndarray] | None:
    """(ν, S) by exhaustive enumeration of S ⊆ allowed rows, or None if C(|allowed|, f′) > limit.

    Rows whose deviation from the coordinate-wise median exceeds 10^100 times the median
    deviation (e.g. 1e308 next to O(1) rows) would lose every other row's precision in one
    frame, so subsets avoiding them are scored in the frame of the remaining rows and subsets
    touching them in the global frame; the max of both is exact.
    """
    n = X.shape[0]
    m = n - f
    allowed = np.isfinite(X).all(axis=1) if allowed is None else allowed
    k = int(allowed.sum())
    if k < m or math.comb(k, m) > EXHAUSTIVE_LIMIT:
        return None
    M = subset_masks(n, f) if k == n else _indicators(np.flatnonzero(allowed), n, m)
    Xa = X if k == n else np.where(allowed[:, None], X, 0.0)
    r = subset_ratios(M, Xa, z)
    if float(np.max(np.abs(Xa))) <= 1e100:
        i = int(np.argmax(r))
        return float(r[i]), np.flatnonzero(M[i])
    med = np.median(Xa[allowed], axis=0)
    dev = np.max(np.abs(0.5 * Xa - 0.5 * med), axis=1)
    ref = float(np.median(dev[allowed]))
    huge = allowed & (dev > 1e100 * max(ref, 1e-300))
    if huge.any() and k - int(huge.sum()) >= m:
        normal = ~(M[:, huge] > 0).any(axis=1)
        keep = allowed & ~huge
        r_norm = subset_ratios(M[normal], np.where(keep[:, None], Xa, 0.0), z)
        r = np.where(normal, -np.inf, r)
        r[normal] = r_norm
    i = int(np.argmax(r))
    return float(r[i]), np.flatnonzero(M[i])


# ------------------------------------------------------------------------- ratio over S
def robustness_ratio(X: np.ndarray, z: np.ndarray, f: int, *, honest: np.ndarray | None = None
                     ) -> tuple[float, np.ndarray, str]:
    """max over S (|S| = n − f, finite rows only) of ‖z − x̄_S‖² / var_S; returns (ν, S, method).

    Exhaustive (:func:`exact_ratio`, vectorised over the subset
    indicators) when C(#finite rows, n − f) ≤ 2·10^4, else a swap local search (a lower bound).
    """
    X = np.asarray(X, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    n = X.shape[0]
    m = n - f
    allowed = np.isfinite(X).all(axis=1)
    if allowed.sum() < m:
        raise FedAuditError(f"fewer than n − f = {m} finite inputs: the ratio is undefined")
    if not np.isfinite(z).all():
        return math.inf, np.flatnonzero(allowed)[:m], "non-finite output"
    exact = exact_ratio(X, z, f, allowed)
    if exact is not None:
        return exact[0], exact[1], "exhaustive"
    return _greedy(np.where(allowed[:, None], X, 0.0), z, n, m, allowed, honest)


def _greedy(X, z, n, m, allowed, honest) -> tuple[float, np.ndarray, str]:
    """Swap local search over S from the honest set and the m rows closest to/farthest from z."""
    dist = np.where(allowed, np.sum((0.5 * X - 0.5 * z) ** 2, axis=1), np.inf)
    starts = [np.argsort(dist)[:m], np.argsort(-np.where(allowed, dist, -np.inf))[:m]]
    if honest is not None and len(honest) == m:
        starts.append(np.asarray(honest))
    best = (-1.0, None)
    for start in starts:
        mask = np.zeros(n)
        mask[start] = 1.0
        current = float(subset_ratios(mask[None, :], X, z)[0])
        for _ in range(200):
            inside, outside = np.flatnonzero(mask > 0), np.flatnonzero((mask == 0) & allowed)
            if len(outside) == 0:
                break
            cand = np.repeat(mask[None, :], len(inside) * len(outside), axis=0)
            ii = np.repeat(inside, len(outside))
            oo = np.tile(outside, len(inside))
            cand[np.arange(len(cand)), ii] = 0.0
            cand[np.arange(len(cand)), oo] = 1.0
            r = subset_ratios(cand, X, z)
            j = int(np.argmax(r))
            if r[j] <= current * (1 + 1e-12):
                break
            current, mask = float(r[j]), cand[j]
        if current > best[0]:
            best = (current, np.flatnonzero(mask))
    return best[0], best[1], "greedy swap search"


def best_subset_ratio(X: np.ndarray, z: np.ndarray, f: int) -> tuple[float, np.ndarray]:
    if np.isfinite(z).all():
        exact = exact_ratio(X, z, f)
        if exact is not None:
            return exact
    nu, S, _ = robustness_ratio(X, z, f)
    return nu, S


_WORKING_SIZE = 256


class SubsetScorer:
    """ν for the optimiser's inner loop.

    Exact (every S) when C(n, f) ≤ WORKING_LIMIT. Otherwise the max over a working set W of
    subsets — a lower bound on ν, so still a valid certificate — refreshed by :meth:`refresh`
    with the top subsets of a full evaluation (exhaustive or swap search) at the start and end of
    every local run; the reported value is always a full evaluation (``certify``).
    """

    def __init__(self, n: int, f: int):
        self.n, self.f = n, f
        total = math.comb(n, f)
        self.small, self.full = total <= WORKING_LIMIT, total <= EXHAUSTIVE_LIMIT
        self.W: np.ndarray | None = None

    def __call__(self, Y: np.ndarray, z: np.ndarray, offset: float) -> float:
        if self.small:
            return float(np.max(subset_ratios(subset_masks(self.n, self.f), Y, z, offset)))
        if self.W is None:
            self.refresh(Y, z, offset)
        return float(np.max(subset_ratios(self.W, Y, z, offset)))

    def refresh(self, Y: np.ndarray, z: np.ndarray, offset: float) -> None:
        if self.small:
            return
        if self.full:
            M = subset_masks(self.n, self.f)
            r = subset_ratios(M, Y, z, offset)
            top = M[np.argpartition(-r, _WORKING_SIZE)[:_WORKING_SIZE]]
        else:
            X = np.hstack([Y, np.full((self.n, 1), 0.0)])
            zz = np.append(z, math.sqrt(offset))
            _, S, _ = robustness_ratio(X, zz, self.f)
            top = np.zeros((1, self.n))
            top[0, S] = 1.0
        W = top if self.W is None else np.vstack([top, self.W])
        self.W = np.unique(W, axis=0)[: 4 * _WORKING_SIZE]
