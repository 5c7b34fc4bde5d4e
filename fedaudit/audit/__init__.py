"""Experiments that turn samples into certified numbers.

* :func:`audit_ldp` / :func:`audit_worst_case` — certified lower bounds on a randomizer's ε
  (sampling → distinguishers → :class:`ScoreAuditor`; :func:`audit_ldp_streams` draws from a
  given ``SeedSequence``); :func:`audit_pair` certifies a named pair of :data:`LDP_PAIRS` (or the
  searched one), :func:`pair_power` says how much of a claim the pair can test;
* :class:`ScoreAuditor` — certified ε lower bounds from attack scores (scores in, bound out);
* :meth:`ScoreAuditor.one_run` / :func:`one_run_epsilon` / :func:`one_run_epsilon_fdp` — one-run
  bounds from m canaries (Steinke–Nasr–Jagielski 2023; the f-DP analysis of Mahloujifar–Melis–
  Chaudhuri 2024); :meth:`ScoreAuditor.gdp` — the Gaussian-DP estimate (Nasr et al. 2023);
* :func:`audit_dpsgd` / :func:`audit_dp_fedavg` — canary audits of an Opacus DP-SGD run and of
  client-level DP-FedAvg, next to the accountant's ε (loaded on first use: they train);
* :func:`audit_sparse_upload` — the certified ε of E-FLoPS's gated sparse upload (plain and private)
  on neighbouring local datasets (loaded on first use);
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
from fedaudit.audit.gdp import GDPAudit, gdp_epsilon
from fedaudit.audit.ldp import LDPAudit, audit_ldp, audit_ldp_streams
from fedaudit.audit.one_run import OneRunAudit, one_run_audit, one_run_epsilon, one_run_epsilon_fdp, one_run_p_value
from fedaudit.audit.pair_search import PairSearch, audit_worst_case, search_pairs
from fedaudit.audit.pairs import LDP_PAIRS, audit_pair, input_pair, pair_power
from fedaudit.audit.scores import BonferroniSelection, ScoreAudit, ScoreAuditor, SplitSelection
from fedaudit.audit.variance import MSEResult, VarianceCurve, measure_mse, variance_vs_dk


def __getattr__(name):  # these pull in defenses, attacks, fl or torch: load on first use
    if name in ("audit_robustness", "RobustnessAudit"):
        from fedaudit.audit import robustness

        return getattr(robustness, name)
    if name in ("audit_dpsgd", "DPSGDAudit"):
        from fedaudit.audit import dpsgd_audit

        return getattr(dpsgd_audit, name)
    if name in ("audit_sparse_upload", "SparseUploadAudit", "audit_worst_pair", "worst_pair", "WorstPair",
                "WorstPairAudit"):
        from fedaudit.audit import sparse_upload

        return getattr(sparse_upload, name)
    if name in ("audit_dp_fedavg", "DPFedAvgAudit"):
        from fedaudit.audit import dp_fedavg_audit

        return getattr(dp_fedavg_audit, name)
    if name == "audit_dpfedavg":  # its spelling before issue #24 (deprecated)
        from fedaudit.deprecation import warn_renamed

        warn_renamed("fedaudit.audit.audit_dpfedavg", "audit_dp_fedavg", "fedaudit.audit")
        return __getattr__("audit_dp_fedavg")
    raise AttributeError(name)


__all__ = [
    "ScoreAuditor", "ScoreAudit", "SplitSelection", "BonferroniSelection",
    "LDPAudit", "audit_ldp", "audit_ldp_streams", "audit_worst_case", "search_pairs", "PairSearch",
    "LDP_PAIRS", "audit_pair", "input_pair", "pair_power",
    "audit_robustness", "RobustnessAudit",
    "OneRunAudit", "one_run_audit", "one_run_epsilon", "one_run_epsilon_fdp", "one_run_p_value",
    "GDPAudit", "gdp_epsilon", "audit_dpsgd", "DPSGDAudit", "audit_dp_fedavg", "DPFedAvgAudit",
    "audit_sparse_upload", "SparseUploadAudit", "audit_worst_pair", "worst_pair", "WorstPair", "WorstPairAudit",
    "MSEResult", "VarianceCurve", "measure_mse", "variance_vs_dk",
    "cp_lower", "cp_upper", "epsilon_lower_bound", "expected_epsilon_lower_bound", "best_threshold_epsilon",
    "ThresholdBound",
]
