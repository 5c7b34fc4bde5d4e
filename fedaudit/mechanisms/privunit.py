"""PrivUnitG: the Gaussian variant of PrivUnit (Asi, Feldman, Talwar, ICML 2022, arXiv 2205.02466).

For a unit vector ``v`` draw ``g ~ N(0, I_d)`` and replace its component along ``v`` by ``t``,
where with probability ``p`` ``t ~ N(0, 1) | t >= gamma`` and otherwise ``t ~ N(0, 1) | t < gamma``;
output ``sigma * (g - <g, v> v + t v)``. With

    s = eps + log((1 - p) / p),   q = 1 / (1 + e^s) = Phibar(gamma),   gamma = Phibar^{-1}(q),
    sigma = 1 / (phi(gamma) (p / Phibar(gamma) - (1 - p) / Phi(gamma)))
          = q (1 - q) (p + e^eps (1 - p)) / (phi(gamma) p (1 - p) (e^eps - 1)),

``E[t] = 1 / sigma`` so ``E[output] = v``, and ``E[t^2] = 1 + gamma / sigma``. The default ``p`` is
the variance-optimal ``p* = argmin_{p in (1/2, 1)} sigma(eps, p)``; then ``sigma^2`` equals the
asymptotic MSE/d (6.33 at eps=1, 0.435 at eps=4, 0.133 at eps=8).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import ndtri_exp

from fedaudit.guarantees import PureLDP
from fedaudit.validation import check_int, check_positive, check_real
from fedaudit.mechanisms.base import (Mechanism, check_epsilon, halfspace_pair_sup, parallel_sign,
                                      signed_directions)

__all__ = ["PrivUnitG", "optimal_p", "privunitg_sigma"]

_LOG_2PI = math.log(2.0 * math.pi)


def _log_q_pair(epsilon: float, p: np.ndarray | float) -> tuple[Any, Any]:
    """(log q, log(1 - q)) with q = 1/(1 + e^s), s = eps + log((1-p)/p), computed without cancellation."""
    s = epsilon + np.log1p(-p) - np.log(p)
    return -np.logaddexp(0.0, s), -np.logaddexp(0.0, -s)


def _gamma(log_q: Any, log_1mq: Any) -> Any:
    """gamma = Phibar^{-1}(q), inverting whichever tail is smaller (accurate for |gamma| large)."""
    return np.where(log_q <= log_1mq, -ndtri_exp(np.minimum(log_q, 0.0)), ndtri_exp(np.minimum(log_1mq, 0.0)))


def _log_sigma(epsilon: float, p: np.ndarray | float) -> Any:
    """log sigma(eps, p) (vectorised over p), from the cancellation-free form in the module docstring."""
    log_q, log_1mq = _log_q_pair(epsilon, p)
    gamma = _gamma(log_q, log_1mq)
    log_phi = -0.5 * gamma**2 - 0.5 * _LOG_2PI
    log_mix = np.logaddexp(np.log(p), epsilon + np.log1p(-p))  # log(p + e^eps (1-p))
    log_em1 = epsilon + np.log(-np.expm1(-epsilon))  # log(e^eps - 1)
    return log_q + log_1mq + log_mix - log_phi - np.log(p) - np.log1p(-p) - log_em1


def _check_p(p: Any) -> float:
    return check_real("p", p, low=0.5, high=1.0, open_low=True, open_high=True)


def privunitg_sigma(epsilon: float, p: float) -> float:
    """The PrivUnitG output scale ``sigma(eps, p)`` (see the module docstring); ``sigma^2`` ~ MSE/d."""
    epsilon = check_epsilon(epsilon)
    p = _check_p(p)
    return float(np.exp(_log_sigma(epsilon, p)))


@lru_cache(maxsize=256)
def _optimal_p(epsilon: float) -> float:
    # Coarse grid over (1/2, 1) in a logit parametrisation, then bounded Brent around the best cell.
    z = np.linspace(-30.0, 25.0, 5501)  # p = 1/2 + 1/2 * sigmoid(z) spans (0.5 + 5e-14, 1 - 7e-12)
    ps = 0.5 + 0.5 / (1.0 + np.exp(-z))
    i = int(np.argmin(_log_sigma(epsilon, ps)))
    lo, hi = z[max(i - 1, 0)], z[min(i + 1, len(z) - 1)]
    res = minimize_scalar(lambda zz: float(_log_sigma(epsilon, 0.5 + 0.5 / (1.0 + math.exp(-zz)))),
                          bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    return 0.5 + 0.5 / (1.0 + math.exp(-float(res.x)))


def optimal_p(epsilon: float) -> float:
    """Variance-optimal ``p* = argmin_{p in (1/2,1)} sigma(eps, p)`` (0.589 at eps=1, 0.791 at 4, 0.901 at 8)."""
    return _optimal_p(check_epsilon(epsilon))


class PrivUnitG(Mechanism):
    """PrivUnitG (Asi–Feldman–Talwar 2022, Alg. "PrivUnitG"), eps-LDP on the L2 ball of radius ``clip``.

    Input handling: ``x`` is projected onto the ball (``x min(1, clip/|x|)``) and scaled, ``y = x / clip``;
    ``v = +y/|y|`` w.p. ``(1 + |y|)/2`` else ``-y/|y|`` (``v = +-e_1`` w.p. 1/2 each when ``x = 0``),
    so ``E[v] = y``; the report is ``clip * sigma * (g - <g,v> v + t v)`` and ``E[report] = x``.

    Report layout: (n, dim) float64 output vectors; ``decode`` is the identity.
    ``bits_per_report = 64 * dim``: we count what is sent. (Feldman & Talwar, ICML 2021, show such
    randomizers can be compressed to a PRG seed; not done here.)

    Density (w.r.t. Lebesgue measure on R^d), with ``u = z / (clip sigma)``, ``a = <u, v>``:
    ``log f_v(z) = -|u|^2/2 - (d/2) log 2pi - d log(clip sigma) + log c(a)``, where
    ``c(a) = p / Phibar(gamma)`` if ``a >= gamma`` else ``(1 - p) / Phi(gamma)``; for ``|y| < 1``
    ``f_x = (1+|y|)/2 f_v + (1-|y|)/2 f_{-v}``.

    Privacy proof: every ``f_{+-v}`` is the same Gaussian factor times ``c in {c_lo, c_hi}``, so every
    mixture ``f_x`` lies in ``[c_lo, c_hi]`` times that factor and, for any x, x', z,
    ``f_x(z) / f_x'(z) <= c_hi / c_lo = p Phi(gamma) / ((1 - p) Phibar(gamma)) = (p/(1-p)) e^s = e^eps``
    (as ``Phi(gamma)/Phibar(gamma) = (1-q)/q = e^s``). The bound is attained by antipodal unit inputs
    on reports with ``a >= gamma > -a``.

    Parameters: ``dim >= 1`` (d = 1 is valid: the output is ``sigma t v``), ``epsilon > 0``,
    ``clip > 0``, ``p`` in (1/2, 1) or None for ``optimal_p(epsilon)``.
    """

    name = "privunitg"

    def __init__(self, dim: int, epsilon: float, clip: float = 1.0, p: float | None = None):
        self.dim = check_int("dim", dim, low=1)
        self.guarantee = PureLDP(check_epsilon(epsilon))
        self.clip = check_positive("clip", clip)
        self._p_given = p is not None
        self.p = _check_p(p) if p is not None else optimal_p(self.epsilon)
        self.report_width = self.dim
        self.report_layout = f"(n, {self.dim}) float64 output vectors; decode = identity"
        self._log_q, self._log_1mq = (float(a) for a in _log_q_pair(self.epsilon, self.p))
        self.gamma = float(_gamma(self._log_q, self._log_1mq))
        self.sigma = float(np.exp(_log_sigma(self.epsilon, self.p)))
        self._log_c_hi = math.log(self.p) - self._log_q        # log p / Phibar(gamma)
        self._log_c_lo = math.log1p(-self.p) - self._log_1mq   # log (1-p) / Phi(gamma)

    @property
    def bits_per_report(self) -> int:
        return 64 * self.dim

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "epsilon": self.epsilon, "clip": self.clip,
                "p": self.p if self._p_given else None}

    # ------------------------------------------------------------ sampling
    def _draw_t(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Exact inverse-CDF draws in log space: w.p. p, t = Phibar^{-1}(U q); else Phi^{-1}(U (1-q))."""
        upper = rng.random(n) < self.p
        log_u = np.log1p(-rng.random(n))  # log U, U in (0, 1]
        t_hi = -ndtri_exp(log_u + self._log_q)
        t_lo = ndtri_exp(log_u + self._log_1mq)
        return np.where(upper, t_hi, t_lo)


    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = X.shape[0]
        U, p_plus = signed_directions(X, self.clip)
        sign = np.where(rng.random(n) < p_plus, 1.0, -1.0)
        g = rng.standard_normal((n, self.dim))
        t = self._draw_t(n, rng)
        # v = sign * U:  g - <g,v> v + t v = g + (sign * t - <g,U>) U
        coef = sign * t - np.einsum("ij,ij->i", g, U)
        return (self.clip * self.sigma) * (g + coef[:, None] * U)

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        U, p_plus = signed_directions(x[None, :], self.clip)
        u = U[0]
        sign = np.where(rng.random(size) < p_plus[0], 1.0, -1.0)
        g = rng.standard_normal((size, self.dim))
        t = self._draw_t(size, rng)
        coef = sign * t - g @ u
        g += coef[:, None] * u
        g *= self.clip * self.sigma
        return g

    def decode(self, reports: Any) -> np.ndarray:
        return self._check_reports(reports).copy()

    # ------------------------------------------------------------ density
    def _log_c(self, a: np.ndarray) -> np.ndarray:
        return np.where(a >= self.gamma, self._log_c_hi, self._log_c_lo)

    def _log_mix(self, a: np.ndarray, w: float) -> np.ndarray:
        """log(w c(a) + (1 − w) c(−a)): the x-dependent factor of the density, a = <u, U_x>."""
        if w >= 1.0:
            return self._log_c(a)
        return np.logaddexp(math.log(w) + self._log_c(a), math.log1p(-w) + self._log_c(-a))

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        U, p_plus = signed_directions(x[None, :], self.clip)
        w = float(p_plus[0])
        scale = self.clip * self.sigma
        u = reports / scale
        base = -0.5 * np.einsum("ij,ij->i", u, u) - 0.5 * self.dim * _LOG_2PI - self.dim * math.log(scale)
        return base + self._log_mix(u @ U[0], w)

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """ess sup over u in R^d of |log mix_0(<u, U0>) − log mix_1(<u, U1>)| (the Gaussian base
        factor cancels), U_i the directions of :func:`signed_directions` (e_1 at x = 0).

        mix_i is constant between the breakpoints {gamma} (w_i = 1) or {gamma, −gamma} (w_i < 1:
        sides of {<u, ±U_i> >= gamma}); Lebesgue-null boundaries are ignored. The image of
        u ↦ (<u, U0>, <u, U1>) is R² if U0, U1 are independent and the line a1 = c·a0 if
        U1 = c·U0 (up to rounding, :func:`~fedaudit.mechanisms.base.parallel_sign`; always for d = 1), so enumerating one point per cell is exact
        (:func:`~fedaudit.mechanisms.base.halfspace_pair_sup`). At x = 0 the law is the
        ½/½ mixture over v = ±e_1: it is not rotation invariant, so e_1 matters and is used.
        Antipodal unit inputs give exactly log(c_hi/c_lo) = eps.
        """
        U, w = signed_directions(np.vstack([x0, x1]), self.clip)
        breaks = [[self.gamma] if wi >= 1.0 else [self.gamma, -self.gamma] for wi in w]
        u0 = x0 if np.any(x0) else U[0]  # parallelism of the exact directions x/|x| (e_1 at 0)
        u1 = x1 if np.any(x1) else U[1]
        return halfspace_pair_sup(lambda a: self._log_mix(a, float(w[0])), breaks[0],
                                  lambda a: self._log_mix(a, float(w[1])), breaks[1],
                                  parallel_sign(u0, u1))

    # ------------------------------------------------------------ accuracy
    def expected_mse(self, x_norm: float) -> float:
        """Exact E|report - x|^2 for |x| = x_norm in [0, clip]:
        ``clip^2 sigma^2 (d - 1 + E[t^2]) - |x|^2 = clip^2 (sigma^2 d + sigma gamma) - |x|^2``."""
        x_norm = check_real("x_norm", x_norm, low=0.0, high=self.clip)
        return self.clip**2 * (self.sigma**2 * self.dim + self.sigma * self.gamma) - x_norm**2
