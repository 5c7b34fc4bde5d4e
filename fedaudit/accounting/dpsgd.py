"""ε of DP-SGD: ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

Each step samples every example independently with probability ``q = sample_rate``, clips the
per-example gradients to norm C and adds N(0, (σC)²) to their sum, σ = ``noise_multiplier``. Under
add-or-remove-one neighbouring, one step's privacy loss is that of the pair
``P = (1−q)·N(0, σ²) + q·N(1, σ²)`` versus ``Q = N(0, σ²)`` (and the reverse), and the run is its
``steps``-fold self-composition. Three accountants turn that into ε at a given δ:

* ``"pld"`` — dp-accounting's privacy-loss-distribution accountant (numerical, tight). The loss is
  discretised on a grid of ``pld_discretization`` (default 1e-4) with dp-accounting's pessimistic
  estimate (losses rounded up, connect-the-dots), so the result is an upper bound on the exact ε.
* ``"rdp"`` — Opacus's Rényi-DP accountant (Mironov et al. 2019 RDP of the sampled Gaussian,
  converted to (ε, δ) at the best order of ``opacus.accountants.rdp.DEFAULT_ALPHAS``); an upper
  bound, 6–15 % above the PLD at 10^3–10^5 steps (49 % at 10^3 steps of q = 0.004).
* ``"prv"`` — Opacus's privacy-random-variable accountant (Gopi, Lee, Wutschitz 2021; FFT
  composition); returns the upper end of its error interval, about ``prv_eps_error`` (default
  0.01) above its estimate, so its signed error is ≈ +prv_eps_error in ε: relatively largest at
  small ε.

**Signed error of the defaults** at δ = 1e-5, against dp-accounting's PLD on a 5x finer grid (2e-5;
itself an upper bound, which moves by < 3e-4 in ε between the two grids), measured by
``python benchmarks/accountants.py --section accuracy``:

| σ, q, steps | pld (1e-4) | prv (0.01) | rdp |
|---|---|---|---|
| 1.1, 0.004267, 10^3 (ε 0.599) | +0.003 % | +1.68 % | +48.6 % |
| 1.1, 0.004267, 10^4 (ε 1.978) | +0.004 % | +0.51 % | +9.3 % |
| 1.1, 0.004267, 10^5 (ε 7.271) | +0.004 % | +0.14 % | +7.8 % |
| 1.0, 0.01, 10^3 (ε 1.828) | +0.000 % | +0.55 % | +14.9 % |
| 1.0, 0.01, 10^4 (ε 6.188) | +0.001 % | +0.17 % | +8.5 % |
| 1.0, 0.01, 10^5 (ε 25.57) | +0.001 % | +0.04 % | +6.5 % |

No accountant here under-counts: every error is ≥ 0. A coarser ``pld_discretization`` is faster
and looser (1e-3: +0.4 % at the reference case σ = 1.1, q = 256/60000, 14062 steps), a finer one
slower; the loss grid holds ~ (loss range)/``pld_discretization`` points, so small σ needs a
coarser grid or ``"rdp"``/``"prv"``. A smaller ``prv_eps_error`` tightens PRV at the cost of a
finer mesh (its time grows like 1/``prv_eps_error``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real

__all__ = ["DPSGDAccount", "epsilon_dpsgd", "noise_multiplier_for", "DPSGD_METHODS"]

DPSGD_METHODS = ("pld", "rdp", "prv")
PLD_DISCRETIZATION = 1e-4
PRV_EPS_ERROR = 0.01


@dataclass(frozen=True)
class DPSGDAccount:
    """(ε, δ) of a DP-SGD run as computed by ``method``; ``parameters`` holds σ, q, steps and the
    accountant's own settings (discretisation interval, error bound)."""

    epsilon: float
    delta: float
    method: str
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "method": self.method,
                         "parameters": dict(self.parameters)})


def _check(noise_multiplier, sample_rate, steps, delta, method):
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sample_rate", sample_rate, open_high=False)
    steps = check_int("steps", steps, low=1)
    delta = check_probability("delta", delta)
    method = check_choice("method", method, DPSGD_METHODS)
    return sigma, q, steps, delta, method


def check_accuracy(pld_discretization: float, prv_eps_error: float) -> tuple[float, float]:
    """The accuracy settings, validated: the PLD loss grid in (0, 0.1] and PRV's ε error in (0, 1]
    (both are read by their own method only)."""
    return (check_real("pld_discretization", pld_discretization, low=0.0, high=0.1, open_low=True),
            check_real("prv_eps_error", prv_eps_error, low=0.0, high=1.0, open_low=True))


def _epsilon(sigma: float, q: float, steps: int, delta: float, method: str, disc: float = PLD_DISCRETIZATION,
             eps_error: float = PRV_EPS_ERROR) -> tuple[float, dict]:
    if method == "pld":
        from dp_accounting import dp_event, pld
        accountant = pld.PLDAccountant(value_discretization_interval=disc)
        try:
            accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
            return float(accountant.get_epsilon(delta)), {"value_discretization_interval": disc}
        except MemoryError:  # the loss grid spans ~1/σ² in steps of disc (σ = 1e-3, disc = 1e-4: 38 GiB)
            raise FedAuditError(f"the pld accountant ran out of memory at noise_multiplier={sigma:g}, "
                                f"pld_discretization={disc:g} (its privacy-loss grid grows like 1/(σ² · "
                                f"pld_discretization)): raise pld_discretization or use method='rdp' or "
                                f"'prv'") from None
    if method == "rdp":
        RDPAccountant = require("opacus.accountants", "the rdp accountant (Opacus)").RDPAccountant
        accountant = RDPAccountant()
        accountant.history = [(sigma, q, steps)]
        eps, order = accountant.get_privacy_spent(delta=delta)
        return float(eps), {"best_order": float(order)}
    PRVAccountant = require("opacus.accountants", "the prv accountant (Opacus)").PRVAccountant
    accountant = PRVAccountant()
    accountant.history = [(sigma, q, steps)]
    eps = accountant.get_epsilon(delta, eps_error=eps_error)
    return float(eps), {"eps_error": eps_error}


def epsilon_dpsgd(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  method: str = "pld", *, pld_discretization: float = PLD_DISCRETIZATION,
                  prv_eps_error: float = PRV_EPS_ERROR) -> DPSGDAccount:
    """ε at ``delta`` of ``steps`` Poisson-subsampled Gaussian steps (noise σ, rate q) by ``method``.

    ``pld_discretization`` (method "pld", in (0, 0.1]) is the privacy-loss grid of dp-accounting's
    PLD; ``prv_eps_error`` (method "prv", in (0, 1]) is the ε error Opacus's PRV accountant
    targets. Both results are upper bounds; their signed error per regime is in the module
    docstring. ``inf`` means the accountant certifies no finite ε at that δ (never NaN)."""
    sigma, q, steps, delta, method = _check(noise_multiplier, sample_rate, steps, delta, method)
    disc, eps_error = check_accuracy(pld_discretization, prv_eps_error)
    eps, extra = _epsilon(sigma, q, steps, delta, method, disc, eps_error)
    if math.isnan(eps):
        raise FedAuditError(f"the {method} accountant returned NaN for noise_multiplier={sigma:g}, "
                            f"sample_rate={q:g}, steps={steps}, delta={delta:g}")
    params = {"noise_multiplier": sigma, "sample_rate": q, "steps": steps, **extra}
    return DPSGDAccount(epsilon=eps, delta=delta, method=method, parameters=params)


def noise_multiplier_for(target_epsilon: float, sample_rate: float, steps: int, delta: float,
                         method: str = "pld", *, tol: float = 1e-3,
                         sigma_range: tuple[float, float] = (2.0 ** -6, 2.0 ** 12),
                         pld_discretization: float = PLD_DISCRETIZATION, prv_eps_error: float = PRV_EPS_ERROR) -> float:
    """The smallest σ (to relative ``tol``) with ``ε(σ) ≤ target_epsilon`` (ε by ``method`` at the
    accuracy settings of :func:`epsilon_dpsgd`).

    ε is decreasing in σ. A bracket [lo, hi] with ε(lo) > target ≥ ε(hi) is found by doubling /
    halving from σ = 1 inside ``sigma_range``, then bisected (geometrically) until
    ``lo ≥ hi·(1 − tol)``; ``hi`` is returned, so ``ε(σ*) ≤ target < ε(σ*·(1 − tol))``."""
    target = check_positive("target_epsilon", target_epsilon)
    _, q, steps, delta, method = _check(1.0, sample_rate, steps, delta, method)
    tol = check_real("tol", tol, low=0.0, high=0.5, open_low=True)
    disc, eps_error = check_accuracy(pld_discretization, prv_eps_error)
    s_min, s_max = (check_positive("sigma_range[0]", sigma_range[0]),
                    check_positive("sigma_range[1]", sigma_range[1]))

    def ok(sigma: float) -> bool:
        return _epsilon(sigma, q, steps, delta, method, disc, eps_error)[0] <= target

    lo = hi = 1.0
    if ok(1.0):
        while ok(lo):
            if lo <= s_min:
                raise FedAuditError(f"target_epsilon={target:g} is met even at noise_multiplier="
                                    f"{lo:g} (sigma_range[0]); lower sigma_range[0] or the target")
            hi, lo = lo, max(lo / 2, s_min)
    else:
        while not ok(hi):
            if hi >= s_max:
                raise FedAuditError(f"target_epsilon={target:g} is not met even at noise_multiplier="
                                    f"{hi:g} (sigma_range[1]); raise sigma_range[1] or the target")
            lo, hi = hi, min(hi * 2, s_max)
    while lo < hi * (1 - tol):
        mid = math.sqrt(lo * hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
