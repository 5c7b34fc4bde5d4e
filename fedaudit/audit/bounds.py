"""Confidence bounds on rates and the ε they certify.

Hypothesis-testing view of (ε, δ)-DP (Kairouz, Oh, Viswanath 2015): for neighbouring inputs
and every event E, ``P[M(x) ∈ E] ≤ e^ε P[M(x') ∈ E] + δ``. With ``tp`` hits of E in ``n_pos``
draws of M(x) and ``fp`` hits in ``n_neg`` draws of M(x'), one-sided Clopper–Pearson bounds
TPR_lb, FPR_ub at α/2 each hold jointly with probability ≥ 1 − α, and then

    ε ≥ ε_lb = log((TPR_lb − δ) / FPR_ub)          (Jagielski et al. 2020; Nasr et al. 2021)

is a certified lower bound at confidence 1 − α for *one* pre-selected event. Selecting the
event on the same data invalidates it; fedaudit selects on a separate split.

Clopper–Pearson (1934): lower(k, n, a) = Beta.ppf(a, k, n − k + 1) (0 when k = 0),
upper(k, n, a) = Beta.ppf(1 − a, k + 1, n − k) (1 when k = n).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

__all__ = ["cp_lower", "cp_upper", "epsilon_lower_bound", "max_certifiable_epsilon", "gdp_mu_estimate"]


def cp_lower(k, n, alpha):
    """One-sided Clopper–Pearson lower bound on a binomial rate at level 1 − alpha (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k <= 0, 0.0, out)


def cp_upper(k, n, alpha):
    """One-sided Clopper–Pearson upper bound on a binomial rate at level 1 − alpha (vectorised)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        out = stats.beta.ppf(1.0 - alpha, k + 1, n - k)
    return np.where(k >= n, 1.0, out)


def epsilon_lower_bound(tp, n_pos, fp, n_neg, *, delta: float = 0.0, alpha: float = 0.05):
    """Certified ε_lb = max(0, log((TPR_lb − δ)/FPR_ub)) with CP bounds at α/2 each (vectorised).

    Valid at confidence 1 − alpha for an event chosen independently of these counts.
    """
    tpr_lb = cp_lower(tp, n_pos, alpha / 2)
    fpr_ub = cp_upper(fp, n_neg, alpha / 2)
    num = tpr_lb - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(num > 0, np.log(np.maximum(num, 1e-300) / fpr_ub), 0.0)
    return np.maximum(eps, 0.0)


def max_certifiable_epsilon(n: int, *, delta: float = 0.0, alpha: float = 0.05) -> float:
    """The largest ε any audit with n draws per input can certify (TP = n, FP = 0)."""
    return float(epsilon_lower_bound(n, n, 0, n, delta=delta, alpha=alpha))


def gdp_mu_estimate(tpr: float, fpr: float) -> float:
    """Point estimate μ = Φ⁻¹(TPR) − Φ⁻¹(FPR) of a Gaussian-DP trade-off through (FPR, TPR)
    (Dong, Roth, Su 2022). An *estimate* under a Gaussian-shape assumption, never a bound."""
    tpr = float(np.clip(tpr, 1e-300, 1 - 1e-16))
    fpr = float(np.clip(fpr, 1e-300, 1 - 1e-16))
    return float(stats.norm.ppf(tpr) - stats.norm.ppf(fpr))
