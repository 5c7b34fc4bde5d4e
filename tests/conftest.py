"""Shared test configuration: environment of the suite, deterministic hypothesis profile, the
session's Ray, and the xdist group of the Ray tests. Plain helpers (the repository root, tolerances,
checkpoint resealing) are in tests/helpers.py."""

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import REPO

# Flower (tests/integrations/flower/): no telemetry (the machine has no network), and quiet logs.
for _key, _value in (("FLWR_TELEMETRY_ENABLED", "0"), ("FLWR_LOG_LEVEL", "ERROR"),
                     ("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")):
    os.environ.setdefault(_key, _value)

# The engine's default backend is "process" (fedaudit.engine.default_backend). The suite runs the
# audits it does not aim at a backend in this process (2 cores, many small audits, monkeypatched
# helpers that a worker would not see); the backends are compared explicitly in tests/engine/ and
# the tests/**/test_*_engine.py modules. `FEDAUDIT_BACKEND=process pytest` runs the whole suite on
# worker processes.
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


@pytest.fixture
def ray_local():
    """A local Ray instance (``ray.init(num_cpus=2)``) shared by every test of the session that asks
    for it: started on first use (again after a test that needed Ray to itself shut it down, e.g.
    the ``ray start --head`` cluster test), stopped at the end of the session. Starting Ray costs
    10–15 s on 2 cores, so modules never start their own."""
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        # the workers import the test modules (the package tests.*, under the repository root) to
        # unpickle their chunk functions, as a cluster user ships theirs
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
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
#: (which ends with ``ray.shutdown()``, stopping the session's Ray too). Paths under tests/.
_RAY_MODULES = {"engine/test_ray_cluster.py", "integrations/flower/test_simulation.py",
                "integrations/flower/test_ldp.py", "experiments/kinds/test_flower.py"}
_TESTS = REPO / "tests"


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``-n`` workers with ``--dist loadgroup``), every test
    that uses Ray goes to one worker, in collection order: one shared local Ray per run instead of
    one per worker, and the tests that stop or replace Ray never race the ones that use it. A module
    of _RAY_MODULES that is not there (moved or renamed) is an error, not a silently lost group."""
    missing = sorted(m for m in _RAY_MODULES if not (_TESTS / m).is_file())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py: _RAY_MODULES names missing test modules {missing}")
    for item in items:
        if "ray_local" in item.fixturenames or _relative(item.path) in _RAY_MODULES:
            item.add_marker(pytest.mark.xdist_group("ray"))


def _relative(path: Path) -> str:
    """``path`` relative to tests/ (``engine/test_ray.py``); a path outside tests/ as it is."""
    try:
        return Path(path).resolve().relative_to(_TESTS).as_posix()
    except ValueError:
        return str(path)
