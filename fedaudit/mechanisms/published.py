"""Algorithms kept *as published*, so the audit can exhibit their flaws. Never used as defaults.

:class:`SSTQSketch` is the ``sstq_compress`` pseudo-code from the SSTQ explainer
(``shared/seeds/sstq-subsampled-stochastic-turboquant.txt``, citing arXiv 2608.05127v1), taken
literally. It is **NOT** locally differentially private, whatever ``epsilon`` says.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
from scipy.special import gammaln

from fedaudit.guarantees import PureLDP
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_choice, check_int
from fedaudit.mechanisms.base import Mechanism, check_epsilon, check_levels
from fedaudit.rng import RngLike, as_generator

__all__ = ["SSTQSketch", "sample_subsets"]

_CHUNK_ELEMS = 1 << 22  # ≤ 4M elements per temporary table (≈ 32 MB float64 + 32 MB int64)


def sample_subsets(n: int, d: int, k: int, rng: RngLike = None, *, method: str = "auto") -> np.ndarray:
    """(n, k) int64: each row an independent uniform k-subset of {0..d-1}, sorted ascending.

    Two vectorised exact samplers (rows processed in chunks, memory ≤ ~64 MB):
    ``"argpartition"`` keeps the k smallest of d i.i.d. uniform keys per row (cost ∝ n·d);
    ``"floyd"`` is Floyd's algorithm (Bentley & Floyd, CACM 1987) run over all rows at once:
    for j = d−k..d−1 draw t ~ U{0..j}, insert j if t is already chosen else t (cost ∝ n·k²).
    ``"auto"`` picks Floyd when k² ≤ 16·d.
    """
    n = check_int("n", n, low=0)
    d = check_int("d", d, low=1)
    k = check_int("k", k, low=1, high=d, high_name="d")
    check_choice("method", method, ("auto", "floyd", "argpartition"))
    rng = as_generator(rng)
    if k == d:
        return np.broadcast_to(np.arange(d, dtype=np.int64), (n, d)).copy()
    if method == "auto":
        method = "floyd" if k * k <= 16 * d else "argpartition"
    out = np.empty((n, k), dtype=np.int64)
    if method == "floyd":
        rows = max(1, _CHUNK_ELEMS // k)
        for start in range(0, n, rows):
            m = min(rows, n - start)
            S = out[start:start + m]
            for t, j in enumerate(range(d - k, d)):
                r = rng.integers(0, j + 1, size=m)
                dup = (S[:, :t] == r[:, None]).any(axis=1)
                S[:, t] = np.where(dup, j, r)
    else:
        rows = max(1, _CHUNK_ELEMS // d)
        for start in range(0, n, rows):
            m = min(rows, n - start)
            keys = rng.random((m, d))
            out[start:start + m] = np.argpartition(keys, k - 1, axis=1)[:, :k]
    out.sort(axis=1)
    return out


def _row_norms(V: np.ndarray) -> np.ndarray:
    """Overflow-safe row-wise Euclidean norms (the same arithmetic in encode and log_prob)."""
    m = np.max(np.abs(V), axis=1)
    safe = np.where(m > 0, m, 1.0)
    return m * np.sqrt(np.sum((V / safe[:, None]) ** 2, axis=1))


def _rounding_grid(xs: np.ndarray, norm: np.ndarray, levels: int):
    """QSGD rounding cell of v = x_S/norm: sign(v), lower level l and P[round up] = frac.

    |v|·levels is clamped to [0, levels]; norm = 0 gives v = 0 (always rounded to 0).
    """
    safe = np.where(norm > 0, norm, 1.0)[:, None]
    v = xs / safe
    u = np.minimum(np.abs(v) * levels, float(levels))
    low = np.floor(u)
    return np.sign(v), low, u - low


class SSTQSketch(Mechanism):
    """The seed's SSTQ sketch, literally — **NOT LDP; a reference for audits, never a default.**

    Per input x (no clipping): S = k of d indices uniformly without replacement; N = ‖x_S‖₂;
    v = x_S/N; Q(v)_j = sign(v_j)·(l_j + B_j)/s with s = ``levels``, l_j = ⌊s|v_j|⌋,
    B_j ~ Bernoulli(s|v_j| − l_j) (QSGD, Alistarh et al. 2017; grid {0, 1/s, …, 1} with sign
    kept — unbiased, E[Q(v)] = v; levels ≥ 2 as in the main SSTQ); values y = N·Q(v) + Lap(b)^k
    i.i.d., b = 2/(levels·ε). Our reading of ``laplace_noise(epsilon, s)``: Laplace of
    sensitivity 2/s (normalised range [−1, 1] of width 2 split into s steps) over ε, added per
    value, budget not split over the k values. N = 0 gives y = Lap(b)^k.

    Report layout (n, 2k+1): ``[N, idx_1..idx_k, y_1..y_k]`` with idx ascending (the set S).
    ``decode = (d/k)·scatter(S, y)`` (unbiased: E[y_j] = x_{S_j}, P[i ∈ S] = k/d).
    ``bits_per_report = 64 + k·⌈log2 d⌉ + 64·k`` (the norm and values as float64).
    ``log_prob`` is exact w.r.t. (counting on S) × (atom at the norm) × (Lebesgue on y):
    −log C(d,k) + [0 if N = ‖x_S‖ (rel. 1e-12) else −inf]
    + Σ_j log((1−f_j)·Lap(y_j − N·sign·l_j/s) + f_j·Lap(y_j − N·sign·(l_j+1)/s)).

    Why it is not ε-LDP (the audit should find all three):
      1. The norm N is sent in the clear and unclipped: it is a deterministic function of x
         given S, so two inputs whose ‖x_S‖ differ on every S have disjoint report supports —
         privacy loss +∞ (a single report distinguishes them with certainty).
      2. The noise is calibrated to one quantization step of the *normalised* value, but it is
         added to N·Q(v), whose range [−N, N] is unbounded: even with N hidden, the loss grows
         like 2N/b per value.
      3. The budget is not divided over the k released values: even were 1 and 2 repaired,
         each value spends the full ε, so the report composes to about k·ε, not ε.
    """

    as_published = True

    name = "sstq-sketch"

    def __init__(self, dim: int, k: int, levels: int, epsilon: float):
        self.dim = check_int("dim", dim, low=1)
        self.k = check_int("k", k, low=1, high=self.dim, high_name="dim")
        self.levels = check_levels(levels)
        self.guarantee = PureLDP(check_epsilon(epsilon))  # claimed, NOT delivered  # claimed, NOT delivered
        self.noise_scale = 2.0 / (self.levels * self.epsilon)
        self.report_width = 2 * self.k + 1
        self.report_layout = (f"(n, {self.report_width}): [norm, idx_1..idx_k (ascending), "
                              "value_1..value_k]")
        self._log_subsets = float(gammaln(self.dim + 1) - gammaln(self.k + 1)
                                  - gammaln(self.dim - self.k + 1))  # log C(d, k)

    @property
    def bits_per_report(self) -> int:
        return 64 + self.k * (self.dim - 1).bit_length() + 64 * self.k

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "k": self.k, "levels": self.levels, "epsilon": self.epsilon}

    # -------------------------------------------------------------- sampling
    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n, k = X.shape[0], self.k
        idx = sample_subsets(n, self.dim, k, rng)
        xs = np.take_along_axis(X, idx, axis=1)
        norm = _row_norms(xs)
        sign, low, frac = _rounding_grid(xs, norm, self.levels)
        q = sign * (low + (rng.random(xs.shape) < frac)) / self.levels * norm[:, None]
        out = np.empty((n, self.report_width))
        out[:, 0] = norm
        out[:, 1:k + 1] = idx
        out[:, k + 1:] = q + rng.laplace(0.0, self.noise_scale, size=xs.shape)
        return out

    # ------------------------------------------------------------ inference
    def _parse(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k, d = self.k, self.dim
        norm, raw, vals = reports[:, 0], reports[:, 1:k + 1], reports[:, k + 1:]
        bad = ~((raw == np.floor(raw)) & (raw >= 0) & (raw <= d - 1)).all(axis=1)
        bad |= (np.diff(raw, axis=1) <= 0).any(axis=1)
        bad |= norm < 0
        if bad.any():
            i = int(np.argmax(bad))
            raise FedAuditError(f"reports rows must be [norm >= 0, {k} strictly increasing integer "
                                f"indices in [0, dim-1={d - 1}], {k} values]; row {i} is not")
        return norm, raw.astype(np.int64), vals

    def decode(self, reports: Any) -> np.ndarray:
        """(d/k)·scatter(idx, values): unbiased for x."""
        _, idx, vals = self._parse(self._check_reports(reports))
        out = np.zeros((idx.shape[0], self.dim))
        np.put_along_axis(out, idx, vals * (self.dim / self.k), axis=1)
        return out

    #: most subsets T ⊆ supp(x0) ∪ supp(x1) the finite case enumerates before returning None
    max_enumerated_subsets = 1 << 16

    @staticmethod
    def _norms_match(n0: np.ndarray, n1: np.ndarray) -> np.ndarray:
        """The norm-column test of ``log_prob`` (relative tolerance 1e-12)."""
        return np.abs(n0 - n1) <= 1e-12 * np.maximum(n0, n1)

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float | None:
        """Exact sup over (S, N, y) of |log p(r|x0) − log p(r|x1)|.

        **Infinite** if some k-subset S has ‖x0_S‖ ≠ ‖x1_S‖ (by log_prob's 1e-12 relative test):
        the norm column then separates the inputs with certainty. With c = x0² − x1²,
        ‖x0_S‖² − ‖x1_S‖² = Σ_S c. For k = d there is one S (compare ‖x0‖, ‖x1‖). For k < d: if
        every k-sum of c vanished, exchanging i ∈ S for j ∉ S would give c_i = c_j, so c would be
        constant and k·c_1 = 0, i.e. c = 0; hence the loss is infinite iff |x0| ≠ |x1| somewhere.
        The witness checked is the bottom-k or top-k set of c (every k-sum lies between their
        sums); if |x0| ≠ |x1| but both pass the tolerance test, return None.

        **Finite** otherwise (k < d: sign flips only, equal norms on every S; k = d: equal
        norms). Given S, the values are independent and each density is a two-point mixture
        (1−f)·Lap(y − μ_a) + f·Lap(y − μ_b) with atoms μ = N·sign·l/s. Between consecutive atoms
        of both mixtures the ratio is (αe^{2y/b} + β)/(γe^{2y/b} + δ), monotone in y, and beyond
        the extreme atoms it is constant (log E_0[e^{±μ/b}] − log E_1[e^{±μ/b}], the ±∞ tails),
        so the per-value sup (either direction) is the max over the 4 atoms and the 2 tails and is
        attained. The sup over S is not separable (the atoms scale with N_S): S = T ∪ (zeros of
        both inputs, which contribute 0 and leave N_S unchanged) is enumerated over
        T ⊆ supp(x0) ∪ supp(x1); None if that needs more than ``max_enumerated_subsets`` subsets.
        """
        d, k = self.dim, self.k
        if k == d:
            witnesses = [np.arange(d)]
        else:
            order = np.argsort(x0 * x0 - x1 * x1, kind="stable")
            witnesses = [order[:k], order[d - k:]]
        for S in witnesses:
            if not self._norms_match(_row_norms(x0[S][None, :]), _row_norms(x1[S][None, :]))[0]:
                return math.inf
        if k < d and not (np.abs(x0) == np.abs(x1)).all():
            return None
        supp = np.flatnonzero((x0 != 0.0) | (x1 != 0.0))
        m, zeros = supp.size, d - supp.size
        sizes = range(max(0, k - zeros), min(k, m) + 1)
        if sum(math.comb(m, t) for t in sizes) > self.max_enumerated_subsets:
            return None
        best = 0.0
        for t in sizes:
            if t == 0:
                continue
            T = supp[np.array(list(itertools.combinations(range(m), t)), dtype=np.int64)]
            xs0, xs1 = x0[T], x1[T]
            up, down = self._value_sups(xs0, _row_norms(xs0), xs1, _row_norms(xs1))
            best = max(best, float(up.sum(axis=1).max()), float(down.sum(axis=1).max()))
        return best

    def _value_sups(self, xs0, n0, xs1, n1) -> tuple[np.ndarray, np.ndarray]:
        """Per value, sup_y ±(log p0(y) − log p1(y)) for the two-point Laplace mixtures of
        (xs0, norm n0) and (xs1, norm n1): max over the atoms of both and the ±∞ tails."""
        b = self.noise_scale
        atoms, logw = [], []
        for xs, norm in ((xs0, n0), (xs1, n1)):
            sign, low, frac = _rounding_grid(xs, norm, self.levels)
            step = sign * norm[:, None] / self.levels
            atoms.append(np.stack([step * low, step * (low + 1)]))
            with np.errstate(divide="ignore"):
                logw.append(np.stack([np.log1p(-frac), np.log(frac)]))

        def log_mix(i, y):  # log of the mixture density up to the common 1/(2b)
            return np.logaddexp(logw[i][0] - np.abs(y - atoms[i][0]) / b,
                                logw[i][1] - np.abs(y - atoms[i][1]) / b)

        ys = np.concatenate(atoms)  # (4, n, t) candidate points
        diff = [log_mix(0, ys) - log_mix(1, ys)]
        for sgn in (1.0, -1.0):  # y → ±∞: exp(∓y/b) cancels
            tail = [np.logaddexp(logw[i][0] + sgn * atoms[i][0] / b, logw[i][1] + sgn * atoms[i][1] / b)
                    for i in (0, 1)]
            diff.append((tail[0] - tail[1])[None])
        diff = np.concatenate(diff)
        return diff.max(axis=0), (-diff).max(axis=0)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        norm_r, idx, y = self._parse(reports)
        xs = x[idx]
        norm = _row_norms(xs)
        match = self._norms_match(norm_r, norm)
        sign, low, frac = _rounding_grid(xs, norm, self.levels)
        step = sign * norm[:, None] / self.levels
        b = self.noise_scale
        with np.errstate(divide="ignore"):
            lp = np.logaddexp(np.log1p(-frac) - np.abs(y - step * low) / b,
                              np.log(frac) - np.abs(y - step * (low + 1)) / b)
        lp = lp.sum(axis=1) - self.k * math.log(2.0 * b) - self._log_subsets
        return np.where(match, lp, -np.inf)
