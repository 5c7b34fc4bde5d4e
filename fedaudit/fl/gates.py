"""Hard Concrete gates (Louizos, Welling, Kingma, "Learning sparse neural networks through L0
regularization", ICLR 2018) and the functional gated view of a torch model used by E-FLoPS.

Hard Concrete with location log α, temperature β and stretch interval (γ, ζ) = (−0.1, 1.1),
β = 2/3 (the paper's defaults):

    u ~ U(0, 1),   s = σ((log u − log(1 − u) + log α)/β),   s̄ = s·(ζ − γ) + γ,   z = min(1, max(0, s̄)).

The binary concrete s has CDF F_s(x) = σ(β·logit x − log α) on (0, 1), so

    P(z = 0) = F_s(−γ/(ζ − γ)) = σ(β·log(−γ/ζ) − log α),   P(z ≠ 0) = σ(log α − β·log(−γ/ζ)),
    P(z = 1) = 1 − F_s((1 − γ)/(ζ − γ)) = σ(log α − β·log((1 − γ)/(ζ − 1))),

and the deterministic test-time gate is ẑ = min(1, max(0, σ(log α)·(ζ − γ) + γ)). The functions
accept numpy arrays (float64 out) or torch tensors (same dtype/device out, differentiable in log α).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import expit

from fedaudit.arrays import is_torch
from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_choice

__all__ = ["HardConcrete", "GatedModel", "GATE_MODES"]

#: How gates are shared: one gate per parameter, or one per output unit / filter of every layer.
GATE_MODES = ("parameter", "unit")


class HardConcrete:
    """Stateless Hard Concrete gate helpers with constants ``GAMMA`` = −0.1, ``ZETA`` = 1.1,
    ``BETA`` = 2/3 (module docstring for the formulas)."""

    GAMMA = -0.1
    ZETA = 1.1
    BETA = 2.0 / 3.0
    #: β·log(−γ/ζ) = (2/3)·log(1/11) ≈ −1.5986: P(z ≠ 0) = σ(log α − SHIFT).
    SHIFT = BETA * math.log(-GAMMA / ZETA)
    #: u is drawn in [EPS, 1 − EPS] so that logit u stays finite.
    EPS = 1e-6

    @staticmethod
    def uniform(shape: Any, rng: RngLike) -> np.ndarray:
        """The reparameterisation noise u ~ U[EPS, 1 − EPS] (float64) from a numpy ``rng``."""
        return as_generator(rng).uniform(HardConcrete.EPS, 1.0 - HardConcrete.EPS, size=shape)

    @classmethod
    def sample(cls, log_alpha: Any, rng: RngLike = None, *, u: Any = None) -> Any:
        """z = clamp(σ((logit u + log α)/β)·(ζ − γ) + γ, 0, 1), with u from ``rng`` unless given
        (torch: differentiable in log α; u is moved to log α's dtype and device)."""
        if u is None:
            u = cls.uniform(tuple(log_alpha.shape), rng)
        if is_torch(log_alpha):
            import torch

            u = torch.as_tensor(u, dtype=log_alpha.dtype, device=log_alpha.device)
            s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / cls.BETA)
            return torch.clamp(s * (cls.ZETA - cls.GAMMA) + cls.GAMMA, 0.0, 1.0)
        la = np.asarray(log_alpha, dtype=np.float64)
        u = np.asarray(u, dtype=np.float64)
        s = expit((np.log(u) - np.log1p(-u) + la) / cls.BETA)
        return np.clip(s * (cls.ZETA - cls.GAMMA) + cls.GAMMA, 0.0, 1.0)

    @classmethod
    def prob_nonzero(cls, log_alpha: Any) -> Any:
        """P(z ≠ 0) = σ(log α − β·log(−γ/ζ)): the expected L0 contribution of each gate."""
        if is_torch(log_alpha):
            import torch

            return torch.sigmoid(log_alpha - cls.SHIFT)
        return expit(np.asarray(log_alpha, dtype=np.float64) - cls.SHIFT)

    @classmethod
    def log_prob_nonzero(cls, log_alpha: Any) -> tuple[Any, Any]:
        """(log P(z ≠ 0), log P(z = 0)) computed with log-sigmoid (no log 0 for extreme log α)."""
        if is_torch(log_alpha):
            import torch.nn.functional as F

            return F.logsigmoid(log_alpha - cls.SHIFT), F.logsigmoid(cls.SHIFT - log_alpha)
        t = np.asarray(log_alpha, dtype=np.float64) - cls.SHIFT
        return -np.logaddexp(0.0, -t), -np.logaddexp(0.0, t)

    @classmethod
    def deterministic(cls, log_alpha: Any) -> Any:
        """ẑ = clamp(σ(log α)·(ζ − γ) + γ, 0, 1), the test-time gate (0 iff σ(log α) ≤ 1/12)."""
        if is_torch(log_alpha):
            import torch

            return torch.clamp(torch.sigmoid(log_alpha) * (cls.ZETA - cls.GAMMA) + cls.GAMMA, 0.0, 1.0)
        s = expit(np.asarray(log_alpha, dtype=np.float64))
        return np.clip(s * (cls.ZETA - cls.GAMMA) + cls.GAMMA, 0.0, 1.0)

    @classmethod
    def log_alpha_for(cls, probability: float) -> float:
        """The log α with P(z ≠ 0) = ``probability``: logit(p) + β·log(−γ/ζ)."""
        return math.log(probability) - math.log1p(-probability) + cls.SHIFT


class GatedModel:
    """A functional view θ ↦ f_θ of a torch ``module`` over one flat parameter vector, with gates.

    The parameters of ``module`` (in ``named_parameters()`` order, each flattened row-major) form
    θ ∈ R^{|θ|}; :meth:`forward` evaluates the module at θ = θ̃ ⊙ z[g] with
    ``torch.func.functional_call`` — the module itself is never modified, so any torch model works
    (nn.Linear, nn.Conv2d, Sequential stacks). ``g`` maps every coordinate to its gate:

    * ``gates="parameter"``: one gate per coordinate (g = identity, n_gates = |θ|);
    * ``gates="unit"`` (Louizos et al.'s group sparsity): a 2-D ``weight`` (Linear, (out, in)) gets
      one gate per *input* unit, shared by its column ``weight[:, i]`` (input-feature selection);
      a weight with more dimensions (Conv, (out, in, k…)) one gate per output filter k, shared by
      ``weight[k]`` and ``bias[k]``; every other parameter (e.g. a Linear bias) keeps one gate
      per coordinate.
    """

    def __init__(self, module: Any, gates: str = "parameter"):
        torch = require("torch", "a gated torch model (E-FLoPS)")

        if not isinstance(module, torch.nn.Module):
            raise FedAuditError(f"model must be a torch.nn.Module (e.g. torch.nn.Linear(d, 1)), "
                                f"got {type(module).__name__}")
        self.mode = check_choice("gates", gates, GATE_MODES)
        self.module = module
        named = list(module.named_parameters())
        if not named:
            raise FedAuditError("model must have at least one parameter, got none")
        self.names = [n for n, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.sizes = [int(p.numel()) for _, p in named]
        self.dtype = named[0][1].dtype
        self.dim = int(sum(self.sizes))
        self.groups = self._groups(module, named) if self.mode == "unit" else np.arange(self.dim)
        self.n_gates = int(self.groups.max()) + 1
        self.group_sizes = np.bincount(self.groups, minlength=self.n_gates)
        self._groups_t = torch.as_tensor(self.groups)

    def _groups(self, module: Any, named: list) -> np.ndarray:
        import torch

        offsets = dict(zip(self.names, np.cumsum([0] + self.sizes[:-1]).tolist()))
        groups = np.full(self.dim, -1, dtype=np.int64)
        nxt = 0
        for prefix, sub in module.named_modules():
            w = getattr(sub, "weight", None)
            key = f"{prefix}.weight" if prefix else "weight"
            if not isinstance(w, torch.nn.Parameter) or w.dim() < 2 or key not in offsets:
                continue
            if w.dim() == 2:  # Linear (out, in): one gate per input unit, i.e. per column
                ids = nxt + np.arange(w.shape[1])
                groups[offsets[key]: offsets[key] + w.numel()] = np.tile(ids, w.shape[0])
                nxt += w.shape[1]
                continue
            units, per = w.shape[0], w[0].numel()  # Conv (out, in, ...): one gate per output filter
            ids = nxt + np.arange(units)
            groups[offsets[key]: offsets[key] + units * per] = np.repeat(ids, per)
            bkey = f"{prefix}.bias" if prefix else "bias"
            if bkey in offsets and getattr(sub, "bias", None) is not None and sub.bias.numel() == units:
                groups[offsets[bkey]: offsets[bkey] + units] = ids
            nxt += units
        rest = groups < 0
        groups[rest] = nxt + np.arange(int(rest.sum()))
        return groups

    def initial_weights(self) -> np.ndarray:
        """The module's current parameters as one float64 vector θ̃₀ of length |θ|."""
        return np.concatenate([p.detach().cpu().double().reshape(-1).numpy() for p in self.module.parameters()])

    def expand(self, gate_values: Any) -> Any:
        """Per-gate values (n_gates,) → per-coordinate values (|θ|,) (v[g]); numpy or torch."""
        if self.mode == "parameter":
            return gate_values
        return gate_values[self._groups_t] if is_torch(gate_values) else np.asarray(gate_values)[self.groups]

    def reduce(self, values: np.ndarray) -> np.ndarray:
        """Per-coordinate values (|θ|,) → per-gate means (n_gates,) (the inverse of :meth:`expand`
        on vectors constant within each group)."""
        if self.mode == "parameter":
            return np.asarray(values, dtype=np.float64)
        return np.bincount(self.groups, weights=values, minlength=self.n_gates) / self.group_sizes

    def forward(self, theta: Any, X: Any) -> Any:
        """f_θ(X) for a flat torch vector θ (differentiable)."""
        from torch.func import functional_call

        parts = theta.split(self.sizes)
        params = {n: t.reshape(s) for n, t, s in zip(self.names, parts, self.shapes)}
        return functional_call(self.module, params, (X,))
