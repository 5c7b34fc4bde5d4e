"""The Ray backend: each task a Ray remote function on one CPU, on a Ray the caller initialised,
a local instance the engine starts, or a cluster it joins (kept for later calls until
:func:`fedaudit.engine.shutdown`, :func:`close_ray`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

from fedaudit.engine.inflight import bounded
from fedaudit.engine.workers import become_worker, private_env_removed
from fedaudit.errors import FedAuditError

__all__ = ["require_ray", "run_ray", "close_ray"]

_RAY_HINT = "pip install fedaudit[ray] (in zsh: pip install 'fedaudit[ray]')"


def require_ray() -> Any:
    """The ``ray`` module, or a :class:`~fedaudit.errors.FedAuditError` saying how to install it
    (so a run asking for Ray fails once, before any task, with one clear line)."""
    try:
        import ray
    except ImportError:
        raise FedAuditError(f"backend='ray' needs Ray, which is not installed: {_RAY_HINT}") from None
    return ray


def _ray_task(fn, task):
    """What a Ray worker runs: set up as a pool worker is (:func:`become_worker`), then ``fn``."""
    become_worker()
    return fn(task)


#: the address of the Ray instance or cluster connection this engine opened (kept for later calls), or None
_RAY_OPENED: list[str | None] = [None]


def _ensure_ray(ray, address: str | None) -> None:
    """Make Ray usable for a call: a Ray the caller initialised is used as it is; otherwise the
    engine starts a local instance (``address=None``) or joins ``address`` and keeps it for later
    calls (a later call that names another address gets a new connection)."""
    wanted = address or "local"
    if ray.is_initialized():
        if _RAY_OPENED[0] is None or _RAY_OPENED[0] == wanted:
            return  # the caller's instance, or the one this engine opened for the same address
        ray.shutdown()
        _RAY_OPENED[0] = None
    # Ray >= 2.5x warns on every start unless this is set; the accelerator override is irrelevant here
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    try:
        with private_env_removed():  # Ray's processes, and so its workers, never see the report key
            ray.init(address=wanted, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    except Exception as exc:  # ConnectionError, RuntimeError, ...: one clear line
        where = f"the Ray cluster at address={address!r}" if address else "a local Ray instance"
        raise FedAuditError(f"backend='ray': cannot start or join {where}: {type(exc).__name__}: {exc}") from None
    _RAY_OPENED[0] = wanted


def run_ray(ray, fn, tasks, workers, address, advance) -> Iterator[tuple[Any, Any]]:
    """``(task, fn(task))`` pairs as Ray completes them, one CPU per task, at most ``2 × workers``
    in flight (``workers`` default: the cluster's CPUs)."""
    _ensure_ray(ray, address)
    if workers is None:
        workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(num_cpus=1)(_ray_task)
    fn_ref = ray.put(fn)
    yield from bounded(tasks, workers, lambda task: remote.remote(fn_ref, task),
                       lambda refs: ray.wait(refs, num_returns=1)[0], ray.get, ray.cancel, advance)


def close_ray() -> None:
    """Shut down the local Ray instance the engine started (or its connection to a cluster it
    joined); a Ray the caller initialised is left alone."""
    ray = sys.modules.get("ray")
    if _RAY_OPENED[0] is not None and ray is not None and ray.is_initialized():
        ray.shutdown()
    _RAY_OPENED[0] = None
