"""vqSGD with the cross-polytope codebook, optionally made ε-LDP by randomized response.

Gandikota, Kane, Maity, Mazumdar, "vqSGD: Vector Quantized Stochastic Gradient Descent",
AISTATS 2021 (arXiv 1911.07971).

Let s = clip·√d. After clipping, ‖x‖₂ ≤ clip, so ‖x‖₁ ≤ √d‖x‖₂ ≤ s and x lies in the convex
hull of the 2d vertices {±s·e_i}. With r = 1 − ‖x‖₁/s ≥ 0 the convex weights

    w(+i) = max(x_i, 0)/s + r/(2d),      w(−i) = max(−x_i, 0)/s + r/(2d)

sum to 1 and Σ_v w(v)·vertex(v) = x (the r-mass is spread evenly and the vertices sum to 0).
One vertex V ~ w is the (non-private, ``epsilon=None``) unbiased quantizer, log2(2d) bits.

Privacy (``epsilon`` given): 2d-ary randomized response on the vertex index — keep V w.p.
p = e^ε/(e^ε + 2d − 1), else report one of the other 2d − 1 vertices uniformly (each q =
1/(e^ε + 2d − 1)). Then P[o | x] = q + (p − q)·w_x(o) ∈ [q, p], so every likelihood ratio is
≤ p/q = e^ε: ε-LDP. Because the vertex set sums to 0, E[vertex(o)] = (p − q)·x; decoding divides
by c = p − q. The tight worst-case loss over the clip-ball is log(1 + (e^ε − 1)·w_max) with
w_max = 1/√d + (1 − 1/√d)/(2d) (attained at x = clip·e_i vs x' = clip·(−1, ±1, …)/√d), which
is < ε for d > 1 (see :attr:`VQSGD.worst_case_epsilon`).

Vertex encoding: v = 2i for +s·e_i and v = 2i + 1 for −s·e_i, i in {0..d-1}.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import make_guarantee
from fedaudit.validation import check_int, check_matrix, check_positive
from fedaudit.mechanisms.base import Mechanism, check_epsilon, clip_l2, randomized_response_event
from fedaudit.mechanisms.randomized_response import check_index_reports

__all__ = ["VQSGD"]

_CHUNK_FLOATS = 1 << 22  # 32 MB of float64 per chunk of the inverse-CDF table


class VQSGD(Mechanism):
    """Cross-polytope vqSGD, ε-LDP through 2d-ary randomized response (``epsilon=None``: plain).

    Report layout (n, 1): ``[v]`` — vertex index in {0..2d-1}: v = 2i (+clip·√d·e_i) or
    v = 2i + 1 (−clip·√d·e_i). ``bits_per_report = ⌈log2(2d)⌉``.
    ``decode`` returns ±clip·√d·e_i / (p − q), unbiased for ``clip_l2(x)``.
    ``log_prob`` is exact: log(q + (p − q)·w_x(o)) (log w_x(o) without privacy).
    """

    name = "vqsgd"

    def __init__(self, dim: int, epsilon: float | None, clip: float = 1.0):
        self.dim = check_int("dim", dim, low=1)
        self.guarantee = make_guarantee(check_epsilon(epsilon, allow_none=True))
        self.clip = check_positive("clip", clip)
        self.report_width = 1
        self.report_layout = ("(n, 1): [v] vertex index in {0..2d-1}; v = 2i -> +clip*sqrt(d)*e_i, "
                              "v = 2i+1 -> -clip*sqrt(d)*e_i")
        self.n_vertices = 2 * self.dim
        self.scale = self.clip * math.sqrt(self.dim)  # s = clip·√d
        if self.epsilon is None:
            self.p_keep, self.p_other, self.gap = 1.0, 0.0, 1.0
        else:
            lz = float(np.logaddexp(self.epsilon, math.log(self.n_vertices - 1)))
            self.p_keep = math.exp(self.epsilon - lz)
            self.p_other = math.exp(-lz)
            self.gap = self.p_keep * -math.expm1(-self.epsilon)  # c = p − q
            self._log_q = -lz  # log-domain constants: q underflows for ε ≳ 745
            self._log_gap = self.epsilon - lz + math.log(-math.expm1(-self.epsilon))

    def dp_event(self) -> Any:
        """ε-randomized response over the 2·dim vertices (``RandomizedResponseDpEvent``), the PLD
        :func:`fedaudit.accounting.pld_of` uses; a FedAuditError without ε (not private)."""
        if self.epsilon is None:
            raise FedAuditError("VQSGD(epsilon=None) is not private: it has no DpEvent")
        return randomized_response_event(self.n_vertices, self.epsilon)

    @property
    def bits_per_report(self) -> int:
        return (self.n_vertices - 1).bit_length()  # ⌈log2(2d)⌉

    @property
    def worst_case_epsilon(self) -> float | None:
        """Tight sup over x, x' in the clip-ball and outputs o of log P[o|x]/P[o|x'] (≤ ε)."""
        if self.epsilon is None:
            return None
        d = self.dim
        w_max = 1.0 / math.sqrt(d) + (1.0 - 1.0 / math.sqrt(d)) / (2 * d)
        # log(1 + (e^ε − 1)·w) written stably for large ε
        return self.epsilon + math.log(w_max + (1.0 - w_max) * math.exp(-self.epsilon))

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "epsilon": self.epsilon, "clip": self.clip}

    # ------------------------------------------------------------- weights
    def weights(self, X: Any) -> np.ndarray:
        """(n, 2d) convex weights w_x(v) of the clipped rows of ``X`` (rows sum to 1)."""
        return self._weights(check_matrix("X", X, cols=self.dim))

    def _weights(self, X: np.ndarray) -> np.ndarray:
        X = clip_l2(X.reshape(-1, self.dim), self.clip)
        pos = np.maximum(X, 0.0) / self.scale
        neg = np.maximum(-X, 0.0) / self.scale
        r = 1.0 - (pos + neg).sum(axis=1, keepdims=True)
        # r within rounding error (d ulps) of 0 is 0: boundary inputs get exact zero weights
        r = np.where(r > 2.0 * self.dim * np.finfo(np.float64).eps, r, 0.0) / self.n_vertices
        W = np.empty((X.shape[0], self.n_vertices))
        W[:, 0::2] = pos + r
        W[:, 1::2] = neg + r
        return W / W.sum(axis=1, keepdims=True)  # exact 1 up to rounding (r clamped at 0)

    def _randomize(self, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.epsilon is not None:
            n = v.shape[0]
            keep = rng.random(n) < self.p_keep
            other = (v + 1 + rng.integers(0, self.n_vertices - 1, size=n)) % self.n_vertices
            v = np.where(keep, v, other)
        return v.astype(np.float64)[:, None]

    # -------------------------------------------------------------- sampling
    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = X.shape[0]
        v = np.empty(n, dtype=np.int64)
        rows = max(1, _CHUNK_FLOATS // self.n_vertices)
        for start in range(0, n, rows):
            cdf = np.cumsum(self._weights(X[start:start + rows]), axis=1)
            cdf /= cdf[:, -1:]
            u = rng.random((cdf.shape[0], 1))
            # inverse CDF: first v with cdf[v] > u (never a zero-weight vertex)
            v[start:start + rows] = np.minimum((cdf <= u).sum(axis=1), self.n_vertices - 1)
        return self._randomize(v, rng)

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        cdf = np.cumsum(self._weights(x)[0])
        cdf /= cdf[-1]
        v = np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), self.n_vertices - 1)
        return self._randomize(v.astype(np.int64), rng)

    # ------------------------------------------------------------ inference
    def decode(self, reports: Any) -> np.ndarray:
        """vertex(o)/(p − q) as (n, d): unbiased for clip_l2(x)."""
        reports = self._check_reports(reports)
        o = check_index_reports(reports, 0, self.n_vertices, "vertex indices", "2*dim")
        out = np.zeros((o.shape[0], self.dim))
        out[np.arange(o.shape[0]), o // 2] = (1.0 - 2.0 * (o % 2)) * (self.scale / self.gap)
        return out

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        o = check_index_reports(reports, 0, self.n_vertices, "vertex indices", "2*dim")
        w = self._weights(x)[0][o]
        with np.errstate(divide="ignore"):
            log_w = np.log(w)  # −inf for zero-weight vertices
        if self.epsilon is None:
            return log_w
        return np.logaddexp(self._log_q, self._log_gap + log_w)  # log(q + (p − q)·w)

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """max over the 2d outputs o of |log P[o|x0] − log P[o|x1]|, P[o|x] = q + (p − q)·w_x(o)
        (exact enumeration of the finite output set; ``inf`` without privacy when a vertex has
        weight 0 under exactly one input, vertices impossible under both skipped)."""
        o = np.arange(self.n_vertices, dtype=np.float64)[:, None]
        lp0, lp1 = self._log_prob(o, x0), self._log_prob(o, x1)
        both = np.isneginf(lp0) & np.isneginf(lp1)
        return float(np.max(np.abs(lp0[~both] - lp1[~both])))

    def expected_mse(self, x: Any) -> float | np.ndarray:
        """E‖decode(M(x)) − x̄‖² = s²/(p − q)² − ‖x̄‖², x̄ = clip_l2(x), s = clip·√d.

        Every decoded report has norm s/(p − q) and mean x̄. A vector gives a float, a matrix (n,).
        """
        arr = np.asarray(x)
        X = check_matrix("x", x, cols=self.dim)
        Xc = clip_l2(X, self.clip)
        mse = (self.scale / self.gap) ** 2 - np.sum(Xc * Xc, axis=1)
        return float(mse[0]) if arr.ndim == 1 else mse
