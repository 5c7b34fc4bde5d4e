"""Gaussian mechanism with exact discrete-Gaussian noise on a power-of-two grid.

Calibration: the analytic Gaussian mechanism (Balle & Wang, ICML 2018, Thm. 8): adding
``N(0, sigma^2 I)`` to a query of L2 sensitivity ``Delta`` is (eps, delta)-DP iff

    Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta) <= delta.

Noise: exact multivariate discrete Gaussian (Canonne, Kamath, Steinke, NeurIPS 2020, "CKS20")
on the grid ``grid * Z^d``; see :class:`Gaussian` for the privacy argument that carries the
analytic calibration over to the discrete noise.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import log_ndtr

from fedaudit.guarantees import ApproxLDP
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive, check_probability
from fedaudit.mechanisms.base import GridMechanism, check_epsilon, no_event, pow2_floor
from fedaudit.mechanisms.noise import discrete_gaussian, discrete_gaussian_logpmf

__all__ = ["Gaussian", "check_gaussian_delta", "analytic_gaussian_sigma", "analytic_gaussian_delta", "gaussian_pair_epsilon",
           "smoothing_eta"]

#: the discrete Gaussian's variance is split as sigma^2 = s1^2 + SMOOTHING_S2^2 (see Gaussian)
SMOOTHING_S2 = 2
#: largest integer sigma^2 (in grid units) the exact int64 sampler is driven with (sigma <= 2^26)
_MAX_SIGMA2_GRID = 1 << 52
_REL = 2.0**-40  # relative safety margin for floating-point evaluations on the privacy path


def check_gaussian_delta(delta: Any, name: str = "delta") -> float:
    """δ of a Gaussian mechanism, in the open interval (0, 1). δ = 0 is rejected, never replaced
    by a default: no finite σ makes Gaussian noise pure DP (its privacy loss is unbounded)."""
    if isinstance(delta, Real) and not isinstance(delta, bool) and delta == 0:
        raise FedAuditError(f"{name} must be in (0, 1) for the Gaussian mechanism, got {name}=0: Gaussian "
                            f"noise is never pure DP (δ = 0 would need infinite noise)")
    return check_probability(name, delta)


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """delta(eps) of ``N(0, sigma^2 I)`` at L2 sensitivity ``Delta`` (Balle & Wang 2018, Thm. 8):
    ``Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)``,
    evaluated in log space (no cancellation for large eps)."""
    return math.exp(_log_delta(float(sigma), float(epsilon), float(sensitivity)))


def _log_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    u = sensitivity / sigma
    a = 0.5 * u - epsilon / u
    b = -0.5 * u - epsilon / u
    la = float(log_ndtr(a))
    diff = epsilon + float(log_ndtr(b)) - la
    if diff >= 0.0 or la == -math.inf:
        return -math.inf
    return la + math.log(-math.expm1(diff))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """The smallest ``sigma`` with ``analytic_gaussian_delta(sigma, eps, Delta) <= delta`` (up to 1e-12 relative).

    Brent's method on ``log delta(log sigma) - log delta`` (the function is decreasing in sigma),
    then the returned value is nudged upward until the condition is verified, so it is always on
    the safe side. Scales linearly in ``Delta``. For eps < 1 it is below the classical
    ``Delta sqrt(2 ln(1.25/delta))/eps`` (Dwork & Roth 2014, Thm. A.1).
    """
    epsilon = check_epsilon(epsilon)
    delta = check_probability("delta", delta)
    sensitivity = check_positive("sensitivity", sensitivity)
    target = math.log(delta)

    def g(log_sigma: float) -> float:
        return _log_delta(math.exp(log_sigma), epsilon, sensitivity) - target

    x0 = math.log(sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon)
    lo, hi = x0 - 1.0, x0 + 1.0
    while g(lo) <= 0.0:
        lo -= 2.0
    while g(hi) > 0.0:
        hi += 2.0
    root = brentq(g, lo, hi, xtol=1e-14, rtol=1e-15, maxiter=500)
    sigma = math.exp(root) * (1.0 + 1e-13)
    while _log_delta(sigma, epsilon, sensitivity) > target:
        sigma *= 1.0 + 1e-12
    return sigma


def gaussian_pair_epsilon(mu: float, delta: float) -> float:
    """The smallest ``eps >= 0`` with ``delta_mu(eps) <= delta`` for ``N(0, 1)`` vs ``N(mu, 1)``:
    ``delta_mu(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)`` (Balle & Wang 2018, Thm. 8;
    the exact privacy curve of the pair, symmetric in the two directions, strictly decreasing in
    eps). 0 if ``mu = 0`` or ``delta_mu(0) = 2 Phi(mu/2) - 1 <= delta``. Brent's method in log space,
    returned on the safe side (``delta_mu(eps) <= delta`` verified)."""
    mu = float(mu)
    delta = check_probability("delta", delta)
    if not (math.isfinite(mu) and mu >= 0.0):
        raise FedAuditError(f"mu must be a finite real number >= 0, got mu={mu!r}")
    target = math.log(delta)
    if mu == 0.0 or _log_delta(1.0, 0.0, mu) <= target:
        return 0.0

    def g(eps: float) -> float:
        return _log_delta(1.0, eps, mu) - target

    hi = max(1.0, mu * mu)
    while g(hi) > 0.0:
        hi *= 2.0
    eps = brentq(g, 0.0, hi, xtol=1e-15, rtol=4.0 * 2.0**-52, maxiter=500)
    while g(eps) > 0.0:
        eps = math.nextafter(eps, math.inf)
    return eps


def smoothing_eta(s: float) -> float:
    """``eta(s) = 2 sum_{m>=1} exp(-2 pi^2 s^2 m^2)``: by Poisson summation
    ``sum_{k in Z} exp(-(k - x)^2/(2 s^2)) = sqrt(2 pi) s (1 + r(x))`` with ``|r(x)| <= eta(s)``."""
    c = 2.0 * math.pi**2 * s * s
    return 2.0 * sum(math.exp(-c * m * m) for m in range(1, 8))


def _pow2_ceil(x: float) -> float:
    m, e = math.frexp(x)
    return math.ldexp(1.0, e - 1 if m == 0.5 else e)


class Gaussian(GridMechanism):
    """(eps, delta)-LDP Gaussian mechanism on the L2 ball of radius ``clip``, exact discrete noise.

    Encoding: ``a = clip_l2(x)``; ``k = rint(a / grid)`` (deterministic nearest rounding; ``grid``
    a power of two, so ``a/grid`` and ``k * grid`` are exact in float64); report
    ``(k + Y) * grid`` with ``Y_j ~ N_Z(0, sigma2_grid)`` i.i.d. exact discrete Gaussians
    (CKS20 Alg. 3). Report layout (n, dim): real values on the grid. ``decode`` is the identity:
    ``E[report] = grid * rint(clip(x)/grid)``, i.e. unbiased up to a deterministic rounding bias
    of at most ``grid/2`` per coordinate (``grid ~ sigma/2^10``, far below the noise).

    Sensitivity in grid units: ``|k - k'|_2 <= |a - a'|_2/grid + |e - e'|_2 <= 2 clip/grid + sqrt(dim)``
    (rounding errors ``|e_j| <= 1/2``), used as ``Delta_grid`` (with a 2^-40 relative margin).
    ``grid`` is the largest power of two <= min(sigma_c/2^10, 2 clip/(sqrt(dim) 2^10)) (so the
    rounding term costs <= 0.1% of noise), unless that would need ``sigma_grid > 2^26`` (the
    exact int64 sampler's range); then the grid is coarsened and ``noise_inflation`` reports the
    cost. ``sigma_c = analytic_gaussian_sigma(eps, delta, 2 clip)`` is the continuous reference.

    **Guarantee claimed: (eps, delta)-LDP, exactly** (plus rho-zCDP, below). Proof: write
    ``sigma2_grid = s1^2 + s2^2`` with ``s2 = 2``. Let ``Q_k`` be the law of ``Z`` obtained by
    drawing ``X ~ N(k, s1^2 I)`` (continuous) and then ``Z_j ~ N_Z(X_j, s2^2)`` independently --
    a post-processing of the continuous Gaussian mechanism whose kernel does not depend on k,
    so ``Q`` is (eps', delta')-DP whenever ``s1 >= analytic_gaussian_sigma(eps', delta', Delta_grid)``.
    Integrating out X (Gaussian convolution, ``s1^2 + s2^2 = sigma^2``) and using Poisson summation
    for the kernel normaliser ``sum_z exp(-(z - x)^2/(2 s2^2)) = sqrt(2 pi) s2 (1 + r(x))``,
    ``|r| <= eta = smoothing_eta(2) ~ 1e-34``, gives ``Q_k(z)/P_k(z) in [1/C, C]`` with
    ``C = ((1 + eta)/(1 - eta))^dim``, where ``P_k`` is our mechanism's law. Hence for any event E,
    ``P_k(E) <= C Q_k(E) <= C (e^eps' Q_k'(E) + delta') <= e^(eps' + 2 ln C) P_k'(E) + C delta'``.
    We calibrate with ``eps' = eps - 2 ln C - margin`` and ``delta' = delta / C - margin`` (both
    changes are < 1e-12 relative), so the claim is exactly (eps, delta). This is the lattice
    smoothing argument (Micciancio & Regev 2004; Peikert 2010's convolution lemma) made explicit.

    CKS20, Theorem 14 ("Multivariate Discrete Gaussian Satisfies Concentrated Differential
    Privacy"): for ``q: X^n -> Z^d`` with ``sum_j (q_j(x) - q_j(x'))^2 / sigma_j^2 <= eps^2`` and
    independent ``Y_j ~ N_Z(0, sigma_j^2)``, ``M(x) = q(x) + Y`` is ``eps^2/2``-zCDP. So the
    mechanism is also ``rho``-zCDP with ``rho = Delta_grid^2 / (2 sigma2_grid)`` (attribute
    ``rho``; useful for composition). Converting that zCDP bound to (eps, delta) (CKS20 Sec. 2.3)
    would need ~8-27% more noise than the analytic calibration used here.

    ``log_prob`` is exact w.r.t. counting measure on the grid:
    ``sum_j log N_Z(0, sigma2_grid)(r_j/grid - k_j)`` (``-inf`` off the grid).
    """

    name = "gaussian"

    def __init__(self, dim: int, epsilon: float, delta: float, clip: float = 1.0):
        self.dim = check_int("dim", dim, low=1)
        self.guarantee = ApproxLDP(check_epsilon(epsilon), check_gaussian_delta(delta))
        self.clip = check_positive("clip", clip)
        self.report_width = self.dim
        self.report_layout = (f"(n, {self.dim}) float64 noisy values on the grid k*{{grid}}; "
                              "decode = identity")

        eta = smoothing_eta(SMOOTHING_S2)
        log_c = self.dim * (math.log1p(eta) - math.log1p(-eta))
        eps_cal = min(self.epsilon - 2.0 * log_c, self.epsilon * (1.0 - _REL))
        delta_cal = min(self.delta * math.exp(-log_c), self.delta * (1.0 - _REL))
        if eps_cal <= 0.0:  # pragma: no cover - needs dim ~ 1e33
            raise FedAuditError(f"dim={self.dim} is too large for epsilon={self.epsilon}")

        self.sigma_analytic = analytic_gaussian_sigma(self.epsilon, self.delta, 2.0 * self.clip)
        s_unit = analytic_gaussian_sigma(eps_cal, delta_cal, 1.0)   # sigma per unit L2 sensitivity
        sqrt_d = math.sqrt(self.dim) * (1.0 + _REL)
        budget = (math.sqrt(_MAX_SIGMA2_GRID - (1 << 27)) * (1.0 - 1e-9)) / s_unit
        if budget - sqrt_d <= 0.0:
            raise FedAuditError(
                f"dim={self.dim} is too large for the exact int64 discrete Gaussian sampler at "
                f"epsilon={self.epsilon}, delta={self.delta}: need sqrt(dim) * sigma_per_unit_sensitivity "
                f"({s_unit:.4g}) < 2^26")
        grid_min = 2.0 * self.clip / (budget - sqrt_d)
        grid_want = min(self.sigma_analytic, 2.0 * self.clip / math.sqrt(self.dim)) / 2.0**10
        grid = pow2_floor(grid_want)
        if grid < grid_min:
            grid = _pow2_ceil(grid_min)
        self.grid = grid
        self.sensitivity_grid = (2.0 * self.clip / grid) * (1.0 + _REL) + sqrt_d
        s1 = s_unit * self.sensitivity_grid                         # analytic sigma is linear in Delta
        while _log_delta(s1, eps_cal, self.sensitivity_grid) > math.log(delta_cal):
            s1 *= 1.0 + 1e-12                                       # pragma: no cover - safety
        # sigma^2 = t c >= s1^2 + s2^2 with t = floor(sqrt(.)) + 1 the sampler's proposal scale, so
        # sigma^2/t is an integer and the exact sampler's arithmetic stays in int64 (noise.py)
        n_min = int(math.ceil(s1 * s1 * (1.0 + _REL))) + SMOOTHING_S2**2
        self.proposal_scale = math.isqrt(n_min) + 1
        self.sigma2_grid = self.proposal_scale * (-(-n_min // self.proposal_scale))
        if self.sigma2_grid > _MAX_SIGMA2_GRID:  # pragma: no cover - excluded by grid_min
            raise FedAuditError(f"internal: sigma2_grid={self.sigma2_grid} exceeds 2^52")
        s1_actual = math.sqrt(self.sigma2_grid - SMOOTHING_S2**2)
        #: s1 (grid units): the σ of the continuous Gaussian N(k, s1² I) the privacy proof post-processes
        self.proof_sigma_grid = s1_actual
        if _log_delta(s1_actual, eps_cal, self.sensitivity_grid) > math.log(delta_cal):  # pragma: no cover
            raise FedAuditError("internal: discrete Gaussian calibration failed its check")
        self.sigma_grid = math.sqrt(self.sigma2_grid)
        self.sigma = self.sigma_grid * self.grid                   # noise std in input units (≈)
        self.rho = self.sensitivity_grid**2 / (2.0 * self.sigma2_grid)
        self.noise_inflation = self.sigma / self.sigma_analytic
        self.rounding_bias_bound = self.grid / 2.0
        self.report_layout = self.report_layout.replace("{grid}", f"{self.grid:g}")

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "epsilon": self.epsilon, "delta": self.delta, "clip": self.clip}

    def dp_event(self) -> Any:
        """For ``dim > 1``: dp-accounting's ``GaussianDpEvent(s1/Δ_grid)``, the continuous Gaussian
        N(k, s1² I) at the L2 sensitivity bound ``sensitivity_grid`` that the privacy proof
        post-processes (class docstring; up to a likelihood factor below float64 resolution), the
        PLD :func:`fedaudit.accounting.pld_of` uses. It is stated for **add/remove** neighbours at the
        diameter of the inputs: account it with ``neighbouring="add-remove"``, which for this
        symmetric noise is the replace-one (local DP) guarantee (dp-accounting reads a
        ``GaussianDpEvent`` under replace-one as a shift of twice its sensitivity). For ``dim == 1``
        the report is a discrete Gaussian on the lattice, which dp-accounting has no event for: a
        one-line FedAuditError naming ``pld_of`` and :class:`fedaudit.accounting.PldDpEvent`."""
        if self.dim == 1:
            raise FedAuditError(no_event(self, "a discrete Gaussian on the lattice (dim=1)"))
        from dp_accounting import dp_event

        return dp_event.GaussianDpEvent(noise_multiplier=self.proof_sigma_grid / self.sensitivity_grid)

    # ----------------------------------------------------------------- pair
    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """The pair's ε(δ) at the mechanism's own δ: ``gaussian_pair_epsilon(mu, delta)``, the
        smallest ε with ``delta_pair(ε) <= delta``, where ``mu = |k0 − k1|_2 · grid / sigma`` on the
        grid-rounded clipped inputs ``k_i = rint(clip_l2(x_i)/grid)``.

        This is the exact curve of *continuous* noise ``N(0, sigma_grid^2 I)`` at shift k0 − k1
        (only the component along k0 − k1 matters). Our discrete noise has pmf = that density /
        ``(sqrt(2 pi) sigma_grid (1 + r))^dim`` (``|r| <= smoothing_eta(sigma_grid)``), so its curve is a
        lattice sum of the same integrand: it differs by the normaliser factor ``(1 ± eta)^dim``
        (negligible, ``sigma_grid >= 2^10``) plus a Poisson/Euler–Maclaurin term from the kink
        of ``[p0 − e^eps p1]_+``, of order ``mu phi(eps/mu + mu/2) / sigma_grid^2`` (≲ 1e-7 relative
        to delta; checked by exact 1-D enumeration in the tests). For the calibration pair
        ``a1 = −a0``, ``|a0| = clip`` (with clip/grid an integer) this is
        ``gaussian_pair_epsilon(2 clip/sigma, delta)``, while ``eps = gaussian_pair_epsilon(2 clip/
        sigma_analytic, delta)``: below the claim only through ``noise_inflation`` (~1e-3, the
        grid-rounding and smoothing margins of the calibration).
        """
        k0 = self._grid_point(x0[None, :])[0]
        k1 = self._grid_point(x1[None, :])[0]
        mu = float(np.linalg.norm((k0 - k1).astype(np.float64))) / self.sigma_grid
        return gaussian_pair_epsilon(mu, self.delta)

    # ----------------------------------------------------------------- internals
    def _noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        return discrete_gaussian(self.sigma2_grid, 1, shape, rng, proposal_scale=self.proposal_scale)

    def _noise_logpmf(self, z: np.ndarray) -> np.ndarray:
        return discrete_gaussian_logpmf(z, self.sigma_grid)
