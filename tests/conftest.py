"""Shared test configuration: deterministic hypothesis profile, derived tolerances."""

import atexit
import functools
import importlib.util
import itertools
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from scipy import stats

from fedaudit.experiments.runner import PlanProgress

# Flower (tests/test_flower_*.py): no telemetry (the machine has no network), and quiet logs.
for _key, _value in (("FLWR_TELEMETRY_ENABLED", "0"), ("FLWR_LOG_LEVEL", "ERROR"),
                     ("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")):
    os.environ.setdefault(_key, _value)

# The engine's default backend is "process" (fedaudit.engine.default_backend). The suite runs the
# audits it does not aim at a backend in this process (2 cores, many small audits, monkeypatched
# helpers that a worker would not see); the backends are compared explicitly in tests/test_engine*.py
# and the *_engine tests. `FEDAUDIT_BACKEND=process pytest` runs the whole suite on worker processes.
os.environ.setdefault("FEDAUDIT_BACKEND", "serial")

# Checkpoints are authenticated with the user's fedaudit secret (fedaudit.chain): the suite keeps
# it in a directory of its own (inherited by the CLI subprocesses), never in ~/.local/state.
if not os.environ.get("FEDAUDIT_STATE_DIR"):
    os.environ["FEDAUDIT_STATE_DIR"] = tempfile.mkdtemp(prefix="fedaudit-test-state-")
    atexit.register(shutil.rmtree, os.environ["FEDAUDIT_STATE_DIR"], True)

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


def load_benchmark(filename: str):
    """Import ``benchmarks/FILENAME`` (not a package) as a module, for tests of a benchmark script."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / filename
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def recorded(claim) -> dict:
    """A claim's evidence as report.json stores it (strict JSON round trip)."""
    from fedaudit import json as fjson

    return fjson.loads(fjson.dumps(claim.evidence), what="evidence")


def check_rederived(claim, flips=(), missing=()) -> None:
    """Its kind's ``decide`` re-derives the claim's verdict from its recorded evidence; each
    ``(edit, verdict)`` of ``flips`` (an edit of one decisive number of the recorded evidence) moves
    the re-derived verdict to ``verdict``; each edit of ``missing`` (a needed number removed or
    malformed) leaves evidence that cannot decide (EvidenceError)."""
    from fedaudit.experiments.kind import EvidenceError, derived_verdict
    from fedaudit.experiments.kinds import claim_kind

    kind = claim_kind(claim.kind)
    assert claim.error is None, claim.error
    assert derived_verdict(kind, claim.expect, recorded(claim)) == claim.verdict
    for edit, verdict in flips:
        evidence = recorded(claim)
        edit(evidence)
        assert verdict != claim.verdict and derived_verdict(kind, claim.expect, evidence) == verdict
    for edit in missing:
        evidence = recorded(claim)
        edit(evidence)
        with pytest.raises(EvidenceError):
            derived_verdict(kind, claim.expect, evidence)


@pytest.fixture
def ray_local():
    """A local Ray instance (``ray.init(num_cpus=2)``) shared by every test of the session that asks
    for it: started on first use (again after a test that needed Ray to itself shut it down, e.g.
    the ``ray start --head`` cluster test), stopped at the end of the session. Starting Ray costs
    10–15 s on 2 cores, so modules never start their own."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        # the workers import the test modules to unpickle their chunk functions (as a cluster user ships theirs)
        path = os.pathsep.join(p for p in (os.path.dirname(__file__), os.environ.get("PYTHONPATH")) if p)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 runtime_env={"env_vars": {"PYTHONPATH": path}})
    return ray


@pytest.fixture(scope="session", autouse=True)
def _stop_ray_at_the_end():
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


#: Modules that start Ray themselves: a cluster with ``ray start --head``, or Flower's simulation
#: (which ends with ``ray.shutdown()``, stopping the session's Ray too).
_RAY_MODULES = {"test_engine_ray_cluster.py", "test_flower_simulation.py", "test_flower_ldp.py",
                "test_claim_kinds_flower.py"}


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``-n`` workers with ``--dist loadgroup``), every test
    that uses Ray goes to one worker, in collection order: one shared local Ray per run instead of
    one per worker, and the tests that stop or replace Ray never race the ones that use it."""
    for item in items:
        if "ray_local" in item.fixturenames or item.path.name in _RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))


def reseal_checkpoint(path, purpose=None) -> None:
    """Recompute every MAC of the chained JSON-lines file ``path`` (its lines kept in order) under
    this user's secret (:mod:`fedaudit.chain`): what only the holder of the secret can do. Tests that
    edit a record to show that a resumed run reads it (and still checks its shape) reseal it.
    ``purpose``: the file's key purpose, default an engine checkpoint's (``chain.ENGINE_PURPOSE``;
    a stress grid's ``cells.jsonl``: ``chain.CELLS_PURPOSE``)."""
    import json
    from pathlib import Path

    from fedaudit import chain

    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    key = chain.derive_key(chain.user_secret(create=False), purpose or chain.ENGINE_PURPOSE, header["nonce"])
    header = chain.Chain.seal_header(key, header)
    link = chain.Chain(key, header)
    records = [link.seal(json.loads(line)) for line in lines[1:]]
    path.write_text("\n".join(json.dumps(r) for r in [header, *records]) + "\n", encoding="utf-8")


def gaussian_delta(mu: float, eps: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism at sensitivity/σ = μ (Balle and Wang 2018), the reference
    the accountant tests check against."""
    return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of the Gaussian mechanism at sensitivity/σ = μ (:func:`gaussian_delta` inverted)."""
    from scipy.optimize import brentq

    return float(brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, 100.0, xtol=1e-12))


def analytic_gaussian(neighboring_relation, *, slack: float = 0.0):
    """The toy accountant of the tests, a user's accountant as the docs show one: the exact ε of
    composed unsampled Gaussian steps under add/remove neighbours (ten steps of σ are one Gaussian
    of σ/√10), plus ``slack``. A factory ``factory(neighboring_relation, **settings)``: registered
    under a name (``ACCOUNTANTS.register(name, analytic_gaussian)``) or named by a ``module:attr``
    reference, it is accepted wherever fedaudit takes an accountant. Its class subclasses
    dp-accounting's ``PrivacyAccountant`` and is made on first use, so that conftest does not import
    dp-accounting (seconds) for every test."""
    return _analytic_gaussian_class()(neighboring_relation, slack=slack)


@functools.lru_cache(maxsize=1)
def _analytic_gaussian_class() -> type:
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant

    from fedaudit.guarantees import Bound

    class _AnalyticGaussian(PrivacyAccountant):
        __doc__ = analytic_gaussian.__doc__

        def __init__(self, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE, *, slack: float = 0.0):
            super().__init__(neighboring_relation)
            self.slack, self.mu2 = slack, 0.0
            self.epsilon_bound = Bound.UPPER

        def _maybe_compose(self, event, count, do_compose):
            if isinstance(event, dp_event.SelfComposedDpEvent):
                return self._maybe_compose(event.event, count * event.count, do_compose)
            if isinstance(event, dp_event.PoissonSampledDpEvent) and event.sampling_probability == 1.0:
                return self._maybe_compose(event.event, count, do_compose)
            if not isinstance(event, dp_event.GaussianDpEvent):
                return PrivacyAccountant.CompositionErrorDetails(event, "unsampled Gaussian steps only")
            if do_compose:
                self.mu2 += count / event.noise_multiplier ** 2
            return None

        def get_delta(self, target_epsilon):
            return gaussian_delta(math.sqrt(self.mu2), target_epsilon)

        def get_epsilon(self, target_delta):
            return gaussian_epsilon(math.sqrt(self.mu2), target_delta) + self.slack

    return _AnalyticGaussian
