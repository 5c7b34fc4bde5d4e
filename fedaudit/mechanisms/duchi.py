"""Duchi et al.'s L2 mechanism (Duchi, Jordan, Wainwright, JASA 2018, Sec. 4.2.3).

For ``x`` in the L2 ball of radius ``r = clip``: ``x~ = +r x/|x|`` w.p. ``a = 1/2 + |x|/(2r)``,
else ``-r x/|x|`` (so ``E[x~] = x``); with probability ``pi = e^eps/(e^eps + 1)`` output ``Z``
uniform on the radius-``B`` sphere with ``<Z, x~> > 0``, otherwise uniform with ``<Z, x~> <= 0``.
Since ``E|U_1| = Gamma(d/2) / (sqrt(pi) Gamma((d+1)/2))`` for ``U`` uniform on the unit sphere,

    B = r (e^eps + 1)/(e^eps - 1) * sqrt(pi) Gamma((d+1)/2) / Gamma(d/2)   (~ r (e^eps+1)/(e^eps-1) sqrt(pi d / 2))

gives ``E[Z | x~] = x~`` and hence ``E[Z] = x``; ``E|Z - x|^2 = B^2 - |x|^2``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import gammaln

from fedaudit.guarantees import PureLDP
from fedaudit.validation import check_int, check_positive, check_real
from fedaudit.mechanisms.base import (Mechanism, randomized_response_event, check_epsilon, halfspace_pair_sup, parallel_sign,
                                      signed_directions)

__all__ = ["Duchi", "duchi_radius"]


def duchi_radius(dim: int, epsilon: float, clip: float = 1.0) -> float:
    """``B = clip (e^eps+1)/(e^eps-1) sqrt(pi) Gamma((d+1)/2)/Gamma(d/2)`` (log-gamma; ``1/tanh(eps/2)`` form)."""
    dim = check_int("dim", dim, low=1)
    epsilon = check_epsilon(epsilon)
    clip = check_positive("clip", clip)
    log_ratio = gammaln((dim + 1) / 2.0) - gammaln(dim / 2.0)
    return clip / math.tanh(epsilon / 2.0) * math.sqrt(math.pi) * math.exp(log_ratio)


def _log_mix(w: float, la: float, lb: float) -> float:
    """log(w e^la + (1 - w) e^lb) for w in [0, 1]."""
    if w >= 1.0:
        return la
    if w <= 0.0:
        return lb
    return float(np.logaddexp(math.log(w) + la, math.log1p(-w) + lb))


class Duchi(Mechanism):
    """Duchi–Jordan–Wainwright L2 mechanism, eps-LDP on the L2 ball of radius ``clip``.

    Inputs outside the ball are projected onto it (``x min(1, clip/|x|)``). At ``x = 0`` (``a = 1/2``) the
    output is uniform on the sphere for any direction of ``x~``; we use ``e_1``, which is equal in
    law to a uniformly random direction.

    Report layout: (n, dim) float64 points on the radius-``B`` sphere; ``decode`` is the identity;
    ``bits_per_report = 64 * dim``.

    Density w.r.t. the uniform probability measure on the radius-``B`` sphere:
    ``f_x(z) = 2 [a pi + (1 - a)(1 - pi)]`` if ``<z, x> > 0`` else ``2 [a (1 - pi) + (1 - a) pi]``,
    and 0 off the sphere (``| |z| - B | > 1e-9 B``). Both values lie in ``[2(1 - pi), 2 pi]``, so
    ``f_x(z)/f_x'(z) <= pi/(1 - pi) = e^eps`` (attained by antipodal unit inputs): eps-LDP.

    ``dim >= 1``: for d = 1 the "sphere" is ``{-B, B}`` and the mechanism is binary randomized
    response on the sign with ``B = clip (e^eps + 1)/(e^eps - 1)``.
    """

    name = "duchi"

    def __init__(self, dim: int, epsilon: float, clip: float = 1.0):
        self.dim = check_int("dim", dim, low=1)
        self.guarantee = PureLDP(check_epsilon(epsilon))
        self.clip = check_positive("clip", clip)
        self.report_width = self.dim
        self.report_layout = f"(n, {self.dim}) float64 points on the sphere of radius B; decode = identity"
        self.radius = duchi_radius(self.dim, self.epsilon, self.clip)
        self._log_pi = -float(np.logaddexp(0.0, -self.epsilon))     # log pi
        self._log_1mpi = -float(np.logaddexp(0.0, self.epsilon))    # log (1 - pi)
        self._pi = math.exp(self._log_pi)

    def dp_event(self) -> Any:
        """The worst pair is (π, 1 − π) vs (1 − π, π), π = e^ε/(1 + e^ε): binary ε-randomized response
        (``RandomizedResponseDpEvent(2/(e^ε + 1), 2)``), replace-one."""
        return randomized_response_event(2, self.epsilon)

    @property
    def bits_per_report(self) -> int:
        return 64 * self.dim

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "epsilon": self.epsilon, "clip": self.clip}


    def _draw(self, U: np.ndarray, a: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """Z = B w s where w is uniform on the unit sphere and s = +-1 puts Z in the chosen half."""
        x_sign = np.where(rng.random(n) < a, 1.0, -1.0)          # x~ = x_sign * clip * U
        half = np.where(rng.random(n) < self._pi, 1.0, -1.0)      # +1: <Z, x~> > 0
        w = rng.standard_normal((n, self.dim))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        proj = w @ U if U.ndim == 1 else np.einsum("ij,ij->i", w, U)
        s = np.where(proj > 0, 1.0, -1.0) * x_sign * half
        w *= (self.radius * s)[:, None]
        return w

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        U, a = signed_directions(X, self.clip)
        return self._draw(U, a, X.shape[0], rng)

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        U, a = signed_directions(x[None, :], self.clip)
        return self._draw(U[0], a[0], size, rng)

    def decode(self, reports: Any) -> np.ndarray:
        return self._check_reports(reports).copy()

    def _side_log_density(self, x: np.ndarray) -> tuple[float, float]:
        """(log f_x on <z, x> > 0, log f_x on <z, x> <= 0)."""
        if not np.any(x):
            return 0.0, 0.0  # x = 0: uniform (exactly; <z, 0> = 0 would pick lp_neg anyway)
        _, a = signed_directions(x[None, :], self.clip)
        w = float(a[0])
        log2 = math.log(2.0)
        return (log2 + _log_mix(w, self._log_pi, self._log_1mpi),
                log2 + _log_mix(w, self._log_1mpi, self._log_pi))

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """max over the non-null sign cells (sign<z, x0>, sign<z, x1>) of |log f_x0 − log f_x1|.

        f_x is constant on each open half-sphere {±<z, x> > 0} (the great circle <z, x> = 0 is
        null for d >= 2; for d = 1 the two atoms ±B never hit it). All four cells are non-null
        unless x1 = c·x0 (up to rounding, :func:`~fedaudit.mechanisms.base.parallel_sign`), when only {sign a1 = sign(c)·sign a0} remain; x = 0 is
        uniform (f = 1), any direction. See :func:`~fedaudit.mechanisms.base.halfspace_pair_sup`.
        Antipodal inputs on the clip sphere give exactly log(pi/(1 − pi)) = eps.
        """
        def mix(x):
            pos, neg = self._side_log_density(x)
            return lambda t: np.where(np.asarray(t) > 0, pos, neg)

        u0 = x0 if np.any(x0) else np.eye(self.dim)[0]
        u1 = x1 if np.any(x1) else np.eye(self.dim)[0]
        return halfspace_pair_sup(mix(x0), [0.0], mix(x1), [0.0], parallel_sign(u0, u1))

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        lp_pos, lp_neg = self._side_log_density(x)
        on_sphere = np.abs(np.linalg.norm(reports, axis=1) - self.radius) <= 1e-9 * self.radius
        out = np.where(reports @ x > 0, lp_pos, lp_neg)
        return np.where(on_sphere, out, -np.inf)

    def expected_mse(self, x_norm: float) -> float:
        """Exact E|Z - x|^2 = B^2 - |x|^2 for |x| = x_norm in [0, clip]."""
        x_norm = check_real("x_norm", x_norm, low=0.0, high=self.clip)
        return self.radius**2 - x_norm**2
