"""Convergence metrics of a loss curve: plateau level, rounds to the plateau, first round at or
below a level, whether the curve reached a plateau, and the first round at a target accuracy.

These turn a :class:`fedaudit.fl.training.Trace` (its ``rounds`` and ``loss``) into the numbers a
convergence claim compares; they compute, never run or draw.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_real, check_vector

__all__ = ["plateau_level", "rounds_to_plateau", "first_at_or_below", "plateau_status", "rounds_to_target"]


def _check_losses(losses: Any) -> np.ndarray:
    arr = check_vector("losses", losses, finite=False)
    if arr.size < 2:
        raise FedAuditError(f"losses must be a 1-D sequence of at least 2 values, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise FedAuditError("losses must be finite (a diverged run has no plateau)")
    return arr


def plateau_level(losses: Sequence[float], tail: float = 0.2) -> float:
    """ℓ_∞ = median of the last ⌈tail·len⌉ losses (at least one)."""
    arr = _check_losses(losses)
    tail = check_real("tail", tail, low=0.0, high=1.0, open_low=True)
    m = max(1, int(math.ceil(tail * arr.size)))
    return float(np.median(arr[-m:]))


def rounds_to_plateau(losses: Sequence[float], reference_loss: float, eps: float = 0.05,
                      tail: float = 0.2, *, rounds: Sequence[int] | None = None,
                      sustained: bool = False, plateau: float | None = None, atol: float = 0.0) -> int:
    """Rounds needed to reach the asymptotic error (proxy for reading the paper's plots).

    With ℓ* = ``reference_loss`` (e.g. the best loss of the f = 0 run) and the plateau
    ℓ_∞ = :func:`plateau_level` (median of the last ``tail`` fraction; or ``plateau`` if given,
    e.g. a plateau shared by several methods), returns the first k with

        L(x_k) − ℓ* ≤ (ℓ_∞ − ℓ*) + max(ε·|ℓ_∞ − ℓ*|, atol),

    which is (1 + ε)(ℓ_∞ − ℓ*) whenever the plateau lies above ℓ* and ``atol`` is 0 (the usual
    case); the |·| keeps the rule meaningful if it does not, and ``atol`` gives an absolute floor
    for runs whose plateau *is* ℓ* (f = 0), where a relative rule would demand machine precision.
    Always defined when ℓ_∞ comes from the run (at least half the tail is ≤ ℓ_∞); with an
    external ``plateau`` the curve may never get there, then ``-1`` is returned.
    ``losses[j]`` is taken to be after ``rounds[j]`` rounds (default j). ``sustained=True``
    returns the first k after which the curve never goes back above the threshold.

    Caveat: under attack the loss often dips *below* its plateau and climbs back (the iterate
    passes near argmin L_H on its way to the biased fixed point); the first-crossing rule then
    counts the rounds to come down to the plateau level, which is what one reads off a plot. If
    the run is too short to be on its plateau, the median of the tail underestimates ℓ_∞.
    """
    arr = _check_losses(losses)
    ref = check_real("reference_loss", reference_loss)
    eps = check_real("eps", eps, low=0.0)
    atol = check_real("atol", atol, low=0.0)
    if plateau is None:
        plateau = plateau_level(arr, tail)
    else:
        plateau = check_real("plateau", plateau)
    gap = plateau - ref
    thresh = ref + gap + max(eps * abs(gap), atol)
    below = arr <= thresh + 1e-15 * max(1.0, abs(thresh))
    if not below.any():
        return -1
    if sustained:
        above = np.flatnonzero(~below)
        j = 0 if above.size == 0 else int(above[-1]) + 1
        if j >= arr.size:
            return -1
    else:
        j = int(np.argmax(below))
    if rounds is None:
        return j
    rounds = np.asarray(rounds)
    if rounds.shape != arr.shape:
        raise FedAuditError(f"rounds must have the same length as losses ({arr.size}), got {rounds.shape}")
    return int(rounds[j])


def first_at_or_below(rounds: Sequence[int], losses: Sequence[float], level: float) -> int | None:
    """The first ``rounds[j]`` with a finite ``losses[j] ≤ level`` (up to a relative 1e-15 of
    max(1, |level|), so a curve that lands on the level counts), else ``None``."""
    for r, v in zip(rounds, losses):
        if math.isfinite(v) and v <= level + 1e-15 * max(1.0, abs(level)):
            return int(r)
    return None


def plateau_status(rounds: Sequence[int], losses: Sequence[float], window: int, tol: float) -> dict[str, Any]:
    """Whether a loss curve reached a plateau, and from which round.

    Definition. With L(k) the honest loss after k rounds, the relative change over the window
    of w rounds ending at round k is Δ(k) = |L(k) − L(k − w)| / |L(k − w)| (k ≥ w). The run is *on a
    plateau at round k* when Δ(k) ≤ τ. It *reached a plateau* when it is on one at its last
    round K; its plateau round is the first k from which Δ(j) ≤ τ for every recorded j ≥ k
    (sustained through K). A curve still falling by more than τ per w rounds at K did not reach
    a plateau, however long it ran. Returns ``reached``, ``round`` (None unless reached),
    ``final_change`` = signed (L(K) − L(K − w)) / |L(K − w)| (None when K < w or the loss is not
    finite), ``window`` and ``tol``.
    """
    r = np.asarray(rounds, dtype=np.int64)
    v = np.asarray(losses, dtype=np.float64)
    out: dict[str, Any] = {"reached": False, "round": None, "final_change": None, "window": window, "tol": tol}
    if r.size == 0 or not np.isfinite(v).all():
        return out
    change = np.full(r.size, np.nan)
    for j in range(r.size):
        i = np.searchsorted(r, r[j] - window, side="right") - 1  # the last round ≤ k − w
        if r[j] >= window and i >= 0 and r[i] == r[j] - window and v[i] != 0:
            change[j] = (v[j] - v[i]) / abs(v[i])
    if math.isfinite(change[-1]):
        out["final_change"] = float(change[-1])
    on = np.isfinite(change) & (np.abs(change) <= tol)
    if on[-1]:
        off = np.flatnonzero(~on)
        first = 0 if off.size == 0 else int(off[-1]) + 1
        out.update(reached=True, round=int(r[first]))
    return out


def rounds_to_target(rounds: Sequence[int], accuracy: Sequence[float | None], target: float | None) -> int | None:
    """First recorded round whose test accuracy is ≥ ``target`` (``None`` if never or no target)."""
    if target is None:
        return None
    for r, a in zip(rounds, accuracy):
        if isinstance(a, (int, float)) and a >= target:  # None (absent) and "nan" never reach it
            return int(r)
    return None
