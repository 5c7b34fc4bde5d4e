"""One-run ε lower bounds (Steinke, Nasr, Jagielski 2023; Mahloujifar, Melis, Chaudhuri 2024).

References used here, none of them the implementation restated:
* the published ceilings of the one-run bound at δ = 1e-5, 95% (all guesses correct;
  ../shared/research/privacy.md §0, computed there with the jax_privacy formula);
* β and α by direct enumeration of every correctness pattern of r ≤ 10 guesses;
* the exact false-alarm probability of the bound on mechanisms whose privacy is known exactly:
  randomized response (each guess right w.p. e^ε/(1 + e^ε): ε-DP, the worst case for ε-DP) and
  the (ε, δ) worst case (the coin revealed w.p. δ, else randomized response). The bound is
  nondecreasing in the correct count v, so P[ε_lb > ε] = P[V ≥ v*] for the smallest v* that
  certifies more than ε — a binomial tail, no Monte Carlo noise;
* a seeded Monte Carlo of whole audits (canaries through Gaussian noise, μ-GDP, scored by the
  exact likelihood ratio) through ScoreAuditor.one_run.
"""

import itertools
import json

import numpy as np
import pytest
from scipy import special, stats

from tests.helpers import SUITE_ALPHA
from fedaudit import json as fjson
from fedaudit.audit import ScoreAuditor
from fedaudit.audit.gdp import gdp_epsilon
from fedaudit.audit.one_run import (GUESS_FRACTIONS, OneRunAudit, one_run_audit, one_run_epsilon,
                                    one_run_epsilon_fdp, one_run_p_value)
from fedaudit.errors import FedAuditError

#: statistical (Monte Carlo) assertions of this module share SUITE_ALPHA
N_ASSERTIONS = 3


def steinke(v, r, m, delta=1e-5, confidence=0.95):
    return one_run_epsilon(v, r, m, delta=delta, confidence=confidence)


def fdp_gauss(v, r, m, delta=1e-5, confidence=0.95):
    return one_run_epsilon_fdp(v, r, m, delta=delta, confidence=confidence, curve="gaussian")


def fdp_dp(v, r, m, delta=1e-5, confidence=0.95):
    return one_run_epsilon_fdp(v, r, m, delta=delta, confidence=confidence, curve="dp")


BOUNDS = {"steinke": steinke, "fdp-gaussian": fdp_gauss, "fdp-dp": fdp_dp}


# --------------------------------------------------------------------------- reference values
@pytest.mark.parametrize("canaries, guesses, correct, ceiling", [
    (1000, 100, 100, 3.47), (1000, 1000, 1000, 5.78), (10_000, 10_000, 10_000, 7.83),
    (100_000, 100_000, 100_000, 8.13)])
def test_published_ceilings(canaries, guesses, correct, ceiling):
    assert steinke(correct, guesses, canaries) == pytest.approx(ceiling, abs=0.005)


def test_ninety_percent_precision_saturates_near_two():
    assert steinke(900, 1000, 1000) == pytest.approx(2.0, abs=0.05)
    assert steinke(90_000, 100_000, 100_000) == pytest.approx(2.18, abs=0.05)
    assert steinke(9_000, 10_000, 10_000) == pytest.approx(2.1, abs=0.1)


def enumerated_p_value(v, r, m, eps, delta):
    """β, α and p by summing over all 2^r correctness patterns (no binomial formula)."""
    q = np.exp(eps) / (1 + np.exp(eps))
    patterns = np.array(list(itertools.product([0, 1], repeat=r)))
    k = patterns.sum(axis=1)
    w = q ** k * (1 - q) ** (r - k)
    beta = w[k >= v].sum()
    alpha = max(w[(k >= v - i) & (k < v)].sum() / i for i in range(1, v + 1)) if v else 0.0
    return min(1.0, beta + 2 * m * delta * alpha)


@pytest.mark.parametrize("v, r, m, eps, delta", [
    (10, 10, 100, 1.0, 1e-3), (8, 10, 1000, 0.5, 1e-4), (7, 9, 50, 2.0, 1e-2), (5, 5, 10, 3.0, 0.0),
    (3, 10, 100, 0.2, 1e-2), (1, 1, 10, 0.0, 0.1), (6, 8, 10_000, 1.5, 1e-3), (9, 10, 20, 4.0, 0.2),
    (0, 6, 10, 1.0, 1e-3)])
def test_p_value_matches_enumeration(v, r, m, eps, delta):
    got = one_run_p_value(v, r, m, epsilon=eps, delta=delta)
    assert got == pytest.approx(enumerated_p_value(v, r, m, eps, delta), rel=1e-10, abs=1e-15)


@pytest.mark.parametrize("r, m", [(10, 10), (100, 1000), (1000, 1000), (64, 10_000)])
@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_all_right_at_pure_dp_is_the_binomial_test(r, m, confidence):
    """v = r and δ = 0: P[all r right] ≤ q^r, so ε_lb solves q^r = 1 − confidence, i.e.
    ε_lb = logit((1 − confidence)^(1/r)) — Steinke's bound exactly, and the (ε, δ)-curve f-DP
    analysis as δ → 0."""
    exact = float(special.logit((1 - confidence) ** (1 / r)))
    assert steinke(r, r, m, delta=0.0, confidence=confidence) == pytest.approx(exact, abs=1e-7)
    assert fdp_dp(r, r, m, delta=1e-12, confidence=confidence) == pytest.approx(exact, abs=1e-5)


def test_bound_is_the_first_epsilon_the_p_value_stops_rejecting():
    for v, r, m in [(100, 100, 1000), (700, 1000, 1000), (60, 64, 10_000)]:
        eps = steinke(v, r, m)
        assert one_run_p_value(v, r, m, epsilon=eps - 1e-4, delta=1e-5) <= 0.05
        assert one_run_p_value(v, r, m, epsilon=eps + 1e-4, delta=1e-5) > 0.05
        assert one_run_p_value(v, r, m, epsilon=eps, delta=1e-5) == pytest.approx(0.05, rel=1e-4)


def test_no_evidence_gives_zero():
    for bound in BOUNDS.values():
        assert bound(50, 100, 1000) == 0.0  # chance level
        assert bound(1, 1, 1000) == 0.0  # one right guess never rejects ε = 0 at 95%
        assert bound(0, 100, 1000) == 0.0  # every guess wrong
    assert steinke(100, 100, 1000, delta=0.01) == 0.0  # 2mδ = 20 swamps a perfect small audit


# --------------------------------------------------------------------------- monotonicity
@pytest.mark.parametrize("name", list(BOUNDS))
def test_more_correct_guesses_never_lower_the_bound(name):
    bound = BOUNDS[name]
    eps = [bound(v, 200, 1000) for v in range(100, 201, 4)]
    assert all(b >= a - 1e-9 for a, b in zip(eps, eps[1:])), eps
    assert eps[-1] > eps[0]


@pytest.mark.parametrize("name", list(BOUNDS))
@pytest.mark.parametrize("precision", [1.0, 0.95, 0.8])
def test_more_canaries_at_the_same_accuracy_never_lower_the_bound(name, precision):
    """While 2mδ stays small (here ≤ 0.2); see the next test for where it does not."""
    bound = BOUNDS[name]
    eps = [bound(int(round(precision * m)), m, m) for m in (100, 200, 500, 1000, 2000, 5000, 10_000)]
    assert all(b >= a - 1e-9 for a, b in zip(eps, eps[1:])), eps


def test_steinke_loses_to_its_delta_term_once_m_nears_one_over_delta():
    """Steinke's p-value carries 2mδα: at δ = 1e-5, 10^6 canaries all guessed right certify less
    (7.95) than 10^5 (8.13). The f-DP analyses have no such term."""
    assert steinke(10**6, 10**6, 10**6) < steinke(10**5, 10**5, 10**5) - 0.1
    assert fdp_dp(10**6, 10**6, 10**6) > fdp_dp(10**5, 10**5, 10**5)


@pytest.mark.parametrize("name", list(BOUNDS))
def test_a_larger_delta_or_confidence_never_raises_the_bound(name):
    bound = BOUNDS[name]
    by_delta = [bound(950, 1000, 1000, delta=d) for d in (1e-9, 1e-7, 1e-5, 1e-4, 1e-3)]
    by_conf = [bound(950, 1000, 1000, confidence=c) for c in (0.5, 0.8, 0.95, 0.99, 0.999)]
    for seq in (by_delta, by_conf):
        assert all(b <= a + 1e-9 for a, b in zip(seq, seq[1:])), seq


# --------------------------------------------------------------------------- f-DP versus Steinke
@pytest.mark.parametrize("v, r, m", [(1000, 1000, 1000), (100, 100, 1000), (900, 1000, 1000), (10_000, 10_000, 10_000),
                                     (20, 20, 1000), (480, 500, 10_000), (6000, 10_000, 10_000)])
def test_gaussian_fdp_is_at_least_steinke(v, r, m):
    """Mahloujifar et al.'s claim: hypothesising the Gaussian curve through (ε, δ) gives a larger
    bound than Steinke et al. on the same counts (observed 12.33 vs 5.78 at m = r = v = 1000)."""
    assert fdp_gauss(v, r, m) >= steinke(v, r, m)


def test_dp_curve_fdp_tightens_the_delta_term():
    """With the (ε, δ) curve itself the analysis is about Steinke's where δ does not matter, and
    larger where Steinke's 2mδ term does (m = 10^4: 8.113 vs 7.834)."""
    assert fdp_dp(10_000, 10_000, 10_000) > steinke(10_000, 10_000, 10_000) + 0.2
    assert fdp_dp(1000, 1000, 1000, delta=1e-3) > steinke(1000, 1000, 1000, delta=1e-3)
    assert fdp_dp(900, 1000, 1000) == pytest.approx(steinke(900, 1000, 1000), abs=0.05)


# --------------------------------------------------------------------------- exact validity
def smallest_certifying_count(bound, m, eps, **kw):
    """Smallest v with bound(v, m, m) > eps (bound nondecreasing in v), None if none."""
    if bound(m, m, m, **kw) <= eps:
        return None
    lo, hi = 0, m
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound(mid, m, m, **kw) > eps else (mid, hi)
    return hi


def false_alarm(bound, m, eps, delta, reveal, confidence):
    """P[bound > ε] when each of the m guesses is right independently w.p.
    reveal + (1 − reveal)·e^ε/(1 + e^ε)."""
    v = smallest_certifying_count(bound, m, eps, delta=delta, confidence=confidence)
    q = reveal + (1 - reveal) * special.expit(eps)
    return 0.0 if v is None else float(stats.binom.sf(v - 1, m, q))


@pytest.mark.parametrize("name", ["steinke", "fdp-dp"])
@pytest.mark.parametrize("m, eps", [(100, 1.0), (1000, 0.5), (1000, 2.0), (10_000, 1.0)])
@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_exact_validity_on_randomized_response(name, m, eps, confidence):
    """Randomized response is ε-DP, hence (ε, δ)-DP: the bound exceeds ε with probability at
    most 1 − confidence. Steinke's p-value is the binomial tail here, so at δ = 0 its error is
    close to the level (a conservative bug would show as a much smaller rate)."""
    bound = BOUNDS[name]
    level = 1 - confidence
    assert false_alarm(bound, m, eps, 1e-5, 0.0, confidence) <= level
    if name == "steinke":
        assert false_alarm(bound, m, eps, 0.0, 0.0, confidence) <= level
        assert false_alarm(bound, m, eps, 0.0, 0.0, confidence) >= 0.5 * level


@pytest.mark.parametrize("name", ["steinke", "fdp-dp"])
@pytest.mark.parametrize("m, eps, delta", [(100, 1.0, 0.01), (1000, 1.0, 0.001), (1000, 2.0, 0.01), (1000, 0.5, 0.05)])
def test_exact_validity_on_the_epsilon_delta_worst_case(name, m, eps, delta):
    """Each coin revealed independently w.p. δ, else randomized response at ε: exactly (ε, δ)-DP."""
    assert false_alarm(BOUNDS[name], m, eps, delta, delta, 0.95) <= 0.05


@pytest.mark.parametrize("name", ["steinke", "fdp-dp"])
@pytest.mark.parametrize("m, eps, delta", [(100, 1.0, 0.01), (1000, 1.0, 0.001), (1000, 2.0, 0.001),
                                           (10_000, 1.0, 0.001), (1000, 0.5, 0.001)])
def test_exact_validity_on_a_burst_of_revealed_coins(name, m, eps, delta):
    """The (ε, δ) mechanism the 2mδ term is there for: with probability p the run reveals
    k = ⌊δm/p⌋ coins at once (each coin is revealed w.p. pk/m ≤ δ, so it stays (ε, δ)-DP),
    the rest go through randomized response. Worst p of a grid; observed worst rates: Steinke
    0.005–0.037, the (ε, δ)-curve f-DP 0.032–0.039 (tighter, and still below 0.05)."""
    bound = BOUNDS[name]
    v = smallest_certifying_count(bound, m, eps, delta=delta, confidence=0.95)
    q = special.expit(eps)
    worst = 0.0
    for p in (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
        k = int(np.floor(delta * m / p))
        if v is not None and k <= m:
            rate = p * stats.binom.sf(v - 1 - k, m - k, q) + (1 - p) * stats.binom.sf(v - 1, m, q)
            worst = max(worst, float(rate))
    assert worst <= 0.05


@pytest.mark.parametrize("m", [100, 1000])
@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_exact_validity_of_the_gaussian_curve_on_a_gaussian_mechanism(m, mu, confidence):
    """Each canary's score N(μ·[in], 1) (μ-GDP), every coin guessed by the threshold μ/2: each
    guess is right independently w.p. Φ(μ/2), and the bound may exceed the true ε(δ) of μ-GDP
    with probability at most 1 − confidence (observed at most 0.125 at confidence 0.5)."""
    eps = gdp_epsilon(mu, 1e-5)
    v = smallest_certifying_count(fdp_gauss, m, eps, delta=1e-5, confidence=confidence)
    rate = 0.0 if v is None else float(stats.binom.sf(v - 1, m, stats.norm.cdf(mu / 2)))
    assert rate <= 1 - confidence


def test_the_gaussian_curve_is_no_certificate_for_randomized_response():
    """What the docstrings warn: randomized response at ε = 1 is not μ(1, δ)-GDP, and the
    Gaussian f-DP analysis rejects that hypothesis almost surely — an ε bound far above 1."""
    assert false_alarm(fdp_gauss, 1000, 1.0, 1e-5, 0.0, 0.95) > 0.99


def test_exact_validity_check_can_fail():
    """The check above detects an off-by-one in β (P[B > v] instead of P[B ≥ v]): the plug-in
    bound of that mistake exceeds the level."""
    def loose(v, r, m, delta, confidence):
        return steinke(min(v + 1, r), r, m, delta=delta, confidence=confidence) if v < r else 50.0
    assert false_alarm(loose, 1000, 1.0, 0.0, 0.0, 0.95) > 0.05


# --------------------------------------------------------------------------- Monte Carlo
SEEDS = 40


def gaussian_canaries(mu, m, seed):
    """m canaries, each in w.p. ½; a canary's score is its coordinate of a Gaussian output with
    mean μ·[in]: exactly μ-GDP for each canary, and the score is its likelihood ratio's argument."""
    rng = np.random.default_rng([12, seed])
    member = rng.random(m) < 0.5
    z = rng.normal(mu * member, 1.0)
    return z[member], z[~member]


@pytest.fixture(scope="module")
def gaussian_audits():
    mu, m, delta = 1.0, 1000, 1e-5
    runs = {name: [] for name in ("steinke", "fdp-gaussian", "fdp-dp")}
    for seed in range(SEEDS):
        a, b = gaussian_canaries(mu, m, seed)
        runs["steinke"].append(one_run_audit(a, b, delta=delta, confidence=0.5))
        runs["fdp-gaussian"].append(one_run_audit(a, b, delta=delta, confidence=0.5, method="fdp", curve="gaussian"))
        runs["fdp-dp"].append(one_run_audit(a, b, delta=delta, confidence=0.5, method="fdp", curve="dp"))
    return mu, delta, runs


def test_monte_carlo_validity_on_gaussian_canaries(gaussian_audits):
    """Whole audits (guess-count grid, Bonferroni) of μ-GDP canaries at confidence 0.5: no method
    exceeds the true ε(δ) = 4.38 in more than the binomial tolerance of seeds (observed: never,
    largest 3.86; the Gaussian f-DP bound averages 65% of the truth, Steinke's and the (ε, δ)-curve
    f-DP bound 43%)."""
    mu, delta, runs = gaussian_audits
    true_eps = gdp_epsilon(mu, delta)
    tol = int(stats.binom.isf(SUITE_ALPHA / N_ASSERTIONS, SEEDS, 0.5))
    for name, audits in runs.items():
        over = sum(r.epsilon > true_eps for r in audits)
        assert over <= tol, (name, over, tol)
    means = {k: np.mean([r.epsilon for r in v]) for k, v in runs.items()}
    assert means["fdp-gaussian"] > means["steinke"] and means["fdp-gaussian"] > 0.5 * true_eps, means


def test_an_under_noised_run_is_flagged():
    """Claimed μ = 0.5 (ε(1e-5) = 1.87), actual μ = 4: every method's certified bound exceeds
    the claim in every seed."""
    claimed = gdp_epsilon(0.5, 1e-5)
    for seed in range(5):
        a, b = gaussian_canaries(4.0, 1000, 100 + seed)
        for kw in ({}, {"method": "fdp"}, {"method": "fdp", "curve": "dp"}):
            assert one_run_audit(a, b, delta=1e-5, **kw).epsilon > claimed


# --------------------------------------------------------------------------- ScoreAuditor.one_run
def test_score_auditor_counts_the_guesses_by_hand():
    rng = np.random.default_rng(3)
    a, b = rng.normal(2.0, 1.0, 480), rng.normal(0.0, 1.0, 520)
    res = ScoreAuditor(a, b).one_run(1e-5)
    m = 1000
    grid = sorted({max(1, round(m * f)) for f in GUESS_FRACTIONS}, reverse=True)
    assert res.grid == tuple(grid) and res.alpha_per_test == pytest.approx(0.05 / len(grid))
    pooled = np.concatenate([a, b])
    is_in = np.concatenate([np.ones(a.size, bool), np.zeros(b.size, bool)])
    order = np.argsort(pooled)  # continuous scores: no ties
    best = []
    for r in grid:
        top, bottom = order[::-1][:(r + 1) // 2], order[:r // 2]
        v = int(is_in[top].sum() + (~is_in[bottom]).sum())
        best.append((steinke(v, r, m, confidence=1 - 0.05 / len(grid)), r, v))
    eps, r, v = max(best)
    assert (res.epsilon, res.guesses, res.correct) == (pytest.approx(eps), r, v)
    assert res.grid_epsilons == pytest.approx([e for e, _, _ in best])
    assert res.threshold_in == pytest.approx(pooled[order[::-1][(r + 1) // 2 - 1]])
    assert res.threshold_out == pytest.approx(pooled[order[r // 2 - 1]])
    assert res.canaries == m and res.canaries_in == 480 and res.precision == v / r


def test_a_fixed_guess_count_pays_no_correction():
    a, b = gaussian_canaries(3.0, 1000, 4)
    res = ScoreAuditor(a, b).one_run(1e-5, guesses=200)
    assert res.grid == (200,) and res.alpha_per_test == pytest.approx(0.05)
    assert res.epsilon == pytest.approx(steinke(res.correct, 200, 1000))
    assert ScoreAuditor(a, b).one_run(1e-5, guesses=[200, 100]).grid == (200, 100)


def test_ties_are_broken_independently_of_membership():
    """Every score equal: the guesses are coin flips, so about half are right (a stable sort
    would put every in-canary below every out-canary and get every guess wrong)."""
    res = ScoreAuditor(np.zeros(500), np.zeros(500)).one_run(1e-5, guesses=1000)
    lo, hi = stats.binom.interval(1 - SUITE_ALPHA, 1000, 0.5)
    assert lo <= res.correct <= hi and res.epsilon == 0.0 and res.ties == "random order (seed 0)"


def test_scores_in_low_mirror_scores_in_high():
    a, b = gaussian_canaries(3.0, 1000, 5)
    high = ScoreAuditor(a, b).one_run(1e-5, method="fdp")
    low = ScoreAuditor(-a, -b).one_run(1e-5, method="fdp", orientation="in-low")
    assert (low.epsilon, low.correct, low.guesses) == (high.epsilon, high.correct, high.guesses)
    assert low.threshold_in == -high.threshold_in and low.threshold_out == -high.threshold_out


def test_result_is_strict_json_with_a_one_line_summary():
    a, b = gaussian_canaries(3.0, 200, 6)
    for kw, word in (({}, "every (ε, δ)-DP"), ({"method": "fdp", "curve": "gaussian"}, "Gaussian")):
        res = ScoreAuditor(a, b).one_run(1e-5, **kw)
        assert isinstance(res, OneRunAudit)
        d = fjson.loads(fjson.dumps(res.to_dict()))
        assert d["epsilon"] == res.epsilon and d["precision"] == res.precision
        json.dumps(res.to_dict(), allow_nan=False)
        line = res.summary()
        assert "\n" not in line and word in line and f"{res.correct:,}/{res.guesses:,}" in line


@pytest.mark.parametrize("kw, match", [
    ({"delta": 1.0}, "delta"), ({"delta": -1e-5}, "delta"), ({"delta": 0.0, "method": "fdp"}, "delta"),
    ({"delta": 1e-5, "confidence": 1.0}, "confidence"), ({"delta": 1e-5, "confidence": 0.0}, "confidence"),
    ({"delta": 1e-5, "guesses": 0}, "guesses"), ({"delta": 1e-5, "guesses": 101}, "guesses"),
    ({"delta": 1e-5, "guesses": []}, "guesses"), ({"delta": 1e-5, "guesses": [10, 2.5]}, "guesses"),
    ({"delta": 1e-5, "method": "jax"}, "method"), ({"delta": 1e-5, "method": "fdp", "curve": "laplace"}, "curve"),
    ({"delta": 1e-5, "orientation": "up"}, "orientation")])
def test_bad_input_of_one_run(kw, match):
    auditor = ScoreAuditor(*gaussian_canaries(1.0, 100, 7))
    with pytest.raises(FedAuditError, match=match):
        auditor.one_run(**kw)


def test_bad_input_of_the_pure_functions():
    with pytest.raises(FedAuditError, match="guesses"):
        one_run_epsilon(5, 11, 10, delta=1e-5)
    with pytest.raises(FedAuditError, match="correct"):
        one_run_epsilon(6, 5, 10, delta=1e-5)
    with pytest.raises(FedAuditError, match="canaries"):
        one_run_epsilon(0, 0, 0, delta=1e-5)
    with pytest.raises(FedAuditError, match="delta"):
        one_run_epsilon_fdp(5, 5, 10, delta=0.0)
    with pytest.raises(FedAuditError, match="epsilon"):
        one_run_p_value(5, 5, 10, epsilon=-1.0, delta=0.0)
    with pytest.raises(FedAuditError, match="at least 10 canaries"):
        one_run_audit(np.ones(4), np.zeros(5), delta=1e-5)
    with pytest.raises(FedAuditError, match="finite"):
        one_run_audit(np.r_[np.ones(9), np.nan], np.zeros(10), delta=1e-5)
    with pytest.raises(FedAuditError, match="finite"):
        ScoreAuditor(np.r_[np.ones(9), np.inf], np.zeros(10))
    tallies = ScoreAuditor.from_counts([0.0, 1.0], [10, 10], [0.0, 1.0], [10, 10])
    with pytest.raises(FedAuditError, match="individual score"):
        tallies.one_run(1e-5)
