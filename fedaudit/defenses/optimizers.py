"""Server-side optimizers on an inexact (robustly aggregated) gradient oracle.

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
``fedaudit.fl.federation.Federation`` (surrogate = honest client 0's loss, as in the authors'
code); :class:`QuadraticProblem` is a synthetic problem with closed forms, for tests.

Optimizers (one oracle call per round each):

* :class:`DGD` — x_{k+1} = x_k − lr·g_k.
* :class:`DNAG` — PyTorch ``SGD(lr, momentum=m, nesterov=True)`` applied to g_k, which is what
  the authors' code runs as "D-NAG": b_0 = g_0, b_k = m·b_{k−1} + g_k,
  x_{k+1} = x_k − lr·(g_k + m·b_k).
* :class:`RobustAccelerated` — the seed's two-sequence Nesterov recursion with the Γ_k/γ_k
  schedule. **Departure from the seed, documented:** the recursion as printed in the seed is
  not translation invariant (its coefficients on (y_k, y_{k−1}, x_k) do not sum to one, so a
  stationary point x* with g(x*) = 0 is not a fixed point unless x* = 0) and on a quadratic it
  converges to a shrunken point, not to x*. Eliminating the argmin from the
  Devolder–Glineur–Nesterov fast gradient method for a (δ, 2L, μ/2)-oracle (the derivation the
  seed describes) gives instead

      x_{k+1} = y_k + (Γ_{k−1}/Γ_k)(γ_k/γ_{k+1})(y_k − y_{k−1}) + (γ_k/γ_{k+1})(μ/(4L))(x_k − y_k),

  i.e. the seed's formula with "− (Γ_{k−1}/Γ_k)·y_k + (γ_k/γ_{k+1})(μ/4L)·x_k" replaced by
  "(γ_k/γ_{k+1})(μ/4L)·(x_k − y_k)". That is the default (``variant="fgm"``); the printed
  recursion is kept as ``variant="literal"`` and Nesterov's constant-momentum strongly convex
  scheme (Introductory Lectures, 2.2.19) as ``variant="nesterov"``.
* :class:`PIGS` — x_{k+1} ≈ argmin_x L̂(x) + ⟨g_k − ∇L̂(x_k), x⟩ + ‖x − x_k‖²/(2η), solved on
  the server by L-BFGS warm-started at x_k; η = 1/(2·m·Δ̂) by default, Δ̂ the largest
  :func:`estimate_delta` seen at x_0 and along the run, m a safety margin.

:func:`run` drives any of them for a number of rounds and returns a :class:`Trace`;
:func:`rounds_to_plateau` turns a loss curve into "rounds to reach the asymptotic error".

Beyond tolerance. When a round's oracle raises :class:`~fedaudit.errors.AggregatorBreakdown`
(more non-finite inputs than the rule tolerates), :func:`run` stops and records
``Trace.breakdown = {"round": k, "rule", "n", "nonfinite", "tolerated", "message"}``: a result
of the configuration, not an exception.

Randomness. Every random component draws from the call: round k's oracle (attack and rule,
e.g. bucketing's permutation) gets ``rng`` = child k of the run seed's oracle stream and the
optimizer's own randomness (PIGS's power iterations) a separate child, so the same seed gives
the same bits and nothing depends on a rule's internal state or on which worker runs the job.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.validation import check_int, check_matrix, check_positive, check_real, check_vector
from fedaudit.rng import RngLike, as_generator, as_seed_sequence

__all__ = [
    "Surrogate",
    "Problem",
    "QuadraticSurrogate",
    "QuadraticProblem",
    "FederationProblem",
    "as_problem",
    "Optimizer",
    "DGD",
    "DNAG",
    "RobustAccelerated",
    "PIGS",
    "nesterov_schedule",
    "estimate_delta",
    "Trace",
    "run",
    "rounds_to_plateau",
    "plateau_level",
]


# ============================================================================ problems
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
        return float(0.5 * x @ (self.A @ x) - self.b @ x)

    def honest_grad(self, x):
        return self.A @ x - self.b

    def honest_hvp(self, x, v):
        return self.A @ v

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
        het = None
        if heterogeneity:
            het = (float(((H - true_g) ** 2).sum(axis=1).mean()), float(true_g @ true_g))
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
            raise FedAuditError(f"problem must provide {name!r} (see fedaudit.defenses.optimizers.Problem), "
                                f"got {type(obj).__name__}")
    return obj


# ============================================================================ optimizers
class _State:
    """Per-run mutable state of an optimizer: where to query, how to update, what to report."""

    def query(self) -> np.ndarray:
        raise NotImplementedError

    def update(self, g: np.ndarray) -> None:
        raise NotImplementedError

    def output(self) -> np.ndarray:
        raise NotImplementedError

    info: dict[str, Any] = {}
    extras: dict[str, list] = {}


class Optimizer:
    """Base class: an optimizer object holds only its configuration (reusable across runs);
    :meth:`start` makes the per-run state (query point, update, reported iterate)."""

    name = "optimizer"

    def start(self, problem: Any, x0: np.ndarray, rng: np.random.Generator) -> _State:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.config().items())
        return f"{type(self).__name__}({args})"


class DGD(Optimizer):
    """Distributed gradient descent on the robust aggregate: x_{k+1} = x_k − lr·g_k.

    With an (ζ², α)-inexact oracle and lr ≤ 1/L, GD converges linearly to an O(ζ²/μ)
    neighbourhood (the optimal Byzantine error order). The authors' experiments use lr = 0.1.
    """

    name = "dgd"

    def __init__(self, lr: float):
        self.lr = check_positive("lr", lr)

    def start(self, problem, x0, rng):
        opt = self

        class S(_State):
            def __init__(self):
                self.x = x0.copy()
                self.info, self.extras = {}, {}

            def query(self):
                return self.x

            def update(self, g):
                self.x = self.x - opt.lr * g

            def output(self):
                return self.x

        return S()


class DNAG(Optimizer):
    """Constant-momentum Nesterov on the robust aggregate — exactly ``torch.optim.SGD(lr,
    momentum=m, nesterov=True, dampening=0, weight_decay=0)``:

        b_0 = g_0,  b_k = m·b_{k−1} + g_k,  x_{k+1} = x_k − lr·(g_k + m·b_k),

    with g_k the oracle at x_k. This is the "D-NAG" of the authors' code (server-side SGD,
    lr 0.1, momentum 0.9), not the Γ_k/γ_k scheme of the paper (see :class:`RobustAccelerated`).
    """

    name = "dnag"

    def __init__(self, lr: float, momentum: float = 0.9):
        self.lr = check_positive("lr", lr)
        self.momentum = check_real("momentum", momentum, low=0.0, high=1.0, open_high=True)

    def start(self, problem, x0, rng):
        opt = self

        class S(_State):
            def __init__(self):
                self.x, self.buf = x0.copy(), None
                self.info, self.extras = {}, {}

            def query(self):
                return self.x

            def update(self, g):
                self.buf = g.copy() if self.buf is None else opt.momentum * self.buf + g
                self.x = self.x - opt.lr * (g + opt.momentum * self.buf)

            def output(self):
                return self.x

        return S()


def nesterov_schedule(L: float, mu: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The seed's step-size schedule: γ_0 = 1 and, for k ≥ 0, γ_{k+1} > 0 solving

        2L + Γ_k·μ/2 = 2L·γ_{k+1}²/Γ_{k+1},   Γ_k = Σ_{i≤k} γ_i,

    i.e. γ_{k+1} = (c + sqrt(c² + 8L·c·Γ_k))/(4L) with c = 2L + Γ_k·μ/2. This is the
    Devolder–Glineur–Nesterov FGM condition L'·α_{k+1}²/A_{k+1} = L' + μ'·A_k for a
    (δ, L' = 2L, μ' = μ/2)-oracle. Returns (γ_0..γ_n, Γ_0..Γ_n); with μ > 0 they grow
    geometrically, so long runs should use the ratios computed by :class:`RobustAccelerated`.
    """
    L = check_positive("L", L)
    mu = check_real("mu", mu, low=0.0)
    n = check_int("n", n, low=0)
    gam, Gam = [1.0], [1.0]
    for _ in range(n):
        c = 2 * L + Gam[-1] * mu / 2
        g = (c + math.sqrt(c * c + 8 * L * c * Gam[-1])) / (4 * L)
        gam.append(g)
        Gam.append(Gam[-1] + g)
    return np.array(gam), np.array(Gam)


class RobustAccelerated(Optimizer):
    """The paper's robust accelerated (Nesterov) method, Γ_k/γ_k two-sequence form.

    One oracle call per round, at x_k; the reported iterate is y_k:

        y_k = x_k − g(x_k)/(2L)
        x_{k+1} = y_k + (Γ_{k−1}/Γ_k)(γ_k/γ_{k+1})(y_k − y_{k−1}) + (γ_k/γ_{k+1})(μ/(4L))(x_k − y_k)

    with the schedule of :func:`nesterov_schedule` and Γ_{−1} = 0 (``variant="fgm"``, default).
    This is exactly the Devolder–Glineur–Nesterov fast gradient method (Math. Prog. 2014 and
    the strongly convex follow-up, CORE DP 2013/16) for a (δ, 2L, μ/2)-oracle — y_k = T(x_k),
    z_k = argmin of the estimate sequence, x_{k+1} = (Γ_k y_k + γ_{k+1} z_k)/Γ_{k+1} — with z_k
    eliminated; the test-suite checks the equivalence against the three-sequence form.

    ``variant="literal"``: the recursion exactly as printed in the seed,
    x_{k+1} = y_k + (Γ_{k−1}/Γ_k)(γ_k/γ_{k+1})(y_k − y_{k−1}) − (Γ_{k−1}/Γ_k)·y_k
    + (γ_k/γ_{k+1})(μ/(4L))·x_k. Its coefficients sum to
    1 − Γ_{k−1}/Γ_k + (γ_k/γ_{k+1})μ/(4L) ≠ 1, so it is not translation invariant: a minimiser
    x* ≠ 0 is not a fixed point, and on a quadratic it converges to a point shrunk towards 0
    (kept only to demonstrate this).

    ``variant="nesterov"``: Nesterov's constant-momentum scheme for μ-strongly convex L-smooth
    functions (Introductory Lectures 2.2.19 with γ_0 = μ): x_{k+1} = y_k − g(y_k)/L,
    y_{k+1} = x_{k+1} + β(x_{k+1} − x_k), β = (√L − √μ)/(√L + √μ); oracle at y_k, reports x_k.

    ``L`` and ``mu`` default to ``problem.smoothness()`` / ``problem.strong_convexity()``.
    """

    name = "robust-accelerated"
    VARIANTS = ("fgm", "literal", "nesterov")

    def __init__(self, L: float | None = None, mu: float | None = None, variant: str = "fgm"):
        self.L = None if L is None else check_positive("L", L)
        self.mu = None if mu is None else check_real("mu", mu, low=0.0)
        if variant not in self.VARIANTS:
            raise FedAuditError(f"variant must be one of {self.VARIANTS}, got variant={variant!r}")
        if self.L is not None and self.mu is not None and self.mu > self.L:
            raise FedAuditError(f"mu must be <= L, got mu={self.mu:g}, L={self.L:g}")
        self.variant = variant

    def _constants(self, problem) -> tuple[float, float]:
        L = self.L if self.L is not None else check_positive("L (problem.smoothness())", problem.smoothness())
        mu = self.mu if self.mu is not None else check_real("mu (problem.strong_convexity())",
                                                           problem.strong_convexity(), low=0.0)
        if mu > L:
            raise FedAuditError(f"mu must be <= L, got mu={mu:g}, L={L:g}")
        return L, mu

    def start(self, problem, x0, rng):
        L, mu = self._constants(problem)
        if self.variant == "nesterov":
            return self._nesterov(L, mu, x0)
        return self._fgm(L, mu, x0, literal=self.variant == "literal")

    @staticmethod
    def _nesterov(L, mu, x0):
        beta = (math.sqrt(L) - math.sqrt(mu)) / (math.sqrt(L) + math.sqrt(mu))

        class S(_State):
            def __init__(self):
                self.x, self.y = x0.copy(), x0.copy()
                self.info, self.extras = {"L": L, "mu": mu, "beta": beta}, {}

            def query(self):
                return self.y

            def update(self, g):
                x_new = self.y - g / L
                self.y = x_new + beta * (x_new - self.x)
                self.x = x_new

            def output(self):
                return self.x

        return S()

    @staticmethod
    def _fgm(L, mu, x0, literal):
        q = mu / (4 * L)

        class S(_State):
            """Schedule kept as ratios: u_k = γ_{k+1}/Γ_k solves u² = (1/Γ_k + μ/(4L))(1 + u)
            (the schedule equation divided by 2L·Γ_k²), so nothing overflows on long runs."""

            def __init__(self):
                self.x = x0.copy()
                self.y = x0.copy()
                self.y_prev = None
                self.k = 0
                self.inv_Gamma = 1.0  # 1/Γ_k, Γ_0 = γ_0 = 1
                self.u_prev = None    # u_{k−1} = γ_k/Γ_{k−1}
                self.info, self.extras = {"L": L, "mu": mu, "variant": "literal" if literal else "fgm"}, {}

            def query(self):
                return self.x

            def update(self, g):
                x = self.x
                y = x - g / (2 * L)
                a = self.inv_Gamma + q
                u = (a + math.sqrt(a * a + 4 * a)) / 2           # u_k = γ_{k+1}/Γ_k
                if self.k == 0:
                    r_prev = 0.0                                 # Γ_{−1}/Γ_0
                    ratio = 1.0 / u                              # γ_0/γ_1 = 1/(u_0·Γ_0)
                else:
                    r_prev = 1.0 / (1.0 + self.u_prev)           # Γ_{k−1}/Γ_k
                    ratio = (self.u_prev / u) * r_prev           # γ_k/γ_{k+1}
                mom = r_prev * ratio
                if literal:
                    x_new = y - r_prev * y + ratio * q * x
                else:
                    x_new = y + ratio * q * (x - y)
                if self.y_prev is not None and mom != 0.0:
                    x_new = x_new + mom * (y - self.y_prev)
                self.y_prev, self.y, self.x = y, y, x_new
                self.inv_Gamma = self.inv_Gamma / (1.0 + u)
                self.u_prev = u
                self.k += 1

            def output(self):
                return self.y

        return S()


def estimate_delta(problem: Any, x: np.ndarray | None = None, iters: int = 100,
                   rng: RngLike = 0, *, tol: float = 1e-7) -> float:
    """Hessian similarity Δ̂ = ‖∇²L_H(x) − ∇²L̂(x)‖_op by power iteration.

    Power iteration (random Gaussian start from ``rng``) on the symmetric operator
    v ↦ ∇²L_H(x)v − ∇²L̂(x)v, built from Hessian-vector products (``problem.honest_hvp`` and
    ``problem.surrogate.hvp``); returns ‖Mv‖ for the final unit v, a lower bound on ‖M‖_op that
    converges to the largest |eigenvalue| (the spectral norm, whatever the sign). Stops when
    the estimate changes by less than ``tol`` relatively. PIGS uses it at x_0 for η = 1/(2Δ̂);
    for logistic losses both Hessians carry the same μI, so μ cancels (methods.md §3.3).
    """
    problem = as_problem(problem)
    if not hasattr(problem, "honest_hvp") or getattr(problem, "surrogate", None) is None:
        raise FedAuditError("estimate_delta needs problem.honest_hvp(x, v) and problem.surrogate.hvp(x, v)")
    iters = check_int("iters", iters, low=1)
    tol = check_positive("tol", tol)
    x = np.zeros(problem.dim) if x is None else check_vector("x", x, dim=problem.dim)
    gen = as_generator(rng)

    def M(v):
        return np.asarray(problem.honest_hvp(x, v), dtype=np.float64) - np.asarray(problem.surrogate.hvp(x, v),
                                                                                  dtype=np.float64)

    v = gen.standard_normal(problem.dim)
    v /= np.linalg.norm(v)
    est = 0.0
    for _ in range(iters):
        w = M(v)
        new = float(np.linalg.norm(w))
        if new == 0.0:
            return 0.0
        v = w / new
        if abs(new - est) <= tol * new:
            return new
        est = new
    return est


def _newton_polish(sur, z, gz, grad_phi, eta, gtol, steps: int = 5):
    """A few Newton–CG steps on φ(z) = L̂(z) + ⟨c, z⟩ + ‖z − x_k‖²/(2η), whose Hessian is
    ∇²L̂(z) + I/η. L-BFGS-B's line search works on function values and stalls once φ changes
    by less than its rounding error (‖Δz‖ ~ 1e-8 for φ ~ 1); Newton steps only use gradients
    and Hessian-vector products, so they reach a gradient tolerance near machine precision. A
    step is kept only if it reduces ‖∇φ‖. Returns (z, ∇φ(z), number of steps kept)."""
    from scipy.sparse.linalg import LinearOperator, cg

    n = z.size
    kept = 0
    gn = float(np.max(np.abs(gz)))
    for _ in range(steps):
        if gn <= gtol:
            break
        op = LinearOperator((n, n), dtype=np.float64,
                            matvec=lambda v, z=z: np.asarray(sur.hvp(z, v), dtype=np.float64) + v / eta)
        p, _ = cg(op, -gz, rtol=1e-12, atol=0.0, maxiter=4 * n)
        z_new = z + p
        g_new = grad_phi(z_new)
        gn_new = float(np.max(np.abs(g_new)))
        if not gn_new < gn:
            break
        z, gz, gn = z_new, g_new, gn_new
        kept += 1
    return z, gz, kept


def _delta_check_rounds(k: int, every: int | None) -> bool:
    """Rounds at which PIGS re-estimates Δ̂: k = 0, 1, 2, 4, 8, … (``every=None``; the iterate
    moves most early on) or every ``every`` rounds."""
    if every is not None:
        return k % every == 0
    return k == 0 or (k & (k - 1)) == 0


class PIGS(Optimizer):
    """Preconditioned inexact gradient under similarity (PIGS).

    Per round: g_k = oracle(x_k) (one communication), then on the server

        x_{k+1} ≈ argmin_x  L̂(x) + ⟨g_k − ∇L̂(x_k), x − x_k⟩ + ‖x − x_k‖²/(2η),

    solved by scipy's L-BFGS-B warm-started at x_k (``max_iter`` iterations, gradient
    tolerance ``gtol`` on the sup-norm; the authors use torch L-BFGS with tolerance 1e-13),
    then — if that tolerance was not reached because the line search hit the rounding error of
    the objective — polished by a few Newton–CG steps with the surrogate's Hessian-vector
    products (``polish=True``).
    With L̂ = L_H and an exact oracle this is the proximal-point step. Theory: if
    ‖∇²L_H(x) − ∇²L̂(x)‖_op ≤ Δ for all x then η = 1/(2Δ) gives a linear rate
    ≈ 1 − μ/(μ + 2Δ) up to the oracle's error floor.

    Step size (``eta=None``). Δ is a supremum over x, and power iteration at one point gives a
    *lower* estimate of the norm at that point, so 1/(2Δ̂(x_0)) errs on the unsafe side (on
    digits, Δ̂ along a run is about twice Δ̂(x_0)). PIGS therefore estimates
    Δ̂(p) = :func:`estimate_delta` (``delta_iters`` power iterations, seeded from the run's
    optimizer stream) at x_0 and, on check rounds k (1, 2, 4, 8, … or every ``delta_every``),
    at the candidate x_{k+1} and at a uniformly random point of the segment [x_k, x_{k+1}],
    and uses

        η_k = 1 / (2·m·max_{p probed so far} Δ̂(p)),   m = ``delta_margin`` (default 1.25),

    recomputing the server-side step (no extra communication) when a probe raises the maximum
    (at most three times per round).
    η_k is non-increasing. The margin m covers the power-iteration bias and the points between
    probes; it is a safety factor, not a bound (no finite set of probes certifies a sup).
    Every probe is kept in ``info["delta_estimates"]`` (round, where, value), the step of each
    round in ``extras["eta"]``. With ``eta`` given, η is fixed and nothing is estimated.
    The L-BFGS outcome per round is kept in ``Trace.extras``.
    """

    name = "pigs"

    def __init__(self, eta: float | None = None, max_iter: int = 1000, gtol: float = 1e-10,
                 history: int = 10, delta_iters: int = 200, polish: bool = True,
                 delta_margin: float = 1.25, delta_every: int | None = None):
        self.eta = None if eta is None else check_positive("eta", eta)
        self.polish = bool(polish)
        self.max_iter = check_int("max_iter", max_iter, low=1)
        self.gtol = check_positive("gtol", gtol)
        self.history = check_int("history", history, low=1)
        self.delta_iters = check_int("delta_iters", delta_iters, low=1)
        self.delta_margin = check_real("delta_margin", delta_margin, low=1.0)
        self.delta_every = None if delta_every is None else check_int("delta_every", delta_every, low=1)

    def start(self, problem, x0, rng):
        from scipy.optimize import minimize

        sur = getattr(problem, "surrogate", None)
        if sur is None:
            raise FedAuditError("PIGS needs problem.surrogate with loss(x), grad(x) (and hvp for eta=None)")
        opt = self
        gen = as_generator(rng)
        info: dict[str, Any] = {}
        estimates: list[dict[str, Any]] = []

        def probe(x, k, where) -> float:
            d = estimate_delta(problem, x, opt.delta_iters, gen)
            estimates.append({"round": k, "where": where, "delta": d})
            return d

        if self.eta is None:
            d0 = probe(x0, 0, "x0")
            if d0 <= 0:
                raise FedAuditError("estimated Hessian similarity is 0 (L̂ = L_H): pass eta explicitly")
            info.update(delta_hat_x0=d0, delta_hat=d0, delta_margin=self.delta_margin,
                        delta_used=self.delta_margin * d0, eta_initial=1.0 / (2.0 * self.delta_margin * d0),
                        eta=1.0 / (2.0 * self.delta_margin * d0), delta_estimates=estimates,
                        eta_source="1/(2*delta_margin*max delta_hat over x0 and the run's probes)")
        else:
            info.update(eta=self.eta, eta_source="given")

        def prox(xk, c, eta):
            def fun(z):
                d = z - xk
                val = float(sur.loss(z)) + float(c @ d) + float(d @ d) / (2 * eta)
                grad = np.asarray(sur.grad(z), dtype=np.float64) + c + d / eta
                return val, grad

            res = minimize(fun, xk, jac=True, method="L-BFGS-B",
                           options={"maxiter": opt.max_iter, "gtol": opt.gtol, "ftol": 1e-30,
                                    "maxcor": opt.history, "maxls": 50})
            z = np.asarray(res.x, dtype=np.float64)
            gz = fun(z)[1]
            its = int(res.nit)
            if opt.polish and np.max(np.abs(gz)) > opt.gtol and hasattr(sur, "hvp"):
                z, gz, extra = _newton_polish(sur, z, gz, lambda w: fun(w)[1], eta, opt.gtol)
                its += extra
            return z, gz, its

        class S(_State):
            def __init__(self):
                self.x = x0.copy()
                self.k = 0
                self.info = info
                self.extras = {"prox_grad_norm": [], "prox_iters": [], "prox_converged": [], "eta": []}

            def query(self):
                return self.x

            def update(self, g):
                xk = self.x
                c = g - np.asarray(sur.grad(xk), dtype=np.float64)
                eta = info["eta"]
                z, gz, its = prox(xk, c, eta)
                if opt.eta is None and _delta_check_rounds(self.k, opt.delta_every):
                    for _ in range(3):  # a raised maximum shortens the step; re-check where it lands
                        t = float(gen.uniform())
                        d = max(probe(z, self.k, "next iterate"), probe(xk + t * (z - xk), self.k, "segment"))
                        if d <= info["delta_hat"]:
                            break
                        info.update(delta_hat=d, delta_used=opt.delta_margin * d,
                                    eta=1.0 / (2.0 * opt.delta_margin * d))
                        eta = info["eta"]
                        z, gz, extra = prox(xk, c, eta)
                        its += extra
                self.x = z
                self.k += 1
                self.extras["eta"].append(eta)
                self.extras["prox_grad_norm"].append(float(np.linalg.norm(gz)))
                self.extras["prox_iters"].append(its)
                self.extras["prox_converged"].append(bool(np.max(np.abs(gz)) <= opt.gtol))

            def output(self):
                return self.x

        return S()


# ============================================================================ runner
@dataclass
class Trace:
    """What happened during a run, one entry per recorded round.

    ``rounds[j]`` is the number of completed communication rounds; ``loss[j]``, ``grad_norm[j]``,
    ``test_acc[j]`` are at the optimizer's reported iterate after that many rounds
    (``rounds[0] = 0`` is x_0). ``wall_time[j]`` is cumulative optimizer time (oracle + update,
    excluding logging). The oracle arrays are indexed by ``oracle_rounds`` (round k's query
    point q_k): ``oracle_err_sq = ‖g_k − ∇L_H(q_k)‖²``, ``grad_sq = ‖∇L_H(q_k)‖²`` and, when the
    problem exposes ``heterogeneity``, ``het_dev_sq`` = (1/|H|)Σ‖∇L_i(q_k) − ∇L_H(q_k)‖² and
    ``het_grad_sq`` = ‖∇L_H(q_k)‖² from the federation.

    Early stops: ``diverged`` (non-finite or exploding iterate/loss) and ``breakdown`` — None,
    or ``{"round": k, "rule", "n", "nonfinite", "tolerated", "message"}`` when round k's oracle
    raised :class:`~fedaudit.errors.AggregatorBreakdown` (the arrays then end at round k).
    :meth:`to_dict` writes non-finite floats as the strings ``"inf"``, ``"-inf"``, ``"nan"``
    (strict JSON, and distinguishable from a missing value).
    """

    optimizer: str
    config: dict[str, Any]
    rounds: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    test_acc: list[float | None] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)
    oracle_rounds: list[int] = field(default_factory=list)
    oracle_err_sq: list[float] = field(default_factory=list)
    grad_sq: list[float] = field(default_factory=list)
    het_dev_sq: list[float] = field(default_factory=list)
    het_grad_sq: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, list] = field(default_factory=dict)
    diverged: bool = False
    breakdown: dict[str, Any] | None = None
    seed_entropy: int | None = None
    x_final: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self, include_x: bool = False) -> dict[str, Any]:
        from fedaudit.json import jsonable  # strict JSON: non-finite → "inf"/"-inf"/"nan", None = absent

        out = {k: v for k, v in asdict(self).items() if k != "x_final"}
        out["seed_entropy"] = None if self.seed_entropy is None else str(self.seed_entropy)
        if include_x and self.x_final is not None:
            out["x_final"] = self.x_final.tolist()
        return jsonable(out)


def run(optimizer: Optimizer, problem: Any, x0: Any = None, rounds: int = 100, *,
        rng: RngLike = None, seed: int | None = None, record_every: int = 1,
        callback: Callable[[int, dict[str, Any]], None] | None = None,
        record_heterogeneity: bool = True, divergence_factor: float = 1e6) -> Trace:
    """Run ``optimizer`` for ``rounds`` communication rounds on ``problem`` from ``x0``.

    ``problem`` is a :class:`Problem` or a Federation (wrapped by :class:`FederationProblem`);
    ``x0`` defaults to zeros. Randomness: ``rng`` or ``seed`` (not both; default seed 0) is the
    root; round k's oracle gets its own child stream (``SeedSequence.spawn``), so two optimizers
    run with the same seed face the same attack randomness round by round, and the optimizer's
    own randomness (Δ̂ power iteration) comes from a separate child. Recording happens every
    ``record_every`` rounds and at the last round; ``callback(round, record)`` is called after
    each recording. The run stops early (``diverged=True``) when the iterate or the loss becomes
    non-finite or the loss exceeds |L(x_0)|·``divergence_factor`` + 1, and (``breakdown`` set,
    see :class:`Trace`) when the oracle raises :class:`~fedaudit.errors.AggregatorBreakdown`.
    """
    if not isinstance(optimizer, Optimizer):
        raise FedAuditError(f"optimizer must be a fedaudit Optimizer (DGD, DNAG, RobustAccelerated, PIGS), "
                            f"got {type(optimizer).__name__}")
    problem = as_problem(problem)
    rounds = check_int("rounds", rounds, low=1)
    record_every = check_int("record_every", record_every, low=1)
    divergence_factor = check_positive("divergence_factor", divergence_factor)
    if rng is not None and seed is not None:
        raise FedAuditError("pass either rng or seed, not both")
    root = as_seed_sequence(seed if seed is not None else (0 if rng is None else rng))
    oracle_ss, opt_ss = root.spawn(2)
    round_seeds = oracle_ss.spawn(rounds)
    x0 = np.zeros(problem.dim) if x0 is None else check_vector("x0", x0, dim=problem.dim)

    has_acc = hasattr(problem, "test_accuracy")
    has_het = record_heterogeneity and hasattr(problem, "heterogeneity")
    has_details = hasattr(problem, "oracle_details")
    trace = Trace(optimizer=optimizer.name, config=optimizer.config(), seed_entropy=root.entropy)

    def record(k: int, x: np.ndarray, elapsed: float) -> dict[str, Any]:
        loss = float(problem.honest_loss(x))
        gn = float(np.linalg.norm(problem.honest_grad(x)))
        acc = float(problem.test_accuracy(x)) if has_acc else None
        trace.rounds.append(k)
        trace.loss.append(loss)
        trace.grad_norm.append(gn)
        trace.test_acc.append(acc)
        trace.wall_time.append(elapsed)
        return {"round": k, "loss": loss, "grad_norm": gn, "test_acc": acc, "wall_time": elapsed}

    state = optimizer.start(problem, x0, np.random.default_rng(opt_ss))
    trace.info = state.info
    rec = record(0, state.output(), 0.0)
    loss0 = rec["loss"]
    if callback is not None:
        callback(0, rec)
    elapsed = 0.0
    for k in range(rounds):
        logging = (k % record_every == 0) or k == rounds - 1
        round_rng = np.random.default_rng(round_seeds[k])
        t0 = time.perf_counter()
        q = np.array(state.query(), dtype=np.float64, copy=True)
        het = None
        try:
            if logging and has_details:
                g, true_g, het = problem.oracle_details(q, round_rng, heterogeneity=has_het)
            else:
                g = problem.oracle(q, round_rng)
        except AggregatorBreakdown as exc:  # past the rule's tolerance: a result, not a crash
            trace.breakdown = {"round": k, **exc.to_dict()}
            break
        g = np.asarray(g, dtype=np.float64)
        elapsed += time.perf_counter() - t0
        if logging:
            if not has_details:
                true_g = np.asarray(problem.honest_grad(q), dtype=np.float64)
                if has_het:
                    het = problem.heterogeneity(q)
            true_g = np.asarray(true_g, dtype=np.float64)
            trace.oracle_rounds.append(k)
            trace.oracle_err_sq.append(float(np.sum((g - true_g) ** 2)))
            trace.grad_sq.append(float(true_g @ true_g))
            if has_het:
                trace.het_dev_sq.append(float(het[0]))
                trace.het_grad_sq.append(float(het[1]))
        t0 = time.perf_counter()
        if not np.isfinite(g).all():
            trace.diverged = True
            break
        state.update(g)
        elapsed += time.perf_counter() - t0
        x = state.output()
        if not np.isfinite(x).all():
            trace.diverged = True
            break
        if ((k + 1) % record_every == 0) or k == rounds - 1:
            rec = record(k + 1, x, elapsed)
            if not math.isfinite(rec["loss"]) or rec["loss"] > abs(loss0) * divergence_factor + 1.0:
                trace.diverged = True
                if callback is not None:
                    callback(k + 1, rec)
                break
            if callback is not None:
                callback(k + 1, rec)
    trace.extras = {k: list(v) for k, v in state.extras.items()}
    trace.x_final = np.array(state.output(), dtype=np.float64, copy=True)
    return trace


# ============================================================================ plateau
def _check_losses(losses: Any) -> np.ndarray:
    arr = np.asarray(losses, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2:
        raise FedAuditError(f"losses must be a 1-D sequence of at least 2 values, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise FedAuditError("losses must be finite (a diverged run has no plateau)")
    return arr


def plateau_level(losses: Sequence[float], tail: float = 0.2) -> float:
    """ℓ_∞ = median of the last ⌈tail·len⌉ losses (at least one)."""
    arr = _check_losses(losses)
    tail = check_real("tail", tail, low=0.0, high=1.0, open_low=True)
    m = max(1, int(math.ceil(tail * arr.size)))
    return float(np.median(arr[-m:]))


def rounds_to_plateau(losses: Sequence[float], reference_loss: float, eps: float = 0.05,
                      tail: float = 0.2, *, rounds: Sequence[int] | None = None,
                      sustained: bool = False, plateau: float | None = None, atol: float = 0.0) -> int:
    """Rounds needed to reach the asymptotic error (proxy for reading the paper's plots).

    With ℓ* = ``reference_loss`` (e.g. the best loss of the f = 0 run) and the plateau
    ℓ_∞ = :func:`plateau_level` (median of the last ``tail`` fraction; or ``plateau`` if given,
    e.g. a plateau shared by several methods), returns the first k with

        L(x_k) − ℓ* ≤ (ℓ_∞ − ℓ*) + max(ε·|ℓ_∞ − ℓ*|, atol),

    which is (1 + ε)(ℓ_∞ − ℓ*) whenever the plateau lies above ℓ* and ``atol`` is 0 (the usual
    case); the |·| keeps the rule meaningful if it does not, and ``atol`` gives an absolute floor
    for runs whose plateau *is* ℓ* (f = 0), where a relative rule would demand machine precision.
    Always defined when ℓ_∞ comes from the run (at least half the tail is ≤ ℓ_∞); with an
    external ``plateau`` the curve may never get there, then ``-1`` is returned.
    ``losses[j]`` is taken to be after ``rounds[j]`` rounds (default j). ``sustained=True``
    returns the first k after which the curve never goes back above the threshold.

    Caveat: under attack the loss often dips *below* its plateau and climbs back (the iterate
    passes near argmin L_H on its way to the biased fixed point); the first-crossing rule then
    counts the rounds to come down to the plateau level, which is what one reads off a plot. If
    the run is too short to be on its plateau, the median of the tail underestimates ℓ_∞.
    """
    arr = _check_losses(losses)
    ref = check_real("reference_loss", reference_loss)
    eps = check_real("eps", eps, low=0.0)
    atol = check_real("atol", atol, low=0.0)
    if plateau is None:
        plateau = plateau_level(arr, tail)
    else:
        plateau = check_real("plateau", plateau)
    gap = plateau - ref
    thresh = ref + gap + max(eps * abs(gap), atol)
    below = arr <= thresh + 1e-15 * max(1.0, abs(thresh))
    if not below.any():
        return -1
    if sustained:
        above = np.flatnonzero(~below)
        j = 0 if above.size == 0 else int(above[-1]) + 1
        if j >= arr.size:
            return -1
    else:
        j = int(np.argmax(below))
    if rounds is None:
        return j
    rounds = np.asarray(rounds)
    if rounds.shape != arr.shape:
        raise FedAuditError(f"rounds must have the same length as losses ({arr.size}), got {rounds.shape}")
    return int(rounds[j])
