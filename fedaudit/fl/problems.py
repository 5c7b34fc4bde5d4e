"""Problems the optimizers run on: an inexact gradient oracle plus the honest objective.

Byzantine-robust distributed learning is first-order optimisation with an *inexact oracle*
(Gaucher, Dieuleveut, Hendrikx, "From Inexact Gradients to Byzantine Robustness: Acceleration
and Optimization under Similarity", arXiv 2602.03329): each round the server broadcasts x_k and
receives g_k = F(∇L_1(x_k), …, ∇L_n(x_k)) from an (f, κ)-robust rule F, which satisfies

    ‖g_k − ∇L_H(x_k)‖² ≤ ζ² + α‖∇L_H(x_k)‖²,   ζ² = κG², α = κB²,

under (G, B)-heterogeneity of the honest losses. One oracle call = one communication round.

Problem protocol (duck-typed, see :class:`Problem`): ``dim``, ``oracle(x, rng) -> g``,
``honest_loss(x)``, ``honest_grad(x)``; optionally ``honest_hvp(x, v)``, ``surrogate``
(an object with ``loss(x)``, ``grad(x)``, ``hvp(x, v)`` — the server's cheap loss L̂ used by
PIGS), ``test_accuracy(x)``, ``heterogeneity(x) -> (mean_sq_dev, grad_norm_sq)``,
``smoothness()`` and ``strong_convexity()``. :class:`FederationProblem` adapts a
:class:`fedaudit.fl.federation.Federation` (surrogate = honest client 0's loss, as in the
authors' code); :class:`QuadraticProblem` is a synthetic problem with closed forms, for tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.fl.federation import gradient_heterogeneity
from fedaudit.rng import as_generator
from fedaudit.validation import check_int, check_matrix, check_real, check_vector

__all__ = ["Surrogate", "Problem", "QuadraticSurrogate", "QuadraticProblem", "FederationProblem", "as_problem"]


@runtime_checkable
class Surrogate(Protocol):
    """The server's cheap loss L̂ (PIGS): value, gradient and Hessian-vector product."""

    def loss(self, x: np.ndarray) -> float: ...
    def grad(self, x: np.ndarray) -> np.ndarray: ...
    def hvp(self, x: np.ndarray, v: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class Problem(Protocol):
    """What the optimizers need: an inexact oracle and the honest objective for logging."""

    dim: int

    def oracle(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...
    def honest_loss(self, x: np.ndarray) -> float: ...
    def honest_grad(self, x: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class QuadraticSurrogate:
    """L̂(x) = ½xᵀAx − bᵀx."""

    A: np.ndarray
    b: np.ndarray

    def loss(self, x):
        return float(0.5 * x @ (self.A @ x) - self.b @ x)

    def grad(self, x):
        return self.A @ x - self.b

    def hvp(self, x, v):
        return self.A @ v


class QuadraticProblem:
    """Synthetic problem L_H(x) = ½xᵀAx − bᵀx with an inexact oracle.

    ``oracle(x) = ∇L_H(x) + bias + sqrt(alpha)·‖∇L_H(x)‖·u + noise·ξ`` with u a fixed unit
    vector and ξ ~ N(0, I): additive error ‖bias‖² (+ noise), multiplicative error α. The
    surrogate is ½xᵀÂx − b̂ᵀx (defaults: Â = A, b̂ = b, i.e. Δ = 0).
    """

    def __init__(self, A, b, *, A_hat=None, b_hat=None, bias=None, alpha: float = 0.0,
                 noise: float = 0.0, direction=None):
        A = check_matrix("A", A)
        if A.shape[0] != A.shape[1] or not np.allclose(A, A.T):
            raise FedAuditError(f"A must be a symmetric square matrix, got shape {A.shape}")
        self.dim = A.shape[0]
        self.A = A
        self.b = check_vector("b", b, dim=self.dim)
        self._honest = QuadraticSurrogate(A, self.b)
        A_hat = A if A_hat is None else check_matrix("A_hat", A_hat, cols=self.dim)
        b_hat = self.b if b_hat is None else check_vector("b_hat", b_hat, dim=self.dim)
        self.surrogate = QuadraticSurrogate(A_hat, b_hat)
        self.bias = np.zeros(self.dim) if bias is None else check_vector("bias", bias, dim=self.dim)
        self.alpha = check_real("alpha", alpha, low=0.0)
        self.noise = check_real("noise", noise, low=0.0)
        u = np.ones(self.dim) if direction is None else check_vector("direction", direction, dim=self.dim)
        self.direction = u / np.linalg.norm(u)
        eig = np.linalg.eigvalsh(A)
        self._L, self._mu = float(eig[-1]), float(eig[0])

    def honest_loss(self, x):
        return self._honest.loss(x)

    def honest_grad(self, x):
        return self._honest.grad(x)

    def honest_hvp(self, x, v):
        return self._honest.hvp(x, v)

    def oracle(self, x, rng):
        g = self.honest_grad(x)
        out = g + self.bias
        if self.alpha > 0:  # (0·‖g‖ would be NaN once ‖g‖ overflows)
            out = out + math.sqrt(self.alpha) * np.linalg.norm(g) * self.direction
        if self.noise > 0:
            out = out + self.noise * as_generator(rng).standard_normal(self.dim)
        return out

    def minimizer(self) -> np.ndarray:
        return np.linalg.solve(self.A, self.b)

    def smoothness(self) -> float:
        return self._L

    def strong_convexity(self) -> float:
        return self._mu


class _ClientSurrogate:
    """L̂ = the loss of one (trusted, honest) client of a federation."""

    def __init__(self, federation: Any, client: int):
        self._fed, self.client = federation, client

    def loss(self, x):
        return float(self._fed.client_loss(self.client, x))

    def grad(self, x):
        return np.asarray(self._fed.client_grad(self.client, x), dtype=np.float64)

    def hvp(self, x, v):
        return np.asarray(self._fed.client_hvp(self.client, x, v), dtype=np.float64)


class FederationProblem:
    """Adapter: a ``fedaudit.fl.federation.Federation`` seen as an inexact-oracle problem.

    The oracle is the federation's robust aggregate (honest gradients plus the Byzantine
    vectors through its aggregator); the objective is L_H = mean of the honest client losses;
    the PIGS surrogate is honest client ``surrogate_client``'s loss (client 0 in the authors'
    code). ∇²L_H·v is the mean of the honest clients' Hessian-vector products.
    """

    def __init__(self, federation: Any, surrogate_client: int = 0):
        self.federation = federation
        self.dim = int(federation.dim)
        self.surrogate_client = check_int("surrogate_client", surrogate_client, low=0,
                                          high=int(federation.n_honest) - 1)
        self.surrogate = _ClientSurrogate(federation, self.surrogate_client)

    def oracle(self, x, rng):
        return np.asarray(self.federation.oracle(x, rng), dtype=np.float64)

    def oracle_details(self, x, rng, heterogeneity: bool = True):
        """(g, ∇L_H(x), (mean_sq_dev, ‖∇L_H‖²) or None) from one pass over the honest clients."""
        fed = self.federation
        H = np.asarray(fed.honest_gradients(x), dtype=np.float64)
        g = np.asarray(fed.oracle(x, rng, honest_grads=H), dtype=np.float64)
        true_g = H.mean(axis=0)
        het = gradient_heterogeneity(H, true_g) if heterogeneity else None
        return g, true_g, het

    def honest_loss(self, x):
        return float(self.federation.honest_loss(x))

    def honest_grad(self, x):
        return np.asarray(self.federation.honest_grad(x), dtype=np.float64)

    def honest_hvp(self, x, v):
        fed = self.federation
        if hasattr(fed, "honest_hvp"):
            return np.asarray(fed.honest_hvp(x, v), dtype=np.float64)
        out = np.zeros(self.dim)
        for i in range(int(fed.n_honest)):
            out += np.asarray(fed.client_hvp(i, x, v), dtype=np.float64)
        return out / int(fed.n_honest)

    def test_accuracy(self, x):
        return float(self.federation.test_accuracy(x))

    def heterogeneity(self, x):
        dev, gsq = self.federation.heterogeneity(x)
        return float(dev), float(gsq)

    def smoothness(self) -> float:
        """L of L_H = (1/|H|)Σ_i L_i: ½·λ_max((1/|H|)Σ_i Ã_iᵀÃ_i/n_i) + μ, Ã_i = [A_i, 1]
        (the federation's own ``smoothness()`` when it has one)."""
        fed = self.federation
        if hasattr(fed, "smoothness"):
            return float(fed.smoothness())
        model = fed.model
        intercept = bool(getattr(model, "fit_intercept", True))
        G = None
        H = int(fed.n_honest)
        for A, _ in fed.clients[:H]:
            A = np.asarray(A, dtype=np.float64)
            if A.shape[0] == 0:
                continue
            if intercept:
                A = np.hstack([A, np.ones((A.shape[0], 1))])
            Gi = A.T @ A / (A.shape[0] * H)
            G = Gi if G is None else G + Gi
        lam = 0.0 if G is None else float(np.linalg.eigvalsh(G)[-1])
        return 0.5 * lam + float(model.mu)

    def strong_convexity(self) -> float:
        return float(self.federation.model.mu)


def as_problem(obj: Any, surrogate_client: int = 0) -> Any:
    """A Problem: a Federation is wrapped in :class:`FederationProblem`, others pass through."""
    if hasattr(obj, "client_hvp") and hasattr(obj, "honest_gradients"):
        return FederationProblem(obj, surrogate_client=surrogate_client)
    for name in ("dim", "oracle", "honest_loss", "honest_grad"):
        if not hasattr(obj, name):
            raise FedAuditError(f"problem must provide {name!r} (see fedaudit.fl.problems.Problem), "
                                f"got {type(obj).__name__}")
    return obj
