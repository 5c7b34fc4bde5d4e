"""Cross-check Flower's own privacy accountant against fedaudit's accountants on the same events.

**Flower's accountant** (flwr 1.42, ``flwr/supercore/privacy_accounting/rdp_accountant.py``).
``RdpAccountant(PrivacyConfig(target_delta, population_size, neighboring_relation, sampling_method))``
wraps dp-accounting's ``RdpAccountant`` ("This class wraps Google's ``dp-accounting`` package",
rdp_accountant.py:35-36). Its backend is built with ``orders=None`` unless the caller passes orders
(rdp_accountant.py:194-202), i.e. dp-accounting's ``DEFAULT_RDP_ORDERS`` (1.1 … 10.9 in steps of 0.1,
11 … 63, 128, 256, 512, 1024); a ``GaussianPrivacyEvent(noise_multiplier, sample_size,
population_size)`` becomes (rdp_accountant.py:208-225)

* ``POISSON``: ``PoissonSampledDpEvent(sample_size / population_size, GaussianDpEvent(z))``
  (with ADD_OR_REMOVE_ONE);
* ``WITHOUT_REPLACEMENT``: ``SampledWithoutReplacementDpEvent(population, sample, GaussianDpEvent(z))``
  (with REPLACE_ONE);
* ``NO_AMPLIFICATION``: ``GaussianDpEvent(z)`` (with ADD_OR_REMOVE_ONE; the only mode the central-DP
  fixed-clipping wrappers accept, ``serverapp/strategy/dp_fixed_clipping.py:104-108``).

ε(δ) is dp-accounting's RDP-to-DP conversion ``compute_epsilon`` (Canonne–Kamath–Steinke 2020,
Prop. 12: ε = min_α r(α) + log(1 − 1/α) − log(δα)/(α − 1)).

**What it is compared with**, on the same (z, q, T, δ): fedaudit's ``"dpa-rdp"`` (the same
dp-accounting RDP with the same default orders: it must agree to rounding), ``"rdp"`` (Opacus's RDP
of the Poisson-subsampled Gaussian, orders 1.1 … 63; the same conversion formula, Balle et al. 2020
Thm. 21, so it differs only where the optimal order lies above 63), and ``"pld"`` (dp-accounting's
privacy-loss-distribution accountant, pessimistic discretisation: the tightest of the three; every RDP
ε must be ≥ it up to the discretisation slack). An accountant whose ε is below the PLD ε under-counts.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

from dp_accounting import dp_event

from fedaudit.accounting.accountants import account, dpsgd_event
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_positive, check_probability

require_flwr()

from flwr.supercore.privacy_accounting import (  # noqa: E402
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant  # noqa: E402

__all__ = ["AccountantRow", "flower_epsilon", "cross_check_row", "cross_check", "GRID_SIGMAS", "GRID_RATES",
           "GRID_ROUNDS", "GRID_DELTAS", "POPULATION", "SAMPLINGS", "AGREE_RTOL", "PLD_SLACK"]

#: the default grid of the benchmark: noise multipliers, sampling rates, rounds and δ
GRID_SIGMAS = (0.5, 0.8, 1.0, 2.0, 5.0)
GRID_RATES = (0.01, 0.1, 1.0)
GRID_ROUNDS = (1, 10, 100, 1000)
GRID_DELTAS = (1e-5,)
#: the population the sampling rates are drawn from (sample size = rate · population, an integer)
POPULATION = 1000
#: Flower's sampling methods the cross-check runs ("poisson" or "no-amplification")
SAMPLINGS = ("poisson", "no-amplification")
#: relative tolerance of "Flower agrees with dp-accounting's RDP" (the same code: rounding only)
AGREE_RTOL = 1e-9
#: relative slack allowed below the PLD ε before an RDP ε counts as under-counting (PLD's pessimistic
#: discretisation 1e-4 over-states its own ε by at most about T·1e-4 in absolute terms; see cross_check_row)
PLD_SLACK = 1e-3


def _sample_size(rate: float, population: int) -> int:
    size = rate * population
    if abs(size - round(size)) > 1e-9 or round(size) < 1:
        raise FedAuditError(f"sample rate {rate:g} × population {population} must be a whole number ≥ 1 of "
                            f"clients (Flower's GaussianPrivacyEvent takes a sample size), got {size:g}")
    return int(round(size))


def flower_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float, *,
                   sampling: str = "poisson", population: int = POPULATION) -> tuple[float, float]:
    """(ε, optimal order) of Flower's own ``RdpAccountant`` after ``rounds`` identical releases of
    ``GaussianPrivacyEvent(noise_multiplier, sample_rate·population, population)`` at ``delta``, with
    ``sampling`` "poisson" (add/remove neighbours) or "no-amplification" (the fixed-clipping wrappers' mode;
    ``sample_rate`` is then only recorded, as Flower does)."""
    sampling = check_choice("sampling", sampling, SAMPLINGS)
    population = check_int("population", population, low=1)
    method = SamplingMethod.POISSON if sampling == "poisson" else SamplingMethod.NO_AMPLIFICATION
    acc = RdpAccountant(PrivacyConfig(target_delta=delta, population_size=population,
                                      neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                                      sampling_method=method))
    acc.compose(GaussianPrivacyEvent(noise_multiplier=float(noise_multiplier),
                                     sample_size=_sample_size(sample_rate, population),
                                     population_size=population), count=rounds)
    spent = acc.get_privacy_spent(delta)
    return float(spent.epsilon), float(spent.optimal_order or math.nan)


@dataclass(frozen=True)
class AccountantRow:
    """One event of the cross-check: z = ``sigma``, q = ``rate`` (1 under no amplification), T =
    ``rounds``, δ = ``delta``; ε of Flower's accountant (``eps_flower``, its optimal order
    ``order_flower``), fedaudit's ``"dpa-rdp"`` (the same backend), ``"rdp"`` (Opacus RDP) and ``"pld"``
    (dp-accounting PLD); ``ratio`` = eps_flower / eps_pld; ``agrees`` — Flower equals dpa-rdp within
    :data:`AGREE_RTOL`; ``under_counts`` — Flower's ε is below the PLD ε by more than
    :data:`PLD_SLACK` (relative)."""

    sampling: str
    sigma: float
    rate: float
    rounds: int
    delta: float
    eps_flower: float
    order_flower: float
    eps_dpa_rdp: float
    eps_rdp: float
    eps_pld: float
    ratio: float
    agrees: bool
    under_counts: bool

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))


def _event(sigma: float, rate: float, rounds: int, sampling: str) -> dp_event.DpEvent:
    if sampling == "poisson":
        return dpsgd_event(sigma, rate, rounds)
    return dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(sigma), rounds)


def cross_check_row(sigma: float, rate: float, rounds: int, delta: float, *, sampling: str = "poisson",
                    population: int = POPULATION) -> AccountantRow:
    """Flower's ε and fedaudit's three accountants' ε on the same event (module docstring)."""
    sigma = check_positive("sigma", sigma)
    rate = check_probability("rate", rate, open_high=False)
    rounds = check_int("rounds", rounds, low=1)
    delta = check_probability("delta", delta)
    sampling = check_choice("sampling", sampling, SAMPLINGS)
    eps_f, order = flower_epsilon(sigma, rate, rounds, delta, sampling=sampling, population=population)
    event = _event(sigma, rate, rounds, sampling)
    eps = {name: account(event, delta=delta, accountant=name).epsilon for name in ("dpa-rdp", "rdp", "pld")}
    pld = eps["pld"]
    return AccountantRow(
        sampling=sampling, sigma=sigma, rate=rate if sampling == "poisson" else 1.0, rounds=rounds, delta=delta,
        eps_flower=eps_f, order_flower=order, eps_dpa_rdp=eps["dpa-rdp"], eps_rdp=eps["rdp"], eps_pld=pld,
        ratio=eps_f / pld if pld > 0 else math.inf,
        agrees=math.isclose(eps_f, eps["dpa-rdp"], rel_tol=AGREE_RTOL, abs_tol=1e-12),
        under_counts=eps_f < pld * (1.0 - PLD_SLACK))


def cross_check(sigmas: Sequence[float] = GRID_SIGMAS, rates: Sequence[float] = GRID_RATES,
                rounds: Sequence[int] = GRID_ROUNDS, deltas: Sequence[float] = GRID_DELTAS, *,
                samplings: Iterable[str] = SAMPLINGS, population: int = POPULATION) -> list[AccountantRow]:
    """:func:`cross_check_row` over the grid (no-amplification rows ignore ``rates``: one row per z, T, δ)."""
    rows = []
    for sampling in samplings:
        for sigma in sigmas:
            for rate in (rates if sampling == "poisson" else (1.0,)):
                for t in rounds:
                    for delta in deltas:
                        rows.append(cross_check_row(sigma, rate, t, delta, sampling=sampling, population=population))
    return rows
