"""Squared distances between rows from one Gram matrix, ‖x_i − x_j‖² = G_ii + G_jj − 2 G_ij, with
the recentring rule for ill-conditioned inputs and the :class:`~fedaudit.kernels.geometry.Geometry`
fallback for extreme magnitudes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.arrays import is_torch
from fedaudit.kernels.columns import to_float64
from fedaudit.kernels.geometry import GRAM_LOW, Geometry, direct_gram_ok, gram
from fedaudit.kernels.order import cw_median

__all__ = ["sqdist_from_gram", "pairwise_sqdist", "centered_gram"]

#: Recentre the Gram matrix when the median centred squared norm exceeds this many times the
#: median nearest-neighbour squared distance (relative cancellation error ≈ ratio · 1e-16).
_ILL_CONDITIONED = 1e6


def sqdist_from_gram(G: np.ndarray) -> np.ndarray:
    """D_ij = G_ii + G_jj − 2 G_ij, made exactly symmetric, clipped at 0, zero diagonal."""
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
    i_idx, j_idx = np.nonzero(np.triu(D < GRAM_LOW, 1))
    if i_idx.size == 0:
        return True
    rep = np.arange(n)
    for j in np.unique(j_idx):
        r = rep[int(i_idx[j_idx == j].min())]
        if not _rows_equal(X[j], X[r]):
            return False
        rep[j] = r
    return bool(np.all(rep[i_idx] == rep[j_idx]))


def _tiny_rows_are_center(X: np.ndarray, G: np.ndarray, center: np.ndarray) -> bool:
    """Whether every row whose squared deviation G_ii is below 2^-900 equals the centre."""
    return all(_rows_equal(X[i], center) for i in np.flatnonzero(np.diag(G) < GRAM_LOW))


def _rows_equal(a: Any, b: Any) -> bool:
    """Whether two rows (numpy or torch, any floating dtypes) hold the same values."""
    if is_torch(a):
        return bool((a == b).all())
    return bool(np.array_equal(a, b))


def pairwise_sqdist(X: np.ndarray) -> np.ndarray:
    """(n, n) squared Euclidean distances, float64, via a centred Gram matrix.

    Direct pass (rows centred by their mean; recentred once on the most central row when
    cancellation threatens). When that pass overflows or underflows (its largest diagonal
    entry outside [2^-900, 2^900], or a squared distance below 2^-900 between rows that are not
    identical), the overflow-free
    :class:`Geometry` around the coordinate-wise median is used instead: the result is then in
    units of 2^(−2E) with rows beyond 2^400 reference lengths drawn in radially, which never
    changes a comparison among rows within that radius (callers only compare distances).
    """
    n = X.shape[0]
    if n == 1:
        return np.zeros((1, 1))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = gram(X)
        if direct_gram_ok(G):
            D = sqdist_from_gram(G)
            c = _ill_conditioned(G, D)
            if c is not None:
                G = gram(X, center=to_float64(X[c]))
                D = sqdist_from_gram(G) if direct_gram_ok(G) else None
            # a squared distance below 2^-900 is exact only between identical rows; otherwise it
            # may have underflowed (rows closer than ~1e-135 next to ordinary ones)
            if D is not None and _tiny_pairs_are_duplicates(X, D):
                return D
    geo = Geometry(X, cw_median(X))
    G = geo.gram()
    D = sqdist_from_gram(G)
    c = _ill_conditioned(G, D)
    if c is not None:
        D = sqdist_from_gram(Geometry(X, to_float64(X[c])).gram())
    return D


def centered_gram(X: np.ndarray, z0: np.ndarray,
                   floor_log2: float = -math.inf) -> tuple[np.ndarray, "Geometry | None"]:
    """Gram matrix of the rows centred at z0 and, when the direct pass over- or underflowed,
    the :class:`Geometry` it came from (its units are 2^(−E); None: input units)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        G = gram(X, center=z0)
    if direct_gram_ok(G) and _tiny_rows_are_center(X, G, z0):
        return G, None
    geo = Geometry(X, z0, floor_log2)
    return geo.gram(), geo
