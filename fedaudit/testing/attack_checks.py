"""The contract of a Byzantine attack: :func:`check_attack`.

The call convention of :mod:`fedaudit.attacks.byzantine`: ``attack(honest, f, rng) -> (f, d)``
rows of the honest matrix's type and dtype, ``(0, d)`` for f = 0, the honest rows never mutated,
``rng`` the only source of randomness. An :class:`~fedaudit.attacks.Attack` also promises that
``params()`` are its constructor's keywords (:meth:`~fedaudit.attacks.Attack.with_scale`, plans
and reports rebuild it from them) and that ``with_scale`` sets the scale it reports. Attacks
may send non-finite rows on purpose (:class:`~fedaudit.attacks.NonFinite`): the rows are not
required to be finite.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fedaudit.attacks.byzantine import Attack
from fedaudit.testing.contract import Checks, ContractReport

__all__ = ["check_attack"]


def check_attack(attack: Attack | Callable[..., Any], *, n_honest: int = 8, f: int = 2, d: int = 3,
                 seed: int = 0) -> ContractReport:
    """Check that ``attack`` keeps the Byzantine call convention (module docstring).

    Properties, in order (the first that fails raises :class:`~fedaudit.testing.ContractError`):

    * **interface** — a callable; an :class:`~fedaudit.attacks.Attack` has a non-empty ``name``;
    * **strict JSON** — ``params()`` is strict JSON (:mod:`fedaudit.json`);
    * **shapes and dtypes** — (n_honest, d) float64 honest rows give (f, d) float64 rows, float32
      gives float32, f = 0 gives (0, d); the honest rows are not mutated;
    * **determinism under a seed** — the same ``rng`` seed gives the same rows (NaN equal to NaN);
    * **rebuilt from params** (an Attack) — ``type(attack)(**attack.params())`` sends the same rows;
    * **scale** (an Attack with ``has_scale``) — ``with_scale(s).scale == s`` for a new s.

    ``n_honest``, ``f``, ``d``: the shapes of the round attacked; ``seed`` fixes the honest rows
    and every ``rng``. Returns a :class:`~fedaudit.testing.ContractReport`.
    """
    checks = Checks(f"attack {attack!r}")
    checks.require(callable(attack), "interface", f"{type(attack).__name__} is not callable")
    is_attack = isinstance(attack, Attack)
    if is_attack:
        checks.require(isinstance(attack.name, str) and attack.name.strip(), "interface",
                       f"name must be a non-empty string, got {attack.name!r}")
        checks.held("interface")
        checks.strict_json("params()", attack.params())
    else:
        checks.held("interface")
        checks.skip("strict JSON", "not an Attack: no params()")
    H = np.random.default_rng(seed).normal(size=(n_honest, d))
    prop = "shapes and dtypes"
    with checks.step(prop):
        for data, dtype in ((H, np.float64), (H.astype(np.float32), np.float32)):
            before = data.copy()
            rows = attack(data, f, rng=seed)
            checks.require(np.array_equal(data, before), prop, f"the attack mutated the {data.dtype} honest rows")
            checks.require(isinstance(rows, np.ndarray) and rows.shape == (f, d), prop,
                           f"{data.dtype} honest rows {data.shape} gave {type(rows).__name__} of shape "
                           f"{getattr(rows, 'shape', None)}, want ({f}, {d})")
            checks.require(rows.dtype == dtype, prop, f"{data.dtype} honest rows gave {rows.dtype} rows")
        empty = attack(H, 0, rng=seed)
        checks.require(np.shape(empty) == (0, d), prop, f"f = 0 gave shape {np.shape(empty)}, want (0, {d})")
    prop = "determinism under a seed"
    with checks.step(prop):
        a = attack(H, f, rng=np.random.default_rng(seed))
        b = attack(H, f, rng=np.random.default_rng(seed))
        checks.require(np.array_equal(a, b, equal_nan=True), prop,
                       "the same rng seed gave different rows (hidden random state)")
    if not is_attack:
        checks.skip("rebuilt from params", "not an Attack")
        return checks.report()
    prop = "rebuilt from params"
    with checks.step(prop):
        again = type(attack)(**attack.params())(H, f, rng=seed)
        checks.require(np.array_equal(again, attack(H, f, rng=seed), equal_nan=True), prop,
                       f"{type(attack).__name__}(**params()) sends other rows: params() must be the constructor's "
                       f"keywords")
    if attack.has_scale:
        prop = "scale"
        with checks.step(prop):
            new = 2.0 * abs(attack.default_scale(n_honest, f) or 1.0) + 0.5
            scaled = attack.with_scale(new)
            checks.require(scaled.scale == new, prop, f"with_scale({new:g}).scale is {scaled.scale!r}")
            rows = scaled(H, f, rng=seed)
            checks.require(np.shape(rows) == (f, d), prop, f"with_scale({new:g}) sends shape {np.shape(rows)}")
    else:
        checks.skip("scale", "has_scale is False")
    return checks.report()
