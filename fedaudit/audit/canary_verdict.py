"""The bounds and the verdict every one-run canary audit of training shares.

From the scores of the included (``scores_in``) and excluded (``scores_out``) canaries of one run,
:func:`canary_bounds` computes, at ``confidence`` and δ, the Steinke–Nasr–Jagielski one-run bound,
its f-DP refinement (Mahloujifar, Melis, Chaudhuri 2024) on the trade-off curve ``curve`` and the
Gaussian-DP estimate (Nasr et al. 2023), and compares them with the accountant's ε of the claimed
configuration. Only *certified* bounds can make a violation: Steinke's, and the f-DP bound on the
(ε, δ) curve f_{ε,δ} (valid for every (ε, δ)-DP algorithm). The f-DP bound on the Gaussian curve
through (ε, δ) is no certificate for the Poisson-subsampled Gaussian of DP-SGD and DP-FedAvg,
whose δ(ε′) exceeds μ-GDP's at some ε′, and the GDP number is an estimate: both are reported,
neither decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedaudit.audit.gdp import GDPAudit
from fedaudit.audit.one_run import OneRunAudit
from fedaudit.audit.scores import MIN_SCORES, ScoreAuditor
from fedaudit.errors import FedAuditError

__all__ = ["CanaryBounds", "canary_bounds", "CanaryAudit"]


@dataclass(frozen=True)
class CanaryBounds:
    """``one_run`` (Steinke), ``one_run_fdp`` (f-DP on ``one_run_fdp.curve``) and ``gdp`` of one run;
    ``violated_by`` names the certified bounds above ``accountant_epsilon``."""

    one_run: OneRunAudit
    one_run_fdp: OneRunAudit
    gdp: GDPAudit
    accountant_epsilon: float
    violated_by: tuple[str, ...]



def canary_bounds(scores_in: np.ndarray, scores_out: np.ndarray, accountant_epsilon: float, *, delta: float,
                  confidence: float, curve: str) -> CanaryBounds:
    """The three numbers of a one-run canary audit and which certified ones exceed
    ``accountant_epsilon`` (module docstring). Each side needs at least ``MIN_SCORES`` canaries."""
    k, rest = np.size(scores_in), np.size(scores_out)
    if min(k, rest) < MIN_SCORES:
        raise FedAuditError(f"{k} of canaries={k + rest} were included and {rest} excluded; each side needs at "
                            f"least {MIN_SCORES}: use more canaries (or another seed)")
    auditor = ScoreAuditor(scores_in, scores_out)
    steinke = auditor.one_run(delta, confidence, method="steinke")
    fdp = auditor.one_run(delta, confidence, method="fdp", curve=curve)
    certified = (("steinke", steinke),) + ((("fdp", fdp),) if curve == "dp" else ())
    violated = tuple(name for name, bound in certified if bound.epsilon > accountant_epsilon)
    return CanaryBounds(one_run=steinke, one_run_fdp=fdp, gdp=auditor.gdp(delta, confidence),
                        accountant_epsilon=float(accountant_epsilon), violated_by=violated)


@dataclass(frozen=True)
class CanaryAudit:
    """What every one-run training audit reports: ``accountant`` (the claimed configuration's
    account, with ``epsilon`` and ``method``), the bounds of :func:`canary_bounds` at ``delta`` and
    ``confidence``, ``violation`` (any of ``violated_by``) and the canary counts."""

    accountant: Any
    one_run: OneRunAudit
    one_run_fdp: OneRunAudit
    gdp: GDPAudit
    violation: bool
    violated_by: tuple[str, ...]
    delta: float
    confidence: float
    canaries: int
    canaries_in: int

    @property
    def epsilon_lower(self) -> float:
        """The largest *certified* one-run bound (the Gaussian-curve f-DP bound is not one)."""
        fdp = self.one_run_fdp.epsilon if self.one_run_fdp.curve == "dp" else 0.0
        return max(self.one_run.epsilon, fdp)

    def describe_bounds(self) -> str:
        """The shared part of the one-line summary: accountant, bounds, verdict."""
        verdict = (f"VIOLATION ({', '.join(self.violated_by)} bound above the accountant)" if self.violation
                   else "no violation")
        fdp = "f-DP" if self.one_run_fdp.curve == "dp" else "f-DP Gaussian-curve estimate"
        return (f"accountant ε = {self.accountant.epsilon:.4g} ({self.accountant.method}) at δ = {self.delta:g}; "
                f"one-run ε ≥ {self.one_run.epsilon:.4f} (Steinke), ≥ {self.one_run_fdp.epsilon:.4f} ({fdp}) at "
                f"{self.confidence:.0%}; GDP estimate {self.gdp.epsilon:.4f}; {verdict}")
