"""Accountants: what a client has spent over rounds, what shuffling amplifies to, and what a
DP-SGD run costs, built on the typed guarantees of :mod:`fedaudit.guarantees` and on
dp-accounting and Opacus wherever they do the work.

* :data:`ACCOUNTANTS` — the accountant family over dp-accounting's ``DpEvent`` (PLD and RDP of
  dp-accounting, RDP and PRV of Opacus, shuffling, the privacy blanket; a user registers their own):
  :func:`account` answers ε(δ) or δ(ε) of an event as an :class:`Account`, :func:`calibrate` finds
  the parameter of an event factory that meets a target ε (:mod:`fedaudit.accounting.accountants`);
* :func:`compose` — basic, optimal advanced (Kairouz–Oh–Viswanath) and exact PLD composition (or
  any registered accountant) of per-report guarantees or mechanisms, each entry an event
  (:func:`event_of`; fedaudit's own :class:`EpsilonDeltaDpEvent` for an (ε, δ) claim and
  :class:`PldDpEvent` for a PLD dp-accounting has no event for); :class:`Ledger` — a per-client
  budget ledger;
* :func:`pld_of` — the dp-accounting privacy loss distribution of a fedaudit mechanism, a typed
  noise specification (:class:`LaplacePLD`, :class:`GaussianPLD`, :class:`DiscreteLaplacePLD`,
  :class:`DiscreteGaussianPLD`, :class:`PmfPair`) or a guarantee;
* :func:`epsilon_dpsgd` / :func:`calibrate_dpsgd` — Poisson-subsampled Gaussian (DP-SGD)
  accounting by PLD (dp-accounting), RDP or PRV (Opacus), and its inverse;
* :func:`epsilon_dp_fedavg` / :func:`calibrate_dp_fedavg` — client-level DP-FedAvg (clients
  Poisson-sampled with probability q, updates clipped to C, N(0, (zC)²) on the sum) over rounds;
* :func:`shuffle_epsilon` — shuffle-model amplification of n ε0-LDP reports (Feldman, McMillan
  and Talwar 2021: closed form and numerical bound); :func:`blanket_epsilon` — the
  mechanism-specific privacy-blanket bound for k-RR and Laplace (Balle, Bell, Gascón, Nissim 2019).

``noise_multiplier_for`` and ``noise_multiplier_for_dpfedavg`` are deprecated aliases of the
calibration, and ``epsilon_dpfedavg``, ``calibrate_dpfedavg`` and ``DPFEDAVG_METHODS`` the former
spellings of the DP-FedAvg names (module ``fedaudit.accounting.fedavg``, now
:mod:`fedaudit.accounting.dp_fedavg`) (DeprecationWarning; removed in the next release).

The canary audits that hold these accountants to account are in :mod:`fedaudit.audit`
(:func:`~fedaudit.audit.dpsgd_audit.audit_dpsgd`, :func:`~fedaudit.audit.dp_fedavg_audit.audit_dp_fedavg`).
"""

from fedaudit.accounting.accountants import (ACCOUNTANTS, NEIGHBOURING, Accountant, AccountantMemoryError, account,
                                             accountants_for,
                                             calibrate, dpsgd_event, make_accountant, register_accountant,
                                             schedule_event)
from fedaudit.accounting.blanket import (BLANKET_BOUNDS, BLANKET_MECHANISMS, BlanketBound, BlanketDpEvent,
                                        blanket_delta, blanket_epsilon, blanket_gamma)
from fedaudit.accounting.composition import METHODS, Composition, compose
from fedaudit.accounting.events import EpsilonDeltaDpEvent, PldDpEvent, event_of
from fedaudit.accounting.dpsgd import (DPSGD_METHODS, DPSGDAccount, calibrate_dpsgd, epsilon_dpsgd,
                                      noise_multiplier_for)
from fedaudit.accounting.dp_fedavg import (DP_FEDAVG_METHODS, DPFedAvgAccount, calibrate_dp_fedavg,
                                          epsilon_dp_fedavg, noise_multiplier_for_dpfedavg)
from fedaudit.accounting.ledger import Ledger, LedgerEntry
from fedaudit.accounting.pld import (PLD_SUPPORTED, DiscreteGaussianPLD, DiscreteLaplacePLD, GaussianPLD, LaplacePLD,
                                     NoiseSpec, PmfPair, guarantee_of, pld_of)
from fedaudit.accounting.result import Account
from fedaudit.accounting.shuffling import (SHUFFLE_METHODS, ShuffleBound, ShuffledDpEvent, closed_form_regime,
                                          shuffle_epsilon)
from fedaudit.deprecation import module_aliases
from fedaudit.guarantees import Bound

__all__ = [
    "ACCOUNTANTS", "Accountant", "AccountantMemoryError", "Account", "Bound", "account", "calibrate", "make_accountant",
    "register_accountant", "accountants_for", "dpsgd_event", "schedule_event", "NEIGHBOURING",
    "ShuffledDpEvent", "BlanketDpEvent", "EpsilonDeltaDpEvent", "PldDpEvent", "event_of", "calibrate_dpsgd", "calibrate_dp_fedavg",
    "compose", "Composition", "METHODS", "Ledger", "LedgerEntry",
    "epsilon_dpsgd", "noise_multiplier_for", "DPSGDAccount", "DPSGD_METHODS",
    "epsilon_dp_fedavg", "noise_multiplier_for_dpfedavg", "DPFedAvgAccount", "DP_FEDAVG_METHODS",
    "shuffle_epsilon", "ShuffleBound", "closed_form_regime", "SHUFFLE_METHODS",
    "pld_of", "guarantee_of", "NoiseSpec", "LaplacePLD", "GaussianPLD", "DiscreteLaplacePLD",
    "DiscreteGaussianPLD", "PmfPair", "PLD_SUPPORTED",
    "blanket_epsilon", "blanket_delta", "blanket_gamma", "BlanketBound", "BLANKET_BOUNDS", "BLANKET_MECHANISMS",
]

#: the spellings these had before issue #24 (deprecated; each read warns with the new name)
__getattr__ = module_aliases(__name__, {
    "epsilon_dpfedavg": ("epsilon_dp_fedavg", lambda: epsilon_dp_fedavg),
    "calibrate_dpfedavg": ("calibrate_dp_fedavg", lambda: calibrate_dp_fedavg),
    "DPFEDAVG_METHODS": ("DP_FEDAVG_METHODS", lambda: DP_FEDAVG_METHODS),
})
