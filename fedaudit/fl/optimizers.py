"""Server-side optimizers on an inexact (robustly aggregated) gradient oracle.

The setting and the problem protocol are in :mod:`fedaudit.fl.problems`; :func:`fedaudit.fl.training.run`
drives an optimizer for a number of rounds. One oracle call per round each:

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

An optimizer object holds only its parameters (:meth:`Optimizer.params`); :meth:`Optimizer.start`
makes the per-run :class:`OptimizerState`. Randomness (PIGS's power iterations) comes from the
``rng`` handed to ``start``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.fl.problems import as_problem
from fedaudit.fl.registry import OPTIMIZERS
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_choice, check_int, check_positive, check_real, check_vector

__all__ = ["OptimizerState", "Optimizer", "DGD", "DNAG", "RobustAccelerated", "PIGS", "nesterov_schedule",
           "estimate_delta"]


class OptimizerState:
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

    def start(self, problem: Any, x0: np.ndarray, rng: np.random.Generator) -> OptimizerState:
        raise NotImplementedError

    def params(self) -> dict[str, Any]:
        """The constructor parameters."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
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

        class S(OptimizerState):
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

        class S(OptimizerState):
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
        check_choice("variant", variant, self.VARIANTS)
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

        class S(OptimizerState):
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

        class S(OptimizerState):
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

        class S(OptimizerState):
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


for _cls in (DGD, DNAG, RobustAccelerated, PIGS):
    OPTIMIZERS.register(_cls.name, _cls)
del _cls
