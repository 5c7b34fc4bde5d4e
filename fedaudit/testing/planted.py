"""Deliberately broken randomizers — the auditor's own regression targets.

Each class reproduces one implementation mistake seen in practice and claims the guarantee
its correct sibling has. Their ``log_prob`` describes what they *actually* do, so a white-box
audit is truthful and a black-box audit is not helped. Never use them for anything else.

* :class:`UnsplitBudgetSSTQ` — randomized response at ε per coordinate instead of ε/k
  (true ε = k·ε for pairs that move all k coordinates).
* :class:`ScaledLaplace` — noise scale divided by ``factor`` (true ε = factor·ε).
* :class:`LeakedNormSSTQ` — appends the clipped norm ‖clip(x)‖ to the report (ε = ∞ for
  pairs of different norms).
* :class:`CleartextIndicesSSTQ` — keeps the k largest |x_j| and sends their indices in the
  clear (data-dependent subsampling; ε = ∞ for pairs with different top-k sets).
* :func:`scaled_gaussian_sampler` — a black-box Gaussian sampler with σ divided by ``factor``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.mechanisms.base import clip_l2
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.sstq import SSTQ

__all__ = ["UnsplitBudgetSSTQ", "ScaledLaplace", "LeakedNormSSTQ", "CleartextIndicesSSTQ", "scaled_gaussian_sampler"]


class UnsplitBudgetSSTQ(SSTQ):
    """SSTQ that forgets to divide ε by k: every coordinate's randomized response runs at ε."""

    name = "planted-unsplit-sstq"

    def __init__(self, dim: int, k: int, levels: int, epsilon: float, clip: float = 1.0, rotate: bool = True, **kw):
        super().__init__(dim, k, levels, epsilon, clip, rotate, **kw)
        e = math.exp(self.epsilon)
        self.keep_prob, self.other_prob = e / (e + self.levels - 1), 1.0 / (e + self.levels - 1)

    @property
    def epsilon_per_coordinate(self) -> float:
        return self.epsilon  # the bug: the whole budget on every coordinate

    # epsilon_for_pair is SSTQ's: it reads keep_prob/other_prob, so it is exact here too (the
    # worst case over the clip ball is k·ε, attained when all k kept coordinates sit at ±B)


class ScaledLaplace(Laplace):
    """Laplace mechanism whose noise scale is ``factor`` times too small."""

    name = "planted-scaled-laplace"

    def __init__(self, dim: int, epsilon: float, clip: float = 1.0, factor: int = 2):
        super().__init__(dim, epsilon, clip)
        self.factor = int(factor)
        self.scale_den *= self.factor
        self.scale_grid = self.scale_num / self.scale_den
        self.scale = self.scale_grid * self.grid

    def params(self) -> dict[str, Any]:
        return {**super().params(), "factor": self.factor}


class LeakedNormSSTQ(SSTQ):
    """SSTQ report plus the clipped input norm in the last column."""

    name = "planted-leaked-norm-sstq"

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.report_width = self.k + 2
        self.report_layout += "; last column: ‖clip(x)‖ (the leak)"

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        norms = np.linalg.norm(clip_l2(X, self.clip), axis=1)
        return np.column_stack([super()._encode(X, rng), norms])

    def decode(self, reports: Any) -> np.ndarray:
        return super().decode(np.asarray(reports, dtype=np.float64)[:, :-1])

    def _check_reports(self, reports: Any) -> np.ndarray:
        return np.asarray(reports, dtype=np.float64)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        base = super()._log_prob(reports[:, :-1], x)
        norm = np.linalg.norm(clip_l2(x[None, :], self.clip))
        return np.where(np.isclose(reports[:, -1], norm, rtol=1e-12, atol=0.0), base, -np.inf)

    def _privacy_loss(self, reports, x0, x1):
        return self._log_prob(reports, x0) - self._log_prob(reports, x1)

    def epsilon_for_pair(self, x0, x1):
        n0, n1 = (np.linalg.norm(clip_l2(v[None, :], self.clip)) for v in (x0, x1))
        return math.inf if not np.isclose(n0, n1, rtol=1e-12, atol=0.0) else None


class CleartextIndicesSSTQ(SSTQ):
    """Keeps the k largest |x_j| (no rotation) and sends [indices, levels]: the indices leak x."""

    name = "planted-cleartext-indices-sstq"

    def __init__(self, dim: int, k: int, levels: int, epsilon: float, clip: float = 1.0):
        super().__init__(dim, k, levels, epsilon, clip, rotate=False)
        self.report_width = 2 * self.k
        self.report_layout = f"[i_1..i_{self.k}, o_1..o_{self.k}]: top-k indices of |x| in the clear, then levels"

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "k": self.k, "levels": self.levels, "epsilon": self.epsilon, "clip": self.clip}

    def _top(self, X: np.ndarray) -> np.ndarray:
        return np.sort(np.argsort(-np.abs(X), axis=1, kind="stable")[:, : self.k], axis=1)

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        X = clip_l2(X, self.clip)
        idx = self._top(X)
        y = np.take_along_axis(X, idx, axis=1)
        lo, up = self._rounding(y)
        level = lo + (rng.random(y.shape) < up)
        flip = rng.random(y.shape) >= self.keep_prob
        other = rng.integers(0, self.levels - 1, size=y.shape)
        other += other >= level
        return np.column_stack([idx, np.where(flip, other, level)]).astype(np.float64)

    def decode(self, reports: Any) -> np.ndarray:
        r = np.asarray(reports, dtype=np.float64)
        out = np.zeros((r.shape[0], self.dim))
        np.put_along_axis(out, r[:, : self.k].astype(np.int64),
                          self.grid[r[:, self.k:].astype(np.int64)] / (self.keep_prob - self.other_prob), axis=1)
        return out  # biased: the subset is not random — part of the bug

    def _check_reports(self, reports: Any) -> np.ndarray:
        return np.asarray(reports, dtype=np.float64)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        xc = clip_l2(x[None, :], self.clip)
        idx = self._top(xc)[0]
        same = (reports[:, : self.k] == idx[None, :]).all(axis=1)
        y = np.broadcast_to(xc[0, idx], (reports.shape[0], self.k))
        lp = self._levels_log_prob(reports[:, self.k:], y).sum(axis=1)
        return np.where(same, lp, -np.inf)

    def _privacy_loss(self, reports, x0, x1):
        return self._log_prob(reports, x0) - self._log_prob(reports, x1)

    def epsilon_for_pair(self, x0, x1):
        return None


def scaled_gaussian_sampler(sigma: float, factor: float = 3.0):
    """Black-box ``sampler(x, size, rng)`` adding N(0, (σ/factor)²) per coordinate (floats)."""
    s = float(sigma) / float(factor)

    def sampler(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return x[None, :] + s * rng.standard_normal((size, x.shape[0]))

    return sampler
