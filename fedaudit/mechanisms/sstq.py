"""SSTQ — subsampled stochastic (Turbo)quantization with ε-local differential privacy.

The corrected version of the seed's sketch (``published.SSTQSketch`` keeps the original). A
report of x ∈ R^d is produced in five steps:

1. **Clip**: x ← x·min(1, C/‖x‖₂), so ‖x‖₂ ≤ C (no norm is ever sent).
2. **Rotate** (``rotate=True``): y = H·diag(s)·x/√D, x zero-padded to D = 2^⌈log2 d⌉,
   s ∈ {±1}^D from the report's public seed u. Then ‖y‖₂ = ‖x‖₂ and every y_j is
   sub-Gaussian with variance proxy ‖x‖²/D (Hoeffding over s). Without rotation, y = x, D = d.
3. **Subsample** k of D coordinates uniformly without replacement, the set S also derived
   from u — data-independent public randomness.
4. **Quantize** each y_j, j ∈ S, after clamping to [−B, B], to the grid
   L_l = −B + 2B·l/(s−1), l = 0..s−1, by unbiased stochastic rounding.
5. **Randomize** each level with s-ary randomized response at ε/k: keep w.p.
   p = e^{ε/k}/(e^{ε/k}+s−1), else a uniform other level (probability c = (1−p)/(s−1) each).

**Report layout** (n, 1+k): ``[u, o_1, …, o_k]`` — the public seed u ∈ [0, 2^52) (an exact
integer in float64) and the k output level indices o_j ∈ {0..s−1} for the coordinates of S
in increasing order. ``bits_per_report`` = 52 + k·⌈log2 s⌉: the server regenerates S and s
from u, so indices are never sent.

**Decoding**: E[L_o | y_j] = (p−c)·clamp(y_j) + c·Σ_l L_l and Σ_l L_l = 0 (symmetric grid), so
ŷ_j = L_{o_j}/(p−c) is unbiased for clamp_B(y_j); z = (D/k)·Σ_{j∈S} ŷ_j e_j is unbiased for
clamp_B(y), and x̂ = diag(s)·H·z/√D (first d coordinates) for x when no coordinate is clamped.

**Privacy** (ε-LDP per report, worst case over inputs *and* public randomness). Given u, the
k outputs are independent; for every coordinate and output o,
P(o | y) = c + (p−c)·P(round(y) = o) ∈ [c, p], so P(o | y)/P(o | y') ≤ p/c = e^{ε/k} for any
y, y' ∈ [−B, B]. The product over k coordinates is ≤ e^ε, and u is independent of the data,
so the likelihood ratio of a whole report is ≤ e^ε. The per-coordinate bound e^{ε/k} is
attained at y_j = −B vs +B; the total ε is attained only by pairs that can put all k kept
coordinates at opposite ends (e.g. k = 1). Inputs in the clip ball usually cannot, so the
exact loss of a pair (:meth:`epsilon_for_pair`) is often below ε.

**Choice of B and clipping bias.** Without rotation B = C and clamping never binds (unbiased).
With rotation, B = C·√(2·ln(2D/β)/D) with β = ``clamp_mass`` (default 1e-3): by Hoeffding,
P(|y_j| > B) ≤ 2·exp(−B²D/(2C²)) = β/D per coordinate, so the expected number of clamped
coordinates per report is ≤ β. Clamping then biases x̂ by E[R^T(clamp_B(Rx) − Rx)], whose norm
is at most C·β/… in expectation and is *measured* by :meth:`SSTQ.clamping_bias`. The narrow
range cuts the quantization + privacy variance by (C/B)² ≈ D/(2 ln(2D/β)) compared to B = C.
Pass ``bound`` to choose B yourself.

**Variance** (a hypothesis, not a fact — see ``fedaudit.audit.variance``): without privacy,
MSE ≈ (D/k − 1)‖x‖² + (D/k)·Σ quantization variance = O(d/k). With privacy at a *fixed total*
ε, each coordinate gets ε/k and p − c = (e^{ε/k} − 1)/(e^{ε/k} + s − 1) ≈ ε/(s·k), so a kept
coordinate's estimate ŷ = L_o/(p − c) has E[ŷ²] ≈ c_s·B²·(s·k/ε)², c_s = (s+1)/(3(s−1)) the mean
of L_l²/B² over the grid (outputs are nearly uniform when ε/k is small). The k kept coordinates
are scaled by D/k, so the private noise term is (D/k)²·k·E[ŷ²] = (D/k)·D·E[ŷ²] and

    MSE ≈ c_s·D²·k·B²·s²/ε²,

linear in k at fixed D: larger k is then worse, not better (the log–log slope on d/k is −1).
With the rotated bound B² = 2C²·ln(2D/β)/D this is ∝ D·k·log D (C²s²/ε² fixed); without
rotation (B = C) it is ∝ D²·k.

References: Javanmard, Woodruff, Mirrokni, arXiv 2608.05127 (SSTQ, claims only);
Ailon & Chazelle 2009 (randomized Hadamard); Suresh et al. ICML 2017 (rotation + stochastic
rounding for mean estimation); Warner 1965 / Kairouz et al. 2016 (k-ary randomized response).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.guarantees import make_guarantee
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive, check_probability, check_vector
from fedaudit.mechanisms.base import Mechanism, check_epsilon, check_levels, clip_l2
from fedaudit.mechanisms.rotation import (
    SEED_BITS,
    next_pow2,
    random_signs,
    random_subset,
    rotate,
    unrotate,
)
from fedaudit.rng import RngLike, as_generator, chunk_plan

__all__ = ["SSTQ"]

#: rows per chunk are chosen so that one (rows, D) float64 buffer is at most this many bytes
_CHUNK_BYTES = 8 * 2**20


class SSTQ(Mechanism):
    """Clip → randomized Hadamard rotation → subsample k → s-level stochastic rounding → s-ary RR.

    Parameters
    ----------
    dim : input dimension d ≥ 1.
    k : coordinates kept per report, 1 ≤ k ≤ d.
    levels : quantization levels s, 2 ≤ s ≤ 2^24 (:data:`~fedaudit.mechanisms.base.MAX_LEVELS`).
    epsilon : total LDP budget per report (> 0), split evenly over the k coordinates;
        ``None`` gives the non-private quantizer (no randomized response).
    clip : L2 clipping radius C > 0.
    rotate : apply the randomized Hadamard rotation (default True).
    bound : the quantization range B; default as in the module docstring.
    clamp_mass : β in the default B (expected clamped coordinates per report), in (0, 1).
    """

    name = "sstq"

    def __init__(self, dim: int, k: int, levels: int, epsilon: float | None, clip: float = 1.0,
                 rotate: bool = True, *, bound: float | None = None, clamp_mass: float = 1e-3):
        self.dim = check_int("dim", dim, low=1)
        self.k = check_int("k", k, low=1, high=self.dim, high_name="dim")
        self.levels = check_levels(levels)
        self.guarantee = make_guarantee(check_epsilon(epsilon, allow_none=True))
        self.clip = check_positive("clip", clip)
        self.rotate = bool(rotate)
        self.clamp_mass = check_probability("clamp_mass", clamp_mass)
        self.padded_dim = next_pow2(self.dim) if self.rotate else self.dim
        if bound is None:
            D = self.padded_dim
            bound = self.clip * min(1.0, math.sqrt(2.0 * math.log(2.0 * D / self.clamp_mass) / D)) \
                if self.rotate else self.clip
        self.bound = check_positive("bound", bound)
        if self.epsilon is None:
            self.keep_prob, self.other_prob = 1.0, 0.0
        else:
            e = math.exp(self.epsilon / self.k)
            self.keep_prob = e / (e + self.levels - 1)
            self.other_prob = 1.0 / (e + self.levels - 1)
        self.grid = np.linspace(-self.bound, self.bound, self.levels)
        self.report_width = 1 + self.k
        self.report_layout = (f"[u, o_1..o_{self.k}]: public seed u < 2^{SEED_BITS} "
                              f"(derives the subset and rotation signs), then level indices in 0..{self.levels - 1}")
        self._rows = max(1, _CHUNK_BYTES // (8 * self.padded_dim))

    # ------------------------------------------------------------ properties
    @property
    def epsilon_per_coordinate(self) -> float | None:
        return None if self.epsilon is None else self.epsilon / self.k

    @property
    def bits_per_report(self) -> int:
        return SEED_BITS + self.k * math.ceil(math.log2(self.levels))

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "k": self.k, "levels": self.levels, "epsilon": self.epsilon,
                "clip": self.clip, "rotate": self.rotate, "bound": self.bound}

    # ------------------------------------------------------------ internals
    def _public(self, seeds: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """Rotation signs (or None) and the kept subset for each public seed."""
        signs = random_signs(seeds, self.padded_dim) if self.rotate else None
        return signs, random_subset(seeds, self.padded_dim, self.k)

    def _transform(self, X: np.ndarray, signs: np.ndarray | None) -> np.ndarray:
        X = clip_l2(X, self.clip)
        return rotate(X, signs) if self.rotate else X

    def _rounding(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower grid index and the probability of rounding up, for y clamped to [−B, B]."""
        pos = (np.clip(y, -self.bound, self.bound) + self.bound) / (2 * self.bound) * (self.levels - 1)
        lo = np.minimum(np.floor(pos), self.levels - 2)
        return lo, pos - lo

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = X.shape[0]
        out = np.empty((n, 1 + self.k))
        out[:, 0] = rng.integers(0, 2**SEED_BITS, size=n)
        for start, size in chunk_plan(n, self._rows):
            seeds = out[start:start + size, 0]
            signs, subset = self._public(seeds)
            y = np.take_along_axis(self._transform(X[start:start + size], signs), subset, axis=1)
            lo, up = self._rounding(y)
            level = lo + (rng.random(y.shape) < up)
            if self.epsilon is not None:
                flip = rng.random(y.shape) >= self.keep_prob
                other = rng.integers(0, self.levels - 1, size=y.shape)
                other += other >= level  # uniform over the s−1 other levels
                level = np.where(flip, other, level)
            out[start:start + size, 1:] = level
        return out

    def decode(self, reports: Any) -> np.ndarray:
        reports = self._check_reports(reports)
        n = reports.shape[0]
        out = np.empty((n, self.dim))
        scale = self.padded_dim / self.k / (self.keep_prob - self.other_prob)
        for start, size in chunk_plan(n, self._rows):
            block = reports[start:start + size]
            signs, subset = self._public(block[:, 0])
            z = np.zeros((size, self.padded_dim))
            levels = block[:, 1:].astype(np.int64)
            np.put_along_axis(z, subset, self.grid[levels] * scale, axis=1)
            out[start:start + size] = unrotate(z, signs, self.dim) if self.rotate else z
        return out

    def _check_reports(self, reports: Any) -> np.ndarray:
        reports = super()._check_reports(reports)

        seeds, levels = reports[:, 0], reports[:, 1:]
        if ((seeds < 0) | (seeds >= 2**SEED_BITS) | (seeds != np.floor(seeds))).any():
            raise FedAuditError(f"reports[:, 0] must hold integer public seeds in [0, 2^{SEED_BITS})")
        if ((levels < 0) | (levels > self.levels - 1) | (levels != np.floor(levels))).any():
            raise FedAuditError(f"reports[:, 1:] must hold integer level indices in [0, levels-1={self.levels - 1}]")
        return reports

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        """log p(u) + Σ_j log P(o_j | y_j), p(u) = 2^−52 (uniform public seed)."""
        n = reports.shape[0]
        out = np.empty(n)
        for start, size in chunk_plan(n, self._rows):
            block = reports[start:start + size]
            signs, subset = self._public(block[:, 0])
            y = np.take_along_axis(self._transform(np.broadcast_to(x, (size, self.dim)), signs), subset, axis=1)
            out[start:start + size] = self._levels_log_prob(block[:, 1:], y).sum(axis=1)
        return out - SEED_BITS * math.log(2.0)

    def _privacy_loss(self, reports: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
        """Σ_j log P(o_j | y0_j) − log P(o_j | y1_j), the public signs and subset regenerated once
        per chunk for both inputs (the seed's probability cancels)."""
        n = reports.shape[0]
        out = np.empty(n)
        X = clip_l2(np.vstack([x0, x1]), self.clip)
        for start, size in chunk_plan(n, self._rows):
            block = reports[start:start + size]
            signs, subset = self._public(block[:, 0])
            lev = block[:, 1:]
            lp = []
            for x in X:
                y = np.broadcast_to(x, (size, self.dim))
                y = np.take_along_axis(rotate(y, signs) if self.rotate else y, subset, axis=1)
                lp.append(self._levels_log_prob(lev, y).sum(axis=1))
            with np.errstate(invalid="ignore"):
                out[start:start + size] = lp[0] - lp[1]
        return out

    def _coordinate_sups(self, y0: np.ndarray, y1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Elementwise m± = max_o ±log(P(o|y0)/P(o|y1)) over the s levels.

        Only the ≤ 4 levels next to y0 or y1 can have P ≠ c; every other level has ratio 1
        (c > 0) or is impossible under both (c = 0, skipped). Since Σ_o P(o|y0) = Σ_o P(o|y1) = 1
        some o has P(o|y0) ≥ P(o|y1), so m± ≥ 0 and the max over the candidates and 0 is exact.
        """
        lo0, _ = self._rounding(y0)
        lo1, _ = self._rounding(y1)
        cand = np.stack([lo0, lo0 + 1, lo1, lo1 + 1], axis=-1)
        lp0 = self._levels_log_prob(cand, y0[..., None])
        lp1 = self._levels_log_prob(cand, y1[..., None])
        both = np.isneginf(lp0) & np.isneginf(lp1)
        with np.errstate(invalid="ignore"):
            diff = lp0 - lp1
        up = np.where(both, -np.inf, diff).max(axis=-1)
        down = np.where(both, -np.inf, -diff).max(axis=-1)
        return np.maximum(up, 0.0), np.maximum(down, 0.0)

    def _top_k_sum(self, m: np.ndarray) -> np.ndarray:
        D = m.shape[-1]
        return np.partition(m, D - self.k, axis=-1)[..., D - self.k:].sum(axis=-1)

    #: largest |supp(x0) ∪ supp(x1)| for which rotate=True enumerates the public sign patterns
    max_enumerated_support = 16

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float | None:
        """sup over (signs, S, o) of |Σ_{j∈S} log P(o_j|y0_j) − log P(o_j|y1_j)|, y_i = R_s clip(x_i).

        Given the public seed the k outputs are independent, so for fixed signs the sup over
        (S, o) in direction ± is the sum of the k largest per-coordinate maxima m_j^± (see
        ``_coordinate_sups``); every k-subset S is possible. rotate=False: y_i = clip(x_i),
        ``max(top_k(m⁺), top_k(m⁻))``.

        rotate=True: with T = supp(x0) ∪ supp(x1) (|T| = t) and s_T = (−1)^σ,
        y_j = Σ_{a∈T} (−1)^{τ_a} x_a/√D where τ = h_j ⊕ σ ∈ GF(2)^t and h_j = (parity(j & a))_{a∈T}
        is the Sylvester–Hadamard row on T. j ↦ h_j is GF(2)-linear, so its image V is a
        subspace hit D/|V| times by each element, and for given σ the multiset {(y0_j, y1_j)}
        is {y(τ) : τ ∈ σ ⊕ V}, each D/|V| times. Hence the sup is the max over the 2^t/|V|
        cosets of V of the multiplicity-weighted top-k sums of m±(y(τ)): the 2^t sign patterns
        on T are covered exactly at cost O(2^t·t), independent of D. For t >
        ``max_enumerated_support`` this returns None: the sup is a max over exponentially many
        non-separable top-k sums (an audit then reports ``epsilon_exact=None`` and the claimed
        ε as the upper bound). Public randomness is modelled as ideal (uniform signs and
        subsets). Non-private (epsilon=None): ``inf`` when a level is possible under exactly
        one input.
        """
        X = clip_l2(np.vstack([x0, x1]), self.clip)
        if not self.rotate:
            up, down = self._coordinate_sups(X[0], X[1])
            return float(max(self._top_k_sum(up), self._top_k_sum(down)))
        T = np.flatnonzero((X[0] != 0.0) | (X[1] != 0.0))
        t = T.size
        if t == 0:
            return 0.0
        if t > self.max_enumerated_support:
            return None
        D = self.padded_dim
        bit = np.arange(t, dtype=np.int64)
        tau = np.arange(1 << t, dtype=np.int64)
        Y = (1.0 - 2.0 * ((tau[:, None] >> bit) & 1)) @ (X[:, T].T / math.sqrt(D))  # (2^t, 2)
        up, down = self._coordinate_sups(Y[:, 0], Y[:, 1])
        # xor basis of V = span{col_b}, col_b = (bit b of a)_{a∈T}, with distinct leading bits
        basis: dict[int, int] = {}
        for b in range(D.bit_length() - 1):
            v = int(sum(((int(a) >> b) & 1) << i for i, a in enumerate(T)))
            for lead in sorted(basis, reverse=True):
                if (v >> lead) & 1:
                    v ^= basis[lead]
            if v:
                basis[v.bit_length() - 1] = v
        label = tau.copy()  # canonical coset representative: clear every leading bit, high to low
        for lead in sorted(basis, reverse=True):
            label = np.where((label >> lead) & 1, label ^ basis[lead], label)
        size = 1 << len(basis)
        mult = D // size
        q, rem = divmod(self.k, mult)
        order = np.argsort(label, kind="stable")
        best = 0.0
        for m in (up, down):
            vals = -np.sort(-m[order].reshape(-1, size), axis=1)  # each coset, descending
            total = mult * vals[:, :q].sum(axis=1)
            if rem:
                total = total + rem * vals[:, q]
            best = max(best, float(total.max()))
        return best

    def _levels_log_prob(self, levels: np.ndarray, y: np.ndarray) -> np.ndarray:
        """log P(o | y) = log(c + (p − c)·P(round(y) = o)) elementwise."""
        lo, up = self._rounding(y)
        p_round = np.where(levels == lo, 1.0 - up, 0.0) + np.where(levels == lo + 1, up, 0.0)
        with np.errstate(divide="ignore"):
            return np.log(self.other_prob + (self.keep_prob - self.other_prob) * p_round)

    def expected_mse(self, x: Any) -> float:
        """Exact E‖x̂ − x‖² without rotation: Σ_j (d/k)·E[ŷ_j²] − y_j², where
        E[ŷ_j²] = Σ_o P(o | y_j)·L_o²/(p − c)² (y = clip(x); coordinates never clamp)."""
        if self.rotate:
            raise FedAuditError("expected_mse is exact only for rotate=False; use audit.measure_mse")
        y = clip_l2(check_vector("x", x, dim=self.dim)[None, :], self.clip)[0]
        outs = np.arange(self.levels)[None, :]
        p_out = np.exp(self._levels_log_prob(np.broadcast_to(outs, (self.dim, self.levels)),
                                             np.broadcast_to(y[:, None], (self.dim, self.levels))))
        second = p_out @ (self.grid ** 2) / (self.keep_prob - self.other_prob) ** 2
        return float(np.sum(self.dim / self.k * second - y ** 2))

    # ------------------------------------------------------------ diagnostics
    def clamping_bias(self, x: Any, rotations: int = 10_000, rng: RngLike = 0) -> dict[str, float]:
        """Monte Carlo over public randomness only (no quantization or privacy noise) of the
        bias E[x̂] − x caused by clamping rotated coordinates to [−B, B].

        Returns the bias norm (relative to ‖clip(x)‖), a per-coordinate max |bias| with its
        standard error, and the fraction of clamped coordinates.
        """
        x = check_vector("x", x, dim=self.dim)
        rotations = check_int("rotations", rotations, low=2, high=10**12, high_name="10^12")
        gen = as_generator(rng)
        xc = clip_l2(x[None, :], self.clip)[0]
        total = np.zeros(self.dim)
        total_sq = np.zeros(self.dim)
        clamped = 0
        for _, size in chunk_plan(rotations, self._rows):
            seeds = gen.integers(0, 2**SEED_BITS, size=size).astype(np.float64)
            signs = random_signs(seeds, self.padded_dim) if self.rotate else None
            y = self._transform(np.broadcast_to(xc, (size, self.dim)), signs)
            excess = y - np.clip(y, -self.bound, self.bound)
            clamped += int(np.count_nonzero(excess))
            err = -(unrotate(excess, signs, self.dim) if self.rotate else excess)
            total += err.sum(0)
            total_sq += (err ** 2).sum(0)
        mean = total / rotations
        se = np.sqrt(np.maximum(total_sq / rotations - mean ** 2, 0.0) / rotations)
        norm = float(np.linalg.norm(xc))
        return {
            "bias_norm": float(np.linalg.norm(mean)),
            "relative_bias_norm": float(np.linalg.norm(mean) / norm) if norm > 0 else 0.0,
            "max_abs_bias": float(np.abs(mean).max()),
            "max_bias_se": float(se.max()),
            "clamped_fraction": clamped / (rotations * self.padded_dim),
        }
