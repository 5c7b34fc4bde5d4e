"""The contract of a claim kind: :func:`check_claim_kind`.

The protocol of :mod:`fedaudit.experiments.kind`: plan keys that document themselves (the
reference ``docs/plans.md`` and ``--help`` are generated from them), an estimate of the cost from
the parameters alone, and above all a verdict that a reader can re-derive: ``decide`` of the
evidence *as a report records it* (trimmed, strict-JSON round-tripped) gives the verdict the run
gave, and it reads the numbers it decides from, so evidence without them cannot decide.
"""

from __future__ import annotations

import copy
import inspect
import keyword
import math
import re
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Cost, EvidenceError, derived_verdict
from fedaudit.experiments.keys import REQUIRED, BadValue, Key, coerce
from fedaudit.json import dumps, loads
from fedaudit.testing.contract import Checks, ContractReport

__all__ = ["check_claim_kind"]

_KEY_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
GUARANTEES = ("privacy", "robustness", "utility", None)


def _resolve(kind: Any) -> ClaimKind:
    """An instance of the kind given as an instance, a class or a registered name."""
    from fedaudit.experiments.kinds import claim_kind

    if isinstance(kind, str):
        return claim_kind(kind)
    if isinstance(kind, type) and issubclass(kind, ClaimKind):
        return kind()
    return kind


def check_claim_kind(kind: ClaimKind | type[ClaimKind] | str, claim: Mapping[str, Any] | None = None, *,
                     seed: int = 0) -> ContractReport:
    """Check that a claim kind keeps the protocol of :class:`~fedaudit.experiments.ClaimKind`.

    ``kind`` is an instance, a class or a registered name. Properties, in order (the first that
    fails raises :class:`~fedaudit.testing.ContractError`):

    * **interface** — a ClaimKind whose ``name`` and ``figures`` the registry accepts, a
      ``guarantee`` among privacy, robustness, utility or None, and an implemented ``decide``;
    * **keys documented** — a docstring (its first paragraph describes the kind in
      ``docs/plans.md``); ``keys()`` maps lowercase snake_case names that are not the keys every
      claim takes to :class:`~fedaudit.experiments.keys.Key` objects whose type is known and whose
      default passes their own check. Keys without a ``help`` line are listed in the report's
      ``skipped`` (their row shows only the type and range);

    and, with ``claim`` (the keys of one small claim of this kind, without ``id`` and ``kind``),
    run in a one-claim plan with ``seed``:

    * **estimate** — ``estimate(params)`` of the validated parameters is a
      :class:`~fedaudit.experiments.Cost` of finite, non-negative memory and seconds;
    * **run** — the claim runs without an error (the runner also refuses a run whose verdict
      ``decide`` of the recorded evidence does not give);
    * **strict JSON** — the evidence is strict JSON (:mod:`fedaudit.json`);
    * **decide re-derives the verdict** — ``decide`` of the JSON-round-tripped evidence gives the
      run's verdict, leaves the evidence unchanged, and refuses empty evidence
      (:class:`~fedaudit.experiments.kind.EvidenceError`): a verdict must come from the numbers;
    * **determinism under a seed** — a second run gives the same verdict and the same evidence,
      apart from entries holding wall times (keys ending ``_s``, ``seconds`` or ``per_second``).

    Returns a :class:`~fedaudit.testing.ContractReport`.
    """
    try:
        k = _resolve(kind)
    except FedAuditError as exc:
        raise AssertionError(f"claim kind {kind!r}: {exc}") from None
    checks = Checks(f"claim kind {getattr(k, 'name', '') or type(k).__name__!r}")
    _interface(checks, k)
    _keys(checks, k)
    if claim is None:
        for prop in ("estimate", "run", "decide re-derives the verdict", "determinism under a seed"):
            checks.skip(prop, "no claim given to run")
        return checks.report()
    _run(checks, k, claim, seed)
    return checks.report()


def _interface(checks: Checks, k: Any) -> None:
    from fedaudit.experiments.kinds import check_kind

    prop = "interface"
    checks.require(isinstance(k, ClaimKind), prop, f"{type(k).__name__} is not a ClaimKind subclass")
    with checks.step(prop):
        check_kind(type(k))
        checks.require(k.guarantee in GUARANTEES, prop,
                       f"guarantee must be one of {', '.join(map(repr, GUARANTEES))}, got {k.guarantee!r}")
        checks.require(isinstance(k.unit, str) and k.unit.strip(), prop, f"unit must be a non-empty string, got {k.unit!r}")
        checks.require(type(k).decide is not ClaimKind.decide, prop,
                       "decide(evidence, expect) is not implemented: its verdicts cannot be re-derived")


def _keys(checks: Checks, k: ClaimKind) -> None:
    from fedaudit.experiments.plan import COMMON_KEYS

    prop = "keys documented"
    doc = inspect.getdoc(type(k)) or ""  # as docs/plans.md reads it (inherited from a parent kind)
    checks.require(doc and doc != inspect.getdoc(ClaimKind), prop, "the class has no docstring (its first paragraph describes the kind in docs/plans.md)")
    with checks.step(prop):
        keys = k.keys()
        checks.require(isinstance(keys, dict) and keys, prop, f"keys() must return a non-empty dict, got {keys!r}")
        for name, key in keys.items():
            checks.require(isinstance(name, str) and _KEY_NAME.match(name) and not keyword.iskeyword(name), prop,
                           f"key name {name!r} is not lowercase snake_case")
            checks.require(name not in COMMON_KEYS, prop, f"key {name!r} is one every claim takes ({', '.join(COMMON_KEYS)})")
            checks.require(isinstance(key, Key), prop, f"key {name!r} is a {type(key).__name__}, not a Key")
            try:
                key.describe()
            except KeyError:
                checks.fail(prop, f"key {name!r} has the unknown type {key.type!r}")
            if key.default is not REQUIRED and key.default is not None:
                try:
                    coerce(key.default, key)
                except BadValue:
                    checks.fail(prop, f"key {name!r}: its default {key.default!r} is not {key.describe()}")
    bare = [name for name, key in keys.items() if not key.help.strip()]
    if bare:
        checks.skip("key help", f"no help line for {', '.join(bare)}")


def _plan(k: ClaimKind, claim: Mapping[str, Any], seed: int) -> dict[str, Any]:
    return {"plan": {"title": f"check_claim_kind({k.name})", "seed": seed},
            "claim": [{**copy.deepcopy(dict(claim)), "id": "contract", "kind": k.name}]}


def _registered(k: ClaimKind) -> bool:
    from fedaudit.experiments.kinds import CLAIM_KINDS

    return k.name in CLAIM_KINDS and CLAIM_KINDS.factory(k.name) is type(k)


def _run(checks: Checks, k: ClaimKind, claim: Mapping[str, Any], seed: int) -> None:
    from fedaudit.experiments.kinds import CLAIM_KINDS, register_claim_kind

    checks.require(isinstance(claim, Mapping) and not {"id", "kind"} & set(claim), "run",
                   "claim must be a table of the kind's keys, without 'id' and 'kind'")
    added = not _registered(k)
    if added:
        if k.name in CLAIM_KINDS:
            checks.fail("interface", f"the name {k.name!r} is registered to another class, "
                                     f"{CLAIM_KINDS.factory(k.name).__name__}")
        register_claim_kind(type(k))
    try:
        _estimate_and_run(checks, k, claim, seed)
    finally:
        if added:
            CLAIM_KINDS.unregister(k.name)


def _estimate_and_run(checks: Checks, k: ClaimKind, claim: Mapping[str, Any], seed: int) -> None:
    from fedaudit.experiments.plan import load_plan
    from fedaudit.experiments.runner import run_plan

    with checks.step("estimate"):
        spec = load_plan(_plan(k, claim, seed), allow_large=True).claims[0]
        cost = k.estimate(spec.params)
        checks.require(isinstance(cost, Cost), "estimate", f"estimate() returned {type(cost).__name__}, not a Cost")
        for what in ("memory", "seconds"):
            value = getattr(cost, what)
            checks.require(isinstance(value, (int, float)) and math.isfinite(value) and value >= 0, "estimate",
                           f"estimate().{what} is {value!r}, not a finite number >= 0")
    runs = []
    for attempt in range(2):
        with checks.step("run"):
            (result,) = run_plan(_plan(k, claim, seed), allow_large=True).claims
        checks.require(result.error is None, "run", f"the claim ended in an error: {result.error}")
        runs.append(result)
        if attempt == 0:
            _rederive(checks, k, result)
    first, second = runs
    prop = "determinism under a seed"
    checks.require(second.verdict == first.verdict, prop,
                   f"the same seed gave the verdicts {first.verdict} and {second.verdict}")
    a, b = _without_times(_recorded(first.evidence)), _without_times(_recorded(second.evidence))
    checks.require(a == b, prop, f"the same seed gave other evidence (first difference at {_first_difference(a, b)})")
    checks.held(prop)


def _recorded(evidence: Any) -> Any:
    return loads(dumps(evidence), what="evidence")


def _rederive(checks: Checks, k: ClaimKind, result: Any) -> None:
    try:
        recorded = _recorded(result.evidence)
    except FedAuditError as exc:
        checks.fail("strict JSON", f"the evidence: {exc}")
    checks.held("strict JSON")
    prop = "decide re-derives the verdict"
    kept = copy.deepcopy(recorded)
    try:
        got = derived_verdict(k, result.expect, recorded)
    except EvidenceError as exc:
        checks.fail(prop, f"decide cannot read its own recorded evidence: {exc}")
    checks.require(got == result.verdict, prop,
                   f"decide of the recorded evidence gives {got}, the run gave {result.verdict}")
    checks.require(recorded == kept, prop, "decide changed the evidence it was given")
    try:
        empty = derived_verdict(k, result.expect, {})
    except EvidenceError:
        checks.held(prop)
        return
    checks.fail(prop, f"decide of empty evidence gives {empty} instead of raising EvidenceError: the verdict "
                      f"does not come from the recorded numbers")


#: endings of the evidence keys that hold wall times or rates measured against them
_TIMED = ("_s", "seconds", "per_second")


def _without_times(value: Any) -> Any:
    """``value`` without the entries that hold wall times (keys ending as :data:`_TIMED` says)."""
    if isinstance(value, dict):
        return {key: _without_times(v) for key, v in value.items() if not key.endswith(_TIMED)}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _first_difference(a: Any, b: Any, path: str = "evidence") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [key for key in b if key not in a]:
            if a.get(key, ...) != b.get(key, ...):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path}: {str(a)[:40]} vs {str(b)[:40]}"
