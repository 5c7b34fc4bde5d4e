"""Accountants that never under-count (issue #22 §3): asymmetric pmf pairs composed over mixed
directions, the neighbouring relation of ledger entries, and the accuracy settings of the DP-SGD
and DP-FedAvg accountants.

The references here are computed without dp-accounting: products of the pmfs enumerated over
every sequence of directions, and the hockey-stick divergence summed exactly."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import brentq

from fedaudit.accounting import GaussianPLD, Ledger, LaplacePLD, PmfPair, compose, epsilon_dpsgd
from fedaudit.accounting.dp_fedavg import epsilon_dp_fedavg, noise_multiplier_for_dpfedavg
from fedaudit.accounting.ledger import RELATIONS, to_replace_one
from fedaudit.accounting.pld import dominating_pair, pld_of
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.mechanisms import RandomizedResponse
from fedaudit.mechanisms.gaussian import gaussian_pair_epsilon

DISC = 1e-4
DELTA = 1e-4

#: asymmetric pairs (T(P, Q) != T(Q, P)) on which the old same-direction composition under-counted
ASYMMETRIC = [
    ((0.00290241, 0.04708651, 0.08230428, 0.8677068), (3.0006362e-05, 0.0461688852, 0.504004667, 0.449796441)),
    ((0.27563812, 0.28347523, 0.43619951, 0.00468714), (0.37393804, 0.24372149, 0.38145925, 0.00088122)),
    ((0.0090673, 0.9307174, 0.0602153), (0.000484785108, 0.513277274, 0.486237941)),
]


def _hockey(a: np.ndarray, b: np.ndarray, eps: float) -> float:
    """D_{e^ε}(A‖B) = Σ max(0, a − e^ε b), exactly."""
    return float(np.maximum(a - math.exp(eps) * b, 0.0).sum())


def _epsilon(a: np.ndarray, b: np.ndarray, delta: float) -> float:
    """The smallest ε ≥ 0 with D_{e^ε}(A‖B) ≤ δ (root of a decreasing function)."""
    if _hockey(a, b, 0.0) <= delta:
        return 0.0
    return brentq(lambda e: _hockey(a, b, e) - delta, 0.0, 60.0, xtol=1e-12)


def _product(pairs) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.ones(1), np.ones(1)
    for x, y in pairs:
        a, b = np.outer(a, x).ravel(), np.outer(b, y).ravel()
    return a, b


def _worst_mixed(p, q, k: int, delta: float) -> float:
    """ε at δ of the worst of the 2^k products of (P, Q) and (Q, P), enumerated."""
    p, q = np.asarray(p), np.asarray(q)
    return max(_epsilon(*_product([(q, p) if flip else (p, q) for flip in dirs]), delta)
               for dirs in itertools.product((False, True), repeat=k))


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("pair", range(len(ASYMMETRIC)))
def test_pmf_pair_composition_covers_every_mix_of_directions(pair, k):
    """compose(k × PmfPair) ≥ the exact worst of all 2^k direction sequences (the old code gave
    5.21 < 6.31 on pair 0 at k = 2: it composed P‖Q with P‖Q and Q‖P with Q‖P only), and equals
    the exact k-fold product of the dominating pair up to the grid."""
    p, q = ASYMMETRIC[pair]
    got = compose([PmfPair(p, q)] * k, "pld", DELTA, discretization=DISC).epsilon
    worst = _worst_mixed(p, q, k, DELTA)
    assert got >= worst - 1e-9
    hat_p, hat_q = dominating_pair(p, q)
    assert _epsilon(*_product([(hat_p, hat_q)] * k), DELTA) - 1e-9 <= got
    assert got <= _epsilon(*_product([(hat_p, hat_q)] * k), DELTA) + k * DISC + 1e-9
    assert got <= 1.07 * worst                      # the price of soundness: at most 7 % here


def test_one_mixed_use_beside_other_mechanisms_is_covered():
    """An asymmetric pair composed with a symmetric mechanism still covers both of its directions."""
    p, q = ASYMMETRIC[0]
    rr = RandomizedResponse(2, 1.0)
    e = math.exp(1.0)
    rr_p, rr_q = np.array([e, 1.0]) / (1 + e), np.array([1.0, e]) / (1 + e)
    worst = max(_epsilon(*_product([(p, q), (p, q), (rr_p, rr_q)]), DELTA),
                _epsilon(*_product([(p, q), (q, p), (rr_p, rr_q)]), DELTA))
    assert compose([PmfPair(p, q), rr, PmfPair(p, q)], "pld", DELTA).epsilon >= worst - 1e-9


@pytest.mark.parametrize("pair", range(len(ASYMMETRIC)))
def test_dominating_pair_is_symmetric_and_its_curve_is_the_max_of_both_directions(pair):
    p, q = (np.asarray(v) for v in ASYMMETRIC[pair])
    hat_p, hat_q = dominating_pair(p, q)
    assert hat_p.sum() == pytest.approx(1.0, abs=1e-12) and hat_q.sum() == pytest.approx(1.0, abs=1e-12)
    assert (hat_p >= 0).all() and (hat_q >= 0).all()
    for eps in (0.0, 0.3, 1.0, 2.5, 5.0, 9.0):
        both = max(_hockey(p, q, eps), _hockey(q, p, eps))
        assert _hockey(hat_p, hat_q, eps) == pytest.approx(both, abs=1e-8)   # the pmfs sum to 1 within 1e-9
        assert _hockey(hat_q, hat_p, eps) == pytest.approx(both, abs=1e-8)
    # and one use is read exactly: the pld of the pair gives the max over directions
    assert pld_of(PmfPair(tuple(p), tuple(q))).get_epsilon_for_delta(DELTA) == pytest.approx(
        max(_epsilon(p, q, DELTA), _epsilon(q, p, DELTA)), abs=DISC + 1e-9)


def test_a_pair_that_is_already_symmetric_is_composed_tightly():
    """q a permutation of p: T(P, Q) = T(Q, P), the dominating pair is the pair itself."""
    p, q = (0.7, 0.2, 0.1), (0.1, 0.2, 0.7)
    for k in (2, 3):
        got = compose([PmfPair(p, q)] * k, "pld", DELTA, discretization=DISC).epsilon
        worst = _worst_mixed(p, q, k, DELTA)
        assert worst - 1e-9 <= got <= worst + k * DISC + 1e-9


def test_a_pair_with_disjoint_supports_composes_to_infinity():
    """Each report reveals the input: no finite ε at any δ < 1 (dp-accounting used to raise IndexError
    when self-composing a PLD without finite losses)."""
    for k in (1, 2):
        assert compose([PmfPair((0.0, 1.0), (1.0, 0.0))] * k, "pld", 0.3).epsilon == math.inf


def test_dominating_pair_keeps_infinite_loss_in_both_directions():
    """An output only P produces (and one only Q produces) stays infinite loss, in both directions."""
    hat_p, hat_q = dominating_pair((0.5, 0.3, 0.2, 0.0), (0.4, 0.4, 0.0, 0.2))
    assert hat_p[hat_q == 0].sum() == pytest.approx(0.2) and hat_q[hat_p == 0].sum() == pytest.approx(0.2)


# --- the neighbouring relation of ledger entries ----------------------------------------------------

def test_ledger_entries_record_their_relation_and_refuse_to_add_a_mix():
    ledger = Ledger()
    assert ledger.record("a", 1.0).relation == "replace-one"
    entry = ledger.record("a", GaussianPLD(sigma=2.0), round=1, relation="add-remove")
    assert entry.relation == "add-remove" and entry.to_dict()["relation"] == "add-remove"
    for call in (lambda: ledger.spent("a", method="pld", delta=1e-5),
                 lambda: ledger.remaining("a", 10.0, method="pld", delta=1e-5),
                 lambda: ledger.can_run("a", 0.5, 10.0, method="pld", delta=1e-5)):
        with pytest.raises(FedAuditError, match="'replace-one' and 'add-remove'"):
            call()
    with pytest.raises(FedAuditError, match="no add-remove guarantee"):
        ledger.spent("a", method="pld", delta=1e-5, relation="add-remove")
    with pytest.raises(FedAuditError, match="relation must be one of"):
        ledger.record("a", 1.0, relation="add-or-remove")


def test_replace_one_converts_add_remove_gaussian_at_twice_the_sensitivity():
    """Replace-one = remove then add: a clipped sum moves by ≤ 2C, so the add-remove Gaussian use
    counts as N(0, 1) vs N(2/z, 1); 3 such uses: N(0, 1) vs N(2√3/z, 1) (Balle–Wang, exact)."""
    z, delta = 4.0, 1e-5
    ledger = Ledger()
    for r in range(3):
        ledger.record(7, GaussianPLD(sigma=z), round=r, relation="add-remove")
    alone = ledger.spent(7, method="pld", delta=delta)           # all add-remove: as recorded
    assert alone.epsilon == pytest.approx(gaussian_pair_epsilon(math.sqrt(3) / z, delta), abs=5e-3)
    converted = ledger.spent(7, method="pld", delta=delta, relation="replace-one")
    exact = gaussian_pair_epsilon(2 * math.sqrt(3) / z, delta)
    assert exact - 1e-9 <= converted.epsilon <= exact + 5e-3
    ledger.record(7, PureLDP(0.5), round=3)
    both = ledger.spent(7, method="pld", delta=delta, relation="replace-one")
    assert both.count == 4
    assert both.epsilon == pytest.approx(compose([GaussianPLD(sigma=z, sensitivity=2.0)] * 3 + [PureLDP(0.5)],
                                                 "pld", delta).epsilon, abs=1e-12)
    assert ledger.can_run(7, PureLDP(0.1), both.epsilon + 0.2, method="pld", delta=delta, relation="replace-one")
    assert not ledger.can_run(7, PureLDP(0.5), both.epsilon + 0.2, method="pld", delta=delta,
                              relation="replace-one")


def test_to_replace_one_conversions():
    assert to_replace_one(PureLDP(0.7)) == PureLDP(1.4)
    assert to_replace_one(ApproxLDP(1.0, 1e-6)) == ApproxLDP(2.0, (1 + math.e) * 1e-6)
    assert to_replace_one(LaplacePLD(scale=2.0, sensitivity=1.5)) == LaplacePLD(scale=2.0, sensitivity=3.0)
    with pytest.raises(FedAuditError, match="no replace-one guarantee"):
        to_replace_one(ApproxLDP(3.0, 0.1))                    # (1 + e^3)·0.1 > 1
    with pytest.raises(FedAuditError, match="no replace-one conversion for an add-remove RandomizedResponse"):
        to_replace_one(RandomizedResponse(4, 1.0))
    ledger = Ledger()
    ledger.record(1, RandomizedResponse(4, 1.0), relation="add-remove")
    ledger.record(1, 0.5)
    with pytest.raises(FedAuditError, match="client 1, relation='replace-one': no replace-one conversion"):
        ledger.spent(1, relation="replace-one")
    assert RELATIONS == ("replace-one", "add-remove")


def test_dp_fedavg_charges_are_add_remove_and_do_not_mix_silently():
    from fedaudit.fl import Federation
    from fedaudit.fl.dp_fedavg import train_dp_fedavg

    digits_fed = Federation.build("digits", n_honest=10, f=0, attack=None, aggregator="mean", scheme="iid", rng=0)
    ledger = Ledger()
    tr = train_dp_fedavg(digits_fed, rounds=2, sample_rate=0.5, noise_multiplier=2.0, ledger=ledger, delta=None, rng=0)
    assert ledger.entries() and {e.relation for e in ledger.entries()} == {"add-remove"}
    i = next(i for i in range(digits_fed.n_honest) if any(i in ids for ids in tr.extras["sampled_clients"]))
    k = len(ledger.entries(i))
    ledger.record(i, 1.0)                                       # a local-DP report of the same client
    with pytest.raises(FedAuditError, match="both neighbouring relations"):
        ledger.spent(i, method="pld", delta=1e-5)
    got = ledger.spent(i, method="pld", delta=1e-5, relation="replace-one").epsilon
    assert got == pytest.approx(compose([GaussianPLD(2.0, 2.0)] * k + [1.0], "pld", 1e-5).epsilon, abs=1e-12)


# --- accuracy settings of the DP-SGD and DP-FedAvg accountants ---------------------------------------

def test_accuracy_settings_reach_the_accountants_and_are_recorded():
    sigma, q, steps, delta = 1.1, 0.01, 50, 1e-5
    default = epsilon_dpsgd(sigma, q, steps, delta)
    coarse = epsilon_dpsgd(sigma, q, steps, delta, pld_discretization=1e-2)
    assert default.parameters["value_discretization_interval"] == 1e-4
    assert coarse.parameters["value_discretization_interval"] == 1e-2
    assert coarse.epsilon > default.epsilon + 1e-3             # a coarser pessimistic grid: a larger bound
    tight = epsilon_dpsgd(sigma, q, steps, delta, method="prv", prv_eps_error=0.1)
    loose = epsilon_dpsgd(sigma, q, steps, delta, method="prv", prv_eps_error=0.3)
    assert loose.parameters["eps_error"] == 0.3 and tight.parameters["eps_error"] == 0.1
    assert loose.epsilon > tight.epsilon + 0.05                 # the upper end of a wider interval
    assert tight.epsilon >= default.epsilon - 1e-3              # both upper bounds of the same ε
    fed = epsilon_dp_fedavg(sigma, q, steps, delta, pld_discretization=1e-2)
    assert fed.epsilon == coarse.epsilon and fed.parameters["value_discretization_interval"] == 1e-2
    z_coarse = noise_multiplier_for_dpfedavg(0.5, q, steps, delta, pld_discretization=5e-2, tol=1e-2)
    z_fine = noise_multiplier_for_dpfedavg(0.5, q, steps, delta, pld_discretization=1e-2, tol=1e-2)
    assert z_coarse > z_fine                                    # the larger bound needs more noise


def test_default_pld_never_under_counts_a_finer_grid():
    """The default grid's ε is an upper bound: at or above dp-accounting's PLD on a 5x finer grid."""
    from dp_accounting.pld import privacy_loss_distribution as dpl

    sigma, q, steps, delta = 1.1, 0.01, 30, 1e-5
    fine = dpl.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=2e-5)
    ref = fine.self_compose(steps).get_epsilon_for_delta(delta)
    got = epsilon_dpsgd(sigma, q, steps, delta).epsilon
    assert ref <= got <= ref * (1 + 1e-3)


@pytest.mark.parametrize("kw,name", [
    (dict(pld_discretization=0.0), "pld_discretization"), (dict(pld_discretization=0.5), "pld_discretization"),
    (dict(pld_discretization=float("nan")), "pld_discretization"), (dict(prv_eps_error=-0.01), "prv_eps_error"),
    (dict(prv_eps_error=2.0), "prv_eps_error"),
])
def test_accuracy_settings_bad_input_names_the_parameter(kw, name):
    for fn in (epsilon_dpsgd, epsilon_dp_fedavg):
        with pytest.raises(FedAuditError, match=name):
            fn(1.0, 0.01, 10, 1e-5, **kw)
