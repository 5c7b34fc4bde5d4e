"""Experiments that turn samples into certified numbers.

* :func:`audit_ldp` / :func:`audit_worst_case` — certified lower bounds on a randomizer's ε
  (sampling → distinguishers → :class:`ScoreAuditor`; :func:`audit_ldp_streams` draws from a
  given ``SeedSequence``);
* :class:`ScoreAuditor` — certified ε lower bounds from attack scores (scores in, bound out);
* :func:`audit_robustness` — empirical (f, ν)-robustness of an aggregation rule;
* :func:`measure_mse` / :func:`variance_vs_dk` — error of unbiased mechanisms.
"""

from fedaudit.audit.bounds import (
    ThresholdBound,
    best_threshold_epsilon,
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    expected_epsilon_lower_bound,
)
from fedaudit.audit.ldp import LDPAudit, audit_ldp, audit_ldp_streams
from fedaudit.audit.pair_search import PairSearch, audit_worst_case, search_pairs
from fedaudit.audit.scores import BonferroniSelection, ScoreAudit, ScoreAuditor, SplitSelection
from fedaudit.audit.variance import MSEResult, VarianceCurve, measure_mse, variance_vs_dk


def __getattr__(name):  # robustness pulls in the defenses and attacks: load on first use
    if name in ("audit_robustness", "RobustnessAudit"):
        from fedaudit.audit import robustness

        return getattr(robustness, name)
    raise AttributeError(name)


__all__ = [
    "ScoreAuditor", "ScoreAudit", "SplitSelection", "BonferroniSelection",
    "LDPAudit", "audit_ldp", "audit_ldp_streams", "audit_worst_case", "search_pairs", "PairSearch",
    "audit_robustness", "RobustnessAudit",
    "MSEResult", "VarianceCurve", "measure_mse", "variance_vs_dk",
    "cp_lower", "cp_upper", "epsilon_lower_bound", "expected_epsilon_lower_bound", "best_threshold_epsilon",
    "ThresholdBound",
]
