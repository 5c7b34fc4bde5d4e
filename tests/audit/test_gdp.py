"""Gaussian-DP estimate of ε from scores (ScoreAuditor.gdp; Nasr et al. 2023).

Reference model: scores N(μ, 1) with the target and N(0, 1) without, exactly μ-GDP (Dong, Roth,
Su 2022), whose ε(δ) is the root of Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ (Cor. 2.13). The
conversion is checked against that root (computed here with scipy) and against dp_accounting's
PLD of the Gaussian mechanism with σ = 1/μ; the estimate against the known μ.
"""

import json

import numpy as np
import pytest
from scipy import optimize, stats

from tests.helpers import SUITE_ALPHA
from fedaudit import json as fjson
from fedaudit.audit import ScoreAuditor
from fedaudit.audit.gdp import GDPAudit, gdp_epsilon
from fedaudit.errors import FedAuditError

#: statistical assertions in this module share SUITE_ALPHA
N_ASSERTIONS = 3
SEEDS = 60


def cor_2_13(mu: float, delta: float) -> float:
    """ε(δ) of μ-GDP by Dong–Roth–Su Cor. 2.13, solved in the log domain with scipy."""
    def gap(e):
        a = stats.norm.logcdf(-e / mu + mu / 2)
        b = e + stats.norm.logcdf(-e / mu - mu / 2)
        return a + np.log1p(-np.exp(b - a)) - np.log(delta)
    return float(optimize.brentq(gap, 0.0, 200.0, xtol=1e-12))


@pytest.mark.parametrize("mu", [0.3, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-9])
def test_epsilon_from_mu_matches_corollary_2_13(mu, delta):
    assert gdp_epsilon(mu, delta) == pytest.approx(cor_2_13(mu, delta), rel=1e-8, abs=1e-10)


@pytest.mark.parametrize("mu, delta", [(0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-3)])
def test_epsilon_from_mu_matches_the_gaussian_mechanism_pld(mu, delta):
    """A Gaussian mechanism with sensitivity 1 and σ = 1/μ is exactly μ-GDP: dp_accounting's PLD
    (pessimistic discretisation 1e-4) gives the same ε at δ from above, within the discretisation."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    eps_pld = pld.from_gaussian_mechanism(1.0 / mu, value_discretization_interval=1e-4).get_epsilon_for_delta(delta)
    eps = gdp_epsilon(mu, delta)
    assert eps <= eps_pld + 1e-9
    assert eps_pld - eps < 2e-3, (eps, eps_pld)


def test_epsilon_from_mu_edges():
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    assert gdp_epsilon(1e-6, 1e-5) == 0.0  # (0, δ)-DP already: Φ(μ/2) − Φ(−μ/2) < δ
    for bad in (0.0, 1.0, -1e-5, float("nan")):
        with pytest.raises(FedAuditError, match="delta"):
            gdp_epsilon(1.0, bad)
    with pytest.raises(FedAuditError, match="mu"):
        gdp_epsilon(-1.0, 1e-5)


def gaussian_scores(mu, n, seed):
    rng = np.random.default_rng([11, seed])
    return rng.normal(mu, 1.0, n), rng.normal(0.0, 1.0, n)


def test_mu_estimate_is_below_the_true_mu_and_close_to_it():
    """Under μ-GDP scores, μ̂ ≤ μ except with probability ≤ α (Bonferroni-corrected CP bounds):
    the false alarms over SEEDS stay within the binomial tolerance; and at 10,000 scores per set
    μ̂ reaches ≥ 85% of μ on average (observed ≈ 0.90)."""
    mu, n = 1.0, 10_000
    tol = int(stats.binom.isf(SUITE_ALPHA / N_ASSERTIONS, SEEDS, 0.05))
    mus = np.array([ScoreAuditor(*gaussian_scores(mu, n, s)).gdp(1e-5).mu for s in range(SEEDS)])
    assert int(np.sum(mus > mu)) <= tol
    assert mus.mean() >= 0.85 * mu, mus.mean()


def test_the_soundness_check_flags_uncorrected_estimates():
    """The false-alarm check above can fail: the plug-in μ of the best threshold (empirical rates,
    no confidence bounds, no correction) exceeds the true μ in most seeds."""
    mu, n = 1.0, 2000
    tol = int(stats.binom.isf(SUITE_ALPHA / N_ASSERTIONS, SEEDS, 0.05))
    over = 0
    for s in range(SEEDS):
        a, b = gaussian_scores(mu, n, s)
        t = np.unique(np.concatenate([a, b]))
        tpr = (n - np.searchsorted(np.sort(a), t)) / n
        fpr = (n - np.searchsorted(np.sort(b), t)) / n
        ok = (tpr > 0) & (tpr < 1) & (fpr > 0) & (fpr < 1)
        over += np.max(stats.norm.ppf(tpr[ok]) - stats.norm.ppf(fpr[ok])) > mu
    assert over > tol, (over, tol)


def test_epsilon_is_the_conversion_of_the_estimated_mu():
    a, b = gaussian_scores(2.0, 5000, 1)
    r = ScoreAuditor(a, b).gdp(1e-5, 0.9)
    assert r.epsilon == pytest.approx(cor_2_13(r.mu, 1e-5), rel=1e-8)
    assert r.epsilon < cor_2_13(2.0, 1e-5)
    assert r.tests == 2 * np.unique(np.concatenate([a, b])).size
    assert r.alpha_per_test == pytest.approx(0.1 / r.tests)
    # the reported bounds are the ones μ is made of
    assert r.mu == pytest.approx(stats.norm.isf(r.fpr_upper) - stats.norm.ppf(r.fnr_upper), rel=1e-6)


@pytest.mark.parametrize("decimals", [None, 1])
def test_the_frontier_search_finds_the_best_of_all_thresholds(decimals):
    """Brute force over every distinct score and both orientations, with scipy's beta quantiles
    directly: the same largest μ, for continuous scores (long runs of one set between the other's
    scores) and for rounded ones (ties across the sets)."""
    rng = np.random.default_rng(8)
    a, b = rng.normal(1.0, 1.0, 700), rng.normal(0.0, 1.0, 600)
    if decimals is not None:
        a, b = np.round(a, decimals), np.round(b, decimals)
    r = ScoreAuditor(a, b).gdp(1e-5, 0.9)
    t = np.unique(np.concatenate([a, b]))
    k = 0.1 / (2 * 2 * t.size)  # per bound
    best = 0.0
    for tp, fp in (((a[:, None] >= t).sum(0), (b[:, None] >= t).sum(0)),
                   ((a[:, None] <= t).sum(0), (b[:, None] <= t).sum(0))):
        tpr_lb = np.where(tp > 0, stats.beta.ppf(k, tp, a.size - tp + 1), 0.0)
        fpr_ub = np.where(fp < b.size, stats.beta.ppf(1 - k, fp + 1, b.size - fp), 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            mu = stats.norm.ppf(tpr_lb) - stats.norm.ppf(fpr_ub)
        best = max(best, np.nanmax(np.where(np.isfinite(mu), mu, -np.inf)))
    assert r.mu == pytest.approx(best, rel=1e-9)


def test_best_event_counts_match_the_threshold():
    a, b = gaussian_scores(2.0, 3000, 2)
    r = ScoreAuditor(a, b).gdp(1e-5)
    assert r.orientation == "in-high"
    assert r.fp == int(np.sum(b >= r.threshold)) and r.fn == int(np.sum(a < r.threshold))


def test_scores_in_low_give_the_same_mu():
    a, b = gaussian_scores(1.5, 3000, 3)
    high = ScoreAuditor(a, b).gdp(1e-5)
    low = ScoreAuditor(-a, -b).gdp(1e-5)
    assert low.orientation == "in-low"
    assert low.mu == pytest.approx(high.mu, rel=1e-12) and low.threshold == pytest.approx(-high.threshold)


def test_tallies_give_the_same_estimate_as_the_scores():
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 12, 4000) + 2, rng.integers(0, 12, 4000)
    direct = ScoreAuditor(a, b).gdp(1e-5)
    va, ca = np.unique(a, return_counts=True)
    vb, cb = np.unique(b, return_counts=True)
    tallied = ScoreAuditor.from_counts(va, ca, vb, cb).gdp(1e-5)
    assert tallied == direct


def test_indistinguishable_scores_estimate_zero():
    rng = np.random.default_rng(5)
    r = ScoreAuditor(rng.normal(size=200), rng.normal(size=200)).gdp(1e-5)
    assert r.mu == 0.0 and r.epsilon == 0.0 and r.threshold is None
    assert ScoreAuditor(np.zeros(50), np.zeros(50)).gdp(1e-5).epsilon == 0.0


def test_result_is_strict_json_and_says_it_is_an_estimate():
    a, b = gaussian_scores(1.0, 500, 6)
    r = ScoreAuditor(a, b).gdp(1e-5)
    assert isinstance(r, GDPAudit)
    d = fjson.loads(fjson.dumps(r.to_dict()))
    assert d["mu"] == r.mu and "Gaussian" in d["assumption"]
    json.dumps(r.to_dict(), allow_nan=False)
    line = r.summary()
    assert "estimate" in line and "Gaussian" in line and "not a certified" in line and "\n" not in line


@pytest.mark.parametrize("kw, match", [
    ({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"), ({"delta": -0.1}, "delta"),
    ({"delta": 1e-5, "confidence": 1.0}, "confidence"), ({"delta": 1e-5, "confidence": 0.0}, "confidence")])
def test_bad_input(kw, match):
    auditor = ScoreAuditor(*gaussian_scores(1.0, 100, 7))
    with pytest.raises(FedAuditError, match=match):
        auditor.gdp(**kw)
