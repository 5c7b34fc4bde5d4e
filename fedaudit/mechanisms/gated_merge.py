"""The server's merge rules of the gated sparse upload: how the packets of one round
(:mod:`fedaudit.mechanisms.gated_wire`) become the new global state (θ, log α).

:class:`GatedMergeRule` adds the rules ``"senders"``, ``"dense"`` and ``"votes"`` (and the robust
path through any aggregator) to the wire format it reads; :class:`fedaudit.mechanisms.gated.GatedSparseUpload`
is the upload a user builds (see ``docs/guides/gated-upload.md``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.gated_wire import ClientUpdate, GatedWireFormat, SparsePacket
from fedaudit.validation import check_choice, check_real, check_vector

__all__ = ["GatedMergeRule", "LOG_ALPHA_CLOSED", "RULES"]

#: log α = log(0.01), the lower clamp of Louizos et al.'s reference code: P(z ≠ 0) = sigmoid(log α + 1.5986) ≈ 0.047
LOG_ALPHA_CLOSED = math.log(1e-2)
#: the server's aggregation rules (``rule=``)
RULES = ("senders", "dense", "votes")


class GatedMergeRule(GatedWireFormat):
    """The server's aggregation of gated sparse packets (the wire of :class:`GatedWireFormat`):
    ``unsent_gates``, ``reconstruct`` and ``aggregate``.

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
    """

    def __init__(self, dim: int, m: int, *, index_bytes: int | None = None, value_dtype: str = "float32",
                 rule: str = "votes", unsent_decay: float = 0.05, closed_log_alpha: float = LOG_ALPHA_CLOSED):
        super().__init__(dim, m, index_bytes=index_bytes, value_dtype=value_dtype)
        self.rule = check_choice("rule", rule, RULES)
        self.unsent_decay = check_real("unsent_decay", unsent_decay, low=0.0, high=1.0)
        self.closed_log_alpha = check_real("closed_log_alpha", closed_log_alpha)

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
