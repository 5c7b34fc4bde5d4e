"""Mechanism PLDs (fedaudit.accounting.pld) and their exact composition in compose / Ledger.

References are computed independently of the code under test: closed forms (Gaussian composition
is Gaussian with μ = √k Δ/σ; binary randomized response), exact enumeration of the k-fold
randomized-response privacy loss (multinomial) and of lattice noise pmfs with numpy/scipy, and
dp-accounting's own PLDAccountant / RdpAccountant on the same DpEvents.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import gammaln, logsumexp

from fedaudit.accounting.composition import compose
from fedaudit.accounting.ledger import Ledger
from fedaudit.accounting.pld import (DiscreteGaussianPLD, DiscreteLaplacePLD, GaussianPLD, LaplacePLD, PmfPair,
                                     guarantee_of, pld_of)
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.mechanisms import VQSGD, Duchi, Gaussian, Laplace, PrivUnitG, RandomizedResponse
from fedaudit.mechanisms.gaussian import gaussian_pair_epsilon
from tests.helpers import REPO

DISC = 1e-4


def _hockey(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    """max over both directions of Σ max(0, P − e^ε Q) (replace-one: both inputs are "first")."""
    e = math.exp(eps)
    return max(float(np.clip(p - e * q, 0, None).sum()), float(np.clip(q - e * p, 0, None).sum()))


def _eps_for_delta(delta_fn, delta: float, hi: float) -> float:
    if delta_fn(0.0) <= delta:
        return 0.0
    return brentq(lambda e: math.log(max(delta_fn(e), 1e-300)) - math.log(delta), 0.0, hi, xtol=1e-10)


# ----------------------------------------------------------------------------- cross-checks with dp-accounting
def test_ledger_of_gaussian_uses_matches_pld_accountant_and_the_closed_form():
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    sigma, count, delta = 2.0, 100, 1e-5
    ledger = Ledger()
    for r in range(count):
        ledger.record("c", GaussianPLD(sigma, 1.0), round=r)
    got = ledger.spent("c", method="pld", delta=delta).epsilon
    acc = PLDAccountant(value_discretization_interval=DISC)
    acc.compose(dp_accounting.GaussianDpEvent(sigma), count)  # composes as one Gaussian of sigma/sqrt(count)
    assert got == pytest.approx(acc.get_epsilon(delta), rel=1e-6)
    # independent: 100 Gaussian uses = one Gaussian with mu = sqrt(100)/sigma (Dong-Roth-Su; Balle-Wang)
    exact = gaussian_pair_epsilon(math.sqrt(count) / sigma, delta)
    assert exact <= got <= exact + count * DISC


@pytest.mark.parametrize("k, eps, count", [(2, 0.3, 30), (5, 0.7, 40)])
def test_randomized_response_matches_pld_accountant(k, eps, count):
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    mech = RandomizedResponse(k, eps)
    got = compose([mech] * count, "pld", 1e-6).epsilon
    acc = PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=DISC)
    event = dp_accounting.RandomizedResponseDpEvent(k / (math.exp(eps) + k - 1), k)
    for _ in range(count):  # one at a time: dp-accounting 0.6.0's PLDAccountant ignores count for this event
        acc.compose(event)
    # both are pessimistic discretisations (self-composition vs one-by-one): equal within count·DISC
    assert got == pytest.approx(acc.get_epsilon(1e-6), abs=count * DISC)


def test_randomized_response_pld_is_below_dp_accounting_rdp():
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    k, eps, count = 8, 0.4, 100
    rdp = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    rdp.compose(dp_accounting.RandomizedResponseDpEvent(k / (math.exp(eps) + k - 1), k), count)
    got = compose([RandomizedResponse(k, eps)] * count, "pld", 1e-6).epsilon
    assert got < rdp.get_epsilon(1e-6) < 1.5 * got


def test_laplace_spec_matches_pld_accountant_and_is_below_rdp():
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    got = compose([LaplacePLD(2.0, 1.0)] * 50, "pld", 1e-6).epsilon
    pld_acc = PLDAccountant(value_discretization_interval=DISC)
    pld_acc.compose(dp_accounting.LaplaceDpEvent(2.0), 50)
    rdp_acc = RdpAccountant()
    rdp_acc.compose(dp_accounting.LaplaceDpEvent(2.0), 50)
    assert got == pytest.approx(pld_acc.get_epsilon(1e-6), rel=1e-9)
    assert got < rdp_acc.get_epsilon(1e-6)          # RDP is an upper bound, looser
    assert got < 50 * 0.5                           # and far below basic composition of ε = Δ/b


def test_discrete_laplace_spec_matches_pld_accountant():
    import dp_accounting
    from dp_accounting.pld import PLDAccountant

    got = compose([DiscreteLaplacePLD(4.0, 2)] * 20, "pld", 1e-6).epsilon
    acc = PLDAccountant(value_discretization_interval=DISC)
    acc.compose(dp_accounting.dp_event.DiscreteLaplaceDpEvent(0.25, 2), 20)
    assert got == pytest.approx(acc.get_epsilon(1e-6), rel=1e-9)


# ----------------------------------------------------------------------------- exact enumeration
def _krr_kfold_delta(k: int, eps: float, count: int, eps_total: float) -> float:
    """δ(ε') of ``count`` uses of k-RR on two distinct categories c, c', enumerated exactly: under
    M(c), i outputs equal c (loss +ε each), j equal c' (−ε each), the rest carry no loss;
    (i, j, rest) ~ Multinomial(count; p, q, (k−2) q). Symmetric, so one direction suffices."""
    lz = float(np.logaddexp(eps, math.log(k - 1)))
    log_p, log_q = eps - lz, -lz
    log_r = math.log(k - 2) - lz if k > 2 else -math.inf
    i, j = np.meshgrid(np.arange(count + 1), np.arange(count + 1), indexing="ij")
    ok = i + j <= count
    i, j = i[ok], j[ok]
    rest = count - i - j
    with np.errstate(invalid="ignore"):
        log_pmf = (gammaln(count + 1) - gammaln(i + 1) - gammaln(j + 1) - gammaln(rest + 1)
                   + i * log_p + j * log_q + np.where(rest > 0, rest * log_r, 0.0))
    loss = eps * (i - j)
    keep = loss > eps_total
    if not keep.any():
        return 0.0
    return float(np.exp(logsumexp(log_pmf[keep] + np.log(-np.expm1(eps_total - loss[keep])))))


@pytest.mark.parametrize("k, eps, count", [(2, 0.3, 40), (3, 0.5, 25), (6, 1.5, 8)])
def test_kfold_krr_against_exact_multinomial_enumeration(k, eps, count):
    delta = 1e-6
    exact = _eps_for_delta(lambda e: _krr_kfold_delta(k, eps, count, e), delta, count * eps)
    ledger = Ledger()
    for _ in range(count):
        ledger.record(0, RandomizedResponse(k, eps))
    got = ledger.spent(0, method="pld", delta=delta).epsilon
    assert exact <= got <= exact + count * DISC + 1e-9


def test_rr_pld_is_tighter_than_its_pure_epsilon_for_k_above_2_and_equal_for_k_2():
    count, eps, delta = 50, 0.5, 1e-6
    pure = compose([PureLDP(eps)] * count, "pld", delta).epsilon
    rr4 = compose([RandomizedResponse(4, eps)] * count, "pld", delta).epsilon
    rr2 = compose([RandomizedResponse(2, eps)] * count, "pld", delta).epsilon
    assert rr4 < 0.9 * pure
    assert rr2 == pytest.approx(pure, abs=count * DISC)
    assert rr4 < compose([RandomizedResponse(4, eps)] * count, "advanced", delta).epsilon


def test_duchi_is_binary_randomized_response():
    eps = 1.3
    pld = pld_of(Duchi(5, eps))
    for e in (0.0, 0.4, 1.0, 1.29):
        closed = (math.exp(eps) - math.exp(e)) / (1 + math.exp(eps))  # binary RR δ(ε') for ε' < ε
        upper = (math.exp(eps) - math.exp(e - DISC)) / (1 + math.exp(eps))
        assert closed - 1e-12 <= pld.get_delta_for_epsilon(e) <= upper + 1e-12


def test_pmf_pair_covers_both_directions():
    p, q = (0.7, 0.2, 0.1), (0.1, 0.3, 0.6)
    for e in (0.0, 0.5, 1.0, 1.5):
        exact, looser = _hockey(np.array(p), np.array(q), e), _hockey(np.array(p), np.array(q), e - DISC)
        assert exact - 1e-12 <= pld_of(PmfPair(p, q)).get_delta_for_epsilon(e) <= looser + 1e-12
        assert pld_of(PmfPair(p, q)).get_delta_for_epsilon(e) == pytest.approx(
            pld_of(PmfPair(q, p)).get_delta_for_epsilon(e), rel=1e-9)
    assert PmfPair(p, q).guarantee.epsilon == pytest.approx(math.log(7.0))  # output 0: 0.7/0.1
    assert PmfPair((1.0, 0.0), (0.5, 0.5)).guarantee is None


def test_vqsgd_pld_bounds_its_worst_pair_and_is_2rr_at_d1():
    d, eps = 3, 1.0
    mech = VQSGD(d, eps)
    x0 = np.eye(d)[0]
    x1 = np.array([-1.0, 1.0, 1.0]) / math.sqrt(d)
    o = np.arange(2 * d, dtype=float)[:, None]
    p, q = np.exp(mech.log_prob(o, x0)), np.exp(mech.log_prob(o, x1))
    pld = pld_of(mech)
    for e in (0.0, 0.3, 0.6):
        assert _hockey(p, q, e) <= pld.get_delta_for_epsilon(e)
    one = pld_of(VQSGD(1, eps))
    two = pld_of(RandomizedResponse(2, eps))
    assert one.get_epsilon_for_delta(1e-6) == two.get_epsilon_for_delta(1e-6)


def test_lattice_gaussian_dim1_matches_enumerated_discrete_gaussian_and_its_claim():
    mech = Gaussian(1, 1.0, 1e-5)
    shift = 2 * round(mech.clip / mech.grid)
    s = mech.sigma_grid
    z = np.arange(-int(40 * s) - shift, int(40 * s) + shift + 1)
    logp = -z.astype(float) ** 2 / (2 * mech.sigma2_grid)
    p = np.exp(logp - logsumexp(logp))
    q = np.exp(-(z - shift).astype(float) ** 2 / (2 * mech.sigma2_grid) - logsumexp(logp))
    pld = pld_of(mech)
    for e in (0.5, 1.0):
        exact = _hockey(p, q, e)
        assert exact * (1 - 1e-6) <= pld.get_delta_for_epsilon(e) <= _hockey(p, q, e - DISC) * (1 + 1e-6)
    got = pld.get_epsilon_for_delta(mech.delta)
    assert got <= mech.epsilon and got >= 0.99 * mech.epsilon   # the claim holds and is nearly tight


def test_lattice_laplace_dim1_is_the_discrete_laplace_at_the_attainable_shift():
    mech = Laplace(1, 1.0)
    shift = 2 * round(mech.clip / mech.grid)
    t = mech.scale_grid
    z = np.arange(-shift - int(60 * t), shift + int(60 * t) + 1).astype(float)
    p = np.exp(-np.abs(z) / t)
    q = np.exp(-np.abs(z - shift) / t)
    p, q = p / p.sum(), q / q.sum()
    pld = pld_of(mech)
    for e in (0.0, 0.5, 0.9):
        exact = _hockey(p, q, e)
        assert exact * (1 - 1e-6) <= pld.get_delta_for_epsilon(e) <= _hockey(p, q, e - DISC) * (1 + 1e-6)
    assert shift / t <= mech.epsilon                           # the largest loss is within the claim
    assert pld.get_delta_for_epsilon(mech.epsilon) == 0.0


def test_multidimensional_lattice_mechanisms_stay_within_their_claims():
    lap, gau = Laplace(4, 1.0), Gaussian(4, 1.0, 1e-6)
    assert pld_of(lap).get_delta_for_epsilon(lap.epsilon) == 0.0
    assert pld_of(gau).get_epsilon_for_delta(gau.delta) <= gau.epsilon


# ----------------------------------------------------------------------------- ledger behaviour
def test_ledger_records_mechanisms_and_keeps_their_guarantee_for_basic_and_advanced():
    ledger = Ledger()
    rr = RandomizedResponse(3, 0.5)
    entry = ledger.record("a", rr, round=0)
    ledger.record("a", PureLDP(0.5), round=1)
    assert entry.guarantee == PureLDP(0.5) and entry.mechanism is rr
    assert ledger.spent("a").epsilon == pytest.approx(1.0)
    assert ledger.spent("a", method="advanced", delta=1e-6).epsilon <= 1.0
    d = ledger.to_dict()["entries"][0]
    assert d["mechanism"]["mechanism"] == "rr" and d["guarantee"]["type"] == "pure-ldp"
    assert ledger.spent("a").summary() == "2 uses compose to (1, 0)-DP by basic composition"
    g = ledger.record("b", GaussianPLD(1.0))
    assert g.guarantee is None
    with pytest.raises(FedAuditError, match="method='pld'"):
        ledger.spent("b", method="basic", delta=1e-6)


def test_ledger_pld_remaining_and_can_run():
    ledger = Ledger()
    rr = RandomizedResponse(4, 1.0)
    for r in range(20):
        ledger.record("a", rr, round=r)
    spent = ledger.spent("a", method="pld", delta=1e-6).epsilon
    assert ledger.remaining("a", 10.0, delta=1e-6, method="pld") == pytest.approx(10.0 - spent)
    nxt = compose([rr] * 21, "pld", 1e-6).epsilon
    assert ledger.can_run("a", rr, nxt + 1e-9, delta=1e-6, method="pld")
    assert not ledger.can_run("a", rr, nxt - 1e-3, delta=1e-6, method="pld")
    # the same budget by basic composition is already exhausted: pld lets more rounds run
    assert not ledger.can_run("a", rr, nxt + 1e-9, delta=1e-6, method="basic")


def test_more_entries_never_lower_epsilon():
    ledger = Ledger()
    uses = [RandomizedResponse(4, 0.8), GaussianPLD(3.0), LaplacePLD(2.0), ApproxLDP(0.3, 1e-8), Duchi(2, 0.4)]
    previous = 0.0
    for i in range(15):
        ledger.record("c", uses[i % len(uses)])
        eps = ledger.spent("c", method="pld", delta=1e-5).epsilon
        assert eps >= previous - 1e-12
        previous = eps


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("make, match", [
    (lambda: pld_of("laplace"), "str.*supported"),
    (lambda: pld_of(PrivUnitG(4, 1.0)), "PrivUnitG.*guarantee"),
    (lambda: pld_of(VQSGD(3, None)), "not private"),
    (lambda: pld_of(PureLDP(1.0), discretization=0.0), "discretization"),
    (lambda: LaplacePLD(-1.0), "scale"),
    (lambda: GaussianPLD(1.0, -2.0), "sensitivity"),
    (lambda: DiscreteLaplacePLD(1.0, 0), "sensitivity"),
    (lambda: DiscreteGaussianPLD(0.0, 1), "sigma"),
    (lambda: PmfPair((0.5, 0.6), (0.5, 0.5)), "p must be a pmf"),
    (lambda: PmfPair((0.5, 0.5), (1.0,)), "same finite outputs"),
    (lambda: guarantee_of(3), "int"),
    (lambda: compose([GaussianPLD(1.0)], "advanced", 1e-6), r"epsilons\[0\].*method='pld'"),
    (lambda: compose([RandomizedResponse(2, 1.0), object()], "pld", 1e-6), r"epsilons\[1\]: no privacy loss"),
    (lambda: compose([RandomizedResponse(2, 1.0)], "pld", 1.0), "delta"),
    (lambda: compose([RandomizedResponse(2, 1.0)], "pld", 0.0), "delta"),
    (lambda: Ledger().record("a", object()), "guarantee: no privacy loss"),
    (lambda: Ledger().spent("a", method="pld", delta=1.5), "delta"),
    (lambda: Ledger().record("a", VQSGD(2, None)), "not private"),
])
def test_bad_input_is_a_clear_error(make, match):
    with pytest.raises(FedAuditError, match=match):
        make()


# ----------------------------------------------------------------------------- the reference page
@pytest.mark.parametrize("section", ["## Mechanism PLDs", "## Privacy blanket"])
def test_reference_page_examples_give_the_numbers_shown(section):
    """Each ``expr  # ≈ value`` line of the section's python block evaluates to the value shown."""
    import re

    text = (REPO / "docs" / "reference" / "accounting.md").read_text(encoding="utf-8")
    block = text.split(section, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    shown, lines = [], []
    for line in block.splitlines():
        m = re.match(r"^(\S.*?)\s+# ≈ ([0-9.]+)", line)
        if m:
            lines.append(f"_shown_{len(shown)} = {m.group(1)}")
            shown.append(m.group(2))
        else:
            lines.append(line)
    namespace: dict = {}
    exec(compile("\n".join(lines), section, "exec"), namespace)
    for i, value in enumerate(shown):
        tol = 0.6 * 10 ** -len(value.split(".")[1])
        assert namespace[f"_shown_{i}"] == pytest.approx(float(value), abs=tol), (i, value)
    assert len(shown) >= 4


# ----------------------------------------------------------------------------- mutation-test gaps (reviewer)
def _balle_wang_epsilon(mu: float, delta: float) -> float:
    """ε(δ) of N(0, 1) vs N(μ, 1) from Balle & Wang's closed form, with scipy's normal cdf."""
    from scipy.stats import norm

    curve = lambda e: norm.cdf(mu / 2 - e / mu) - math.exp(e) * norm.cdf(-mu / 2 - e / mu)
    return _eps_for_delta(curve, delta, 50.0)


def test_multidimensional_gaussian_pld_is_the_gaussian_at_its_noise_and_l2_sensitivity():
    """dim > 1: the PLD is a continuous Gaussian's at the mechanism's noise σ_grid and its L2
    sensitivity in grid units, which lies in [2·clip/grid (attained: antipodal inputs ±clip·e1 land on
    the grid exactly), 2·clip/grid + √dim (rounding)]; its ε(δ) reproduces the (ε, δ) claim."""
    from dp_accounting.pld import privacy_loss_distribution as dpl

    mech = Gaussian(8, 1.0, 1e-5)
    attained = 2 * mech.clip / mech.grid
    assert attained == int(attained)                     # ±clip·e1 are grid points: shift 2·clip/grid
    got = pld_of(mech).get_epsilon_for_delta(mech.delta)
    low = dpl.from_gaussian_mechanism(mech.sigma_grid, sensitivity=attained,
                                      value_discretization_interval=DISC).get_epsilon_for_delta(mech.delta)
    high = dpl.from_gaussian_mechanism(mech.sigma_grid, sensitivity=attained + math.sqrt(mech.dim),
                                       value_discretization_interval=DISC).get_epsilon_for_delta(mech.delta)
    assert low - 1e-9 <= got <= high + 1e-6
    assert _balle_wang_epsilon(attained / mech.sigma_grid, mech.delta) <= got + 1e-9   # scipy, no dp-accounting
    assert 0.999 * mech.epsilon <= got <= mech.epsilon                                  # the claim, nearly tight


def test_pmf_pair_guarantee_and_pld_take_the_max_over_both_directions():
    """(.9, .1) vs (.5, .5): log p/q is log 1.8 on output 0 but log(.5/.1) = log 5 the other way."""
    for p, q in [((0.9, 0.1), (0.5, 0.5)), ((0.5, 0.5), (0.9, 0.1))]:
        assert PmfPair(p, q).guarantee.epsilon == pytest.approx(math.log(5.0), rel=1e-12)
        pld = pld_of(PmfPair(p, q))
        for e in (0.0, 0.5, 1.0, 1.5):
            exact = _hockey(np.array(p), np.array(q), e)              # δ(1) = .5 − e·.1 = 0.228, one way only
            assert exact - 1e-12 <= pld.get_delta_for_epsilon(e) <= _hockey(np.array(p), np.array(q), e - DISC) + 1e-12
        assert pld.get_delta_for_epsilon(1.0) == pytest.approx(0.5 - math.e * 0.1, abs=1e-3)
        assert math.log(5.0) - 1e-9 <= pld.get_epsilon_for_delta(1e-12) <= math.log(5.0) + DISC + 1e-9


def test_noise_specs_use_their_sensitivity():
    """GaussianPLD / LaplacePLD at sensitivity 2: dp-accounting's factories at the same arguments and
    the closed forms (Balle–Wang for the Gaussian, δ(ε) = 1 − e^{(ε − Δ/b)/2} for Laplace)."""
    from dp_accounting.pld import privacy_loss_distribution as dpl

    delta = 1e-5
    got = pld_of(GaussianPLD(sigma=1.0, sensitivity=2.0)).get_epsilon_for_delta(delta)
    ref = dpl.from_gaussian_mechanism(1.0, sensitivity=2.0, value_discretization_interval=DISC)
    assert got == pytest.approx(ref.get_epsilon_for_delta(delta), rel=1e-9)
    exact = _balle_wang_epsilon(2.0, delta)                                 # ≈ 9.997 (4.377 at Δ = 1)
    assert exact <= got <= exact + DISC + 1e-9 and got > 9.9
    for scale, sens in [(1.0, 2.0), (3.0, 1.5)]:
        got = pld_of(LaplacePLD(scale=scale, sensitivity=sens)).get_epsilon_for_delta(delta)
        ref = dpl.from_laplace_mechanism(scale, sensitivity=sens, value_discretization_interval=DISC)
        assert got == pytest.approx(ref.get_epsilon_for_delta(delta), rel=1e-9)
        exact = sens / scale + 2 * math.log1p(-delta)                      # 1 − e^{(ε − Δ/b)/2} = δ
        assert exact - 1e-9 <= got <= exact + DISC + 1e-9


@pytest.mark.parametrize("d, eps", [(2, 1.0), (3, 0.7), (5, 2.0)])
def test_vqsgd_pld_is_2d_ary_randomized_response(d, eps):
    """VQSGD(d, ε) is 2d-ary RR on the vertex index: its PLD is that of the worst pair of 2d-ary RR
    (keep-probability e^ε/(e^ε + 2d − 1) on two distinct vertices), enumerated over the 2d outputs,
    and it dominates the mechanism's own output laws at the extreme inputs (vertices ±clip·√d·e_i are
    reached with weight 1 only at d = 1, so the bound is exact there and an upper bound above)."""
    k = 2 * d
    z = math.exp(eps) + k - 1
    p, q = np.full(k, 1 / z), np.full(k, 1 / z)
    p[0] = q[1] = math.exp(eps) / z
    mech = VQSGD(d, eps)
    pld = pld_of(mech)
    for e in (0.0, 0.25 * eps, 0.5 * eps, 0.9 * eps):
        exact = _hockey(p, q, e)                                           # (e^ε − e^e)/(e^ε + 2d − 1)
        assert exact - 1e-12 <= pld.get_delta_for_epsilon(e) <= _hockey(p, q, e - DISC) + 1e-12
    assert pld.get_delta_for_epsilon(eps) <= _hockey(p, q, eps - DISC) + 1e-12      # no loss above ε
    o = np.arange(k, dtype=float)[:, None]
    x0, x1 = np.eye(d)[0], -np.eye(d)[0]
    assert _hockey(np.exp(mech.log_prob(o, x0)), np.exp(mech.log_prob(o, x1)), 0.3 * eps) <= \
        pld.get_delta_for_epsilon(0.3 * eps) + 1e-12
