"""Accountants: what a client has spent over rounds, what shuffling amplifies to, and what a
DP-SGD run costs, built on the typed guarantees of :mod:`fedaudit.guarantees` and on
dp-accounting and Opacus wherever they do the work.

* :func:`compose` — basic, optimal advanced (Kairouz–Oh–Viswanath) and exact PLD composition of
  per-report guarantees; :class:`Ledger` — a per-client budget ledger;
* :func:`epsilon_dpsgd` / :func:`noise_multiplier_for` — Poisson-subsampled Gaussian (DP-SGD)
  accounting by PLD (dp-accounting), RDP or PRV (Opacus), and its inverse;
* :func:`shuffle_epsilon` — shuffle-model amplification of n ε0-LDP reports (Feldman, McMillan
  and Talwar 2021: closed form and numerical bound).

Issue #11 is in progress: DP-FedAvg client-level accounting and the canary audits come next.
"""

from fedaudit.accounting.composition import METHODS, Composition, compose
from fedaudit.accounting.dpsgd import DPSGD_METHODS, DPSGDAccount, epsilon_dpsgd, noise_multiplier_for
from fedaudit.accounting.ledger import Ledger, LedgerEntry
from fedaudit.accounting.shuffling import SHUFFLE_METHODS, ShuffleBound, closed_form_regime, shuffle_epsilon

__all__ = [
    "compose", "Composition", "METHODS", "Ledger", "LedgerEntry",
    "epsilon_dpsgd", "noise_multiplier_for", "DPSGDAccount", "DPSGD_METHODS",
    "shuffle_epsilon", "ShuffleBound", "closed_form_regime", "SHUFFLE_METHODS",
]
