"""Robust aggregation rules: (n, d) → (d,).

Every rule subclasses :class:`~fedaudit.defenses.base.Aggregator`: it accepts numpy arrays and
torch tensors (same type, dtype and device come back, detached: a tensor that requires grad gives a
result without autograd history; integer/bool inputs come back as float64;
every rule is ``torch_native``: a tensor is aggregated with torch operations on its device, a
CPU tensor's Gram matrix and subset means by the compiled kernels on its own memory —
bit-identical to numpy for Mean, CWTM, CWMed, Meamed, Krum, Multi-Krum, MDA and Bulyan, within a
few ulps of the data's scale for GM and CC, whose row combinations run in BLAS),
never mutates its input, drops non-finite rows as Byzantine up to its tolerance (see
:mod:`fedaudit.defenses.base`: f, or ⌈n/2⌉ − 1 for rules without f and rules built with f = 0)
and is stateless: the same input gives the same output on every call.

Numerics: the distance, Gram and column-wise kernels are :mod:`fedaudit.kernels` (exact for
extreme magnitudes, float64 accumulation, bit-identical for any number of threads). GM and CC
combine rows in the units of :class:`fedaudit.kernels.Geometry` when the direct pass over- or
underflows (a far row then exerts its unit Weiszfeld / clipped pull, as it does in exact
arithmetic, instead of overflowing). Every result is finite.

Notation: n inputs x_1 … x_n ∈ ℝ^d, at most f of them Byzantine.
"""

from __future__ import annotations

import math
from itertools import chain, combinations
from typing import Any

import numpy as np

from fedaudit.arrays import is_torch
from fedaudit.defenses.base import Aggregator, Averaging, KrumSelection, MedianBased, TrimmedMean
from fedaudit.errors import FedAuditError
from fedaudit.kernels import (
    centered_gram,
    cw_median,
    cw_trimmed_mean,
    cw_window_mean,
    gram_distances,
    krum_order,
    like,
    lincomb,
    mean_rows,
    pairwise_sqdist,
    screened_mean_rows,
    subset_means,
    to_float64,
    weiszfeld,
)
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


def _copy_row(X: Any, i: int) -> Any:
    return X[i].clone() if is_torch(X) else X[i].copy()


# --------------------------------------------------------------------------------------------
# aggregators
# --------------------------------------------------------------------------------------------

class Mean(Aggregator):
    """Arithmetic mean (1/n) Σ_i x_i — not robust (one Byzantine row moves it arbitrarily).

    ``f`` only sets how many non-finite rows may be dropped (and what a composition passes on).
    """

    name = "mean"
    closed_form = True
    torch_native = True
    robustness = Averaging()
    needs_f = False

    def __init__(self, f: int = 0):
        super().__init__(f)

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return mean_rows(X)


class CWTM(Aggregator):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018).

    Per coordinate k: sort x_1[k] ≤ … ≤ x_n[k], drop the f smallest and the f largest, return
    the mean of the n − 2f in the middle. (f, κ)-robust with κ = (6f/(n−2f))(1 + f/(n−2f))
    (Allouah et al., AISTATS 2023). Needs n > 2f.

    Implementation: :func:`fedaudit.kernels.cw_trimmed_mean`, the compiled selection kernel
    (:mod:`fedaudit.kernels.selection`: one read of each column, sorted in cache by a comparator
    network) and a float64 sum of the middle order statistics in sorted order.
    """

    name = "cwtm"
    closed_form = True
    torch_native = True
    screens_nonfinite = True
    robustness = TrimmedMean()

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        if f == 0:
            return mean_rows(X) if is_torch(X) else screened_mean_rows(X)
        return cw_trimmed_mean(X, f)


class CWMed(Aggregator):
    """Coordinate-wise median (Yin et al., ICML 2018); the mean of the two middle values when
    n is even, added then halved: their exact midpoint rounded once, so it never leaves
    [lower, upper] (subnormal values included; an overflowing sum is redone scaled).
    (f, κ)-robust with κ = 4(1 + f/(n−2f))² (Allouah et al. 2023).

    ``f`` only sets how many non-finite rows may be dropped. Implementation:
    :func:`fedaudit.kernels.cw_median` (the compiled selection kernel).
    """

    name = "cwmed"
    closed_form = True
    torch_native = True
    screens_nonfinite = True
    robustness = MedianBased()
    needs_f = False

    def __init__(self, f: int = 0):
        super().__init__(f)

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return cw_median(X)


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
    torch_native = True
    robustness = MedianBased()
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
        z0 = cw_median(X)
        if n <= 2:  # every point of the segment is a minimiser; the midpoint = the median
            return z0
        # far rows are drawn in at 2^400 reference lengths, the reference at least 2^-300·ν, so
        # they never count as coinciding with the iterate
        G, geo = centered_gram(X, z0, math.log2(self.nu) - 300)
        nu = self.nu if geo is None else geo.scaled(self.nu)
        beta, _ = weiszfeld(G, self.tol, self.max_iter, nu)
        return _affine_point(beta, X, z0) if geo is None else like(geo.combine(beta), X)


def _affine_point(beta: np.ndarray, X: Any, z0: Any) -> Any:
    """z0 + Σ_i β_i (x_i − z0) in float64 (one BLAS pass over X)."""
    return float(1.0 - beta.sum()) * z0 + to_float64(lincomb(beta, X))


class Krum(Aggregator):
    """Krum (Blanchard et al., NeurIPS 2017).

    score_i = Σ_{j ∈ N_i} ‖x_i − x_j‖², N_i the n − f − 2 nearest neighbours of x_i (j ≠ i);
    returns x_{i*} with i* = argmin_i score_i. Ties (structural when n − f − 2 = 1: mutual
    nearest neighbours) go to the smaller Σ_j ‖x_i − x_j‖², then to the lexicographically
    smaller row, so the rule is invariant to the order of the rows. Needs n ≥ 2f + 3.
    (f, κ)-robust with κ = 6(1 + f/(n−2f)) (Allouah et al. 2023).
    """

    name = "krum"
    closed_form = True
    selects_min_krum_score = True
    torch_native = True
    screens_nonfinite = True  # the Gram pass raises NonFiniteInput
    robustness = KrumSelection()

    def min_n(self, f: int) -> int:
        return 2 * f + 3

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        return _copy_row(X, int(krum_order(pairwise_sqdist(X), f, X)[0]))


class MultiKrum(Aggregator):
    """Multi-Krum (Blanchard et al., NeurIPS 2017), non-iterative variant.

    Scores every row once as in :class:`Krum` and returns the mean of the m rows with the lowest
    scores (ties as in :class:`Krum`); m defaults to n − f (the common choice, e.g. Allouah et al.
    2023), must satisfy 1 ≤ m ≤ n − f. (The iterative variant, which re-scores after each
    selection, is what :class:`Bulyan` uses.) Needs n ≥ 2f + 3.
    """

    name = "multikrum"
    closed_form = True
    torch_native = True
    screens_nonfinite = True  # the Gram pass raises NonFiniteInput

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
        return subset_means(X, krum_order(pairwise_sqdist(X), f, X)[None, :m])[0]


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
    torch_native = True

    def __init__(self, f: int = 0, max_subsets: int | None = 20000):
        super().__init__(f)
        self.max_subsets = None if max_subsets is None else check_int("max_subsets", max_subsets, low=1)

    def params(self) -> dict[str, Any]:
        return {"f": self.f, "max_subsets": self.max_subsets}

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        if f == 0:
            return mean_rows(X)
        count = math.comb(n, f)
        if self.max_subsets is not None and count > self.max_subsets:
            raise FedAuditError(
                f"{self.name}: exact minimum-diameter search over C(n={n}, f={f}) = {count:,} subsets exceeds "
                f"max_subsets={self.max_subsets:,}; pass a larger max_subsets (cost grows as C(n, f)·n²) "
                "or use a polynomial-time rule such as nnm+cwtm")
        removed = _removal_sets(n, f)
        D = pairwise_sqdist(X)
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
        return subset_means(X, np.setdiff1d(np.arange(n), removed[best])[None, :])[0]


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
    torch_native = True
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
            v0 = cw_median(X)
        else:
            if self.center.shape[0] != d:
                raise FedAuditError(f"{self.name}: center has length {self.center.shape[0]}, inputs have d={d}")
            v0 = like(self.center, X)
        # far rows are drawn in at 2^400 reference lengths, with the reference at least
        # 2^-300·iters·τ, so they stay ≫ every clipping radius the iteration can see
        G, geo = centered_gram(X, v0, math.log2(self.iters * self.tau) - 300)
        tau = self.tau if geo is None else geo.scaled(self.tau)
        beta = np.zeros(n)
        for _ in range(self.iters):
            dist, _ = gram_distances(G, beta)
            far = dist > tau
            w = np.where(far, tau / np.where(far, dist, 1.0), 1.0)  # min(1, τ/‖·‖) without 0-division
            beta = beta * (1.0 - w.sum() / n) + w / n
        return _affine_point(beta, X, v0) if geo is None else like(geo.combine(beta), X)


class Meamed(Aggregator):
    """Mean around the median (Xie, Koyejo & Gupta, "Generalized Byzantine-tolerant SGD", 2018).

    Per coordinate k: the mean of the n − f values x_i[k] closest to the coordinate-wise median
    (ties keep the lower values). Needs n > 2f. Implementation:
    :func:`fedaudit.kernels.cw_window_mean`: each column sorted once by the compiled selection
    kernel, then the best window of n − f consecutive order statistics.
    """

    name = "meamed"
    closed_form = True
    torch_native = True
    screens_nonfinite = True

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        if f == 0:
            return mean_rows(X) if is_torch(X) else screened_mean_rows(X)
        return cw_window_mean(X, n - f)


class Bulyan(Aggregator):
    """Bulyan over Krum (El Mhamdi, Guerraoui & Rouault, ICML 2018).

    1. Selection: θ = n − 2f rounds; each round applies Krum (same f, scores over the rows not
       yet selected, n_t − f − 2 neighbours, at least 0) and moves the chosen row to the
       selection set.
    2. Per coordinate, the mean of the β = θ − 2f selected values closest to their median.
    Needs n ≥ 4f + 3.
    """

    name = "bulyan"
    torch_native = True
    screens_nonfinite = True  # the Gram pass raises NonFiniteInput

    def min_n(self, f: int) -> int:
        return 4 * f + 3

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        n = X.shape[0]
        theta = n - 2 * f
        D = pairwise_sqdist(X)
        remaining = np.arange(n)
        chosen = []
        for _ in range(theta):
            sub = D[np.ix_(remaining, remaining)]
            i = int(krum_order(sub, f, X, remaining)[0])
            chosen.append(remaining[i])
            remaining = np.delete(remaining, i)
        rows = like(np.sort(np.asarray(chosen)), X)
        return cw_window_mean(X[rows], theta - 2 * f)
