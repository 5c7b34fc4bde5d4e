"""Laplace mechanism with exact discrete-Laplace noise on a power-of-two grid (no float Laplace).

Mironov (CCS 2012) showed that ``x + Laplace`` computed in floating point leaks x through the
porous, input-dependent set of reachable doubles. Here the input is rounded to a grid
``grid * Z^d`` and integer noise is added exactly (Canonne, Kamath, Steinke, NeurIPS 2020,
Alg. 2), so the output lives on one fixed lattice for every input and the privacy analysis is
that of the discrete Laplace (geometric) mechanism (Ghosh, Roughgarden, Sundararajan 2009).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from fedaudit.guarantees import PureLDP
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive
from fedaudit.mechanisms.base import GridMechanism, check_epsilon, no_event, pow2_floor
from fedaudit.mechanisms.noise import discrete_laplace, discrete_laplace_logpmf, rational_at_least

__all__ = ["Laplace"]

_MAX_NUM = 1 << 56  # discrete_laplace's scale numerator limit


class Laplace(GridMechanism):
    """eps-LDP Laplace mechanism on the L2 ball of radius ``clip`` with exact discrete noise.

    Encoding: ``a = clip_l2(x)``; ``k = rint(a / grid)`` (deterministic nearest rounding);
    report ``(k + Z) * grid`` with ``Z_j`` i.i.d. discrete Laplace,
    ``P[Z_j = z] = tanh(1/(2t)) exp(-|z|/t)``, ``t = scale_grid`` (an exact rational).
    Report layout (n, dim): real values on the grid; ``bits_per_report = 64 dim``.

    Sensitivity: the L1 diameter of the L2 ball is ``2 clip sqrt(dim)``; rounding moves each
    coordinate by at most 1/2 grid unit, so ``|k - k'|_1 <= 2 clip sqrt(dim)/grid + dim`` and we use
    ``sensitivity_grid = ceil(2 clip sqrt(dim)/grid (1 + 2^-40)) + dim`` (an integer).
    ``grid`` = the largest power of two <= ``2 clip sqrt(dim)/(dim 2^12)``, so the ``+dim`` term costs
    at most 2^-12 (~0.024%) of the noise, and ``k * grid`` is exact in float64.

    Scale: ``t = num/den >= sensitivity_grid / eps`` exactly (``rational_at_least`` on exact
    rationals). Privacy: for every report r, ``p(r|x)/p(r|x') = exp((|r/grid - k'|_1 - |r/grid - k|_1)/t)
    <= exp(|k - k'|_1 / t) <= exp(sensitivity_grid / t) <= e^eps``: pure eps-LDP, exactly.

    Bias: ``E[report] = grid * rint(clip(x)/grid)``, so ``decode`` (the identity) is unbiased up to
    a deterministic rounding bias of at most ``grid/2 <= clip/(sqrt(dim) 2^12)`` per coordinate
    (attribute ``rounding_bias_bound``), ~1e-4 of clip or smaller.

    ``log_prob`` is exact w.r.t. counting measure on the grid:
    ``sum_j log p_t(r_j/grid - k_j)`` with ``-inf`` off the grid.

    References: Mironov 2012 (floating-point attack); Canonne, Kamath, Steinke 2020 (exact
    discrete Laplace sampler); Dwork, McSherry, Nissim, Smith 2006 (Laplace mechanism).
    """

    name = "laplace"

    def __init__(self, dim: int, epsilon: float, clip: float = 1.0):
        self.dim = check_int("dim", dim, low=1)
        self.guarantee = PureLDP(check_epsilon(epsilon))
        self.clip = check_positive("clip", clip)
        self.report_width = self.dim
        l1_diam = 2.0 * self.clip * math.sqrt(self.dim)
        self.grid = pow2_floor(l1_diam / (self.dim * 2.0**12))
        main = Fraction(l1_diam / self.grid) * Fraction(1 + 2**-40)
        self.sensitivity_grid = int(math.ceil(main)) + self.dim
        t_exact = Fraction(self.sensitivity_grid) / Fraction(self.epsilon)
        if t_exact >= _MAX_NUM:
            raise FedAuditError(f"epsilon={self.epsilon} is too small for dim={self.dim}: the noise scale "
                                f"{float(t_exact):.3g} grid units exceeds the exact sampler's range 2^56")
        max_den = max(1, min(1 << 20, _MAX_NUM // (math.ceil(t_exact) + 1)))
        self.scale_num, self.scale_den = rational_at_least(t_exact, max_den=max_den)
        self.scale_grid = self.scale_num / self.scale_den
        self.scale = self.scale_grid * self.grid              # Laplace scale in input units
        self.rounding_bias_bound = self.grid / 2.0
        self.report_layout = (f"(n, {self.dim}) float64 noisy values on the grid k*{self.grid:g}; "
                              "decode = identity")

    def params(self) -> dict[str, Any]:
        return {"dim": self.dim, "epsilon": self.epsilon, "clip": self.clip}

    def dp_event(self) -> Any:
        """For ``dim == 1``: dp-accounting's ``DiscreteLaplaceDpEvent(1/t, S)`` with S =
        :attr:`lattice_shift` (the lattice diameter of the inputs, attained at x = ±clip), exact.
        It is stated for **add/remove** neighbours (dp-accounting's PLD refuses it under
        replace-one): account it with ``neighbouring="add-remove"``, which for this symmetric noise
        at the diameter is the replace-one (local DP) guarantee. For ``dim > 1`` the worst pair of a
        product of lattice Laplaces over the L2 ball has no event: a one-line FedAuditError naming
        ``pld_of`` and the event of the guarantee."""
        if self.dim > 1:
            raise FedAuditError(no_event(self, f"its worst pair at dim={self.dim} (a product of lattice Laplaces "
                                               f"over the L2 ball)"))
        from dp_accounting import dp_event

        return dp_event.DiscreteLaplaceDpEvent(noise_parameter=1.0 / self.scale_grid, sensitivity=self.lattice_shift)

    def epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float:
        """``|k0 − k1|_1 / t`` on the rounded grid points ``k_i = rint(clip_l2(x_i)/grid)``.

        The loss of a report r = m·grid is ``sum_j (|m_j − k1_j| − |m_j − k0_j|)/t``; by the
        triangle inequality each term is at most ``|k0_j − k1_j|/t`` in absolute value, with
        equality exactly when m_j lies on the closed ray from k0_j away from k1_j (``+``
        direction; the mirror ray from k1_j for ``−``), e.g. m = k0 or any far tail on that
        side. The coordinates are free, so the sup is attained and equals the sum.
        """
        k0 = self._grid_point(x0[None, :])[0]
        k1 = self._grid_point(x1[None, :])[0]
        return float(np.abs(k0 - k1).sum()) / self.scale_grid

    def _noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        return discrete_laplace(self.scale_num, self.scale_den, shape, rng)

    def _noise_logpmf(self, z: np.ndarray) -> np.ndarray:
        return discrete_laplace_logpmf(z, self.scale_grid)

