"""Progress callbacks: the adapter between the two ways fedaudit's long runs count work.

The engine (:func:`fedaudit.engine.run_chunks`), the audits' draws and the plan runner take
``progress(k)`` as an increment: k more units are done. The training loops (DP-SGD and DP-FedAvg
canary audits, E-FLoPS and the sparse baselines) call ``progress(done)`` with the number of steps
or rounds done so far. :func:`increments_from_totals` turns the second kind of caller into the
first, so one progress bar or runner counter serves both.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["increments_from_totals"]


def increments_from_totals(progress: Callable[[int], None]) -> Callable[[int], None]:
    """A callback that takes running totals ``done`` (steps or rounds done so far) and calls
    ``progress`` with the increment ``done − (the largest total seen before)``; a total that does
    not grow is ignored, so each unit is counted once."""
    last = [0]

    def advance(done: int) -> None:
        if done > last[0]:
            progress(done - last[0])
            last[0] = done

    return advance
