"""Declarative audit plans: parse a TOML plan and validate every claim before anything runs.

A plan is a TOML file::

    [plan]
    title = "SSTQ compliance"      # optional
    seed = 0                       # root seed (integer >= 0), default 0

    [[claim]]
    id = "sstq-eps1"               # unique; [A-Za-z0-9_.-]
    kind = "ldp"                   # a registered claim kind (fedaudit.experiments.kinds.CLAIM_KINDS)
    title = "SSTQ is 1-LDP"        # optional (the kind derives a default from the parameters)
    expect = "pass"                # "pass" (default) or "violation"
    mechanism = "sstq"             # the kind's own keys (ClaimKind.keys(), docs/plans.md)
    ...

This module checks what every plan and every claim has (the ``[plan]`` table, ids, kinds,
``expect``, seeds) and hands the rest to the claim's kind: its keys
(:class:`~fedaudit.experiments.keys.Key`), then its ``cross_check`` and ``default_title``.
Validation is all-or-nothing and happens before any claim runs: an unknown key, a wrong type,
an out-of-range value, a duplicate id or an unknown kind raises one :class:`FedAuditError` that
names the claim and the key, e.g.
``claim 'sstq-eps1' (#2): key 'samples' must be an integer >= 100, got 'abc'``.

Seeds. A claim's seed is ``derive_seed(plan seed, "claim=<id>")`` (:func:`fedaudit.rng.derive_seed`:
the id's SHA-256 words as the ``spawn_key`` of ``SeedSequence(plan seed)``), so adding, removing
or reordering claims never changes another claim's result. A claim may pin its own ``seed``
instead (e.g. to replay one claim).
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, ClaimSpec
from fedaudit.experiments.keys import Key, check_keys, show, unknown_keys
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.registry import did_you_mean

__all__ = ["COMMON_KEYS", "PLAN_KEYS", "Plan", "load_plan", "parse_plan", "claim_seed"]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

#: keys every claim accepts
COMMON_KEYS: dict[str, Key] = {
    "id": Key("str", help="unique name of the claim ([A-Za-z0-9_.-])"),
    "kind": Key("str", help="a registered claim kind (see below) or 'package.module:Class'"),
    "title": Key("str", None, help="one line for the report (default derived from the parameters)"),
    "expect": Key("str", "pass", choices=("pass", "violation"),
                  help="'violation' for known-bad systems kept as regression cases: PASS when the violation is detected"),
    "seed": Key("int", None, low=0, help="pin this claim's seed (default: derived from the plan seed and the id)"),
}

#: keys of the [plan] table
PLAN_KEYS: dict[str, Key] = {
    "title": Key("str", "fedaudit compliance report"),
    "seed": Key("int", 0, low=0, help="root seed of every claim"),
}


# ----------------------------------------------------------------------------- model
@dataclass(frozen=True)
class Plan:
    """A validated plan. ``source`` is the bytes its SHA-256 is computed over (the file's bytes,
    or the canonical JSON of a plan given as a dict)."""

    title: str
    seed: int
    claims: tuple[ClaimSpec, ...]
    source: bytes = field(repr=False)
    path: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source).hexdigest()


def claim_seed(plan_seed: int, claim_id: str) -> int:
    """The seed of claim ``claim_id``: ``derive_seed(plan_seed, "claim=" + claim_id)``."""
    from fedaudit.rng import derive_seed

    return derive_seed(plan_seed, f"claim={claim_id}")


# ----------------------------------------------------------------------------- parsing
def load_plan(source: str | Path | Mapping[str, Any]) -> Plan:
    """Read and validate a plan from a TOML file path or an already parsed mapping."""
    if isinstance(source, Mapping):
        try:
            raw = json.dumps(source, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise FedAuditError(f"plan: not plain data ({exc})") from None
        return parse_plan(source, source_bytes=raw)
    if not isinstance(source, (str, Path)):
        raise FedAuditError(f"plan must be a path to a TOML file or a dict, got {type(source).__name__}")
    path = Path(source)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FedAuditError(f"plan file not found: {path}") from None
    except IsADirectoryError:
        raise FedAuditError(f"plan {path} is a directory, not a TOML file") from None
    except OSError as exc:
        raise FedAuditError(f"cannot read plan {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise FedAuditError(f"plan {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise FedAuditError(f"plan {path} is not valid TOML: {exc}") from None
    return parse_plan(data, source_bytes=raw, path=str(path))


def parse_plan(data: Mapping[str, Any], *, source_bytes: bytes | None = None, path: str | None = None) -> Plan:
    """Validate a parsed plan (see the module docstring); raises one :class:`FedAuditError`."""
    if not isinstance(data, Mapping):
        raise FedAuditError(f"plan must be a table, got {type(data).__name__}")
    top = [k for k in data if k not in ("plan", "claim")]
    if top:
        raise unknown_keys("plan file", top, ["plan", "claim"], "at the top level ([plan] and [[claim]])")
    header = data.get("plan", {})
    if not isinstance(header, Mapping):
        raise FedAuditError("plan: [plan] must be a table with title and seed")
    extra = [k for k in header if k not in PLAN_KEYS]
    if extra:
        raise unknown_keys("plan", extra, list(PLAN_KEYS), "in [plan]")
    head = check_keys("plan", header, PLAN_KEYS)
    claims_raw = data.get("claim")
    if claims_raw is None:
        raise FedAuditError("plan: no claims; add at least one [[claim]] table")
    if not isinstance(claims_raw, list) or not all(isinstance(c, Mapping) for c in claims_raw):
        raise FedAuditError("plan: 'claim' must be an array of tables ([[claim]])")
    if not claims_raw:
        raise FedAuditError("plan: no claims; add at least one [[claim]] table")
    specs: list[ClaimSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(claims_raw, 1):
        spec = _parse_claim(index, raw, head["seed"], seen)
        seen[spec.id] = index
        specs.append(spec)
    if source_bytes is None:
        source_bytes = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                  default=str).encode("utf-8")
    return Plan(title=head["title"], seed=head["seed"], claims=tuple(specs), source=source_bytes, path=path)


def _kind(where: str, name: str) -> tuple[str, ClaimKind]:
    """The kind's name as the report records it (registered names lower-cased) and the kind."""
    key = name if ":" in name else name.lower()
    if key not in CLAIM_KINDS:
        names = CLAIM_KINDS.names()
        raise FedAuditError(f"{where}: key 'kind' must be one of {', '.join(repr(k) for k in names)} or "
                            f"'package.module:Class', got {show(name)}{did_you_mean(key, names)}")
    try:
        return key, claim_kind(key)
    except FedAuditError as exc:
        raise FedAuditError(f"{where}: key 'kind' names no usable claim kind: {exc}") from None


def _parse_claim(index: int, raw: Mapping[str, Any], plan_seed: int, seen: dict[str, int]) -> ClaimSpec:
    rid = raw.get("id")
    where = f"claim {rid!r} (#{index})" if isinstance(rid, str) and rid.strip() else f"claim #{index}"
    if "id" not in raw:
        raise FedAuditError(f"{where}: missing required key 'id' (a unique name such as 'sstq-eps1')")
    if not isinstance(rid, str) or not _ID_RE.match(rid.strip()):
        raise FedAuditError(f"{where}: key 'id' must be a string of letters, digits, '_', '.' or '-', "
                            f"got {show(rid)}")
    rid = rid.strip()
    if rid in seen:
        raise FedAuditError(f"{where}: key 'id' duplicates claim #{seen[rid]}; claim ids must be unique")
    if "kind" not in raw:
        raise FedAuditError(f"{where}: missing required key 'kind' ({', '.join(CLAIM_KINDS.names())} or "
                            f"'package.module:Class')")
    common = check_keys(where, {k: raw[k] for k in COMMON_KEYS if k in raw}, COMMON_KEYS)
    name, kind = _kind(where, common["kind"])
    schema = kind.keys()
    unknown = [k for k in raw if k not in COMMON_KEYS and k not in schema]
    if unknown:
        raise unknown_keys(where, unknown, list(COMMON_KEYS) + list(schema), f"for kind {name!r}")
    params = check_keys(where, {k: raw[k] for k in schema if k in raw}, schema)
    kind.cross_check(where, params, common["expect"])
    seed = common["seed"] if common["seed"] is not None else claim_seed(plan_seed, rid)
    title = common["title"] or kind.default_title(params, common["expect"])
    return ClaimSpec(index=index, id=rid, kind=name, title=title, expect=common["expect"], seed=seed,
                     params=params, seed_pinned=common["seed"] is not None)
