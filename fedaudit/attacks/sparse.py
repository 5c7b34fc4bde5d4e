"""Byzantine attacks on the gated sparse upload: the attacker picks its support as well as its values.

Call convention (every sparse attack)::

    sent = attack(honest, f, rng=None, *, upload, previous)   # -> list of f SparsePacket or bytes

``honest`` are the honest clients' packets (:class:`~fedaudit.mechanisms.gated.SparsePacket` or
wire bytes), ``upload`` the :class:`~fedaudit.mechanisms.gated.GatedSparseUpload` in use and
``previous`` the broadcast global :class:`~fedaudit.mechanisms.gated.ClientUpdate`. The adversary
is omniscient: it sees every honest packet. What it sends is accepted by
:meth:`GatedSparseUpload.receive` / :meth:`~GatedSparseUpload.aggregate` (valid packets are used,
malformed bytes are dropped by ``receive``).

:class:`SparseAttack` sparsifies a dense attack (:mod:`fedaudit.attacks.byzantine`): the dense
attack runs on the honest reconstructions H (rows ``upload.reconstruct(packet, previous)``, weights
and log α separately, as a robust server sees them), and each Byzantine packet carries the
attack's values on a support S of m coordinates chosen by ``support``:

* ``"impact"`` — the m coordinates with the largest shift |a_j − μ_j| of the attack row a from the
  honest mean μ of the weights (for ALIE z·σ_j: where the honest clients disagree most; for IPM
  (1 + τ)|μ_j|): where the shift moves the aggregate most;
* ``"popular"`` — the m coordinates most honest clients sent (ties: larger shift, then lower
  index): under the senders rule the attacker dilutes the coordinates that matter, and its support
  looks like an honest one;
* ``"random"`` — m uniform coordinates.

Gate statistics (``gates``): ``"attack"`` applies the dense attack to the log α rows too (ALIE
pushes the gates of S toward closed, IPM flips them); ``"open"`` sends the honest maximum of log α
at each j ∈ S, keeping the attacked coordinates in the support.

:class:`ArbitraryPackets` sends hostile bytes (out-of-range or repeated indices, NaN values, a
truncated packet, a wrong header, or valid packets with random support and huge values) to check
that the server rejects or absorbs them and never crashes.
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np

from fedaudit.attacks.byzantine import ALIE, IPM, Attack
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.gated import ClientUpdate, GatedSparseUpload, SparsePacket
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_choice, check_int, check_real

__all__ = ["SparseAttack", "SparseALIE", "SparseIPM", "ArbitraryPackets", "SUPPORTS"]

SUPPORTS = ("impact", "popular", "random")


def _context(honest: Sequence[Any], upload: Any, previous: Any) -> tuple[GatedSparseUpload, list[SparsePacket]]:
    if not isinstance(upload, GatedSparseUpload):
        raise FedAuditError(f"upload must be a GatedSparseUpload, got {type(upload).__name__}")
    if not isinstance(previous, ClientUpdate):
        raise FedAuditError(f"previous must be a ClientUpdate (the global state), got {type(previous).__name__}")
    packets, dropped = upload.receive(list(honest))
    if not packets and not dropped:
        raise FedAuditError("honest must hold at least one packet (the attacker reads the honest uploads)")
    if dropped:
        raise FedAuditError(f"honest packets must be valid for the upload; positions {dropped} are not")
    return upload, packets


class SparseAttack:
    """A dense attack sparsified to a chosen support (see the module docstring)."""

    name = "sparse"

    def __init__(self, attack: Attack, support: str = "impact", gates: str = "attack"):
        if not isinstance(attack, Attack):
            raise FedAuditError(f"attack must be a fedaudit Attack, got {type(attack).__name__}")
        self.attack = attack
        self.support = check_choice("support", support, SUPPORTS)
        self.gates = check_choice("gates", gates, ("attack", "open"))

    def params(self) -> dict[str, Any]:
        return {"attack": self.attack.name, **self.attack.params(), "support": self.support, "gates": self.gates}

    def _support(self, shift: np.ndarray, counts: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
        p = shift.shape[0]
        if self.support == "random":
            return np.sort(rng.choice(p, size=m, replace=False))
        order = (np.lexsort((np.arange(p), -shift)) if self.support == "impact"
                 else np.lexsort((np.arange(p), -shift, -counts)))
        return np.sort(order[:m])

    def __call__(self, honest: Sequence[Any], f: int, rng: RngLike = None, *, upload: Any,
                 previous: Any) -> list[SparsePacket]:
        up, packets = _context(honest, upload, previous)
        f = check_int("f", f, low=0)
        if f == 0:
            return []
        rng = as_generator(rng)
        rec = [up.reconstruct(p, previous) for p in packets]
        W = np.stack([r.weights for r in rec])
        G = np.stack([r.log_alpha for r in rec])
        A = np.asarray(self.attack(W, f, rng), dtype=np.float64)
        gate_rows = (np.asarray(self.attack(G, f, rng), dtype=np.float64) if self.gates == "attack"
                     else np.repeat(G.max(axis=0)[None, :], f, axis=0))
        counts = np.bincount(np.concatenate([p.indices for p in packets]), minlength=up.dim)
        mu = W.mean(axis=0)
        out = []
        for i in range(f):
            S = self._support(np.abs(A[i] - mu), counts, up.m, rng)
            # round-trip through the wire so what is returned is exactly what the server reads
            out.append(up.decode(up.encode(SparsePacket(S, A[i, S], gate_rows[i, S]))))
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.params().items())})"


class SparseALIE(SparseAttack):
    """Sparse ALIE (Baruch et al. 2019): μ_j + sign·z·σ_j of the honest reconstructions on the
    attacker's support (z = None: :func:`fedaudit.attacks.byzantine.alie_z_max`)."""

    name = "sparse-alie"

    def __init__(self, z: float | None = None, variant: str = "honest", sign: int = -1, support: str = "impact",
                 gates: str = "attack"):
        super().__init__(ALIE(z=z, variant=variant, sign=sign), support=support, gates=gates)


class SparseIPM(SparseAttack):
    """Sparse IPM (Xie, Koyejo, Gupta 2019): −τ·μ_j of the honest reconstructions on the attacker's support."""

    name = "sparse-ipm"

    def __init__(self, tau: float = 0.1, support: str = "impact", gates: str = "attack"):
        super().__init__(IPM(tau=tau), support=support, gates=gates)


_MODES = ("out-of-range", "repeated", "nan", "truncated", "header", "random")


class ArbitraryPackets:
    """Hostile packets. ``mode``: ``"out-of-range"`` (indices ≥ dim), ``"repeated"`` (an index
    twice), ``"nan"`` (NaN values), ``"truncated"`` (a valid packet cut short), ``"header"``
    (wrong magic) — all rejected by the decoder; "repeated" with m = 1 sends an out-of-range index,
    and "out-of-range" when no index ≥ dim fits the index type (dim = 2^16 with uint16) a wrong
    header —, or ``"random"``: *valid* packets with a uniform
    random support and values ±``scale`` (the finite worst a robust rule must absorb), or ``"mix"``:
    the modes in turn. Returns wire bytes."""

    name = "sparse-arbitrary"

    def __init__(self, mode: str = "mix", scale: float = 1e6):
        self.mode = check_choice("mode", mode, _MODES + ("mix",))
        self.scale = check_real("scale", scale, low=0.0, high=float(np.finfo(np.float32).max), open_low=True)

    def params(self) -> dict[str, Any]:
        return {"mode": self.mode, "scale": self.scale}

    def _packet(self, up: GatedSparseUpload, mode: str, rng: np.random.Generator) -> bytes:
        S = np.sort(rng.choice(up.dim, size=up.m, replace=False))
        vals = self.scale * rng.choice([-1.0, 1.0], size=up.m)
        blob = bytearray(up.encode(SparsePacket(S, vals, vals)))
        ib, vb = up.index_bytes, up.value_bytes
        fmt, top = {2: "<H", 4: "<I"}[ib], 2 ** (8 * ib) - 1
        if mode == "repeated" and up.m == 1:  # one index cannot repeat: send it out of range instead
            mode = "out-of-range"
        if mode == "out-of-range" and up.dim > top:  # no index >= dim fits the index type: bad header
            mode = "header"
        if mode == "out-of-range":
            struct.pack_into(fmt, blob, 16 + (up.m - 1) * ib, min(up.dim + int(rng.integers(0, 1000)), top))
        elif mode == "repeated":
            struct.pack_into(fmt, blob, 16 + ib, struct.unpack_from(fmt, blob, 16)[0])
        elif mode == "nan":
            struct.pack_into({4: "<f", 8: "<d"}[vb], blob, 16 + up.m * ib, float("nan"))
        elif mode == "truncated":
            del blob[-int(rng.integers(1, vb + 1)):]
        elif mode == "header":
            blob[:4] = b"XXXX"
        return bytes(blob)

    def __call__(self, honest: Sequence[Any], f: int, rng: RngLike = None, *, upload: Any, previous: Any) -> list[bytes]:
        up, _ = _context(honest, upload, previous)
        f = check_int("f", f, low=0)
        rng = as_generator(rng)
        modes = [_MODES[i % len(_MODES)] for i in range(f)] if self.mode == "mix" else [self.mode] * f
        return [self._packet(up, mode, rng) for mode in modes]

    def __repr__(self) -> str:
        return f"ArbitraryPackets(mode={self.mode!r}, scale={self.scale!r})"

