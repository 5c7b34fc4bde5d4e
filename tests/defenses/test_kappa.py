"""Published (f, κ) bounds: values, internal consistency, monotonicity, errors."""

import math

import pytest
from hypothesis import given, strategies as st

from fedaudit.defenses.kappa import kappa_lower_bound, kappa_upper_bound
from fedaudit.errors import FedAuditError


def test_known_values():
    # n = 21, f = 5: r = f/(n−2f) = 5/11
    r = 5 / 11
    assert kappa_lower_bound(21, 5) == pytest.approx(r)
    assert kappa_upper_bound("cwtm", 21, 5).kappa == pytest.approx(6 * r * (1 + r))
    assert kappa_upper_bound("krum", 21, 5).kappa == pytest.approx(6 * (1 + r))
    assert kappa_upper_bound("gm", 21, 5).kappa == pytest.approx(4 * (1 + r) ** 2)
    assert kappa_upper_bound("cwmed", 21, 5).kappa == pytest.approx(4 * (1 + r) ** 2)
    inner = 6 * r * (1 + r)
    assert kappa_upper_bound("nnm+cwtm", 21, 5).kappa == pytest.approx(8 * 5 / 16 * (inner + 1))
    assert kappa_upper_bound("NNM+CWTM", 21, 5).rule == "nnm+cwtm"


def test_mean_and_unknown_rules():
    assert kappa_upper_bound("mean", 10, 0).kappa == 0.0
    assert math.isinf(kappa_upper_bound("mean", 10, 1).kappa)
    assert kappa_upper_bound("mda", 10, 2) is None
    assert kappa_upper_bound("nnm+mda", 10, 2) is None
    assert kappa_upper_bound("krum", 6, 2) is None  # Krum needs n > 2f + 2
    assert kappa_upper_bound("cwtm", 21, 5).verified is False


@given(f=st.integers(1, 30), extra=st.integers(1, 60))
def test_every_published_bound_is_at_least_the_universal_lower_bound(f, extra):
    n = 2 * f + extra
    low = kappa_lower_bound(n, f)
    for rule in ("cwtm", "krum", "gm", "cwmed", "nnm+cwtm", "nnm+gm", "nnm+cwmed"):
        b = kappa_upper_bound(rule, n, f)
        if b is not None:
            assert b.kappa >= low - 1e-12, (rule, n, f)


@given(f=st.integers(0, 20), extra=st.integers(1, 40))
def test_bounds_grow_with_f_at_fixed_n(f, extra):
    n = 2 * (f + 1) + extra
    assert kappa_lower_bound(n, f + 1) > kappa_lower_bound(n, f)
    for rule in ("cwtm", "gm", "cwmed", "nnm+cwtm"):
        assert kappa_upper_bound(rule, n, f + 1).kappa >= kappa_upper_bound(rule, n, f).kappa


@pytest.mark.parametrize("n, f", [(4, 2), (5, 3), (0, 0), (3, -1)])
def test_bad_n_f(n, f):
    with pytest.raises(FedAuditError):
        kappa_lower_bound(n, f)


def test_bound_dispatches_on_the_rule_class_not_its_name():
    """A user's rule named "cwtm" must not inherit CWTM's bound; instances, compositions, specs
    and classes give the same bound as the names did."""
    import numpy as np

    from fedaudit.defenses import CWTM, NNM, Aggregator, GeometricMedian, Krum, Mean, MultiKrum, compose
    from fedaudit.defenses.base import MedianBased, NearestNeighbourMixing, RobustnessClass, TrimmedMean
    from fedaudit.defenses.kappa import kappa_formula, robustness_class

    class Impostor(Aggregator):
        name = "cwtm"

        def _aggregate(self, X, f):
            return X[0]

    assert kappa_upper_bound(Impostor(5), 21, 5) is None
    assert robustness_class(Impostor(5)) == (RobustnessClass(), "cwtm")
    by_name = kappa_upper_bound("cwtm", 21, 5)
    assert kappa_upper_bound(CWTM(5), 21, 5) == by_name and by_name.rule == "cwtm"
    assert kappa_upper_bound(TrimmedMean(), 21, 5).kappa == by_name.kappa
    assert kappa_upper_bound(compose(NNM(5), Krum(5)), 21, 5) == kappa_upper_bound("nnm+krum", 21, 5)
    assert kappa_upper_bound(compose(NNM(5), Impostor(5)), 21, 5) is None
    assert compose(NNM(5), GeometricMedian()).robustness == NearestNeighbourMixing(MedianBased())
    assert kappa_upper_bound(MultiKrum(2), 10, 2) is None and kappa_upper_bound(Mean(1), 10, 1).kappa == math.inf

    class Subclassed(CWTM):  # a CWTM is a CWTM, whatever it is called
        name = "my-trimmed"

    assert kappa_upper_bound(Subclassed(5), 21, 5).kappa == by_name.kappa

    class Declared(Aggregator):  # a user rule may declare a class, and register a bound for a new one
        name = "declared"
        robustness = MedianBased()

        def _aggregate(self, X, f):
            return np.median(X, axis=0)

    assert kappa_upper_bound(Declared(2), 11, 2).kappa == kappa_upper_bound("gm", 11, 2).kappa

    class Halving(RobustnessClass):
        pass

    kappa_formula.register(Halving, lambda cls, n, f, rule: (0.5, "1/2"))
    assert kappa_upper_bound(Halving(), 11, 2).kappa == 0.5
    with pytest.raises(FedAuditError, match="did you mean 'cwtm'"):
        kappa_upper_bound("cwmt", 21, 5)
    with pytest.raises(FedAuditError, match="must be an Aggregator"):
        kappa_upper_bound(3.0, 21, 5)


def test_nnm_twice_has_no_published_bound():
    """The NNM bound is published for NNM ∘ F with F a base rule; NNM ∘ NNM ∘ F gets none."""
    from fedaudit.defenses.kappa import kappa_upper_bound

    assert kappa_upper_bound("nnm+cwtm", 21, 3) is not None
    assert kappa_upper_bound("nnm+nnm+cwtm", 21, 3) is None
