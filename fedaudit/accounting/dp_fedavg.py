"""Client-level ε of DP-FedAvg (McMahan, Ramage, Talwar, Zhang, ICLR 2018, "Learning
differentially private recurrent language models", Algorithm 1 with the fixed denominator).

Each round samples every client independently with probability ``q = sample_rate``, clips each
sampled client's model update to L2 norm C, sums the clipped updates and adds N(0, (zC)²·I),
z = ``noise_multiplier``; the server divides by a data-independent constant (the expected number
of sampled clients q·N) and steps. The unit of privacy is a **client** (all of its data at once:
user-level DP) and neighbouring federations differ by **adding or removing one client**. One
round is then the Poisson-subsampled Gaussian mechanism with noise multiplier z at sensitivity C
— the same event as one DP-SGD step with examples replaced by clients — and ``rounds`` rounds are
its adaptive self-composition. The accounting is therefore
:func:`fedaudit.accounting.dpsgd.epsilon_dpsgd` on (z, q, rounds): one code path, PLD
(dp-accounting), RDP or PRV (Opacus), or any registered accountant that supports the event;
:func:`calibrate_dp_fedavg` is its inverse (:func:`~fedaudit.accounting.accountants.calibrate`;
:func:`noise_multiplier_for_dpfedavg` is its deprecated name).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

from fedaudit.accounting.dpsgd import (DPSGD_METHODS, PLD_DISCRETIZATION, PRV_EPS_ERROR, calibrate_dpsgd,
                                      check_method, epsilon_dpsgd)
from fedaudit.accounting.result import Account
from fedaudit.json import jsonable
from fedaudit.validation import check_int, check_positive, check_probability

__all__ = ["DPFedAvgAccount", "epsilon_dp_fedavg", "calibrate_dp_fedavg", "noise_multiplier_for_dpfedavg",
           "DP_FEDAVG_METHODS", "UNIT", "NEIGHBOURING"]

DP_FEDAVG_METHODS = DPSGD_METHODS
#: the privacy unit of DP-FedAvg accounting
UNIT = "client"
#: the neighbouring relation the client-level ε is stated for
NEIGHBOURING = "add-or-remove-one-client"


@dataclass(frozen=True)
class DPFedAvgAccount(Account):
    """Client-level (ε, δ) of ``rounds`` DP-FedAvg rounds: for every client and every event S of the
    whole run's outputs, P[run with the client ∈ S] ≤ e^ε·P[run without it ∈ S] + δ and the reverse.
    ``parameters`` holds the accountant's own settings (discretisation, best order, error bound)."""

    method: str = field(kw_only=False)
    noise_multiplier: float
    sample_rate: float
    rounds: int
    unit: str = UNIT
    neighbouring: str = NEIGHBOURING

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"epsilon": self.epsilon, "delta": self.delta, "method": self.method,
                         "noise_multiplier": self.noise_multiplier, "sample_rate": self.sample_rate,
                         "rounds": self.rounds, "unit": self.unit, "neighbouring": self.neighbouring,
                         "parameters": dict(self.parameters), "epsilon_bound": self.epsilon_bound.value})

    def summary(self) -> str:
        """One line: ε at δ, per client, and the schedule."""
        return (f"DP-FedAvg: ({self.epsilon:.4g}, {self.delta:g})-DP per {self.unit} ({self.neighbouring}) after "
                f"{self.rounds} rounds, z = {self.noise_multiplier:g}, q = {self.sample_rate:g} ({self.method})")


def _check(sample_rate, rounds, delta, method):
    q = check_probability("sample_rate", sample_rate, open_high=False)
    rounds = check_int("rounds", rounds, low=1)
    delta = check_probability("delta", delta)
    return q, rounds, delta, check_method(method)


def epsilon_dp_fedavg(noise_multiplier: float, sample_rate: float, rounds: int, delta: float,
                     method: str = "pld", *, pld_discretization: float = PLD_DISCRETIZATION,
                     prv_eps_error: float = PRV_EPS_ERROR) -> DPFedAvgAccount:
    """Client-level ε at ``delta`` of ``rounds`` DP-FedAvg rounds with noise multiplier z > 0 and
    client sampling rate q ∈ (0, 1]: the ``rounds``-fold composition of the Poisson-subsampled
    Gaussian P = (1−q)·N(0, z²) + q·N(1, z²) vs Q = N(0, z²) (and the reverse), by ``method``
    ("pld", "rdp" or "prv") at the accuracy settings ``pld_discretization`` and ``prv_eps_error``
    (:func:`~fedaudit.accounting.dpsgd.epsilon_dpsgd`, whose module docstring gives the signed
    error of each per regime). ``inf`` = no finite ε at δ."""
    z = check_positive("noise_multiplier", noise_multiplier)
    q, rounds, delta, method = _check(sample_rate, rounds, delta, method)
    account = epsilon_dpsgd(z, q, rounds, delta, method, pld_discretization=pld_discretization,
                            prv_eps_error=prv_eps_error)
    extra = {k: v for k, v in account.parameters.items() if k not in ("noise_multiplier", "sample_rate", "steps")}
    return DPFedAvgAccount(epsilon=account.epsilon, delta=delta, method=method, noise_multiplier=z, sample_rate=q,
                           rounds=rounds, parameters=extra,
                           epsilon_bound=account.epsilon_bound)


def calibrate_dp_fedavg(target_epsilon: float, sample_rate: float, rounds: int, delta: float,
                       method: str = "pld", *, tol: float = 1e-3,
                       pld_discretization: float = PLD_DISCRETIZATION, prv_eps_error: float = PRV_EPS_ERROR) -> float:
    """The smallest z (to relative ``tol``) whose client-level ε after ``rounds`` rounds at rate q is
    at most ``target_epsilon``: :func:`~fedaudit.accounting.accountants.calibrate` on the same event
    as DP-SGD (:func:`~fedaudit.accounting.dpsgd.calibrate_dpsgd`), at the same accuracy settings."""
    q, rounds, delta, method = _check(sample_rate, rounds, delta, method)
    return calibrate_dpsgd(target_epsilon, q, rounds, delta, method, tol=tol,
                           pld_discretization=pld_discretization, prv_eps_error=prv_eps_error)


def noise_multiplier_for_dpfedavg(target_epsilon: float, sample_rate: float, rounds: int, delta: float,
                                  method: str = "pld", *, tol: float = 1e-3,
                                  pld_discretization: float = PLD_DISCRETIZATION,
                                  prv_eps_error: float = PRV_EPS_ERROR) -> float:
    """Deprecated (one release): :func:`calibrate_dp_fedavg` (or
    :func:`~fedaudit.accounting.accountants.calibrate` on ``dpsgd_event(z, q, rounds)``)."""
    warnings.warn("noise_multiplier_for_dpfedavg is deprecated: use fedaudit.accounting.calibrate_dp_fedavg or "
                  "fedaudit.accounting.calibrate", DeprecationWarning, stacklevel=2)
    return calibrate_dp_fedavg(target_epsilon, sample_rate, rounds, delta, method, tol=tol,
                              pld_discretization=pld_discretization, prv_eps_error=prv_eps_error)
