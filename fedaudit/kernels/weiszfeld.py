"""The geometric median's Weiszfeld / Vardi–Zhang iteration on the coefficients of the rows,
computed on their Gram matrix."""

from __future__ import annotations

import math

import numpy as np

from fedaudit.kernels.distances import sqdist_from_gram

__all__ = ["gram_distances", "weiszfeld"]

def gram_distances(G: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, float]:
    """Distances from the rows to z = z0 + Σ β_j (x_j − z0), and ‖z − z0‖², from the Gram."""
    Gb = G @ beta
    bGb = float(beta @ Gb)
    return np.sqrt(np.maximum(np.diag(G) - 2.0 * Gb + bGb, 0.0)), bGb


def weiszfeld(G: np.ndarray, tol: float, max_iter: int, nu: float) -> tuple[np.ndarray, int]:
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
        dist, bGb = gram_distances(G, beta)
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
    dist = np.sqrt(sqdist_from_gram(G))
    same = dist <= np.maximum(nu, 1e-7 * np.sqrt(np.diag(G)))[:, None]
    np.fill_diagonal(same, True)
    U = np.where(same, 0.0, 1.0 / np.where(same, 1.0, dist))  # U_ki = 1/‖x_i − x_k‖
    M = U - np.diag(U.sum(axis=1))  # row k: coefficients of R̃(x_k) = Σ_i U_ki (x_i − x_k)
    R = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", M, G, M, optimize=True), 0.0))
    return np.flatnonzero(R <= same.sum(axis=1) * (1.0 + 1e-9))
