"""The gated sparse upload of E-FLoPS: what a client sends, on the wire, and how the server merges it.

A client holds a :class:`ClientUpdate` — its weights θ̃ and Hard Concrete gate parameters log α
(Louizos, Welling, Kingma 2018), flat arrays of length p = |θ|. It uploads only the m = ⌊ρ·p⌋
coordinates with the largest gate probability P(z_j ≠ 0) = sigmoid(log α_j − β·log(−γ/ζ)), which is
increasing in log α_j, so the ranking is by log α_j (ties: lower index first). Each sent coordinate
carries (j, θ̃_j, log α_j). :class:`GatedSparseUpload` defines the binary wire format, its exact byte
count, a strict decoder, and the server's reconstruction and aggregation rule (see
``docs/guides/gated-upload.md``).

Wire format (little endian; ``packet_bytes(m) = 16 + m·(b_i + 2·b_v)``)::

    offset  size      field
    0       4         magic b"FAGS"
    4       1         version (1)
    5       1         b_i: index bytes (2 = uint16, 4 = uint32)
    6       1         b_v: value bytes (4 = float32, 8 = float64)
    7       1         reserved (0)
    8       4         dim p (uint32)
    12      4         m (uint32)
    16      m·b_i     indices, strictly increasing, each < p
    ...     m·b_v     values θ̃_j (in index order)
    ...     m·b_v     gate statistics log α_j (in index order)

:class:`GatedPrivateUpload` (registered as ``"gated-private"``) is the ε-LDP variant: noisy top-m
selection of the indices (the exponential mechanism m times without replacement, sampled exactly)
plus discrete-Laplace values and gate statistics.
"""

from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
from scipy.special import logsumexp

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import PureLDP
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism, check_epsilon, clip_l2
from fedaudit.mechanisms.laplace import Laplace
from fedaudit.mechanisms.noise import bernoulli_exp, discrete_laplace_logpmf, rational_at_least
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real, check_vector

__all__ = ["ClientUpdate", "SparsePacket", "GatedSparseUpload", "GatedPrivateUpload", "m_for_density",
           "top_m_indices", "MAGIC", "VERSION", "HEADER_BYTES", "LOG_ALPHA_CLOSED"]

MAGIC = b"FAGS"
VERSION = 1
_HEADER = struct.Struct("<4sBBBBII")
#: bytes of the packet header (magic, version, dtypes, reserved, dim, m)
HEADER_BYTES = _HEADER.size
_VALUE_DTYPES = {"float32": 4, "float64": 8}
_BYTES_TO_VALUE = {4: "float32", 8: "float64"}
_INDEX_DTYPES = {2: "<u2", 4: "<u4"}
#: log α = log(0.01), the lower clamp of Louizos et al.'s reference code: P(z ≠ 0) = sigmoid(log α + 1.5986) ≈ 0.047
LOG_ALPHA_CLOSED = math.log(1e-2)


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class ClientUpdate:
    """One client's state after local training: weights θ̃ and gate parameters log α (flat, length p).

    Both are finite float64 vectors of the same length p ≥ 1 (copied, read-only).
    """

    weights: np.ndarray
    log_alpha: np.ndarray

    def __post_init__(self) -> None:
        w = check_vector("weights", self.weights).copy()
        la = check_vector("log_alpha", self.log_alpha).copy()
        if w.shape[0] < 1:
            raise FedAuditError("weights must have at least 1 entry, got shape (0,)")
        if la.shape != w.shape:
            raise FedAuditError(f"log_alpha must have the shape of weights {w.shape}, got shape {la.shape}")
        object.__setattr__(self, "weights", _readonly(w))
        object.__setattr__(self, "log_alpha", _readonly(la))

    @property
    def dim(self) -> int:
        """p = |θ|."""
        return int(self.weights.shape[0])

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"weights": self.weights, "log_alpha": self.log_alpha})


@dataclass(frozen=True, eq=False)
class SparsePacket:
    """What the server reads from one client: sent indices (strictly increasing int64), the values
    θ̃_j and gate statistics log α_j at them (finite float64, same length m)."""

    indices: np.ndarray
    values: np.ndarray
    gate_stats: np.ndarray

    def __post_init__(self) -> None:
        idx = np.asarray(self.indices)
        integral = idx.dtype.kind in "iu" or (idx.dtype.kind == "f" and bool(np.all(np.isfinite(idx)))
                                               and bool(np.all(idx == np.rint(idx))))
        if idx.ndim != 1 or not integral:
            raise FedAuditError(f"indices must be a 1-D array of integers, got shape {idx.shape} dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=True)
        if idx.size and (idx[0] < 0 or np.any(np.diff(idx) <= 0)):
            raise FedAuditError("indices must be non-negative and strictly increasing (no repeated index)")
        vals = check_vector("values", self.values).copy() if idx.size else np.zeros(0)
        gates = check_vector("gate_stats", self.gate_stats).copy() if idx.size else np.zeros(0)
        if vals.shape != idx.shape or gates.shape != idx.shape:
            raise FedAuditError(f"values and gate_stats must have the shape of indices {idx.shape}, got "
                                f"{vals.shape} and {gates.shape}")
        object.__setattr__(self, "indices", _readonly(idx))
        object.__setattr__(self, "values", _readonly(vals))
        object.__setattr__(self, "gate_stats", _readonly(gates))

    @property
    def m(self) -> int:
        return int(self.indices.shape[0])

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"indices": self.indices, "values": self.values, "gate_stats": self.gate_stats})


def m_for_density(density: Any, dim: Any) -> int:
    """m = ⌊ρ·p⌋ with ρ read as its shortest decimal (so ⌊0.29·100⌋ = 29, not 28 from binary rounding).

    ρ must be in (0, 1) and m ≥ 1 (else a FedAuditError naming the smallest ρ that keeps one coordinate).
    """
    rho = check_probability("density", density)
    p = check_int("dim", dim, low=1)
    m = math.floor(Fraction(repr(rho)) * p)
    if m < 1:
        raise FedAuditError(f"density must be in [1/dim, 1) = [{1 / p:g}, 1) so that m = floor(density*dim) >= 1, "
                            f"got density={rho:g} with dim={p}")
    return m


def top_m_indices(scores: np.ndarray, m: int) -> np.ndarray:
    """The m largest entries of ``scores`` (ties: lower index first), returned in increasing index order.

    Vectorised: ``argpartition`` for the candidates, then an exact (score desc, index asc) order on
    the boundary ties only.
    """
    p = scores.shape[0]
    if m >= p:
        return np.arange(p, dtype=np.int64)
    kth = -np.partition(-scores, m - 1)[m - 1]          # the m-th largest score
    above = np.flatnonzero(scores > kth)
    ties = np.flatnonzero(scores == kth)[: m - above.size]
    return np.sort(np.concatenate([above, ties])).astype(np.int64)


class GatedSparseUpload:
    """Top-m gated sparse upload (E-FLoPS): client ``select``/``encode``, server ``decode``,
    ``reconstruct`` and ``aggregate``.

    Client: S = the m indices with the largest log α_j (ties: lower index), sent as (j, θ̃_j, log α_j)
    in the wire format of this module; values are rounded to ``value_dtype`` (``select`` returns
    exactly what ``decode(encode(·))`` gives). ``index_bytes`` defaults to 2 (uint16) when p ≤ 2^16,
    else 4 (uint32).

    Server aggregation rule ``rule="senders"`` for packets P_i with client weights w_i
    (e.g. sample counts n_i) and the previous global state (θ̄, φ̄): for every coordinate j let
    S_j = {i : j ∈ P_i, w_i > 0}; if S_j ≠ ∅

        θ_j = Σ_{i∈S_j} w_i θ̃_ij / Σ_{i∈S_j} w_i,     log α_j = Σ_{i∈S_j} w_i log α_ij / Σ_{i∈S_j} w_i,

    otherwise θ_j = θ̄_j and log α_j = u_j, the non-senders' gate (:meth:`unsent_gates`): by default
    φ̄_j + κ·(c − φ̄_j) (κ = ``unsent_decay`` ∈ [0, 1], default 0.05; 0: unchanged; c =
    ``closed_log_alpha``, default log 0.01), or the ``unsent_log_alpha`` the caller passes.
    ``rule="dense"`` is FedAvg of the reconstructions (each client's unsent coordinates = the previous
    global value): θ_j = Σ_i w_i r_ij / Σ_i w_i, the same as :class:`fedaudit.defenses.Mean` on
    ``reconstruct`` rows. ``rule="votes"`` is the dense rule with every non-sender's gate taken as
    u_j: θ_j as in "dense", log α_j = (Σ_{S_j} w_i log α_ij + Σ_{i∉S_j} w_i u_j) / Σ_i w_i — the
    default, and the rule for *training* through the upload (``docs/guides/gated-upload.md``: with "senders" or "dense" the
    gates a client closes are never heard, ρ̂ cannot fall and E-FLoPS diverges; E-FLoPS passes u =
    the data-free local step of φ̄, :func:`fedaudit.fl.gated_training.data_free_gates`). The senders
    rule is what the FLoPS reviews describe as weighted averaging of (θ̃, φ), restricted to the
    clients that hold information about j; the dense rule shrinks a coordinate toward its previous
    value by the share of clients that did not send it.

    Client protocol flags read by :func:`fedaudit.fl.eflops.train_eflops`: ``error_feedback``
    (default True: client i selects and sends from θ̃_i + e_i and keeps the unsent change e_i,
    :class:`fedaudit.fl.gated_training.ErrorFeedback`; the wire format is unchanged) and
    ``dense_rounds`` W ≥ 0 (default 0: the first W rounds use the dense upload, 2·p·4 bytes per client).
    """

    def __init__(self, dim: int, m: int, *, index_bytes: int | None = None, value_dtype: str = "float32",
                 rule: str = "votes", unsent_decay: float = 0.05, closed_log_alpha: float = LOG_ALPHA_CLOSED,
                 error_feedback: bool = True, dense_rounds: int = 0):
        self.dim = check_int("dim", dim, low=1, high=2**32 - 1, high_name="2^32-1")
        self.m = check_int("m", m, low=1, high=self.dim, high_name="dim")
        if index_bytes is None:
            index_bytes = 2 if self.dim <= 2**16 else 4
        self.index_bytes = check_choice("index_bytes", index_bytes, (2, 4))
        if self.index_bytes == 2 and self.dim > 2**16:
            raise FedAuditError(f"index_bytes must be 4 for dim > 65536 (uint16 indices), got index_bytes=2 "
                                f"with dim={self.dim}")
        self.value_dtype = check_choice("value_dtype", value_dtype, tuple(_VALUE_DTYPES))
        self.value_bytes = _VALUE_DTYPES[self.value_dtype]
        self.rule = check_choice("rule", rule, ("senders", "dense", "votes"))
        self.unsent_decay = check_real("unsent_decay", unsent_decay, low=0.0, high=1.0)
        self.closed_log_alpha = check_real("closed_log_alpha", closed_log_alpha)
        if not isinstance(error_feedback, (bool, np.bool_)):
            raise FedAuditError(f"error_feedback must be True or False, got {error_feedback!r}")
        self.error_feedback = bool(error_feedback)
        self.dense_rounds = check_int("dense_rounds", dense_rounds, low=0)
        self._vdtype = np.dtype(self.value_dtype).newbyteorder("<")
        self._idtype = np.dtype(_INDEX_DTYPES[self.index_bytes])

    # ------------------------------------------------------------------ byte counts
    def packet_bytes(self, m: int | None = None) -> int:
        """Exact length of one packet with m coordinates: 16 + m·(index_bytes + 2·value_bytes)."""
        m = self.m if m is None else check_int("m", m, low=0, high=self.dim, high_name="dim")
        return HEADER_BYTES + m * (self.index_bytes + 2 * self.value_bytes)

    def dense_bytes(self, *, gates: bool = False) -> int:
        """Bytes of a dense upload at ``value_dtype`` with no header: p·b_v for FedAvg (weights only),
        2·p·b_v for dense FLoPS (``gates=True``: weights and log α)."""
        return (2 if gates else 1) * self.dim * self.value_bytes

    # ------------------------------------------------------------------ client
    def _check_update(self, update: Any) -> ClientUpdate:
        if not isinstance(update, ClientUpdate):
            raise FedAuditError(f"update must be a ClientUpdate, got {type(update).__name__}")
        if update.dim != self.dim:
            raise FedAuditError(f"update must have dim={self.dim} entries, got {update.dim}")
        return update

    def _round(self, name: str, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            r = x.astype(self._vdtype)
        if not np.isfinite(r).all():
            i = int(np.argmax(~np.isfinite(r)))
            raise FedAuditError(f"{name} must fit in {self.value_dtype} (|x| <= {np.finfo(self._vdtype).max:.4g}), "
                                f"found {x[i]:g} at position {i}")
        return r.astype(np.float64)

    def select(self, update: ClientUpdate) -> SparsePacket:
        """The client's packet: top-m log α (ties: lower index), values rounded to ``value_dtype``."""
        u = self._check_update(update)
        idx = top_m_indices(u.log_alpha, self.m)
        return SparsePacket(idx, self._round("weights", u.weights[idx]), self._round("log_alpha", u.log_alpha[idx]))

    def encode(self, update: ClientUpdate | SparsePacket) -> bytes:
        """Wire bytes of ``select(update)`` (or of a packet, e.g. an attacker's); len = packet_bytes(m)."""
        packet = update if isinstance(update, SparsePacket) else self.select(update)
        self._check_packet(packet)
        header = _HEADER.pack(MAGIC, VERSION, self.index_bytes, self.value_bytes, 0, self.dim, packet.m)
        return b"".join((header, packet.indices.astype(self._idtype).tobytes(),
                         self._round("values", packet.values).astype(self._vdtype).tobytes(),
                         self._round("gate_stats", packet.gate_stats).astype(self._vdtype).tobytes()))

    # ------------------------------------------------------------------ server
    def _check_packet(self, packet: Any) -> SparsePacket:
        if not isinstance(packet, SparsePacket):
            raise FedAuditError(f"packet must be a SparsePacket, got {type(packet).__name__}")
        if packet.m != self.m:
            raise FedAuditError(f"packet must carry m={self.m} coordinates, got {packet.m}")
        if packet.m and packet.indices[-1] >= self.dim:
            raise FedAuditError(f"packet indices must be in [0, dim={self.dim}), got index {int(packet.indices[-1])}")
        return packet

    def decode(self, data: Any) -> SparsePacket:
        """Parse one packet strictly: anything but a well-formed packet of this configuration (magic,
        version, dtypes, dim, m, exact length, indices strictly increasing and < dim, finite values)
        raises FedAuditError."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise FedAuditError(f"packet data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < HEADER_BYTES:
            raise FedAuditError(f"packet is truncated: {len(data)} bytes, the header alone is {HEADER_BYTES}")
        magic, version, ib, vb, reserved, dim, m = _HEADER.unpack_from(data)
        if magic != MAGIC:
            raise FedAuditError(f"packet magic must be {MAGIC!r}, got {magic!r}")
        if version != VERSION:
            raise FedAuditError(f"packet version must be {VERSION}, got {version}")
        if reserved != 0:
            raise FedAuditError(f"packet reserved byte must be 0, got {reserved}")
        got = {"index_bytes": ib, "value_bytes": vb, "dim": dim, "m": m}
        want = {"index_bytes": self.index_bytes, "value_bytes": self.value_bytes, "dim": self.dim, "m": self.m}
        for key in want:
            if got[key] != want[key]:
                raise FedAuditError(f"packet {key} must be {want[key]} for this upload, got {got[key]}")
        if len(data) != self.packet_bytes():
            raise FedAuditError(f"packet must be exactly {self.packet_bytes()} bytes for m={m}, got {len(data)} "
                                f"({'truncated' if len(data) < self.packet_bytes() else 'trailing bytes'})")
        o1 = HEADER_BYTES + m * ib
        o2 = o1 + m * vb
        idx = np.frombuffer(data, self._idtype, m, HEADER_BYTES).astype(np.int64)
        vals = np.frombuffer(data, self._vdtype, m, o1).astype(np.float64)
        gates = np.frombuffer(data, self._vdtype, m, o2).astype(np.float64)
        if m and (idx.max() >= dim):
            raise FedAuditError(f"packet indices must be in [0, dim={dim}), got index {int(idx.max())}")
        if not (np.isfinite(vals).all() and np.isfinite(gates).all()):
            raise FedAuditError("packet values and gate statistics must be finite (found NaN or inf)")
        return SparsePacket(idx, vals, gates)

    def receive(self, blobs: Sequence[Any]) -> tuple[list[SparsePacket], list[int]]:
        """Decode every blob, dropping malformed ones: (packets, positions of the dropped blobs)."""
        packets, dropped = [], []
        for i, blob in enumerate(blobs):
            try:
                packets.append(self._check_packet(blob) if isinstance(blob, SparsePacket) else self.decode(blob))
            except FedAuditError:
                dropped.append(i)
        return packets, dropped

    def _check_previous(self, previous: Any) -> ClientUpdate:
        if not isinstance(previous, ClientUpdate):
            raise FedAuditError(f"previous must be a ClientUpdate (the global state), got {type(previous).__name__}")
        if previous.dim != self.dim:
            raise FedAuditError(f"previous must have dim={self.dim} entries, got {previous.dim}")
        return previous

    def unsent_gates(self, previous: ClientUpdate, unsent_log_alpha: Any = None) -> np.ndarray:
        """u: the gate the server assumes for a coordinate a client did not send — ``unsent_log_alpha``
        if given (E-FLoPS passes the gates' data-free local step, :func:`fedaudit.fl.gated_training.data_free_gates`),
        else the decayed previous gate φ̄ + κ·(c − φ̄)."""
        prev = self._check_previous(previous)
        if unsent_log_alpha is None:
            return prev.log_alpha + self.unsent_decay * (self.closed_log_alpha - prev.log_alpha)
        return check_vector("unsent_log_alpha", unsent_log_alpha, dim=self.dim)

    def reconstruct(self, packet: SparsePacket | bytes, previous: ClientUpdate, *,
                    unsent_log_alpha: Any = None) -> ClientUpdate:
        """Dense view of one packet: sent coordinates from the packet, the rest from ``previous``
        (``rule="votes"``: unsent gates u from :meth:`unsent_gates`)."""
        packet = self.decode(packet) if not isinstance(packet, SparsePacket) else self._check_packet(packet)
        prev = self._check_previous(previous)
        w = prev.weights.copy()
        la = self.unsent_gates(prev, unsent_log_alpha).copy() if self.rule == "votes" else prev.log_alpha.copy()
        w[packet.indices] = packet.values
        la[packet.indices] = packet.gate_stats
        return ClientUpdate(w, la)

    def aggregate(self, packets: Sequence[SparsePacket | bytes], previous: ClientUpdate,
                  weights: Any = None, *, aggregator: Any = None, unsent_log_alpha: Any = None) -> ClientUpdate:
        """The new global state from the packets by the rule of the class docstring (bytes are decoded
        strictly; use :meth:`receive` to drop malformed ones first).

        ``aggregator`` (any rule mapping (n, p) to (p,), e.g. ``make_aggregator("nnm+cwtm", f)``)
        replaces the rule by the robust path: the rule applied to the ``reconstruct`` rows of the
        weights and, separately, of log α (unweighted: ``weights`` must be None); coordinates nobody
        sent then take u as above. ``unsent_log_alpha``: the non-senders' gate u (:meth:`unsent_gates`).
        """
        packets = [self.decode(p) if not isinstance(p, SparsePacket) else self._check_packet(p) for p in packets]
        prev = self._check_previous(previous)
        n = len(packets)
        if n == 0:
            raise FedAuditError("packets must hold at least one packet")
        unsent = self.unsent_gates(prev, unsent_log_alpha)
        if aggregator is not None:
            if weights is not None:
                raise FedAuditError("weights must be None with an aggregator (robust rules are unweighted)")
            if not callable(aggregator):
                raise FedAuditError(f"aggregator must be callable (n, p) -> (p,), got {type(aggregator).__name__}")
            rows = [self.reconstruct(p, prev, unsent_log_alpha=unsent) for p in packets]
            new_w = np.asarray(aggregator(np.stack([r.weights for r in rows])), dtype=np.float64)
            new_la = np.asarray(aggregator(np.stack([r.log_alpha for r in rows])), dtype=np.float64)
            sent = np.zeros(self.dim, dtype=bool)
            sent[np.concatenate([p.indices for p in packets])] = True
            return ClientUpdate(new_w, np.where(sent, new_la, unsent))
        w = np.ones(n) if weights is None else check_vector("weights", weights, dim=n)
        if np.any(w < 0) or w.sum() <= 0:
            raise FedAuditError("weights must be non-negative with a positive sum")
        idx = np.concatenate([p.indices for p in packets])
        wi = np.repeat(w, [p.m for p in packets])
        vals = np.concatenate([p.values for p in packets])
        gates = np.concatenate([p.gate_stats for p in packets])
        mass = np.bincount(idx, weights=wi, minlength=self.dim)
        sum_v = np.bincount(idx, weights=wi * vals, minlength=self.dim)
        sum_g = np.bincount(idx, weights=wi * gates, minlength=self.dim)
        sent = mass > 0
        if self.rule == "senders":
            new_w = np.where(sent, sum_v / np.where(sent, mass, 1.0), prev.weights)
            new_la = np.where(sent, sum_g / np.where(sent, mass, 1.0), prev.log_alpha)
        else:
            total = w.sum()
            new_w = (sum_v + (total - mass) * prev.weights) / total
            # "votes": a client that did not send j counts with u_j (its top-m says "j is not among my
            # open gates"); "dense": with the previous gate itself
            new_la = (sum_g + (total - mass) * (unsent if self.rule == "votes" else prev.log_alpha)) / total
        return ClientUpdate(new_w, np.where(sent, new_la, unsent))

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
