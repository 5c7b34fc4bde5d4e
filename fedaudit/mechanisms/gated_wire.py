"""The wire format of the gated sparse upload (E-FLoPS): what a client holds, what it sends, and
the strict decoder the server reads it with.

A client holds a :class:`ClientUpdate` — its weights θ̃ and Hard Concrete gate parameters log α
(Louizos, Welling, Kingma 2018), flat arrays of length p = |θ|. It uploads only the m = ⌊ρ·p⌋
coordinates (:func:`m_for_density`) with the largest gate probability P(z_j ≠ 0) =
sigmoid(log α_j − β·log(−γ/ζ)), which is increasing in log α_j, so the ranking is by log α_j
(ties: lower index first, :func:`top_m_indices`). Each sent coordinate carries (j, θ̃_j, log α_j),
a :class:`SparsePacket`. :class:`GatedWireFormat` defines the binary wire format, its exact byte
count and a strict decoder; the server's merge rules are in :mod:`fedaudit.mechanisms.gated_merge`
and the upload that combines both is :class:`fedaudit.mechanisms.gated.GatedSparseUpload`.

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
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_probability, check_vector

__all__ = ["ClientUpdate", "SparsePacket", "GatedWireFormat", "m_for_density", "top_m_indices", "MAGIC", "VERSION",
           "HEADER_BYTES"]

MAGIC = b"FAGS"
VERSION = 1
_HEADER = struct.Struct("<4sBBBBII")
#: bytes of the packet header (magic, version, dtypes, reserved, dim, m)
HEADER_BYTES = _HEADER.size
_VALUE_DTYPES = {"float32": 4, "float64": 8}
_INDEX_DTYPES = {2: "<u2", 4: "<u4"}


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


class GatedWireFormat:
    """The client side and the wire of the top-m gated upload: ``select``/``encode`` on the client,
    ``decode``/``receive`` on the server, and the exact byte counts.

    Client: S = the m indices with the largest log α_j (ties: lower index), sent as (j, θ̃_j, log α_j)
    in the wire format of this module; values are rounded to ``value_dtype`` (``select`` returns
    exactly what ``decode(encode(·))`` gives). ``index_bytes`` defaults to 2 (uint16) when p ≤ 2^16,
    else 4 (uint32).
    """

    def __init__(self, dim: int, m: int, *, index_bytes: int | None = None, value_dtype: str = "float32"):
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

    # ------------------------------------------------------------------ server: reading the wire
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
