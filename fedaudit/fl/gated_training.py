"""Training E-FLoPS through the gated sparse upload: the client's error-feedback memory and the
server's model of the gates a client did not send (issue #12; ``docs/guides/gated-upload.md``).

**Error feedback** (Stich, Cordonnier, Jaggi, "Sparsified SGD with memory", NeurIPS 2018;
Karimireddy et al., "Error feedback fixes SignSGD", ICML 2019). Client i keeps a residual e_i ∈ R^p
(0 at the start). After local training from the broadcast θ̄ to θ̃_i it forms the compensated change
p_i = θ̃_i − θ̄ + e_i and uploads, in the unchanged wire format, the top m coordinates S_i of its
gates with the values θ̄_j + p_ij rounded to the wire dtype, v_ij (the packet is "top m by gate
probability, (j, θ̃_j + e_ij, log α_j)"). It keeps what did not reach the server,

    e_i ← θ̄ + p_i − r_i,     r_ij = v_ij (j ∈ S_i),  r_ij = θ̄_j (j ∉ S_i),

i.e. the whole change off S_i and the rounding error on S_i. With the upload's "votes"/"dense"
weight rule θ_j = θ̄_j + Σ_{i∈S_j} w_i (v_ij − θ̄_j)/Σ_i w_i, a change a client could not send is
delayed, not lost (a coordinate's weight learned while its gate was outside the client's top m
reaches the server when the gate enters it).

**Data-free gates** (:func:`data_free_gates`). In a round, client i runs K steps on
J_i = E[ℓ_i] + λ·Σ_j |g_j| π_j + T·Σ_j |g_j| R(π_j) (:mod:`fedaudit.fl.eflops`). For a coordinate with
θ̃_j ≈ 0 (never learned) the loss term's gradient in log α_j is ≈ 0, and the gate moves by the
data-free terms only, whose gradient is exact and known to the server (it broadcast λ and T):
with t = log α − β·log(−γ/ζ) = logit π,

    ∂/∂log α [λ·π + T·R(π)] = π(1 − π)·(λ + T·(t − c_R)),   c_R = 0 (entropy), logit ρ (KL).

The server runs the same K SGD (or Adam) steps with ``lr_gates`` from φ̄ and uses the result u as
the gate of every client that did not send a coordinate (``GatedSparseUpload.aggregate(...,
unsent_log_alpha=u)``, rule "votes"), in place of the ad-hoc decay φ̄ + κ(c − φ̄): the non-senders'
vote then falls as fast as λ pushes (ρ̂ tracks its target) and no faster (early, when λ ≈ 0, a
coordinate outside every client's top m is not closed by the decay alone).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import expit

from fedaudit.errors import FedAuditError
from fedaudit.fl.gates import HardConcrete
from fedaudit.mechanisms.gated import ClientUpdate, SparsePacket
from fedaudit.validation import check_choice, check_int, check_probability, check_real, check_vector

__all__ = ["ErrorFeedback", "data_free_gates"]

_ADAM = (0.9, 0.999, 1e-8)   # torch.optim.Adam defaults (betas, eps), as E-FLoPS' local Adam uses


def data_free_gates(log_alpha: Any, *, lam: float, temperature: float, lr_gates: float, steps: int,
                    optimizer: str = "sgd", regularizer: str = "entropy", density: float | None = None,
                    group_sizes: Any = None) -> np.ndarray:
    """The gates after ``steps`` local steps on λ·Σ|g_j|π_j + T·Σ|g_j|R(π_j) alone (module docstring):
    SGD φ ← φ − η·|g|·π(1 − π)·(λ + T·(t − c_R)), or Adam with torch's defaults (state reset, as the
    client's optimizer). ``density`` ρ is needed for ``regularizer="kl"`` (c_R = logit ρ)."""
    phi = check_vector("log_alpha", log_alpha).copy()
    lam = check_real("lam", lam, low=0.0)
    temperature = check_real("temperature", temperature, low=0.0)
    lr = check_real("lr_gates", lr_gates, low=0.0, open_low=True)
    steps = check_int("steps", steps, low=1)
    check_choice("optimizer", optimizer, ("sgd", "adam"))
    check_choice("regularizer", regularizer, ("entropy", "kl"))
    if regularizer == "kl":
        if density is None:
            raise FedAuditError("density must be given for regularizer='kl' (the KL centre logit ρ)")
        rho = check_probability("density", density)
        centre = math.log(rho) - math.log1p(-rho)
    else:
        centre = 0.0
    sizes = np.ones_like(phi) if group_sizes is None else check_vector("group_sizes", group_sizes, dim=phi.size)
    m1, m2 = np.zeros_like(phi), np.zeros_like(phi)
    b1, b2, eps = _ADAM
    for k in range(1, steps + 1):
        t = phi - HardConcrete.SHIFT
        pi = expit(t)
        grad = sizes * pi * (1.0 - pi) * (lam + temperature * (t - centre))
        if optimizer == "sgd":
            phi -= lr * grad
        else:
            m1 = b1 * m1 + (1.0 - b1) * grad
            m2 = b2 * m2 + (1.0 - b2) * grad * grad
            phi -= (lr / (1.0 - b1 ** k)) * m1 / (np.sqrt(m2) / math.sqrt(1.0 - b2 ** k) + eps)
    return phi


class ErrorFeedback:
    """Per-client error-feedback memory e_i for the gated upload (module docstring): ``compensate``
    before the upload, ``keep`` after it. ``residual(i)`` is e_i (read-only copy)."""

    def __init__(self, clients: int, dim: int):
        self.clients = check_int("clients", clients, low=1)
        self.dim = check_int("dim", dim, low=1)
        self._e = np.zeros((self.clients, self.dim))

    def _client(self, client: Any) -> int:
        return check_int("client", client, low=0, high=self.clients - 1, high_name="clients - 1")

    def residual(self, client: int) -> np.ndarray:
        out = self._e[self._client(client)].copy()
        out.setflags(write=False)
        return out

    def compensate(self, client: int, update: ClientUpdate) -> ClientUpdate:
        """(θ̃_i + e_i, log α_i) = (θ̄ + p_i, log α_i): what client i's packet is selected from."""
        if not isinstance(update, ClientUpdate) or update.dim != self.dim:
            raise FedAuditError(f"update must be a ClientUpdate with dim={self.dim}")
        return ClientUpdate(update.weights + self._e[self._client(client)], update.log_alpha)

    def keep(self, client: int, compensated: ClientUpdate, packet: SparsePacket, previous: ClientUpdate) -> None:
        """e_i ← θ̄ + p_i − r_i for the ``packet`` sent from ``compensated`` (the unsent change, and the
        wire rounding θ̄_j + p_ij − v_ij of the sent values)."""
        i = self._client(client)
        if not isinstance(packet, SparsePacket) or not isinstance(previous, ClientUpdate) or previous.dim != self.dim:
            raise FedAuditError(f"packet must be a SparsePacket and previous a ClientUpdate with dim={self.dim}")
        e = compensated.weights - previous.weights
        e[packet.indices] = compensated.weights[packet.indices] - packet.values
        self._e[i] = e
