"""Clopper–Pearson bounds and the ε they certify (fedaudit.audit.bounds).

Known answers come from scipy.stats.beta (the definition) and from closed forms that do not go
through scipy at all (k = 0 and k = n); coverage is checked by simulation with a tolerance
derived from the simulation's own standard error (tests/helpers.py, z_tolerance).
"""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from tests.helpers import z_tolerance
from fedaudit.audit.bounds import (
    cp_lower,
    cp_upper,
    epsilon_lower_bound,
    gdp_mu_estimate,
    max_certifiable_epsilon,
)

# --------------------------------------------------------------------------- known answers
KNOWN = [(k, n, a) for n in (1, 2, 7, 100, 1000, 10**6) for k in sorted({0, 1, n // 3, n // 2, n - 1, n})
         for a in (0.025, 0.05, 1e-3)]


@pytest.mark.parametrize("k, n, a", KNOWN)
def test_cp_matches_beta_ppf(k, n, a):
    lo = float(cp_lower(k, n, a))
    up = float(cp_upper(k, n, a))
    want_lo = 0.0 if k == 0 else stats.beta.ppf(a, k, n - k + 1)
    want_up = 1.0 if k == n else stats.beta.ppf(1 - a, k + 1, n - k)
    assert lo == pytest.approx(want_lo, rel=1e-12, abs=1e-300)
    assert up == pytest.approx(want_up, rel=1e-12, abs=1e-300)
    assert 0.0 <= lo <= k / n <= up <= 1.0


@pytest.mark.parametrize("n", [1, 2, 10, 1000, 10**6])
@pytest.mark.parametrize("a", [0.025, 0.05, 0.1])
def test_cp_edges_closed_form(n, a):
    """k = 0: lower 0, upper 1 − a^(1/n);  k = n: lower a^(1/n), upper 1 (no scipy involved)."""
    root = a ** (1.0 / n)
    assert float(cp_lower(0, n, a)) == 0.0
    assert float(cp_upper(n, n, a)) == 1.0
    assert float(cp_upper(0, n, a)) == pytest.approx(-math.expm1(math.log(a) / n), rel=1e-10)
    assert float(cp_lower(n, n, a)) == pytest.approx(root, rel=1e-10)


@pytest.mark.parametrize("k, n", [(1, 10), (5, 10), (37, 200), (4000, 10**4), (123, 10**6)])
def test_cp_inverts_the_binomial_tail(k, n):
    """Definition of Clopper–Pearson: P[Bin(n, lower) ≥ k] = a and P[Bin(n, upper) ≤ k] = a."""
    a = 0.025
    assert stats.binom.sf(k - 1, n, float(cp_lower(k, n, a))) == pytest.approx(a, rel=1e-6)
    assert stats.binom.cdf(k, n, float(cp_upper(k, n, a))) == pytest.approx(a, rel=1e-6)


def test_cp_vectorised_shape():
    k = np.array([[0, 3], [7, 10]])
    lo, up = cp_lower(k, 10, 0.05), cp_upper(k, 10, 0.05)
    assert lo.shape == up.shape == (2, 2)
    for idx in np.ndindex(2, 2):
        assert lo[idx] == float(cp_lower(int(k[idx]), 10, 0.05))
        assert up[idx] == float(cp_upper(int(k[idx]), 10, 0.05))


def test_epsilon_lower_bound_formula():
    tp, fp, n, delta, alpha = 7000, 2500, 10**4, 1e-3, 0.05
    want = math.log((stats.beta.ppf(alpha / 2, tp, n - tp + 1) - delta) / stats.beta.ppf(1 - alpha / 2, fp + 1, n - fp))
    assert float(epsilon_lower_bound(tp, n, fp, n, delta=delta, confidence=0.95)) == pytest.approx(want, rel=1e-12)
    # TPR_lb ≤ δ certifies nothing (0, never negative or NaN)
    assert float(epsilon_lower_bound(3, 1000, 0, 1000, delta=0.5)) == 0.0
    assert float(epsilon_lower_bound(0, 1000, 0, 1000)) == 0.0
    # events less likely under the positive input certify 0, not a negative ε
    assert float(epsilon_lower_bound(100, 1000, 900, 1000)) == 0.0


def test_max_certifiable_closed_form():
    """TP = n, FP = 0: ε_max = log(a/(1 − a)) with a = (α/2)^(1/n)."""
    for n in (10, 1000, 10**6):
        a = 0.025 ** (1.0 / n)
        assert max_certifiable_epsilon(n) == pytest.approx(math.log(a / -math.expm1(math.log(0.025) / n)), rel=1e-10)


# --------------------------------------------------------------------------- reference numbers
# shared/research/privacy.md, "Reference numbers" (α = 0.05 total, expected counts): quoted to
# 2–3 significant digits, so compared to ±0.01 (±3e-3 where three digits are given).
@pytest.mark.parametrize("n, want", [(10**3, 5.60), (10**4, 7.9), (10**5, 10.2), (10**6, 12.5), (10**7, 14.8)])
def test_max_certifiable_reference(n, want):
    assert max_certifiable_epsilon(n) == pytest.approx(want, abs=0.05 if want != 5.60 else 0.01)


@pytest.mark.parametrize("n, want, tol", [(10**3, 0.86, 0.01), (10**4, 0.96, 0.01), (10**5, 0.986, 3e-3),
                                          (10**6, 0.996, 3e-3), (10**7, 0.999, 3e-3)])
def test_binary_rr_reference(n, want, tol):
    p = math.e / (1 + math.e)  # binary RR at ε = 1: P[o = x] = e/(1+e)
    tp, fp = round(p * n), round((1 - p) * n)
    assert float(epsilon_lower_bound(tp, n, fp, n)) == pytest.approx(want, abs=tol)


def test_max_certifiable_refs_exact_values():
    assert max_certifiable_epsilon(1000) == pytest.approx(5.6006, abs=1e-3)
    assert max_certifiable_epsilon(10**6) == pytest.approx(12.510, abs=1e-3)


# --------------------------------------------------------------------------- GDP
@pytest.mark.parametrize("mu", [0.0, 0.3, 1.0, 2.5, 5.0])
@pytest.mark.parametrize("c", [-1.0, 0.0, 1.2, 3.0])
def test_gdp_mu_on_phi_exact_points(mu, c):
    """The μ-GDP trade-off curve passes through (FPR, TPR) = (Φ(−c), Φ(μ − c))."""
    fpr, tpr = stats.norm.cdf(-c), stats.norm.cdf(mu - c)
    # Φ⁻¹ near 1 amplifies the rounding of Φ(6) ≈ 1 − 1e-9 by 1/φ(6) ≈ 1.7e8: 1e-6 is ample
    assert gdp_mu_estimate(tpr, fpr) == pytest.approx(mu, abs=1e-6)
    assert gdp_mu_estimate(fpr, tpr) == pytest.approx(-mu, abs=1e-6)


def test_gdp_mu_finite_at_the_edges():
    for tpr, fpr in ((1.0, 0.0), (1.0, 0.5), (0.5, 0.0)):
        assert math.isfinite(gdp_mu_estimate(tpr, fpr)) and gdp_mu_estimate(tpr, fpr) > 0
        assert math.isfinite(gdp_mu_estimate(fpr, tpr)) and gdp_mu_estimate(fpr, tpr) < 0
    # the documented clip of the rates to [1e-300, 1 − 1e-16]
    top = stats.norm.ppf(1 - 1e-16) - stats.norm.ppf(1e-300)
    assert gdp_mu_estimate(1.0, 0.0) == pytest.approx(top, rel=1e-12) == -gdp_mu_estimate(0.0, 1.0)
    assert gdp_mu_estimate(0.5, 0.0) == pytest.approx(-stats.norm.ppf(1e-300), rel=1e-12)


def test_gdp_mu_scalars_give_a_float_and_arrays_an_array():
    one = gdp_mu_estimate(0.9, 0.1)
    assert type(one) is float and one == pytest.approx(2 * stats.norm.ppf(0.9), rel=1e-12)
    many = gdp_mu_estimate([0.9, 0.5], [0.1, 0.5])
    assert isinstance(many, np.ndarray) and many.shape == (2,)
    np.testing.assert_allclose(many, [one, 0.0], atol=1e-15)


# --------------------------------------------------------------------------- properties
counts = st.integers(1, 10**6).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(0, n)))
alphas = st.sampled_from([1e-4, 1e-3, 0.01, 0.05, 0.2])


@given(counts, alphas)
def test_bound_monotone_in_tp_and_fp(nkf, alpha):
    n, tp, fp = nkf
    base = float(epsilon_lower_bound(tp, n, fp, n, confidence=1 - alpha))
    assert base >= 0.0
    if tp < n:
        assert float(epsilon_lower_bound(tp + 1, n, fp, n, confidence=1 - alpha)) >= base - 1e-12
    if fp < n:
        assert float(epsilon_lower_bound(tp, n, fp + 1, n, confidence=1 - alpha)) <= base + 1e-12
    assert base <= max_certifiable_epsilon(n, confidence=1 - alpha) + 1e-12
    # more confidence or a δ to pay can only lower the bound
    assert float(epsilon_lower_bound(tp, n, fp, n, confidence=1 - alpha / 10)) <= base + 1e-12
    assert float(epsilon_lower_bound(tp, n, fp, n, confidence=1 - alpha, delta=1e-3)) <= base + 1e-12


@given(counts, alphas)
def test_cp_brackets_and_nests(nkf, alpha):
    n, k, _ = nkf
    lo, up = float(cp_lower(k, n, alpha)), float(cp_upper(k, n, alpha))
    assert 0.0 <= lo <= k / n <= up <= 1.0
    assert float(cp_lower(k, n, alpha / 10)) <= lo + 1e-15   # smaller α, wider interval
    assert float(cp_upper(k, n, alpha / 10)) >= up - 1e-15
    if k < n:
        assert float(cp_lower(k + 1, n, alpha)) >= lo - 1e-15
        assert float(cp_upper(k + 1, n, alpha)) >= up - 1e-15


# --------------------------------------------------------------------------- coverage
REPLICATES = 20_000
COVERAGE_CASES = [(0.5, 20), (0.05, 200), (0.731, 1000), (0.002, 5000), (0.3, 50)]
#: Bonferroni share of the suite's α over every coverage assertion in this file
Z_COV = z_tolerance(n_assertions=3 * len(COVERAGE_CASES))


def _covers(hit_rate: float, alpha: float) -> bool:
    """Coverage ≥ 1 − α up to z·SE, SE the binomial standard error of the simulated rate."""
    se = math.sqrt(max(hit_rate * (1 - hit_rate), 1e-12) / REPLICATES)
    return hit_rate >= 1 - alpha - Z_COV * se


@pytest.mark.parametrize("p, n", COVERAGE_CASES)
def test_cp_coverage_by_simulation(p, n):
    """One-sided CP bounds at level α hold in ≥ 1 − α of binomial replicates (exact test is
    conservative, so only the lower side of the simulated rate is checked)."""
    rng = np.random.default_rng(20240603 + n)
    k = rng.binomial(n, p, size=REPLICATES)
    alpha = 0.05
    low_ok = float(np.mean(cp_lower(k, n, alpha) <= p))
    up_ok = float(np.mean(cp_upper(k, n, alpha) >= p))
    assert _covers(low_ok, alpha), (low_ok, Z_COV)
    assert _covers(up_ok, alpha), (up_ok, Z_COV)


@pytest.mark.parametrize("p, n", COVERAGE_CASES)
def test_epsilon_bound_coverage_by_simulation(p, n):
    """ε_lb = log(TPR_lb/FPR_ub) with α/2 per side stays ≤ the true log(p/q) in ≥ 1 − α of runs."""
    q = p / math.e  # true ε = 1
    rng = np.random.default_rng(7 + n)
    tp = rng.binomial(n, p, size=REPLICATES)
    fp = rng.binomial(n, q, size=REPLICATES)
    alpha = 0.05
    ok = float(np.mean(epsilon_lower_bound(tp, n, fp, n, confidence=1 - alpha) <= math.log(p / q) + 1e-12))
    assert _covers(ok, alpha), (ok, Z_COV)


# --------------------------------------------------------------------------- mean bound and threshold events
from fedaudit.audit.bounds import (  # noqa: E402
    MAX_SAMPLES,
    best_threshold_epsilon,
    expected_epsilon_lower_bound,
    threshold_event_epsilon,
    threshold_event_rates,
)
from fedaudit.errors import FedAuditError  # noqa: E402


def _brute_mean(tpr, fpr, n, delta=0.0, confidence=0.95):
    """E[ε_lb(TP, n, FP, n)] summed over the whole (n + 1)² grid of counts."""
    k = np.arange(n + 1)
    w = np.outer(stats.binom.pmf(k, n, tpr), stats.binom.pmf(k, n, fpr))
    return float(np.sum(w * epsilon_lower_bound(k[:, None], n, k[None, :], n, delta=delta, confidence=confidence)))


@pytest.mark.parametrize("tpr, fpr, n, delta", [(0.7, 0.1, 40, None), (0.9, 0.3, 25, 0.02), (0.5, 0.5, 30, None),
                                                (1.0, 0.0, 12, None), (0.6, 0.05, 60, 0.1), (0.9, 0.2, 1, None)])
def test_mean_bound_is_the_mean_over_every_pair_of_counts(tpr, fpr, n, delta):
    kw = {} if delta is None else {"delta": delta}  # None: the documented default δ = 0
    assert expected_epsilon_lower_bound(tpr, fpr, n, **kw) == pytest.approx(_brute_mean(tpr, fpr, n, delta or 0.0),
                                                                              rel=1e-9, abs=1e-12)


def test_max_samples_is_the_documented_limit():
    assert MAX_SAMPLES == 10**12 and float(MAX_SAMPLES) < 2.0**53


def _rr(eps):
    p = math.exp(eps) / (1 + math.exp(eps))
    return [p, 1 - p], [1 - p, p], p


def test_best_threshold_of_binary_randomized_response():
    p0, p1, p = _rr(1.0)
    n = 500
    plug = best_threshold_epsilon(p0, p1, n, method="plug-in")
    assert (plug.threshold, plug.positive_input, plug.events, plug.n) == (pytest.approx(1.0), "x0", 4, n)
    assert (plug.tpr, plug.fpr) == (pytest.approx(p), pytest.approx(1 - p))
    assert plug.epsilon == pytest.approx(float(epsilon_lower_bound(p * n, n, (1 - p) * n, n)), rel=1e-12)
    mean = best_threshold_epsilon(p0, p1, n)
    assert mean.method == "expected" and (mean.tpr, mean.fpr) == (pytest.approx(p), pytest.approx(1 - p))
    assert mean.epsilon == pytest.approx(expected_epsilon_lower_bound(p, 1 - p, n), rel=1e-12)
    assert 0 < mean.epsilon < 1.0 and mean.to_dict()["positive_input"] == "x0"
    strict = best_threshold_epsilon(p0, p1, n, delta=0.05, confidence=0.99, method="plug-in")
    assert strict.epsilon == pytest.approx(float(epsilon_lower_bound(p * n, n, (1 - p) * n, n, delta=0.05,
                                                                     confidence=0.99)), rel=1e-12)


def test_best_threshold_picks_the_strongest_level_and_merges_ties():
    # losses log(p0/p1): outcome 0 and 1 tie at log 4, outcome 2 at log(0.1/0.6), outcome 3 is impossible
    p0, p1 = [0.4, 0.4, 0.2, 0.0], [0.1, 0.1, 0.8, 0.0]
    for method in ("plug-in", "expected"):
        b = best_threshold_epsilon(p0, p1, 2000, method=method)
        assert b.events == 4  # two levels × two directions; the impossible outcome is no level
        assert (b.threshold, b.positive_input) == (pytest.approx(math.log(4)), "x0")
        assert (b.tpr, b.fpr) == (pytest.approx(0.8), pytest.approx(0.2))
    # the {L ≤ t} events (positive x1) win when the most negative loss is the largest in size
    b = best_threshold_epsilon([0.1, 0.9], [0.5, 0.5], 2000, method="plug-in")
    assert (b.positive_input, b.tpr, b.fpr) == ("x1", pytest.approx(0.5), pytest.approx(0.1))
    assert b.threshold == pytest.approx(-math.log(5))


def test_best_threshold_rates_never_exceed_one():
    p0 = np.full(10, 0.1)  # sums to 1 only up to rounding: the suffix sums can round above 1
    p1 = np.array([0.3] + [0.7 / 9] * 9)
    b = best_threshold_epsilon(p0, p1, 100, method="plug-in")
    assert 0 <= b.tpr <= 1 and 0 <= b.fpr <= 1
    every = best_threshold_epsilon(p0, p1, 100, method="plug-in")
    assert every == b


@pytest.mark.parametrize("p0, p1, what", [([0.5, 0.6], [0.5, 0.5], "p0"), ([0.5, 0.5], [0.2, 0.2], "p1"),
                                          ([0.5, 0.5 + 1.5e-9], [0.5, 0.5], "within 1e-9"),
                                          ([1.0], [0.5, 0.5], "same length"), ([], [], "non-empty")])
def test_best_threshold_rejects_non_distributions(p0, p1, what):
    with pytest.raises(FedAuditError, match=what):
        best_threshold_epsilon(p0, p1, 10)


def test_best_threshold_rejects_an_unknown_method():
    with pytest.raises(FedAuditError, match="method"):
        best_threshold_epsilon([0.5, 0.5], [0.5, 0.5], 10, method="exact")


def _near(t, offset):
    """Two outcomes; the first has privacy loss t + offset exactly (up to rounding), the second ≪ t."""
    b = 1e-5
    a = b * math.exp(t + offset)
    return [a, 1 - a], [b, 1 - b]


@pytest.mark.parametrize("t", [0.5, 10.0])
def test_threshold_event_tolerance_is_relative_to_the_threshold(t):
    p0, p1 = _near(t, -5e-9 * max(1.0, t))  # 5 tolerances (1e-9·max(1, |t|)) below t: off the threshold
    assert threshold_event_rates(p0, p1, threshold=t, upper=True, positive=0) == (0.0, 0.0)
    p0, p1 = _near(t, -1.5e-9 * max(1.0, t))  # 1.5 default tolerances below: still off
    assert threshold_event_rates(p0, p1, threshold=t, upper=True, positive=0) == (0.0, 0.0)
    assert threshold_event_epsilon(p0, p1, 1000, threshold=t, upper=True, positive=0) == 0.0
    p0, p1 = _near(t, -0.5e-9 * max(1.0, t))  # half the tolerance below t: on the threshold
    assert threshold_event_rates(p0, p1, threshold=t, upper=True, positive=0) == (pytest.approx(p0[0]),
                                                                                   pytest.approx(p1[0]))
    assert threshold_event_rates(p0, p1, threshold=t, upper=True, positive=0, tolerance=0.0) == (0.0, 0.0)


def test_threshold_event_directions_and_positive_input():
    p0, p1 = [0.6, 0.3, 0.1], [0.1, 0.3, 0.6]  # losses log 6, 0, −log 6
    assert threshold_event_rates(p0, p1, threshold=0.0, upper=True, positive=0) == (pytest.approx(0.9),
                                                                                     pytest.approx(0.4))
    assert threshold_event_rates(p0, p1, threshold=0.0, upper=True, positive=1) == (pytest.approx(0.4),
                                                                                     pytest.approx(0.9))
    assert threshold_event_rates(p0, p1, threshold=0.0, upper=False, positive=1) == (pytest.approx(0.9),
                                                                                      pytest.approx(0.4))
    assert threshold_event_rates(p0, p1, threshold=-math.inf, upper=True, positive=0) == (pytest.approx(1.0),
                                                                                          pytest.approx(1.0))
    for kw in ({}, {"delta": 0.0}, {"delta": 0.01, "confidence": 0.9}):  # {}: the documented default δ = 0
        got = threshold_event_epsilon(p0, p1, 300, threshold=math.log(6), upper=True, positive=0, **kw)
        assert got == pytest.approx(expected_epsilon_lower_bound(0.6, 0.1, 300, **kw), rel=1e-12) and got > 0


def test_threshold_events_at_infinite_loss_hold_the_outcomes_only_one_input_produces():
    # outcome 0 only x0 produces (L = +∞), outcome 2 only x1 (L = −∞), outcome 1 both (L = 0)
    p0, p1 = [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]
    assert threshold_event_rates(p0, p1, threshold=math.inf, upper=True, positive=0) == (0.5, 0.0)
    assert threshold_event_rates(p0, p1, threshold=-math.inf, upper=False, positive=1) == (0.5, 0.0)
    assert threshold_event_rates(p0, p1, threshold=0.0, upper=True, positive=0) == (1.0, 0.5)
    # such an event never fires on x1: FP = 0 in every certification
    got = threshold_event_epsilon(p0, p1, 200, threshold=math.inf, upper=True, positive=0)
    assert got == pytest.approx(expected_epsilon_lower_bound(0.5, 0.0, 200), rel=1e-12) and got > 3.0


def test_the_mean_bound_refuses_rates_outside_the_unit_interval():
    for tpr, fpr in ((1.5, 0.1), (0.5, 1.5), (-0.1, 0.1)):
        with pytest.raises(FedAuditError, match="tpr|fpr"):
            expected_epsilon_lower_bound(tpr, fpr, 10)
    with pytest.raises(FedAuditError, match="delta"):
        best_threshold_epsilon([0.5, 0.5], [0.5, 0.5], 10, delta=1.0)


def test_best_threshold_of_one_draw_per_input():
    p0, p1, p = _rr(2.0)
    b = best_threshold_epsilon(p0, p1, 1, method="plug-in")
    assert b.n == 1 and b.epsilon == pytest.approx(float(epsilon_lower_bound(p, 1, 1 - p, 1)), abs=1e-15)


@pytest.mark.parametrize("swap", [False, True])
def test_best_threshold_keeps_outcomes_only_one_input_can_produce(swap):
    # outcome 0 only x0 produces (L = +∞): {L ≥ +∞} has TPR 0.8 and FPR 0, the best event; swapped,
    # the outcome only x1 produces gives {L ≤ −∞} with the same rates and positive input x1
    p0, p1 = [0.8, 0.2, 0.0], [0.0, 0.7, 0.3]
    if swap:
        p0, p1 = p1, p0
    for method in ("plug-in", "expected"):
        b = best_threshold_epsilon(p0, p1, 500, method=method)
        assert (b.tpr, b.fpr, b.positive_input) == (0.8, 0.0, "x1" if swap else "x0")
        assert b.threshold == (-math.inf if swap else math.inf)
    assert b.epsilon == pytest.approx(expected_epsilon_lower_bound(0.8, 0.0, 500), rel=1e-12)


def test_rates_whose_sums_round_above_one_are_reported_as_one():
    p = [0.2, 0.4, 0.3, 0.1]  # added in this order the sum is 1.0000000000000002
    assert threshold_event_rates(p, p, threshold=-math.inf, upper=True, positive=0) == (1.0, 1.0)
    for method in ("plug-in", "expected"):  # one level, both directions: every rate is the whole sum
        b = best_threshold_epsilon(p, p, 100, method=method)
        assert (b.epsilon, b.tpr, b.fpr) == (0.0, 1.0, 1.0)


# --------------------------------------------------------------------------- confidence, formerly alpha (issue #24)
def test_confidence_reproduces_the_former_alpha_bit_for_bit_and_alpha_still_works_with_a_warning():
    """The public bounds take ``confidence`` like every audit; ``confidence=0.95`` is read as the
    decimal 0.95, so it gives exactly the numbers of the former ``alpha=0.05`` (binary 1 − 0.95 is
    not 0.05), and the deprecated ``alpha=`` still gives them, with one DeprecationWarning."""
    from fedaudit.audit.gdp import gdp_mu_lower
    from fedaudit.audit.scores import pessimistic_projection

    p0, p1, _ = _rr(1.5)
    tp, fp = np.array([700, 650]), np.array([200, 240])
    calls = [
        (lambda **c: epsilon_lower_bound(tp, 1000, fp, 1000, delta=1e-3, **c)),
        (lambda **c: max_certifiable_epsilon(1000, **c)),
        (lambda **c: expected_epsilon_lower_bound(0.7, 0.2, 300, **c)),
        (lambda **c: best_threshold_epsilon(p0, p1, 300, **c).epsilon),
        (lambda **c: threshold_event_epsilon(p0, p1, 300, threshold=0.0, upper=True, positive=0, **c)),
        (lambda **c: gdp_mu_lower(tp, 1000, fp, 1000, **c)),
        (lambda **c: pessimistic_projection(tp, 1000, fp, 1000, 5000, 5000, delta=0.0, **c)[0]),
    ]
    for conf, alpha in ((0.95, 0.05), (0.99, 0.01), (0.999, 1e-3)):
        for call in calls:
            with pytest.warns(DeprecationWarning, match=r"alpha= is deprecated; use confidence="):
                old = call(alpha=alpha)
            new = call(confidence=conf)
            assert np.array_equal(np.asarray(new), np.asarray(old)), (call, conf)
    # the documented default confidence 0.95 is the former default α = 0.05
    assert float(epsilon_lower_bound(tp, 1000, fp, 1000)[0]) == float(epsilon_lower_bound(tp, 1000, fp, 1000,
                                                                                          confidence=0.95)[0])
    with pytest.raises(FedAuditError, match="not both"):
        epsilon_lower_bound(7, 10, 1, 10, confidence=0.9, alpha=0.05)
    with pytest.raises(FedAuditError, match="confidence"):
        epsilon_lower_bound(7, 10, 1, 10, confidence=1.0)
    with pytest.raises(FedAuditError, match="needs confidence="):
        gdp_mu_lower(7, 10, 1, 10)
