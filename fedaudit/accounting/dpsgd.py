"""ε of DP-SGD: ``steps`` compositions of the Poisson-subsampled Gaussian mechanism.

Each step samples every example independently with probability ``q = sample_rate``, clips the
per-example gradients to norm C and adds N(0, (σC)²) to their sum, σ = ``noise_multiplier``. Under
add-or-remove-one neighbouring, one step's privacy loss is that of the pair
``P = (1−q)·N(0, σ²) + q·N(1, σ²)`` versus ``Q = N(0, σ²)`` (and the reverse), and the run is its
``steps``-fold self-composition: the event :func:`~fedaudit.accounting.accountants.dpsgd_event`,
accounted by any accountant of :data:`~fedaudit.accounting.accountants.ACCOUNTANTS` that supports
it (a user's registered one included). The three built-ins of :data:`DPSGD_METHODS` turn it into ε
at a given δ:

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

import warnings

from fedaudit.accounting.accountants import (ACCOUNTANTS, PLD_DISCRETIZATION, PRV_EPS_ERROR, AccountantMemoryError,
                                             account, calibrate, dpsgd_event)
from fedaudit.accounting.result import Account
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_positive, check_probability, check_real

__all__ = ["DPSGDAccount", "epsilon_dpsgd", "noise_multiplier_for", "calibrate_dpsgd", "DPSGD_METHODS",
           "accountant_settings", "check_method"]

#: the built-in accountants of a Poisson-subsampled Gaussian (any registered one that supports it works)
DPSGD_METHODS = ("pld", "rdp", "prv")

#: an accountant's answer for DP-SGD is the one result type (``parameters`` holds σ, q, steps and the
#: accountant's own settings: discretisation interval, best order, error bound)
DPSGDAccount = Account


def _check(noise_multiplier, sample_rate, steps, delta):
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sample_rate", sample_rate, open_high=False)
    steps = check_int("steps", steps, low=1)
    delta = check_probability("delta", delta)
    return sigma, q, steps, delta


def check_method(method: str, name: str = "method") -> str:
    """The accountant name ``method``, refused in one line naming the parameter when it is neither
    registered in :data:`~fedaudit.accounting.accountants.ACCOUNTANTS` nor a ``module:attr`` reference."""
    try:
        ACCOUNTANTS.factory(method)
    except FedAuditError as err:
        raise FedAuditError(f"{name}: {err}") from None
    return ACCOUNTANTS.canonical(method)


def check_accuracy(pld_discretization: float, prv_eps_error: float) -> tuple[float, float]:
    """The accuracy settings, validated: the PLD loss grid in (0, 0.1] and PRV's ε error in (0, 1]
    (both are read by their own method only)."""
    return (check_real("pld_discretization", pld_discretization, low=0.0, high=0.1, open_low=True),
            check_real("prv_eps_error", prv_eps_error, low=0.0, high=1.0, open_low=True))


def accountant_settings(method: str, pld_discretization: float = PLD_DISCRETIZATION,
                        prv_eps_error: float = PRV_EPS_ERROR) -> dict:
    """The factory settings of the built-in ``method`` from the DP-SGD accuracy keywords (none for
    another accountant: a user's accountant takes its own defaults)."""
    disc, eps_error = check_accuracy(pld_discretization, prv_eps_error)
    return {"pld": {"discretization": disc}, "prv": {"eps_error": eps_error}}.get(method, {})


def epsilon_dpsgd(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                  method: str = "pld", *, pld_discretization: float = PLD_DISCRETIZATION,
                  prv_eps_error: float = PRV_EPS_ERROR) -> Account:
    """ε at ``delta`` of ``steps`` Poisson-subsampled Gaussian steps (noise σ, rate q) by the
    accountant ``method`` (a name of :data:`~fedaudit.accounting.accountants.ACCOUNTANTS`).

    ``pld_discretization`` (method "pld", in (0, 0.1]) is the privacy-loss grid of dp-accounting's
    PLD; ``prv_eps_error`` (method "prv", in (0, 1]) is the ε error Opacus's PRV accountant
    targets. Both results are upper bounds; their signed error per regime is in the module
    docstring. ``inf`` means the accountant certifies no finite ε at that δ (never NaN)."""
    sigma, q, steps, delta = _check(noise_multiplier, sample_rate, steps, delta)
    method = check_method(method)
    settings = accountant_settings(method, pld_discretization, prv_eps_error)
    try:
        return account(dpsgd_event(sigma, q, steps), delta=delta, accountant=method,
                       parameters={"noise_multiplier": sigma, "sample_rate": q, "steps": steps}, **settings)
    except AccountantMemoryError:  # the loss grid spans ~1/σ² in steps of disc (σ = 1e-3, disc = 1e-4: 38 GiB)
        raise AccountantMemoryError(
            f"the {method} accountant ran out of memory at noise_multiplier={sigma:g}, pld_discretization="
            f"{pld_discretization:g} (its privacy-loss grid grows like 1/(σ² · pld_discretization)): raise "
            f"pld_discretization or use method='rdp' or 'prv'") from None


def noise_multiplier_for(target_epsilon: float, sample_rate: float, steps: int, delta: float,
                         method: str = "pld", *, tol: float = 1e-3,
                         sigma_range: tuple[float, float] = (2.0 ** -6, 2.0 ** 12),
                         pld_discretization: float = PLD_DISCRETIZATION, prv_eps_error: float = PRV_EPS_ERROR) -> float:
    """Deprecated (one release): use :func:`~fedaudit.accounting.accountants.calibrate` on
    :func:`~fedaudit.accounting.accountants.dpsgd_event`. The smallest σ (to relative ``tol``) with
    ``ε(σ) ≤ target_epsilon``, so ``ε(σ*) ≤ target < ε(σ*·(1 − tol))``."""
    warnings.warn("noise_multiplier_for is deprecated: use fedaudit.accounting.calibrate(lambda s: "
                  "dpsgd_event(s, q, steps), target_epsilon, delta, accountant=...)", DeprecationWarning, stacklevel=2)
    return calibrate_dpsgd(target_epsilon, sample_rate, steps, delta, method, tol=tol, sigma_range=sigma_range,
                           pld_discretization=pld_discretization, prv_eps_error=prv_eps_error)


def calibrate_dpsgd(target_epsilon: float, sample_rate: float, steps: int, delta: float, method: str = "pld", *,
                    tol: float = 1e-3, sigma_range: tuple[float, float] = (2.0 ** -6, 2.0 ** 12),
                    pld_discretization: float = PLD_DISCRETIZATION, prv_eps_error: float = PRV_EPS_ERROR) -> float:
    """:func:`~fedaudit.accounting.accountants.calibrate` of σ in ``dpsgd_event(σ, q, steps)`` (what
    ``noise_multiplier_for`` and its DP-FedAvg twin call)."""
    _, q, steps, delta = _check(1.0, sample_rate, steps, delta)
    method = check_method(method)
    settings = accountant_settings(method, pld_discretization, prv_eps_error)
    return calibrate(lambda sigma: dpsgd_event(sigma, q, steps), target_epsilon, delta, accountant=method,
                     tol=tol, search_range=sigma_range, **settings)
