"""The (f, ν) auditor: exact subset maximisation, lower-bound construction, bounds, replay."""

import json
import math

import numpy as np
import pytest

from fedaudit.audit.robustness import audit_robustness, replay, robustness_ratio
from fedaudit.defenses.registry import make_aggregator
from fedaudit.defenses.kappa import kappa_lower_bound
from fedaudit.errors import FedAuditError
from tests.helpers import brute_ratio


@pytest.mark.parametrize("n, f", [(5, 1), (7, 2), (9, 3)])
def test_ratio_matches_brute_force(n, f):
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, 4)) + 10.0  # an offset: the Gram computation must centre
    z = rng.normal(size=4) + 10.0
    nu, S, method = robustness_ratio(X, z, f)
    assert method == "exhaustive"
    assert nu == pytest.approx(brute_ratio(X, z, f), rel=1e-9)
    xs = X[S]
    assert nu == pytest.approx(np.sum((z - xs.mean(0)) ** 2) / np.mean(np.sum((xs - xs.mean(0)) ** 2, 1)), rel=1e-9)


def test_greedy_search_is_used_and_sound_for_large_subsets():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 5))
    z = X[:20].mean(0) + 0.5
    nu, S, method = robustness_ratio(X, z, 10, honest=np.arange(20))
    assert method == "greedy swap search" and len(S) == 20
    xs = X[S]
    assert nu == pytest.approx(np.sum((z - xs.mean(0)) ** 2) / np.mean(np.sum((xs - xs.mean(0)) ** 2, 1)), rel=1e-9)
    honest_nu = np.sum((z - X[:20].mean(0)) ** 2) / np.mean(np.sum((X[:20] - X[:20].mean(0)) ** 2, 1))
    assert nu >= honest_nu * (1 - 1e-12)


@pytest.mark.parametrize("rule", ["cwtm", "cwmed", "krum", "gm", "nnm+cwtm"])
def test_rules_reach_the_universal_lower_bound_and_stay_below_published_bounds(rule):
    res = audit_robustness(rule, n=11, f=2, dim=10, trials=36, search_evals=20, search=300, seed=0)
    assert res.reaches_lower_bound, res.per_configuration
    assert res.nu_empirical >= kappa_lower_bound(11, 2) * (1 - 1e-3)
    assert res.nu_bound is not None and not res.violation
    assert res.nu_empirical <= res.nu_bound


def test_mean_is_unbounded():
    res = audit_robustness("mean", n=11, f=2, dim=5, trials=4, search_evals=0, seed=0)
    assert res.unbounded and math.isinf(res.nu_empirical)
    assert not res.violation  # the published "bound" for the mean is itself infinite


def test_dim_is_the_dimension_and_d_its_deprecated_name():
    """One name for the dimension in Python, plans and the CLI (``dim``); ``d=`` still works for one
    release with a DeprecationWarning naming ``dim=``, and giving both is a one-line error (issue #24)."""
    from fedaudit.audit.robustness import progress_units

    new = audit_robustness("cwtm", n=7, f=1, dim=3, trials=4, search_evals=0, search=0, seed=0)
    with pytest.warns(DeprecationWarning, match=r"audit_robustness: d= is deprecated; use dim="):
        old = audit_robustness("cwtm", n=7, f=1, d=3, trials=4, search_evals=0, search=0, seed=0)
    assert new.d == old.d == 3 and new.nu_empirical == old.nu_empirical
    with pytest.raises(FedAuditError, match="give dim"):
        audit_robustness("cwtm", n=7, f=1, dim=4, d=3, trials=4)
    with pytest.warns(DeprecationWarning, match=r"progress_units: d= is deprecated; use dim="):
        assert progress_units(1, 4, 0, 0, d=3) == progress_units(1, 4, 0, 0, dim=3)


def test_replay_reproduces_the_saved_configuration():
    agg = make_aggregator("cwtm", 2)
    res = audit_robustness(agg, n=9, f=2, dim=6, trials=20, search_evals=10, search=400, seed=3)
    assert replay(res.config, agg) == pytest.approx(res.nu_empirical, rel=1e-9)
    json.dumps(res.to_dict())


def test_deterministic_under_seed():
    a = audit_robustness("krum", n=9, f=2, dim=5, trials=12, search_evals=5, search=400, seed=7)
    b = audit_robustness("krum", n=9, f=2, dim=5, trials=12, search_evals=5, search=400, seed=7)
    assert a.nu_empirical == b.nu_empirical and a.worst_attack == b.worst_attack and a.config == b.config


def test_planted_non_robust_rule_is_flagged():
    """A 'trimmed mean' that trims one value fewer than it claims violates the CWTM bound."""
    from fedaudit.defenses.aggregators import CWTM

    class UnderTrimmed(CWTM):
        name = "cwtm"

        def _aggregate(self, X, f):
            return super()._aggregate(X, max(f - 1, 0))

    res = audit_robustness(UnderTrimmed(2), n=9, f=2, dim=5, trials=30, search_evals=30, search=0, seed=0)
    assert res.violation and res.nu_empirical > res.nu_bound


def test_a_rule_named_cwtm_does_not_inherit_the_cwtm_bound():
    """The bound comes from the rule's robustness class: a rule that is not a CWTM but calls
    itself "cwtm" is audited without a published bound (and so cannot "violate" it)."""
    from fedaudit.defenses.base import Aggregator

    class FirstRow(Aggregator):
        name = "cwtm"

        def _aggregate(self, X, f):
            return X[0]

    res = audit_robustness(FirstRow(2), n=9, f=2, dim=5, trials=6, search_evals=0, search=0, seed=0)
    assert res.aggregator == "cwtm" and res.nu_bound is None and res.bound is None and not res.violation
    assert res.nu_empirical > kappa_lower_bound(9, 2)  # the empirical search still measures it


@pytest.mark.parametrize("kwargs, needle", [
    (dict(n=4, f=2), "n > 2f"),
    (dict(n=7, f=2, attacks="nosuch"), "unknown attack"),
    (dict(n=7, f=2, trials=0), "trials"),
])
def test_bad_input(kwargs, needle):
    with pytest.raises(FedAuditError) as info:
        audit_robustness("cwtm", **kwargs)
    assert needle in str(info.value)


def test_krum_requirement_is_checked():
    with pytest.raises(FedAuditError, match="needs n >="):
        audit_robustness("krum", n=6, f=2, trials=2)
