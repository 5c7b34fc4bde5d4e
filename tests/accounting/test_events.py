"""Events of mechanisms, noise specifications and claims (fedaudit.accounting.events,
Mechanism.dp_event) and compose / Ledger on the ACCOUNTANTS registry.

Every reference is computed without the code under test: dp-accounting's own factories and
accountants called directly, exact enumeration of lattice noise with numpy, or a closed form
(the Gaussian's privacy curve, Balle & Wang 2018, written here with scipy).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import PLDAccountant
from dp_accounting.pld import privacy_loss_distribution as plds
from dp_accounting.pld.common import DifferentialPrivacyParameters
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import RdpAccountant
from scipy.optimize import brentq
from scipy.stats import norm

from fedaudit.accounting import (DiscreteGaussianPLD, DiscreteLaplacePLD, EpsilonDeltaDpEvent, GaussianPLD,
                                 LaplacePLD, Ledger, PldDpEvent, PmfPair, account, accountants_for, compose,
                                 event_of, pld_of)
from fedaudit.audit import ThresholdBound, best_threshold_epsilon
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, Bound, PureLDP
from fedaudit.mechanisms import Duchi, Gaussian, Laplace, RandomizedResponse
from fedaudit.mechanisms.base import Mechanism

DISC = 1e-4


def _gaussian_eps(mu: float, delta: float) -> float:
    """ε(δ) of N(0, 1) vs N(μ, 1): δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)."""
    def log_gap(e):
        return math.log(max(norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2), 1e-300))
    return brentq(lambda e: log_gap(e) - math.log(delta), 0.0, 50.0, xtol=1e-12)


def _discrete_laplace_eps(t: float, shift: int, delta: float) -> float:
    """ε(δ) of Z vs Z + shift, P[Z = z] ∝ exp(−|z|/t), enumerated on the integers (symmetric pair)."""
    z = np.arange(-int(60 * t) - shift, int(60 * t) + 2 * shift + 1)
    p = np.exp(-np.abs(z) / t)
    q = np.exp(-np.abs(z - shift) / t)
    p, q = p / p.sum(), q / q.sum()

    def gap(e):
        return float(np.clip(p - math.exp(e) * q, 0, None).sum())
    return 0.0 if gap(0.0) <= delta else brentq(lambda e: gap(e) - delta, 0.0, shift / t + 1, xtol=1e-12)


# -- mechanisms' events ----------------------------------------------------------------------------

def test_one_dimensional_laplace_event_is_its_discrete_laplace_pair_under_add_remove():
    mech = Laplace(1, 1.0)
    shift = 2 * int(np.rint(mech.clip / mech.grid))
    ev = mech.dp_event()
    assert ev == dp_event.DiscreteLaplaceDpEvent(1.0 / mech.scale_grid, shift)
    got = account(ev, delta=1e-6, neighbouring="add-remove").epsilon
    exact = _discrete_laplace_eps(mech.scale_grid, shift, 1e-6)
    assert exact <= got <= exact + DISC
    assert got <= mech.epsilon
    assert got == pytest.approx(pld_of(mech).get_epsilon_for_delta(1e-6), rel=1e-12)
    with pytest.raises(FedAuditError, match="add-remove") as err:  # dp-accounting's PLD refuses replace-one
        account(ev, delta=1e-6, neighbouring="replace-one")
    assert "\n" not in str(err.value)


def test_gaussian_event_is_the_continuous_gaussian_of_its_privacy_proof():
    mech = Gaussian(4, 1.0, 1e-5)
    ev = mech.dp_event()
    assert isinstance(ev, dp_event.GaussianDpEvent)
    mu = mech.sensitivity_grid / math.sqrt(mech.sigma2_grid - 4)
    got = account(ev, delta=mech.delta, neighbouring="add-remove").epsilon
    exact = _gaussian_eps(mu, mech.delta)
    assert exact <= got <= exact + DISC
    assert got <= mech.epsilon  # the claim holds for the proof's Gaussian
    ten = account(dp_event.SelfComposedDpEvent(ev, 10), delta=1e-5, neighbouring="add-remove").epsilon
    assert ten == pytest.approx(_gaussian_eps(math.sqrt(10) * mu, 1e-5), abs=DISC)


@pytest.mark.parametrize("make, match", [
    (lambda: Gaussian(1, 1.0, 1e-5), "discrete Gaussian"),
    (lambda: Laplace(3, 1.0), "dim=3"),
    (lambda: PmfPair((0.5, 0.5), (0.3, 0.7)), "PmfPair"),
    (lambda: DiscreteGaussianPLD(3.0, 1), "DiscreteGaussianPLD"),
])
def test_what_has_no_dp_accounting_event_names_the_alternatives(make, match):
    with pytest.raises(FedAuditError, match=match) as err:
        make().dp_event()
    message = str(err.value)
    assert "pld_of" in message and "PldDpEvent" in message and "\n" not in message


@pytest.mark.parametrize("spec, event", [
    (LaplacePLD(4.0, 2.0), dp_event.LaplaceDpEvent(2.0)),
    (GaussianPLD(3.0, 1.5), dp_event.GaussianDpEvent(2.0)),
    (DiscreteLaplacePLD(4.0, 2), dp_event.DiscreteLaplaceDpEvent(0.25, 2)),
])
def test_noise_specifications_have_dp_accounting_events(spec, event):
    assert spec.dp_event() == event
    got = account(dp_event.SelfComposedDpEvent(spec.dp_event(), 20), delta=1e-6).epsilon
    ref = PLDAccountant(value_discretization_interval=DISC)
    ref.compose(event, 20)
    assert got == pytest.approx(ref.get_epsilon(1e-6), rel=1e-12)
    assert got == pytest.approx(compose([spec] * 20, "pld", 1e-6).epsilon, abs=20 * DISC)


# -- fedaudit's events -----------------------------------------------------------------------------

def test_epsilon_delta_event_is_the_dominating_pair_of_the_claim():
    ev = EpsilonDeltaDpEvent(0.5, 1e-8)
    assert event_of(ApproxLDP(0.5, 1e-8)) == ev and event_of(PureLDP(0.5)) == EpsilonDeltaDpEvent(0.5)
    direct = plds.from_privacy_parameters(DifferentialPrivacyParameters(0.5, 1e-8), value_discretization_interval=DISC)
    for relation in ("add-remove", "replace-one"):  # a claim is accounted under the relation it is stated for
        got = account(dp_event.SelfComposedDpEvent(ev, 30), delta=1e-5, neighbouring=relation).epsilon
        assert got == direct.self_compose(30).get_epsilon_for_delta(1e-5)
    # the exact (Kairouz–Oh–Viswanath) composition of 30 equal claims, within the discretisation
    kov = compose([ApproxLDP(0.5, 1e-8)] * 30, "advanced", 1e-5).epsilon
    assert kov <= got <= kov + 30 * DISC
    assert account(EpsilonDeltaDpEvent(0.0, 0.0), delta=1e-6).epsilon == 0.0
    assert accountants_for(ev, "replace-one") == ("pld",)
    with pytest.raises(FedAuditError, match="epsilon"):
        EpsilonDeltaDpEvent(-1.0)


def test_pld_event_accounts_any_pld_of_fedaudit():
    pair = PmfPair((0.5, 0.3, 0.2), (0.2, 0.5, 0.3))
    ev = PldDpEvent(pair)
    assert ev == PldDpEvent(PmfPair((0.5, 0.3, 0.2), (0.2, 0.5, 0.3)))  # equal PLDs, equal events
    got = account(ev, delta=1e-6, neighbouring="replace-one").epsilon
    assert got == pld_of(pair).get_epsilon_for_delta(1e-6)
    assert account(PldDpEvent(PmfPair((1.0, 0.0), (0.0, 1.0))), delta=0.5).epsilon == math.inf
    assert account(PldDpEvent(PmfPair((1.0, 0.0), (0.0, 1.0))), epsilon=3.0).delta == 1.0
    with pytest.raises(FedAuditError, match="privacy loss distribution"):
        PldDpEvent(object())


# -- compose and Ledger on the registry -----------------------------------------------------------

def test_compose_pld_is_dp_accountings_self_composed_plds():
    """compose's "pld" equals the PLDs built by dp-accounting's factories, each distinct one
    self-composed, composed pairwise in order of first use."""
    rr, lap = RandomizedResponse(4, 0.8), LaplacePLD(2.0)
    uses = [rr, lap, PureLDP(0.3), rr, lap, rr]
    parts = [plds.from_randomized_response(4 / (math.exp(0.8) + 3), 4, value_discretization_interval=DISC).self_compose(3),
             plds.from_laplace_mechanism(2.0, value_discretization_interval=DISC).self_compose(2),
             plds.from_privacy_parameters(DifferentialPrivacyParameters(0.3, 0.0), value_discretization_interval=DISC)]
    want = parts[0].compose(parts[1]).compose(parts[2]).get_epsilon_for_delta(1e-6)
    assert compose(uses, "pld", 1e-6).epsilon == pytest.approx(want, rel=1e-12)


def test_compose_and_ledger_take_any_registered_accountant():
    k, eps, count = 6, 0.5, 40
    ref = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    ref.compose(dp_event.RandomizedResponseDpEvent(k / (math.exp(eps) + k - 1), k), count)
    got = compose([RandomizedResponse(k, eps)] * count, "dpa-rdp", 1e-6)
    assert got.method == "dpa-rdp" and got.epsilon == pytest.approx(ref.get_epsilon(1e-6), rel=1e-12)
    ledger = Ledger()
    for r in range(count):
        ledger.record("a", RandomizedResponse(k, eps), round=r)
    assert ledger.spent("a", method="dpa-rdp", delta=1e-6).epsilon == got.epsilon
    with pytest.raises(FedAuditError, match="accountants that do: pld"):
        compose([GaussianPLD(2.0)], "dpa-rdp", 1e-6)


class _CoinFlip(Mechanism):
    """A user's binary randomizer fedaudit has no PLD for, declaring its event."""

    name = "coin-flip"

    def __init__(self, epsilon: float):
        self.dim, self.report_width, self.guarantee = 1, 1, PureLDP(epsilon)

    @property
    def bits_per_report(self) -> int:
        return 1

    def _encode(self, X, rng):
        keep = rng.random(len(X)) < 1 / (1 + math.exp(-self.epsilon))
        return np.where(keep, X[:, 0] > 0, X[:, 0] <= 0).astype(np.float64)[:, None]

    def decode(self, reports):
        return np.asarray(reports, dtype=np.float64)

    def dp_event(self):
        return dp_event.RandomizedResponseDpEvent(2 / (math.exp(self.epsilon) + 1), 2)


def test_a_users_mechanism_composes_by_its_own_event():
    got = compose([_CoinFlip(0.7)] * 12, "pld", 1e-6).epsilon
    assert got == compose([RandomizedResponse(2, 0.7)] * 12, "pld", 1e-6).epsilon
    assert got < compose([PureLDP(0.7)] * 12, "pld", 1e-6).epsilon + 1e-12  # binary RR is the pure-ε pair


def test_duchi_composes_by_its_pld_and_its_event_is_binary_randomized_response():
    mech = Duchi(3, 0.4)
    assert isinstance(event_of(mech), PldDpEvent)  # the PLD compose has always used (numbers unchanged)
    by_event = account(dp_event.SelfComposedDpEvent(mech.dp_event(), 10), delta=1e-6, neighbouring="replace-one")
    assert by_event.epsilon == pytest.approx(compose([mech] * 10, "pld", 1e-6).epsilon, abs=10 * DISC)


# -- typed bounds ----------------------------------------------------------------------------------

def test_threshold_bound_says_its_epsilon_is_an_estimate():
    b = best_threshold_epsilon([0.7, 0.3], [0.3, 0.7], 1000)
    assert isinstance(b, ThresholdBound) and b.epsilon_bound is Bound.ESTIMATE
    assert b.to_dict()["epsilon_bound"] == "estimate"
