"""Gaussian-DP estimate of ε from attack scores (Nasr et al. 2023, "Tight auditing of differentially
private machine learning", USENIX Security).

A mechanism is μ-GDP (Dong, Roth, Su 2022) when no test of D against D′ beats the Gaussian
trade-off: for every test with false-positive rate FPR and false-negative rate FNR,
FNR ≥ Φ(Φ⁻¹(1 − FPR) − μ), i.e. μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR). Each threshold event of the scores
gives Clopper–Pearson upper bounds FPR_ub, FNR_ub (Bonferroni over every threshold × orientation
× the two rates), and

    μ̂ = max over events of Φ⁻¹(1 − FPR_ub) − Φ⁻¹(FNR_ub)      (= Φ⁻¹(TPR_lb) − Φ⁻¹(FPR_ub)),

then ε̂ is the ε of μ̂-GDP at δ (Dong, Roth, Su 2022, Cor. 2.13):
δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), solved by :func:`dp_accounting.get_epsilon_gaussian`
with σ = 1/μ (the analytic Gaussian mechanism of Balle & Wang 2018 has exactly this curve).

This is an **estimate**: μ̂ is a lower bound on μ *if* the true trade-off curve is Gaussian, and
the conversion extrapolates from moderate FPR to the small-δ end of the curve. It is not a
certified (ε, δ) lower bound for other mechanisms; use :meth:`ScoreAuditor.epsilon_lower` or
:meth:`ScoreAuditor.one_run` for that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from fedaudit.audit.bounds import alpha_level, cp_lower, cp_upper, gdp_mu_estimate
from fedaudit.guarantees import Bound
from fedaudit.json import jsonable
from fedaudit.validation import check_probability, check_real

__all__ = ["GDPAudit", "gdp_epsilon", "gdp_mu_lower", "GDP_ASSUMPTION"]

#: what every GDP result says about itself
GDP_ASSUMPTION = ("estimate valid only if the trade-off curve is Gaussian (μ-GDP); not a certified (ε, δ) "
                  "lower bound")


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at ``delta`` (Dong, Roth, Su 2022, Cor. 2.13): the root of
    Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ, 0 when μ-GDP is already (0, δ)-DP."""
    mu = check_real("mu", mu, low=0.0)
    delta = check_probability("delta", delta)
    if mu == 0.0:
        return 0.0
    import dp_accounting  # heavy: load on first use

    return float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta))


def gdp_mu_lower(tp, n_in: int, fp, n_out: int, *, confidence: float | None = None,
                 alpha: float | None = None) -> np.ndarray:
    """μ = Φ⁻¹(TPR_lb) − Φ⁻¹(FPR_ub) of each event, the two Clopper–Pearson bounds at α/2 each,
    α = 1 − ``confidence`` (vectorised): under μ-GDP each is ≤ the true μ with probability ≥
    ``confidence``. ``alpha``: deprecated, 1 − confidence."""
    return gdp_mu_lower_at(tp, n_in, fp, n_out, alpha_level("gdp_mu_lower", confidence, alpha, default=None))


def gdp_mu_lower_at(tp, n_in: int, fp, n_out: int, alpha) -> np.ndarray:
    """:func:`gdp_mu_lower` at level α = 1 − confidence, for code that holds α itself
    (the audits take α = 1.0 − confidence, a Bonferroni share α/m); not re-exported."""
    return np.atleast_1d(gdp_mu_estimate(cp_lower(tp, n_in, alpha / 2), cp_upper(fp, n_out, alpha / 2)))


@dataclass(frozen=True)
class GDPAudit:
    """Result of :meth:`ScoreAuditor.gdp`: the μ-GDP estimate ``mu`` (the largest
    Φ⁻¹(1 − FPR_ub) − Φ⁻¹(FNR_ub) over ``tests`` events, each pair of bounds at
    ``alpha_per_test``) and ``epsilon``, the ε of μ-GDP at ``delta``. The best event is
    s ≥ ``threshold`` ("in-high") or s ≤ ``threshold`` ("in-low") guessed "in", with
    ``fp`` of ``n_out`` false and ``fn`` of ``n_in`` missed. An estimate, see ``assumption``."""

    epsilon: float
    mu: float
    delta: float
    confidence: float
    threshold: float | None
    orientation: str | None
    fp: int
    n_out: int
    fn: int
    n_in: int
    fpr_upper: float
    fnr_upper: float
    tests: int
    alpha_per_test: float
    assumption: str = GDP_ASSUMPTION
    #: what ``epsilon`` is: an estimate, never a bound (verdicts do not rest on it)
    epsilon_bound: ClassVar[Bound] = Bound.ESTIMATE

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "epsilon_bound": self.epsilon_bound.value})

    def summary(self) -> str:
        """One line: the estimate, its μ and what it assumes."""
        return (f"GDP estimate ε ≈ {self.epsilon:.4f} (μ ≥ {self.mu:.4f} at {self.confidence:.0%}, δ = {self.delta:g}; "
                f"FPR ≤ {self.fpr_upper:.3g}, FNR ≤ {self.fnr_upper:.3g} over {self.tests:,} events) — "
                f"{self.assumption}")
