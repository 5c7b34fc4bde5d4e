"""Shuffle amplification (Feldman–McMillan–Talwar 2021) against the published interval, the
research note's table (../shared/research/privacy.md section 4) and a brute-force evaluation of
the hockey-stick divergence over every (c, x)."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.stats import binom

from fedaudit.accounting.shuffling import ShuffleBound, closed_form_regime, shuffle_epsilon
from fedaudit.errors import FedAuditError


def _quiet(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # these cases must not warn
        return shuffle_epsilon(*args, **kw)


def test_numerical_lands_in_the_published_interval():
    b = _quiet(100_000, 4.0, 1e-6, method="numerical")
    assert 0.1675 <= b.epsilon <= 0.1728
    assert b.amplified and b.method == "numerical"


# note's table, δ = 1e-6: closed form (exact formula, 3 decimals)
@pytest.mark.parametrize("n,eps0,closed", [
    (10_000, 1, 0.233), (10_000, 2, 0.524), (100_000, 1, 0.075), (100_000, 2, 0.191),
    (100_000, 4, 0.538), (1_000_000, 2, 0.063), (1_000_000, 4, 0.202), (1_000_000, 8, 1.003),
])
def test_closed_form_reproduces_the_table(n, eps0, closed):
    assert round(_quiet(n, eps0, 1e-6, method="closed").epsilon, 3) == closed


# The note's numerical column came from the reference code with a coarse c-step (10 or 100),
# which bounds each block of c by its worse end: an upper bound on this exact sum. Ours is never
# above it and within 5% of it (after the table's rounding).
@pytest.mark.parametrize("n,eps0,coarse", [
    (10_000, 1, 0.055), (10_000, 2, 0.159), (10_000, 4, 0.621), (100_000, 1, 0.016),
    (100_000, 2, 0.045), (100_000, 4, 0.173), (1_000_000, 4, 0.050),
])
def test_numerical_is_at_most_the_coarse_table_and_close_to_it(n, eps0, coarse):
    eps = _quiet(n, eps0, 1e-6, method="numerical").epsilon
    assert 0.95 * (coarse - 5e-4) <= eps <= coarse + 5e-4


def _brute_force(n, eps0, delta):
    """δ(ε) summed over every c and x, both directions, then bisection on [0, ε0]."""
    a = 1 / (1 + math.exp(-eps0))
    c, x = np.arange(n), np.arange(n + 1)
    b0 = binom.pmf(x[None, :], c[:, None], 0.5)
    b1 = binom.pmf(x[None, :] - 1, c[:, None], 0.5)
    p, q = a * b0 + (1 - a) * b1, (1 - a) * b0 + a * b1
    w = binom.pmf(c, n - 1, math.exp(-eps0))

    def d(e):
        return max(w @ np.maximum(0, p - math.exp(e) * q).sum(1), w @ np.maximum(0, q - math.exp(e) * p).sum(1))

    lo, hi = 0.0, eps0
    for _ in range(40):
        lo, hi = (lo, (lo + hi) / 2) if d((lo + hi) / 2) <= delta else ((lo + hi) / 2, hi)
    return hi


@pytest.mark.parametrize("n,eps0", [(300, 1.0), (800, 3.0), (400, 0.3)])
def test_numerical_matches_brute_force(n, eps0):
    exact = _brute_force(n, eps0, 1e-6)
    assert _quiet(n, eps0, 1e-6, method="numerical").epsilon == pytest.approx(exact, abs=3e-5 * eps0)


@pytest.mark.parametrize("method", ["closed", "numerical"])
def test_larger_n_never_raises_epsilon(method):
    eps = [_quiet(n, 2.0, 1e-6, method=method).epsilon for n in (3_000, 10_000, 30_000, 100_000, 1_000_000)]
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert eps[0] < 2.0


def test_numerical_is_tighter_than_closed_and_monotone_in_eps0():
    closed = _quiet(100_000, 2.0, 1e-6).epsilon
    num = [_quiet(100_000, e0, 1e-6, method="numerical").epsilon for e0 in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert num[2] < closed
    assert all(a < b for a, b in zip(num, num[1:]))


def test_closed_form_outside_its_regime_warns_and_reports_no_amplification():
    assert closed_form_regime(10_000, 1e-6) == pytest.approx(math.log(10_000 / (16 * math.log(4e6))))
    with pytest.warns(UserWarning, match="regime"):
        b = shuffle_epsilon(10_000, 4.0, 1e-6, method="closed")
    assert b.epsilon == 4.0 and not b.amplified


def test_numerical_without_amplification_warns():
    with pytest.warns(UserWarning, match="no amplification certified"):
        b = shuffle_epsilon(10_000, 8.0, 1e-6, method="numerical")
    assert b.epsilon == 8.0 and not b.amplified
    with pytest.warns(UserWarning, match="no amplification"):
        assert not shuffle_epsilon(1, 1.0, 1e-6, method="numerical").amplified  # one client: nothing to hide among


def test_numerical_certifies_where_the_closed_form_cannot():
    b = _quiet(100_000, 8.0, 1e-6, method="numerical")  # outside the closed form's regime
    assert b.amplified and 2.0 < b.epsilon < 2.357  # note: 2.357 by the reference code at step 1


def test_result_is_frozen_and_json():
    b = _quiet(100_000, 4.0, 1e-6, method="numerical")
    assert isinstance(b, ShuffleBound)
    with pytest.raises(AttributeError):
        b.epsilon = 0.0
    d = json.loads(json.dumps(b.to_dict(), allow_nan=False))
    assert d == {"epsilon": b.epsilon, "delta": 1e-6, "n": 100_000, "eps0": 4.0, "method": "numerical",
                 "amplified": True, "epsilon_bound": "upper"}


@pytest.mark.parametrize("args,name", [
    ((0, 1.0, 1e-6), "n"), ((-5, 1.0, 1e-6), "n"), ((10.5, 1.0, 1e-6), "n"),
    ((1000, 0.0, 1e-6), "eps0"), ((1000, -1.0, 1e-6), "eps0"), ((1000, math.inf, 1e-6), "eps0"),
    ((1000, 1.0, 0.0), "delta"), ((1000, 1.0, 1.0), "delta"), ((1000, 1.0, 2.0), "delta"),
])
@pytest.mark.parametrize("method", ["closed", "numerical"])
def test_bad_input_names_the_parameter(args, name, method):
    with pytest.raises(FedAuditError, match=rf"\b{name} must"):
        shuffle_epsilon(*args, method=method)


def test_bad_method():
    with pytest.raises(FedAuditError, match="method"):
        shuffle_epsilon(1000, 1.0, 1e-6, method="blanket")
