"""ε curves: an accountant's ε after 1…n steps or rounds, its points computed as engine chunks.

A curve is a list of independent points (each its own accountant call, never an update of the
previous one), so :func:`run_curve` spreads them over :func:`fedaudit.engine.run_chunks` in
:func:`curve_groups` chunks and reassembles them in order: the curve is bit-identical on every
backend and worker count. :func:`epsilon_dpsgd_curve` is the curve of Poisson-subsampled Gaussian
steps (DP-SGD steps, or client-level DP-FedAvg rounds) that the ``dpsgd`` and ``dp-fedavg``
claim kinds and ``fedaudit audit dpsgd|dp-fedavg --plot`` and ``fedaudit account --plot`` draw;
the ``accounting`` kind's curve of a mechanism's schedule is
:func:`fedaudit.accounting.schedule.schedule_curve`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["CURVE_DISCRETIZATION", "CURVE_CHUNKS", "CURVE_MIN_POINTS", "curve_points", "curve_groups", "run_curve",
           "epsilon_dpsgd_curve"]

#: the PLD discretisation of a curve's points before the last (10× coarser than the accountants'
#: 1e-4: still an upper bound, and a curve of 30 points stays cheap)
CURVE_DISCRETIZATION = 1e-3
#: most engine chunks an ε curve is split into
CURVE_CHUNKS = 8
#: fewest points in a chunk: a point takes 10–70 ms of CPU (a DP-SGD PLD self-composition ~12 ms,
#: PRV ~70 ms, a mechanism's PLD ~0.2 s), so 8 keep Ray's ~5 ms per task near or under 5 % of the work
CURVE_MIN_POINTS = 8


def curve_points(rounds: int, points: int) -> list[int]:
    """Up to ``points`` distinct round counts from 1 to ``rounds``, evenly spaced, ``rounds`` last."""
    return [int(v) for v in np.unique(np.round(np.linspace(1, rounds, min(points, rounds))).astype(int))]


def curve_groups(n: int) -> list[list[int]]:
    """The point indices 0..n−1 of an ε curve in c = min(max(⌊n / :data:`CURVE_MIN_POINTS`⌋, 1),
    :data:`CURVE_CHUNKS`) engine chunks (none for n = 0), strided (chunk j holds j, j + c, j + 2c, …)
    so that each mixes cheap early points with costly late ones. Each point is computed on its own,
    so the grouping never changes a value."""
    c = min(max(n // CURVE_MIN_POINTS, min(n, 1)), CURVE_CHUNKS)
    return [list(range(j, n, c)) for j in range(c)]


def run_curve(fn: Any, shared: Any, jobs: list[Any], progress: Callable[[int], None],
              engine: Mapping[str, Any]) -> list[Any]:
    """``[fn((shared, [job]))[0] for job in jobs]`` with the jobs in :func:`curve_groups` chunks on
    the engine (:func:`fedaudit.engine.run_chunks` with ``engine``: backend, workers, address);
    ``progress(1)`` per job. ``fn`` maps ``(shared, jobs)`` to one value per job."""
    from fedaudit.engine import run_chunks

    groups = curve_groups(len(jobs))
    results = run_chunks(fn, [(shared, [jobs[i] for i in g]) for g in groups], progress=progress,
                         units=[len(g) for g in groups], **engine)
    out: list[Any] = [None] * len(jobs)
    for g, values in zip(groups, results):  # chunk order, then each chunk's points in order
        for i, v in zip(g, values):
            out[i] = v
    return out


def epsilon_dpsgd_curve(sigma: float, q: float, total: int, delta: float, method: str, points: int, final: float,
                        progress: Callable[[int], None], *, backend: str | None = None, workers: int | None = None,
                        address: str | None = None) -> tuple[list[int], list[float]]:
    """ε after ``points`` counts from 1 to ``total`` of ``total`` Poisson-subsampled Gaussian steps
    (rounds), the last one ``final`` (the accountant's own value): each point is the accountant
    ``method`` of :data:`~fedaudit.accounting.ACCOUNTANTS` on ``dpsgd_event(σ, q, n)``, PLD at the
    coarser interval :data:`CURVE_DISCRETIZATION` (still an upper bound). The points are
    independent and run as engine chunks (:func:`run_curve` with ``backend``, ``workers``,
    ``address``), so the curve is bit-identical on every backend."""
    from fedaudit.engine import check_run_options

    backend, workers, address = check_run_options(backend, workers, address)
    xs = curve_points(total, points)
    settings = {"discretization": CURVE_DISCRETIZATION} if method == "pld" else None
    ys = run_curve(_gaussian_curve_chunk, (sigma, q, delta, method, settings), xs[:-1], progress,
                   {"backend": backend, "workers": workers, "address": address})
    progress(1)
    return xs, [*ys, final]


def _gaussian_curve_chunk(task: tuple[tuple, list[int]]) -> list[float]:
    """An engine chunk of :func:`epsilon_dpsgd_curve`: ε at δ after each of its counts n by the
    ``method`` accountant with ``settings`` (None: its defaults). (Opacus's PRV ε moves in the last
    bit with the BLAS thread count; the engine runs every chunk with one thread on every backend, so
    the curve is the same on each.)"""
    (sigma, q, delta, method, settings), counts = task
    from fedaudit.accounting import account, dpsgd_event

    return [account(dpsgd_event(sigma, q, n), delta=delta, accountant=method, **(settings or {})).epsilon
            for n in counts]
