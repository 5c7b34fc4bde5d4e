"""Event selection of ``audit_ldp`` on finite-output randomizers, the exact best single-threshold
bound it is measured against, false alarms under the selection rule, and the pair-power notes.

The selection tests judge the *selected event*, not the certified number: the event's expected
certified ε is computed from the exact pmf (``expected_epsilon_lower_bound``), so the assertion
carries no certification noise and is deterministic for the fixed seeds.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from fedaudit.audit.bounds import (
    best_threshold_epsilon,
    epsilon_lower_bound,
    expected_epsilon_lower_bound,
    threshold_event_epsilon,
    threshold_event_rates,
)
from fedaudit.audit.ldp import LOW_PAIR_POWER, audit_ldp
from fedaudit.audit.pair_search import audit_worst_case
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import SSTQ, VQSGD, RandomizedResponse


# --------------------------------------------------------------------------- cases with exact pmfs
def bits_case(d, eps):
    """SSTQ with k = d, s = 2, no rotation and B = 1/√d at x = ±1/√d: every coordinate is an
    independent binary RR bit at ε/d, a product of d RR bits. The privacy loss of a report with
    j bits agreeing with x0 is (2j − d)·ε/d, and j ~ Bin(d, p) under x0, Bin(d, 1 − p) under x1:
    the pmfs returned are over j."""
    m = SSTQ(d, d, 2, eps, rotate=False, bound=1 / math.sqrt(d))
    x0 = np.ones(d) / math.sqrt(d)
    p = 1 / (1 + math.exp(-eps / d))
    j = np.arange(d + 1)
    return m, x0, -x0, stats.binom.pmf(j, d, p), stats.binom.pmf(j, d, 1 - p)


def finite_case(m, x0, x1, outputs):
    o = np.asarray(outputs, dtype=float)[:, None]
    return m, x0, x1, np.exp(m.log_prob(o, x0)), np.exp(m.log_prob(o, x1))


def selected_event_value(case, r):
    """Expected certified ε of the event the audit chose, from the exact pmf."""
    ev = r.event
    return threshold_event_epsilon(case[3], case[4], r.certification_samples, threshold=ev["threshold"],
                                   upper=">=" in ev["event"], positive=int(ev["positive_input"][1]))


def test_rare_most_informative_event_is_selected():
    """16 RR bits at ε = 4: at 2.7e5 certification draws the best event is "≥ 15 bits agree"
    (mass 1.3e-3 under x0, 4e-5 under x1; expected certified ε 2.86), the next "≥ 14" (mass
    8.6e-3) certifies 2.52. Counting the selection split's hits directly, the x1 side of the rare
    event has ~1 hit and the pessimistic projection picks "≥ 14" in half the seeds (0.34 lost);
    the importance-weighted rates pick the rare event every time."""
    case = bits_case(16, 4.0)
    m, x0, x1, p0, p1 = case
    for seed in (2, 3, 4):  # the old rule lost 0.34 at seeds 2 and 4
        r = audit_ldp(m, x0, x1, samples=300_000, seed=seed, distinguisher="likelihood-ratio")
        best = best_threshold_epsilon(p0, p1, r.certification_samples)
        assert best.epsilon == pytest.approx(2.859, abs=2e-3) and best.tpr < 0.01
        assert selected_event_value(case, r) >= best.epsilon - 0.05, (seed, r.event)


def test_weighted_rates_are_unbiased_for_both_inputs():
    """The selection's importance-weighted rates (balance heuristic) of every threshold event of
    L against the exact rates, 8 RR bits at ε = 3, 2·10^4 draws per input. At α = 1 the mass
    shrink is the CP median, ≈ (h − ⅓)/h. Tolerance: 5 standard errors of a direct count of the
    event's h pooled hits, which bounds the weighted estimate's (its weights are ≤ 1/π_i and the
    ratio within an event is exact)."""
    from fedaudit.audit.distinguishers import weighted_rates

    m, x0, x1, p0, p1 = bits_case(8, 3.0)
    s0 = m.privacy_loss(m.sample(x0, 20_000, rng=1), x0, x1)
    s1 = m.privacy_loss(m.sample(x1, 20_000, rng=2), x0, x1)
    t = np.unique(np.concatenate([s0, s1]))
    ge0, ge1, le0, le1 = weighted_rates(s0, s1, t, alpha=1.0)
    pooled = np.concatenate([s0, s1])
    for i, ti in enumerate(t):
        for est, upper, pos in ((ge0, True, 0), (ge1, True, 1), (le0, False, 0), (le1, False, 1)):
            want = threshold_event_rates(p0, p1, threshold=ti, upper=upper, positive=0)[pos]
            h = np.count_nonzero(pooled >= ti if upper else pooled <= ti)
            tol = 5.0 * want / math.sqrt(h) + 1e-12
            assert est[i] == pytest.approx(want, abs=tol), (ti, upper, pos, est[i], want, h)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bits", "krr", "vqsgd"])
def test_issue_target_at_1e6(name):
    """The issue's target: at N = 1e6 the certified ε_lb is within 0.05 of the best
    single-threshold bound at the same certification size. Judged (a) on the selected event's
    expected certified ε (no certification noise) for every seed and (b) on the mean certified
    ε_lb over the seeds, which may fall below the bound by at most 0.05 plus 2.6 standard errors
    of that mean (SE from the seeds' spread)."""
    if name == "bits":
        case = bits_case(16, 4.0)
    elif name == "krr":
        k = 1000
        case = finite_case(RandomizedResponse(k, 2.0), np.eye(k)[0], np.eye(k)[1], range(k))
    else:
        m = VQSGD(256, 4.0)
        case = finite_case(m, np.eye(256)[0], -np.eye(256)[0], range(512))
    m, x0, x1, p0, p1 = case
    lbs = []
    for seed in range(6):
        r = audit_ldp(m, x0, x1, samples=1_000_000, seed=seed)
        best = best_threshold_epsilon(p0, p1, r.certification_samples)
        assert r.test == "likelihood-ratio"
        assert selected_event_value(case, r) >= best.epsilon - 0.05, (seed, r.event)
        lbs.append(r.epsilon_lower)
    se = np.std(lbs, ddof=1) / math.sqrt(len(lbs))
    assert np.mean(lbs) >= best.epsilon - 0.05 - 2.6 * se


# --------------------------------------------------------------------------- the exact bound
def test_expected_bound_equals_brute_force_double_sum():
    n, tpr, fpr = 60, 0.4, 0.1
    k = np.arange(n + 1)
    grid = epsilon_lower_bound(k[:, None], n, k[None, :], n)
    want = float(stats.binom.pmf(k, n, tpr) @ grid @ stats.binom.pmf(k, n, fpr))
    assert expected_epsilon_lower_bound(tpr, fpr, n) == pytest.approx(want, abs=1e-10)
    # with δ: rows with TPR_lb ≤ δ certify 0
    grid = epsilon_lower_bound(k[:, None], n, k[None, :], n, delta=0.2)
    want = float(stats.binom.pmf(k, n, tpr) @ grid @ stats.binom.pmf(k, n, fpr))
    assert expected_epsilon_lower_bound(tpr, fpr, n, delta=0.2) == pytest.approx(want, abs=1e-10)


def test_expected_bound_matches_simulation():
    n, tpr, fpr = 900_000, 1.34e-3, 3.9e-5
    rng = np.random.default_rng(5)
    sims = epsilon_lower_bound(rng.binomial(n, tpr, 20_000), n, rng.binomial(n, fpr, 20_000), n)
    tol = 4.0 * sims.std() / math.sqrt(len(sims))
    assert expected_epsilon_lower_bound(tpr, fpr, n) == pytest.approx(sims.mean(), abs=tol)


def test_best_threshold_binary_rr_closed_form():
    p = math.e / (1 + math.e)
    n = 10**6
    b = best_threshold_epsilon([p, 1 - p], [1 - p, p], n, method="plug-in")
    assert b.epsilon == pytest.approx(float(epsilon_lower_bound(p * n, n, (1 - p) * n, n)), rel=1e-12)
    assert b.epsilon == pytest.approx(0.996, abs=3e-3)  # research/privacy.md reference table
    assert b.threshold == pytest.approx(1.0) and b.positive_input == "x0"


def test_best_threshold_matches_loop_over_levels_and_groups_ties():
    """Independent loop over every level of L. Outcomes 1 and 2 share their L: one level, so
    5 outcomes give 4 levels and 8 candidate events (a level per orientation)."""
    p0 = np.array([0.02, 0.3, 0.3, 0.18, 0.2])
    p1 = np.array([0.001, 0.1, 0.1, 0.3, 0.499])
    loss = np.log(p0) - np.log(p1)
    for n in (50, 5000, 10**6):
        want, arg = 0.0, None
        for t in np.unique(loss):
            for hit, pos in ((loss >= t, 0), (loss <= t, 1)):
                a, b = p0[hit].sum(), p1[hit].sum()
                tpr, fpr = (a, b) if pos == 0 else (b, a)
                e = float(epsilon_lower_bound(tpr * n, n, fpr * n, n))
                if e > want:
                    want, arg = e, (t, tpr, fpr)
        got = best_threshold_epsilon(p0, p1, n, method="plug-in")
        assert got.epsilon == pytest.approx(want, rel=1e-12) and got.events == 8
        assert (got.threshold, got.tpr, got.fpr) == pytest.approx(arg, rel=1e-12)
        mean = best_threshold_epsilon(p0, p1, n)
        assert mean.method == "expected" and 0.0 <= mean.epsilon
        if n == 10**6:  # counts in the thousands: the mean bound is the plug-in up to noise
            assert mean.epsilon == pytest.approx(want, abs=0.01)
    json.dumps(got.to_dict(), allow_nan=False)


def test_threshold_event_epsilon_picks_the_right_outcomes():
    p0 = np.array([0.02, 0.3, 0.3, 0.18, 0.2])
    p1 = np.array([0.001, 0.1, 0.1, 0.3, 0.499])
    n, t = 10_000, math.log(3.0)  # {L ≥ log 3} = outcomes 0, 1, 2 (L = 3.0, 1.1, 1.1)
    want = expected_epsilon_lower_bound(0.62, 0.201, n)
    assert threshold_event_epsilon(p0, p1, n, threshold=t * (1 + 1e-12), upper=True, positive=0) == pytest.approx(want)
    # {L ≤ log 3} with TPR on x1: outcomes 1..4
    want = expected_epsilon_lower_bound(0.999, 0.98, n)
    assert threshold_event_epsilon(p0, p1, n, threshold=t, upper=False, positive=1) == pytest.approx(want)
    assert threshold_event_epsilon(p0, p1, n, threshold=t, upper=False, positive=1) != \
        threshold_event_epsilon(p0, p1, n, threshold=t * 0.99, upper=False, positive=1)


@pytest.mark.parametrize("kw, needle", [
    ({"p0": [0.5, 0.6], "p1": [0.5, 0.5]}, "p0 must be a probability vector"),
    ({"p0": [0.5, 0.5], "p1": [1.0]}, "same length"),
    ({"p0": [1.0, np.nan], "p1": [0.5, 0.5]}, "p0 must be a probability vector"),
    ({"p0": [1.0, 0.0], "p1": [1.0, 0.0], "method": "mean"}, "method must be"),
    ({"p0": [1.0, 0.0], "p1": [1.0, 0.0], "n": 0}, "n must be an integer >= 1"),
])
def test_best_threshold_bad_input(kw, needle):
    args = {"n": 100, **kw}
    with pytest.raises(FedAuditError, match=None) as info:
        best_threshold_epsilon(args.pop("p0"), args.pop("p1"), args.pop("n"), **args)
    assert needle in str(info.value)


# --------------------------------------------------------------------------- false alarms
#: runs per case; under a correct audit P[violation] ≤ α = 0.05 per run, so the count is
#: stochastically below Bin(RUNS, 0.05), whose 0.999 quantile bounds it (one-in-a-thousand
#: chance that a correct implementation fails for one case at these fixed seeds)
RUNS = 120
LIMIT = stats.binom.ppf(0.999, RUNS, 0.05)


def test_false_alarm_rate_at_most_alpha_tight_rr():
    """4-RR at ε = 2, claim = the pair's exact ε (tight): a violation is a false alarm. The
    certified ε averages 1.82 here, so a bound certified at too weak a level (e.g. 25% per side
    instead of 2.5%) raises 32 alarms in these 120 runs."""
    m, x0, x1 = RandomizedResponse(4, 2.0), np.eye(4)[0], np.eye(4)[3]
    exact = m.epsilon_for_pair(x0, x1)
    alarms = sum(audit_ldp(m, x0, x1, epsilon=exact, samples=3000, seed=s).violation for s in range(RUNS))
    assert alarms <= LIMIT, alarms


def test_false_alarms_and_per_event_coverage_with_a_rare_best_event():
    """8 RR bits at ε = 3 (best event "all 8 agree", mass 0.015 / 7.5e-4), 4000 draws: no false
    alarm against the exact ε, and the certificate stays below the *certified event's own*
    true log-ratio log(P0[E]/P1[E]) in all but ≤ LIMIT runs — the per-event statement the
    Clopper–Pearson bound makes, sensitive even where ε_lb is far below ε (a bound at 25% per
    side exceeds it in 18 of these runs)."""
    m, x0, x1, p0, p1 = bits_case(8, 3.0)
    exact = m.epsilon_for_pair(x0, x1)
    alarms = over = 0
    for s in range(RUNS):
        r = audit_ldp(m, x0, x1, epsilon=exact, samples=4000, seed=s, distinguisher="likelihood-ratio")
        ev = r.event
        tpr, fpr = threshold_event_rates(p0, p1, threshold=ev["threshold"], upper=">=" in ev["event"],
                                         positive=int(ev["positive_input"][1]))
        alarms += r.violation
        over += r.epsilon_lower > math.log(tpr / fpr)
    assert alarms <= LIMIT and over <= LIMIT, (alarms, over)


# --------------------------------------------------------------------------- pair power and notes
def _vq_pair_epsilon(d, eps):
    """vqSGD, x = e0 vs −e0: only vertex +0 (and −0) change weight, 1/√d + r vs r, r = (1 − 1/√d)/(2d)."""
    p, q = math.exp(eps) / (math.exp(eps) + 2 * d - 1), 1 / (math.exp(eps) + 2 * d - 1)
    r = (1 - 1 / math.sqrt(d)) / (2 * d)
    return math.log((q + (p - q) * (1 / math.sqrt(d) + r)) / (q + (p - q) * r))


def test_low_power_pair_says_so():
    m, e = VQSGD(16, 1.0), np.eye(16)[0]
    r = audit_ldp(m, e, -e, samples=20_000, seed=0)
    exact = _vq_pair_epsilon(16, 1.0)
    assert r.epsilon_exact == pytest.approx(exact, rel=1e-12) and exact == pytest.approx(0.3457, abs=1e-4)
    assert r.pair_power == pytest.approx(exact / 1.0, rel=1e-12) and r.pair_power < LOW_PAIR_POWER
    assert not r.violation
    assert r.notes == ["this pair carries 35% of the claim (its exact ε 0.346 of the claimed 1): a PASS here says "
                       "little; try --pair search"]
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["pair_power"] == pytest.approx(exact) and d["notes"] == r.notes


def test_full_power_pair_has_no_note_and_black_box_power_is_unknown():
    r = audit_ldp(RandomizedResponse(2, 1.0), [1, 0], [0, 1], samples=5000, seed=0)
    assert r.pair_power == 1.0 and r.notes == []
    r = audit_ldp(lambda x, n, g: x[None, :] + g.laplace(size=(n, 1)), [1.0], [-1.0], epsilon=2.0,
                  samples=5000, seed=0)
    assert r.pair_power is None and r.notes == [] and r.to_dict()["pair_power"] is None


def test_notes_for_an_uncertifiable_claim_and_an_exact_loss_above_the_claim():
    m, e = VQSGD(16, 1.0), np.eye(16)[0]
    r = audit_ldp(m, e, -e, epsilon=20.0, samples=1000, seed=0)
    assert any("no audit can certify more than" in n and "claimed 20" in n for n in r.notes)
    r = audit_ldp(m, e, -e, epsilon=0.1, samples=1000, seed=0)
    assert not r.violation and r.pair_power == pytest.approx(_vq_pair_epsilon(16, 1.0) / 0.1)
    assert any("above the claimed 0.1" in n and "did not certify" in n for n in r.notes)


def test_searched_pair_note_does_not_suggest_search():
    res = audit_worst_case(VQSGD(16, 1.0), samples=5000, search_samples=1000, rounds=0, seed=0)
    assert res.pair_power is not None and res.pair_power < LOW_PAIR_POWER
    assert len(res.notes) == 1 and "search found no stronger pair" in res.notes[0]
    assert "--pair search" not in res.notes[0]
