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

from conftest import z_tolerance
from fedaudit.audit.canaries import train_with_canaries
from fedaudit.errors import FedAuditError

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
    other = train_with_canaries(noise_multiplier=SIGMA, sample_rate=Q, steps=STEPS, seed=4)
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
    ("score_noise_multiplier", 0.0, "score_noise_multiplier")])
def test_bad_training_input_names_the_key(key, value, match):
    kw = dict(noise_multiplier=1.0, sample_rate=0.1, steps=5, canaries=20)
    kw[key] = value
    with pytest.raises(FedAuditError, match=match):
        train_with_canaries(**kw)
