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

import numpy as np

from fedaudit.audit.gdp import GDPAudit
from fedaudit.audit.one_run import OneRunAudit
from fedaudit.audit.scores import MIN_SCORES, ScoreAuditor
from fedaudit.errors import FedAuditError

__all__ = ["CanaryBounds", "canary_bounds"]


@dataclass(frozen=True)
class CanaryBounds:
    """``one_run`` (Steinke), ``one_run_fdp`` (f-DP on ``one_run_fdp.curve``) and ``gdp`` of one run;
    ``violated_by`` names the certified bounds above ``accountant_epsilon``."""

    one_run: OneRunAudit
    one_run_fdp: OneRunAudit
    gdp: GDPAudit
    accountant_epsilon: float
    violated_by: tuple[str, ...]

    def describe(self, accountant: str, delta: float, confidence: float) -> str:
        """The shared part of a training audit's one-line summary: accountant, bounds, verdict."""
        verdict = (f"VIOLATION ({', '.join(self.violated_by)} bound above the accountant)" if self.violated_by
                   else "no violation")
        return (f"accountant ε = {self.accountant_epsilon:.4g} ({accountant}) at δ = {delta:g}; one-run ε ≥ "
                f"{self.one_run.epsilon:.4f} (Steinke), ≥ {self.one_run_fdp.epsilon:.4f} (f-DP) at {confidence:.0%}; "
                f"GDP estimate {self.gdp.epsilon:.4f}; {verdict}")


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
