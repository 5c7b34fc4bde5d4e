"""Canary audits of DP-SGD trained with Opacus (fedaudit.audit.canaries, fedaudit.audit.dpsgd_audit).

The white-box harness is checked against its analytic law: with Dirac canaries every step's
normalised update of a canary's weight is o = b + N(0, σ²), b ~ Bernoulli(q) for an included
canary and 0 for an excluded one, so the likelihood-ratio score s = Σ_t f(o_t) with
f(o) = log(1 − q + q·exp((o − ½)/σ²)) has mean T·E f and variance T·Var f, computed here by
numerical integration (scipy.integrate.quad), independently of the training code.
"""

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from tests.helpers import z_tolerance
from fedaudit.audit.canaries import train_with_canaries
from fedaudit.audit.dpsgd_audit import audit_dpsgd
from fedaudit.audit.one_run import one_run_epsilon
from fedaudit.errors import FedAuditError
from fedaudit.fl.data import load_dataset
from fedaudit.json import dumps, loads
from fedaudit.rng import derive_generator, derive_seed

#: the fast test configuration: claimed ε ≈ 2.34 at δ = 1e-5 (PLD), every included canary sampled
#: with probability 1 − 0.9^100 ≈ 1 − 2.7e-5
SIGMA, Q, STEPS = 2.0, 0.1, 100


@pytest.fixture(scope="module")
def correct_run():
    return train_with_canaries(noise_multiplier=SIGMA, max_grad_norm=0.5, sample_rate=Q, steps=STEPS, seed=3)


def _moments(q: float, sigma: float, included: bool) -> tuple[float, float]:
    """(E f(o), Var f(o)) of one step's log-likelihood-ratio term by quadrature."""
    f = lambda o: np.logaddexp(math.log1p(-q), math.log(q) + (o - 0.5) / sigma ** 2)
    pdf = lambda o, mu: stats.norm.pdf(o, mu, sigma)

    parts = [(0.0, 1.0 - q), (1.0, q)] if included else [(0.0, 1.0)]  # the law of o: a Gaussian mixture

    def expect(g):
        return sum(w * integrate.quad(lambda o: g(o) * pdf(o, mu), mu - 12 * sigma, mu + 12 * sigma, limit=200)[0]
                   for mu, w in parts)

    mean = expect(f)
    return mean, expect(lambda o: f(o) ** 2) - mean ** 2


def test_white_box_scores_follow_the_subsampled_gaussian_law(correct_run):
    z = z_tolerance(4)
    for scores, included in ((correct_run.scores_in, True), (correct_run.scores_out, False)):
        mean, var = _moments(Q, SIGMA, included)
        n = scores.size
        assert abs(scores.mean() - STEPS * mean) <= z * math.sqrt(STEPS * var / n)
        # sample variance of ~500 near-Gaussian sums: chi-square interval on (n − 1)s²/σ²
        lo, hi = stats.chi2.ppf([1e-7, 1 - 1e-7], n - 1) / (n - 1)
        assert lo <= scores.var(ddof=1) / (STEPS * var) <= hi


@pytest.mark.parametrize("clip, sigma", [(0.5, SIGMA), (1e-7, 0.5)])
def test_final_model_scores_are_binomial_plus_gaussian(clip, sigma):
    """white-box-final: s = K + N(0, Tσ²) with K ~ Bin(T, q) when included, K = 0 otherwise
    (any clip norm, however small: the canary's gradient is clipped to C)."""
    run = train_with_canaries(noise_multiplier=sigma, max_grad_norm=clip, sample_rate=Q, steps=STEPS, seed=3,
                              threat="white-box-final")
    out, inc = run.scores_out, run.scores_in
    assert stats.kstest(out / (sigma * math.sqrt(STEPS)), "norm").pvalue > 1e-6
    z = z_tolerance(4)
    var_in = STEPS * Q * (1 - Q) + STEPS * sigma ** 2
    assert abs(inc.mean() - Q * STEPS) <= z * math.sqrt(var_in / inc.size)
    lo, hi = stats.chi2.ppf([1e-7, 1 - 1e-7], inc.size - 1) / (inc.size - 1)
    assert lo <= inc.var(ddof=1) / var_in <= hi


def test_unclipped_noiseless_full_batch_run_is_plain_gradient_descent():
    """q = 1, C far above every gradient norm, σC = 1e-9: DP-SGD is full-batch gradient descent
    W ← W − (lr/(n + m/2))·Σ_i (softmax(W x_i) − e_{y_i}) x_iᵀ from W = 0 on the real rows plus the included
    black-box canaries (inputs N(0, I), random labels, drawn as the module docstring says); the
    canary scores −CE must match a numpy re-computation."""
    m, steps, lr, seed = 50, 20, 0.5, 5
    run = train_with_canaries(noise_multiplier=1e-15, max_grad_norm=1e6, sample_rate=1.0, steps=steps,
                              canaries=m, threat="black-box", learning_rate=lr, seed=seed)
    ds = load_dataset("digits", rng=derive_seed(seed, "data"))
    rng = derive_generator(seed, "canaries")
    included, labels = rng.random(m) < 0.5, rng.integers(0, 10, size=m)
    xc = np.hstack([rng.standard_normal((m, ds.n_features)), np.ones((m, 1))])
    X = np.vstack([np.hstack([ds.X_train, np.ones((ds.n_train, 1))]), xc[included]])
    Y = np.eye(10)[np.concatenate([ds.y_train, labels[included]])]
    W = np.zeros((10, X.shape[1]))
    for _ in range(steps):
        Z = X @ W.T
        P = np.exp(Z - Z.max(1, keepdims=True))
        P /= P.sum(1, keepdims=True)
        W -= lr / (ds.n_train + m / 2) * (P - Y).T @ X
    Zc = xc @ W.T
    expected = -(np.log(np.exp(Zc - Zc.max(1, keepdims=True)).sum(1)) + Zc.max(1) - Zc[np.arange(m), labels])
    np.testing.assert_array_equal(run.included, included)
    np.testing.assert_allclose(run.scores, expected, rtol=1e-7, atol=1e-7)


def test_step_size_does_not_depend_on_the_coins():
    """η·σ·C is the noise on every weight: read off the realised training set (n + #included), it
    would reveal the number of included canaries to a white-box adversary. Two seeds with different
    inclusion counts must train with the same η = lr/(q·(n + m/2))."""
    kw = dict(noise_multiplier=1.0, sample_rate=0.1, steps=2, canaries=40, learning_rate=0.5)
    runs = [train_with_canaries(seed=s, **kw) for s in range(6)]
    assert len({int(r.included.sum()) for r in runs}) > 1
    for r in runs:
        assert r.step_size == 0.5 / (0.1 * (1347 + 40 / 2))


def test_inclusion_is_a_fair_coin_and_training_learns(correct_run):
    m = correct_run.scores.size
    k = int(correct_run.included.sum())
    assert abs(k - m / 2) <= z_tolerance() * math.sqrt(m / 4)
    assert correct_run.train_examples == 1347  # digits: 75 % of 1797 in the stratified split
    assert correct_run.accuracy >= 0.85


def test_same_seed_same_run_and_torch_threads_restored(correct_run):
    before = torch.get_num_threads()
    again = train_with_canaries(noise_multiplier=SIGMA, max_grad_norm=0.5, sample_rate=Q, steps=STEPS, seed=3)
    assert torch.get_num_threads() == before
    np.testing.assert_array_equal(again.scores, correct_run.scores)
    np.testing.assert_array_equal(again.included, correct_run.included)
    assert again.accuracy == correct_run.accuracy
    other = train_with_canaries(noise_multiplier=SIGMA, sample_rate=Q, steps=1, seed=4)
    assert not np.array_equal(other.included, correct_run.included)


def test_progress_counts_every_step():
    seen = []
    train_with_canaries(noise_multiplier=1.0, sample_rate=0.05, steps=7, canaries=20, progress=seen.append)
    assert seen == list(range(1, 8))


def test_black_box_and_synthetic_runs_train():
    bb = train_with_canaries(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, threat="black-box")
    assert bb.accuracy >= 0.85 and np.isfinite(bb.scores).all() and (bb.scores <= 0).all()  # −CE ≤ 0
    syn = train_with_canaries(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, dataset="synthetic",
                              canaries=100)
    assert syn.accuracy > 0.2  # 10 classes: well above chance


@pytest.mark.parametrize("key, value, match", [
    ("noise_multiplier", 0.0, "noise_multiplier"), ("noise_multiplier", -1.0, "noise_multiplier"),
    ("sample_rate", 0.0, "sample_rate"), ("sample_rate", 1.5, "sample_rate"), ("steps", 0, "steps"),
    ("canaries", 9, "canaries"), ("dataset", "mnist-x", "dataset"), ("threat", "grey-box", "threat"),
    ("max_grad_norm", 0.0, "max_grad_norm"), ("learning_rate", -0.1, "learning_rate"),
    ("score_noise_multiplier", 0.0, "score_noise_multiplier"), ("seed", -1, "seed"), ("threads", 0, "threads")])
def test_bad_training_input_names_the_key(key, value, match):
    kw = dict(noise_multiplier=1.0, sample_rate=0.1, steps=5, canaries=20)
    kw[key] = value
    with pytest.raises(FedAuditError, match=match):
        train_with_canaries(**kw)


# ----------------------------------------------------------------------------- audit_dpsgd


@pytest.fixture(scope="module")
def correct_audit():
    return audit_dpsgd(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, seed=0)


@pytest.fixture(scope="module")
def broken_audit():
    # the noise divided by 10 while the accountant keeps the claimed σ
    return audit_dpsgd(noise_multiplier=SIGMA / 10, claimed_noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS,
                       seed=0)


def _pld_epsilon(sigma, q, steps, delta):
    """dp-accounting's PLD accountant, called directly (the reference the ledger must match)."""
    from dp_accounting import dp_event, pld
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return acc.get_epsilon(delta)


def test_correct_configuration_is_not_a_violation(correct_audit):
    a = correct_audit
    assert a.accountant.epsilon == pytest.approx(_pld_epsilon(SIGMA, Q, STEPS, 1e-5), rel=1e-6)
    assert 1.0 < a.accountant.epsilon < 4.0
    assert not a.violation and a.violated_by == ()
    assert a.one_run.epsilon < a.accountant.epsilon and a.one_run_fdp.epsilon < a.accountant.epsilon
    assert a.one_run.method == "steinke" and a.one_run_fdp.method == "fdp"
    assert a.one_run.canaries == a.canaries == 1000 and a.one_run.canaries_in == a.canaries_in
    assert a.accuracy >= 0.85 and a.seconds >= a.training_seconds > 0


def test_noise_divided_by_ten_is_a_violation(broken_audit, correct_audit):
    a = broken_audit
    # the accountant is told the claimed σ: the same ε as the correct run
    assert a.accountant.epsilon == correct_audit.accountant.epsilon
    assert a.noise_multiplier == SIGMA / 10 and a.claimed_noise_multiplier == SIGMA
    assert a.violation and a.violated_by == ("steinke", "fdp")
    assert a.one_run.epsilon > a.accountant.epsilon + 1.5
    assert "VIOLATION" in a.summary() and "no violation" in correct_audit.summary()


def test_final_model_adversary_also_flags_the_broken_run():
    a = audit_dpsgd(noise_multiplier=SIGMA / 10, claimed_noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS,
                    canaries=500, threat="white-box-final", seed=0)
    assert a.threat == "white-box-final" and a.violation and a.one_run.epsilon > a.accountant.epsilon + 1.0


@pytest.mark.filterwarnings("ignore:Optimal order is the smallest alpha")
def test_one_run_ceiling_and_non_private_training_reaches_it():
    a = audit_dpsgd(noise_multiplier=1e-3, sample_rate=Q, steps=STEPS, accountant="rdp", seed=0)
    ceiling = one_run_epsilon(1000, 1000, 1000, delta=1e-5, confidence=0.95)
    assert ceiling == pytest.approx(5.78, abs=0.005)  # the published ceiling at m = 1000
    assert a.one_run.epsilon <= ceiling
    # every guess is right, so the bound is the all-correct bound of the best feasible grid entry
    # (balanced guesses: ⌈r/2⌉ ≤ canaries in, ⌊r/2⌋ ≤ canaries out), each at α/#grid
    k, alpha = a.canaries_in, (1 - a.confidence) / len(a.one_run.grid)
    feasible = [r for r in a.one_run.grid if (r + 1) // 2 <= k and r // 2 <= a.canaries - k]
    best = max(one_run_epsilon(r, r, 1000, delta=1e-5, confidence=1 - alpha) for r in feasible)
    assert a.one_run.correct == a.one_run.guesses
    assert a.one_run.epsilon == pytest.approx(best, rel=1e-6) and best > 4.4


def test_same_seed_same_audit(correct_audit):
    again = audit_dpsgd(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, seed=0).to_dict()
    first = correct_audit.to_dict()
    for d in (again, first):
        d.pop("seconds"), d.pop("training_seconds")
    assert again == first


def test_black_box_correct_run_is_not_flagged_and_json_is_strict():
    a = audit_dpsgd(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, threat="black-box", seed=0)
    assert a.threat == "black-box" and not a.violation
    text = dumps(a.to_dict())
    back = loads(text)
    assert back["accountant"]["epsilon"] == a.accountant.epsilon and back["one_run"]["method"] == "steinke"
    assert back["gdp"]["epsilon"] == a.gdp.epsilon and back["violated_by"] == []


@pytest.mark.parametrize("key, value, match", [
    ("delta", 0.0, "delta"), ("delta", 1.0, "delta"), ("delta", -1e-5, "delta"),
    ("sample_rate", 0.0, "sample_rate"), ("sample_rate", 1.01, "sample_rate"),
    ("noise_multiplier", -1.0, "noise_multiplier"), ("noise_multiplier", 0.0, "noise_multiplier"),
    ("claimed_noise_multiplier", 0.0, "claimed_noise_multiplier"), ("canaries", 9, "canaries"),
    ("steps", 0, "steps"), ("dataset", "cifar", "dataset"), ("threat", "gray-box", "threat"),
    ("accountant", "moments", "accountant"), ("confidence", 1.0, "confidence")])
def test_bad_audit_input_names_the_key(key, value, match):
    kw = dict(noise_multiplier=1.0, sample_rate=0.1, steps=2, canaries=20)
    kw[key] = value
    with pytest.raises(FedAuditError, match=match):
        audit_dpsgd(**kw)


def test_too_few_canaries_on_one_side_is_explained():
    with pytest.raises(FedAuditError, match="each side needs at least 10"):
        audit_dpsgd(noise_multiplier=1.0, sample_rate=0.1, steps=2, canaries=10)


def test_gaussian_fdp_curve_is_reported_but_never_counts_as_a_violation(broken_audit):
    a = audit_dpsgd(noise_multiplier=SIGMA / 10, claimed_noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS,
                    seed=0, fdp_curve="gaussian")
    assert broken_audit.one_run_fdp.curve == "dp" and a.one_run_fdp.curve == "gaussian"
    # the Gaussian hypothesis is the stronger one: its bound is at least the (ε, δ)-curve bound
    assert a.one_run_fdp.epsilon >= broken_audit.one_run_fdp.epsilon > a.accountant.epsilon
    assert a.violation and a.violated_by == ("steinke",)
    # nor is it the certified lower bound the result reports, nor called f-DP plainly in the summary
    assert a.epsilon_lower == a.one_run.epsilon < a.one_run_fdp.epsilon
    assert broken_audit.epsilon_lower == max(broken_audit.one_run.epsilon, broken_audit.one_run_fdp.epsilon)
    assert "Gaussian-curve estimate" in a.summary() and "estimate" not in broken_audit.summary().split("GDP")[0]
    with pytest.raises(FedAuditError, match="fdp_curve"):
        audit_dpsgd(noise_multiplier=1.0, sample_rate=0.1, steps=2, canaries=20, fdp_curve="laplace")


@pytest.mark.slow
@pytest.mark.parametrize("threat", ["white-box", "black-box"])
def test_benchmark_configuration(threat):
    """The benchmark's configuration (σ = 1, q = 0.02, 1000 steps: accountant ε ≈ 3.90 at δ = 1e-5)."""
    ok = audit_dpsgd(noise_multiplier=1.0, sample_rate=0.02, steps=1000, threat=threat, seed=0)
    assert ok.accountant.epsilon == pytest.approx(_pld_epsilon(1.0, 0.02, 1000, 1e-5), rel=1e-6)
    assert not ok.violation and ok.accuracy >= 0.9
    bad = audit_dpsgd(noise_multiplier=0.1, claimed_noise_multiplier=1.0, sample_rate=0.02, steps=1000,
                      threat=threat, seed=0)
    assert bad.accountant.epsilon == ok.accountant.epsilon
    if threat == "white-box":
        assert bad.violation and bad.one_run.epsilon > bad.accountant.epsilon
    else:  # mislabelled inputs scored by the final loss: far too weak to refute ε ≈ 3.9
        assert not bad.violation and bad.one_run.epsilon < 1.0


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_correct_runs_are_not_flagged_across_seeds(seed):
    """A violation of a correct run has probability ≤ 1 − confidence per bound; five seeds of the
    fast configuration (and their full-batch variant) stay far below the accountant."""
    for q, steps, sigma in ((Q, STEPS, SIGMA), (1.0, 20, 8.0)):
        a = audit_dpsgd(noise_multiplier=sigma, sample_rate=q, steps=steps, canaries=500, seed=seed)
        assert not a.violation and a.epsilon_lower < 0.6 * a.accountant.epsilon


def test_accountant_out_of_memory_is_a_clear_error(monkeypatch):
    # dp-accounting's PLD grid grows like 1/σ² (σ = 1e-3 asks numpy for 38 GiB): the accountant says what to do
    from dp_accounting import pld

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(pld.PLDAccountant, "compose", exhausted)
    with pytest.raises(FedAuditError, match="noise_multiplier=0.001.*method='rdp'"):
        audit_dpsgd(noise_multiplier=1e-3, sample_rate=0.1, steps=2, canaries=40)
