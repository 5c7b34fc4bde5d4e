"""Shared test configuration: deterministic hypothesis profile, derived tolerances."""

import itertools
import os

import numpy as np
from hypothesis import HealthCheck, settings
from scipy import stats

from fedaudit.experiments.runner import PlanProgress

# Flower (tests/test_flower_*.py): no telemetry (the machine has no network), and quiet logs.
for _key, _value in (("FLWR_TELEMETRY_ENABLED", "0"), ("FLWR_LOG_LEVEL", "ERROR"),
                     ("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")):
    os.environ.setdefault(_key, _value)

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("dev", deadline=None, max_examples=100)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: Family-wise error rate the whole statistical suite is allowed (per assertion it is split).
SUITE_ALPHA = 1e-6


def z_tolerance(n_assertions: int = 1, alpha: float = SUITE_ALPHA) -> float:
    """Two-sided normal quantile for a Bonferroni share of ``alpha`` over ``n_assertions``."""
    return float(stats.norm.isf(alpha / (2 * n_assertions)))


def assert_unbiased(estimates: np.ndarray, truth: np.ndarray, n_assertions: int = 1) -> None:
    """Every coordinate's sample mean lies within z·SE of the truth (SE from the sample itself)."""
    estimates = np.asarray(estimates, dtype=np.float64)
    n = estimates.shape[0]
    mean = estimates.mean(axis=0)
    se = estimates.std(axis=0, ddof=1) / np.sqrt(n)
    z = z_tolerance(n_assertions * estimates.shape[1])
    err = np.abs(mean - truth)
    ok = err <= z * se + 1e-12
    assert ok.all(), (f"bias beyond {z:.2f} SE at coords {np.flatnonzero(~ok)[:5]}: "
                      f"mean={mean[~ok][:5]}, truth={np.asarray(truth)[~ok][:5]}, se={se[~ok][:5]}")


def brute_ratio(X: np.ndarray, z: np.ndarray, f: int) -> float:
    """Robustness ratio by brute force: max over |S| = n − f of ‖z − x̄_S‖² / ((1/|S|) Σ_S ‖x_i − x̄_S‖²)."""
    n = X.shape[0]
    best = 0.0
    for S in itertools.combinations(range(n), n - f):
        xs = X[list(S)]
        m = xs.mean(0)
        best = max(best, float(np.sum((z - m) ** 2) / np.mean(np.sum((xs - m) ** 2, axis=1))))
    return best


class UnitCounter(PlanProgress):
    """Plan progress that records each claim's announced (total, unit) and the units it then advanced."""

    def __init__(self):
        self.total, self.done = {}, {}

    def claim_started(self, spec, total, unit):
        self.total[spec.id], self.done[spec.id] = (total, unit), 0

    def advance(self, n):
        (last,) = list(self.done)[-1:]
        self.done[last] += n
