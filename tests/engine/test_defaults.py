"""The engine's defaults: ``process`` unless told otherwise, ``serial`` inside a worker, one chunk
in the calling process, the kept process pool, and ``engine_defaults`` / ``FEDAUDIT_*``."""

import os
import time

import numpy as np
import pytest

from fedaudit.engine import (check_run_options, default_backend, engine_defaults, iter_chunks, run_chunks,
                             run_tasks)
from fedaudit.errors import FedAuditError


@pytest.fixture
def no_env(monkeypatch):
    """The machine defaults, not the suite's FEDAUDIT_BACKEND=serial (tests/conftest.py)."""
    monkeypatch.delenv("FEDAUDIT_BACKEND", raising=False)
    monkeypatch.delenv("FEDAUDIT_WORKERS", raising=False)


def where(_):
    """The process a chunk ran in, and the backend a nested run there would default to."""
    return os.getpid(), default_backend()


def slow_where(_):
    """:func:`where` after 0.3 s, so that a 2-worker pool starts both workers."""
    time.sleep(0.3)
    return where(_)


def fails(x):
    if x == 2:
        raise ValueError("chunk 2 fails")
    return os.getpid()


def draw(seed):
    return float(np.random.default_rng(seed).normal())


def test_the_default_is_process_and_nested_runs_default_to_serial(no_env):
    assert default_backend() == "process"
    assert check_run_options()[0] == "process"
    out = run_chunks(where, range(4), workers=2)
    assert {pid for pid, _ in out}.isdisjoint({os.getpid()})  # ran on workers
    assert {nested for _, nested in out} == {"serial"}  # no pool inside a pool


def test_one_chunk_runs_in_the_calling_process(no_env):
    assert run_chunks(where, [0], backend="process") == [(os.getpid(), "process")]
    # and the same bits as on a pool: a seeded chunk gives one value wherever it runs
    assert run_chunks(draw, [7], backend="process") == run_chunks(draw, [7, 7], backend="process", workers=2)[:1]


def test_the_pool_is_kept_between_calls_and_dropped_after_a_failure(no_env):
    first = {pid for pid, _ in run_chunks(slow_where, range(6), workers=2)}
    assert len(first) == 2
    second = {pid for pid, _ in run_chunks(where, range(6), workers=2)}
    assert second <= first  # the same worker processes served the second call
    with pytest.raises(ValueError, match="chunk 2 fails"):
        run_chunks(fails, range(4), workers=2)
    after = {pid for pid, _ in run_chunks(slow_where, range(6), workers=2)}
    assert after.isdisjoint(first)  # a failed run's pool is shut down, a fresh one serves the next


def test_a_pool_in_use_is_not_shared_by_a_nested_driver_call(no_env):
    """A second call while the first iterates (the same thread) gets a private pool, not a
    reconfiguration of the one in use."""
    outer = iter_chunks(where, range(6), workers=2)
    got = [next(outer)]
    inner = run_chunks(draw, range(3), workers=1)
    got.extend(outer)
    assert len(got) == 6 and inner == [draw(i) for i in range(3)]


def test_engine_defaults_apply_to_unset_keywords_only(no_env):
    with engine_defaults(backend="serial"):
        assert default_backend() == "serial"
        assert run_chunks(where, range(3)) == [(os.getpid(), "serial")] * 3
        # an explicit backend wins over the block
        assert check_run_options("process")[0] == "process"
        with engine_defaults(workers=3):
            assert check_run_options() == ("serial", 3, None)
    assert default_backend() == "process"


def test_engine_defaults_address_applies_to_ray_calls_only(no_env):
    with engine_defaults(backend="ray", address="127.0.0.1:6379"):
        assert check_run_options() == ("ray", None, "127.0.0.1:6379")
        assert check_run_options("serial") == ("serial", None, None)
        with engine_defaults(backend="process"):
            assert check_run_options() == ("process", None, None)


@pytest.mark.parametrize("kwargs, match", [
    ({"backend": "threads"}, "backend must be one of"),
    ({"workers": 0}, r"workers must be .*\[1, 1024\]"),
    ({"address": "127.0.0.1:6379"}, "address is only used with backend='ray'"),
    ({"backend": "ray", "address": "nowhere"}, "address must be 'auto' or a Ray cluster address"),
])
def test_engine_defaults_refuses_bad_values(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        with engine_defaults(**kwargs):
            pass


def test_environment_variables_set_the_machine_default(no_env, monkeypatch):
    monkeypatch.setenv("FEDAUDIT_BACKEND", "serial")
    monkeypatch.setenv("FEDAUDIT_WORKERS", "3")
    assert check_run_options() == ("serial", 3, None)
    with engine_defaults(backend="process", workers=2):  # a block wins over the environment
        assert check_run_options() == ("process", 2, None)
    monkeypatch.setenv("FEDAUDIT_BACKEND", "gpu")
    with pytest.raises(FedAuditError, match="FEDAUDIT_BACKEND must be one of process, serial, ray, got 'gpu'"):
        default_backend()
    monkeypatch.setenv("FEDAUDIT_BACKEND", "serial")
    monkeypatch.setenv("FEDAUDIT_WORKERS", "many")
    with pytest.raises(FedAuditError, match=r"FEDAUDIT_WORKERS must be an integer in \[1, 1024\], got 'many'"):
        check_run_options()


def test_run_tasks_follows_the_defaults(no_env):
    with engine_defaults(backend="serial"):
        assert [r for _, r in run_tasks(where, range(2))] == [(os.getpid(), "serial")] * 2


def fail_fast_or_hang(x):
    if x == 0:
        time.sleep(0.5)  # let the other worker pick up its long task first
        raise ValueError("chunk 0 fails")
    time.sleep(60)
    return x


def test_a_failing_run_does_not_wait_for_the_tasks_still_running(no_env):
    """The failed call terminates its workers: the error surfaces in seconds, not after the
    60-second task on the other worker."""
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="chunk 0 fails"):
        run_chunks(fail_fast_or_hang, range(2), backend="process", workers=2)
    assert time.monotonic() - t0 < 30
