"""The gated sparse upload of E-FLoPS: what a client sends, on the wire, and how the server merges it.

:class:`GatedSparseUpload` is the upload a user builds: the wire format of
:mod:`fedaudit.mechanisms.gated_wire` (a client's :class:`ClientUpdate`, the top-m
:class:`SparsePacket` it sends, the binary packet of ``packet_bytes(m) = 16 + m·(b_i + 2·b_v)``
bytes and its strict decoder) and the server's merge rules of
:mod:`fedaudit.mechanisms.gated_merge` (``"senders"``, ``"dense"``, ``"votes"``), plus the client
protocol flags of E-FLoPS (see ``docs/guides/gated-upload.md``).

:class:`GatedPrivateUpload` (registered as ``"gated-private"``) is the ε-LDP variant: noisy top-m
selection of the indices (the exponential mechanism m times without replacement, sampled exactly)
plus discrete-Laplace values and gate statistics.

Every name of the wire format and the merge rules is importable from here too.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import logsumexp

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import PureLDP
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism, check_epsilon, clip_l2
from fedaudit.mechanisms.gated_merge import LOG_ALPHA_CLOSED, GatedMergeRule
from fedaudit.mechanisms.gated_wire import (
    HEADER_BYTES, MAGIC, VERSION, ClientUpdate, GatedWireFormat, SparsePacket, m_for_density, top_m_indices,
)
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.noise import bernoulli_exp, discrete_laplace_logpmf, rational_at_least
from fedaudit.validation import check_int, check_positive, check_probability, check_vector

__all__ = ["ClientUpdate", "SparsePacket", "GatedSparseUpload", "GatedPrivateUpload", "m_for_density",
           "top_m_indices", "MAGIC", "VERSION", "HEADER_BYTES", "LOG_ALPHA_CLOSED", "GatedWireFormat", "GatedMergeRule"]


class GatedSparseUpload(GatedMergeRule):
    """Top-m gated sparse upload (E-FLoPS): client ``select``/``encode``, server ``decode``,
    ``reconstruct`` and ``aggregate``.

    The client side and the wire are those of :class:`~fedaudit.mechanisms.gated_wire.GatedWireFormat`
    (``dim``, ``m``, ``index_bytes``, ``value_dtype``), the server's aggregation rule that of
    :class:`~fedaudit.mechanisms.gated_merge.GatedMergeRule` (``rule``, ``unsent_decay``,
    ``closed_log_alpha``).

    Client protocol flags read by :func:`fedaudit.fl.eflops.train_eflops`: ``error_feedback``
    (default True: client i selects and sends from θ̃_i + e_i and keeps the unsent change e_i,
    :class:`fedaudit.fl.gated_training.ErrorFeedback`; the wire format is unchanged) and
    ``dense_rounds`` W ≥ 0 (default 0: the first W rounds use the dense upload, 2·p·4 bytes per client).
    """

    def __init__(self, dim: int, m: int, *, index_bytes: int | None = None, value_dtype: str = "float32",
                 rule: str = "votes", unsent_decay: float = 0.05, closed_log_alpha: float = LOG_ALPHA_CLOSED,
                 error_feedback: bool = True, dense_rounds: int = 0):
        super().__init__(dim, m, index_bytes=index_bytes, value_dtype=value_dtype, rule=rule,
                         unsent_decay=unsent_decay, closed_log_alpha=closed_log_alpha)
        if not isinstance(error_feedback, (bool, np.bool_)):
            raise FedAuditError(f"error_feedback must be True or False, got {error_feedback!r}")
        self.error_feedback = bool(error_feedback)
        self.dense_rounds = check_int("dense_rounds", dense_rounds, low=0)

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "m": self.m, "index_bytes": self.index_bytes, "value_dtype": self.value_dtype,
                "rule": self.rule, "unsent_decay": self.unsent_decay, "closed_log_alpha": self.closed_log_alpha,
                "error_feedback": self.error_feedback, "dense_rounds": self.dense_rounds}

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**self.params(), "packet_bytes": self.packet_bytes(), "dense_bytes": self.dense_bytes(),
                         "dense_gated_bytes": self.dense_bytes(gates=True)})

    def __repr__(self) -> str:
        return f"GatedSparseUpload({', '.join(f'{k}={v!r}' for k, v in self.params().items())})"


#: largest m for which ``GatedPrivateUpload.log_prob`` sums the m! selection orders exactly
MAX_LOG_PROB_M = 5
#: most index sets ``GatedPrivateUpload.epsilon_for_pair`` enumerates
MAX_PAIR_SETS = 20_000
#: K: the private selection rounds clamp(log α) to the integer grid K·log α/a ∈ [−K, K]
GATE_LEVELS = 4096


class GatedPrivateUpload(Mechanism):
    """ε-LDP gated sparse upload: exponential-mechanism noisy top-m indices, discrete-Laplace values and gates.

    Input x = (θ̃, log α) ∈ R^{2p} (``dim = 2p``), clamped coordinate-wise to the domain
    D = [−c, c]^p × [−a, a]^p (c = ``clip``, a = ``gate_clip``); the neighbouring relation is that of
    LDP: any two inputs of D. With ε = ε_s + ε_v + ε_g (``select_share``·ε, ``gate_share``·ε, the rest):

    1. **Selection** — the gates are rounded to the integer grid k_j = rint(K·clamp(log α_j)/a) ∈
       [−K, K] (K = 4096 = ``GATE_LEVELS``), and m indices are drawn without replacement by the
       exponential mechanism (McSherry & Talwar 2007), each round P[j] ∝ exp(r·k_j) over the indices
       left, with the exact rational r ≤ ε_s/(4Km). The utility k_j has range 2K over D, so each
       round is (2·2K·r ≤ ε_s/m)-DP and the set (a post-processing of the ordered picks) is ε_s-DP
       by basic composition. Sampling is exact: a uniform proposal among the indices left (integer
       uniforms) accepted with probability exp(−r·(max k − k_j)) by the exact Bernoulli(exp(−γ))
       coins of Canonne, Kamath, Steinke (NeurIPS 2020), so no floating-point noise decides the set.
       (In law this is the Gumbel top-m of r·k, Durfee & Rogers, NeurIPS 2019.)
    2. **Values** — clamp(θ̃)_S through :class:`~fedaudit.mechanisms.Laplace` (dim m, ε_v, clip c√m,
       whose ball contains [−c, c]^m): ε_v-DP for every fixed S. **Gates** — likewise clamp(log α)_S at ε_g.

    Given S the two noises are independent, so p(S, v, g | x) = P[S | x]·p_v(v | θ̃_S)·p_g(g | u_S) and
    the privacy loss is at most ε_s + ε_v + ε_g = ε: pure ε-LDP (:class:`~fedaudit.guarantees.PureLDP`).

    Report layout (n, 3p): ``[1{j ∈ S}, v_j, g_j]_{j<p}`` (v_j = g_j = 0 off S), as
    :func:`fedaudit.audit.sparse_upload.packet_row`. ``decode`` gives (n, 2p) = (v, g) with zeros off
    S: the sparse reconstruction, unbiased only on the sent coordinates (selection depends on x).
    ``log_prob`` is exact for m ≤ 5 (sum over the m! pick orders; −inf for impossible rows) and
    ``epsilon_for_pair`` exact for C(p, m) ≤ 20000 (max over S of |ΔlogP[S]| + ε_v(S) + ε_g(S), the
    Laplace parts attaining their bounds at both signs).
    """

    name = "gated-private"

    def __init__(self, params: int, m: int, epsilon: float, *, clip: float = 1.0, gate_clip: float = 4.0,
                 select_share: float = 0.5, gate_share: float = 0.25):
        self.params_dim = check_int("params", params, low=1, high=2**32 - 1, high_name="2^32-1")
        self.m = check_int("m", m, low=1, high=self.params_dim, high_name="params")
        self.dim = 2 * self.params_dim
        eps = check_epsilon(epsilon)
        self.guarantee = PureLDP(eps)
        self.clip = check_positive("clip", clip)
        self.gate_clip = check_positive("gate_clip", gate_clip)
        self.select_share = check_probability("select_share", select_share)
        self.gate_share = check_probability("gate_share", gate_share)
        if self.select_share + self.gate_share >= 1.0:
            raise FedAuditError(f"select_share + gate_share must be < 1 (the rest is the values' budget), got "
                                f"{self.select_share:g} + {self.gate_share:g}")
        self.epsilon_select = self.select_share * eps
        self.epsilon_gates = self.gate_share * eps
        # ε_v: the float at or below ε − ε_s − ε_g taken exactly, so ε_s + ε_v + ε_g <= ε holds as real numbers
        rest = Fraction(eps) - Fraction(self.epsilon_select) - Fraction(self.epsilon_gates)
        ev = float(rest)
        self.epsilon_values = math.nextafter(ev, 0.0) if Fraction(ev) > rest else ev
        # r = rate_num/rate_den <= ε_s/(4Km) exactly (rational_at_least of the reciprocal never under-states it)
        recip = Fraction(4 * GATE_LEVELS * self.m) / Fraction(self.epsilon_select)
        den, num = rational_at_least(recip, max_den=max(1, min(1 << 20, (1 << 50) // (math.ceil(recip) + 1))))
        self.rate_num, self.rate_den = num, den
        self.selection_rate = num / den
        root = math.sqrt(self.m)
        self.values_mechanism = Laplace(self.m, self.epsilon_values, clip=self.clip * root)
        self.gates_mechanism = Laplace(self.m, self.epsilon_gates, clip=self.gate_clip * root)
        p = self.params_dim
        self.report_width = 3 * p
        self.report_layout = (f"(n, {3 * p}) float64: [1{{j sent}} (p={p}), noisy values, noisy gates]; "
                              f"m={self.m} sent per row")

    @property
    def bits_per_report(self) -> int:
        """m·(⌈log2 p⌉ index bits + 64 + 64 value bits)."""
        return self.m * (max(1, math.ceil(math.log2(self.params_dim))) + 128)

    def params(self) -> dict[str, Any]:
        return {"params": self.params_dim, "m": self.m, "epsilon": self.epsilon, "clip": self.clip,
                "gate_clip": self.gate_clip, "select_share": self.select_share, "gate_share": self.gate_share}

    # ------------------------------------------------------------------ sampling
    def _split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = self.params_dim
        return np.clip(X[:, :p], -self.clip, self.clip), np.clip(X[:, p:], -self.gate_clip, self.gate_clip)

    def gate_levels(self, u: np.ndarray) -> np.ndarray:
        """k = rint(K·u/a) ∈ [−K, K] (int64) for clamped gates u."""
        return np.rint(u * (GATE_LEVELS / self.gate_clip)).astype(np.int64)

    def _select(self, k: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """m rounds of the exponential mechanism P[j] ∝ exp(r·k_j) without replacement, exactly:
        propose j uniformly (rejecting indices already taken), accept with Bernoulli(exp(−r·(max k − k_j)))."""
        n, p = k.shape
        if self.m == p:
            return np.tile(np.arange(p), (n, 1))
        taken = np.zeros((n, p), dtype=bool)
        picks = np.empty((n, self.m), dtype=np.int64)
        for t in range(self.m):
            kmax = np.where(taken, -GATE_LEVELS - 1, k).max(axis=1)
            pending, done = np.arange(n), np.zeros(n, dtype=bool)
            while pending.size:
                j = rng.integers(0, p, size=pending.size)
                free = ~taken[pending, j]
                rows, cols = pending[free], j[free]
                coin = bernoulli_exp((kmax[rows] - k[rows, cols]) * self.rate_num, self.rate_den, rng)
                rows, cols = rows[coin], cols[coin]
                picks[rows, t] = cols
                taken[rows, cols] = True
                done[rows] = True
                pending = pending[~done[pending]]
        return np.sort(picks, axis=1)

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        theta, u = self._split(X)
        n, p = theta.shape
        S = self._select(self.gate_levels(u), rng)
        rows = np.arange(n)[:, None]
        out = np.zeros((n, 3 * p))
        out[rows, S] = 1.0
        out[rows, p + S] = self.values_mechanism.encode(theta[rows, S], rng)
        out[rows, 2 * p + S] = self.gates_mechanism.encode(u[rows, S], rng)
        return out

    def decode_bias(self) -> None:
        """None: the sent set depends on x, so the reconstruction is unbiased only on it."""
        return None

    def decode(self, reports: Any) -> np.ndarray:
        """(n, 2p) sparse reconstruction (θ̃, log α) with zeros off the sent set."""
        r = self._check_reports(reports)
        return r[:, self.params_dim:].copy()

    def to_packet(self, report: Any) -> SparsePacket:
        """One report row as a :class:`SparsePacket` (for :meth:`GatedSparseUpload.aggregate` with
        ``value_dtype="float64"``, which carries the grid values exactly)."""
        r = check_vector("report", report, dim=self.report_width)
        p = self.params_dim
        idx = np.flatnonzero(r[:p] == 1.0)
        if idx.size != self.m:
            raise FedAuditError(f"report must mark exactly m={self.m} sent coordinates, got {idx.size}")
        return SparsePacket(idx, r[p + idx], r[2 * p + idx])

    # ------------------------------------------------------------------ exact law
    def _select_log_prob(self, S: np.ndarray, u: np.ndarray) -> np.ndarray:
        """log P[S | u] for index sets S (n, m): Σ over the m! orders π of Π_t w_{π_t}/(W − Σ_{s<t} w_{π_s}),
        w = exp(r·(k − max k)), W = Σ_j w_j (the Plackett–Luce law of m exponential-mechanism rounds)."""
        k = self.gate_levels(u)
        w = np.exp(self.selection_rate * (k - k.max()))
        total = w.sum()
        perms = np.array(list(itertools.permutations(range(self.m))))          # (P, m)
        out = np.empty(S.shape[0])
        for lo in range(0, S.shape[0], 4096):
            ws = w[S[lo:lo + 4096]][:, perms]                                   # (b, P, m)
            before = np.cumsum(ws, axis=2) - ws
            denom = np.maximum(total - before, ws)                              # rounding guard: ≥ the picked weight
            out[lo:lo + 4096] = logsumexp((np.log(ws) - np.log(denom)).sum(axis=2), axis=1)
        return out

    def _laplace_log_prob(self, mech: Laplace, noisy: np.ndarray, exact: np.ndarray) -> np.ndarray:
        k = np.rint(clip_l2(exact, mech.clip) / mech.grid)
        return discrete_laplace_logpmf(noisy / mech.grid - k, mech.scale_grid).sum(axis=1)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        if self.m > MAX_LOG_PROB_M:
            raise NotImplementedError(f"GatedPrivateUpload.log_prob sums m! orders; only for m <= {MAX_LOG_PROB_M}")
        p, m = self.params_dim, self.m
        theta, u = (a[0] for a in self._split(x[None, :]))
        ind = reports[:, :p]
        valid = np.all((ind == 0.0) | (ind == 1.0), axis=1) & (ind.sum(axis=1) == m)
        out = np.full(reports.shape[0], -np.inf)
        if not valid.any():
            return out
        R = reports[valid]
        S = np.sort(np.argsort(-R[:, :p], axis=1, kind="stable")[:, :m], axis=1)
        rows = np.arange(R.shape[0])[:, None]
        off = (R[:, p:2 * p] != 0.0) & (R[:, :p] == 0.0) | (R[:, 2 * p:] != 0.0) & (R[:, :p] == 0.0)
        lp = (self._select_log_prob(S, u)
              + self._laplace_log_prob(self.values_mechanism, R[rows, p + S], theta[S])
              + self._laplace_log_prob(self.gates_mechanism, R[rows, 2 * p + S], u[S]))
        out[valid] = np.where(off.any(axis=1), -np.inf, lp)
        return out

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float | None:
        p, m = self.params_dim, self.m
        if m > MAX_LOG_PROB_M or math.comb(p, m) > MAX_PAIR_SETS:
            return None
        S = np.array(list(itertools.combinations(range(p), m)), dtype=np.int64)
        (t0, u0), (t1, u1) = ((a[0] for a in self._split(x[None, :])) for x in (x0, x1))
        sel = np.abs(self._select_log_prob(S, u0) - self._select_log_prob(S, u1))

        def lap(mech: Laplace, a: np.ndarray, b: np.ndarray) -> np.ndarray:
            ka = np.rint(clip_l2(a[S], mech.clip) / mech.grid)
            kb = np.rint(clip_l2(b[S], mech.clip) / mech.grid)
            return np.abs(ka - kb).sum(axis=1) / mech.scale_grid

        return float(np.max(sel + lap(self.values_mechanism, t0, t1) + lap(self.gates_mechanism, u0, u1)))
