"""Declarative audit plans: parse a TOML plan and validate every claim before anything runs.

A plan is a TOML file::

    [plan]
    title = "SSTQ compliance"      # optional
    seed = 0                       # root seed (integer >= 0), default 0

    [engine]                       # optional: where the claims run (ENGINE_KEYS)
    backend = "process"            # process (default) | serial | ray
    workers = 2                    # default: the machine's cores

    [deployment]                   # optional: the facts a reviewer expects (fedaudit.experiments.deployment)
    privacy_unit = "client"
    trust_model = "local"

    [[claim]]
    id = "sstq-eps1"               # unique; [A-Za-z0-9_.-], at most 64 characters
    kind = "ldp"                   # a registered claim kind (fedaudit.experiments.kinds.CLAIM_KINDS)
    title = "SSTQ is 1-LDP"        # optional (the kind derives a default from the parameters)
    expect = "pass"                # "pass" (default) or "violation"
    mechanism = "sstq"             # the kind's own keys (ClaimKind.keys(), docs/plans.md)
    ...
    [claim.deployment]             # optional: this claim's own deployment facts over the plan's

This module checks what every plan and every claim has (the ``[plan]`` and ``[engine]`` tables, ids, kinds,
``expect``, seeds) and hands the rest to the claim's kind: its keys
(:class:`~fedaudit.experiments.keys.Key`), then its ``cross_check`` and ``default_title``.
Validation is all-or-nothing and happens before any claim runs: an unknown key, a wrong type,
an out-of-range value, a duplicate id or an unknown kind raises one :class:`FedAuditError` that
names the claim and the key, e.g.
``claim 'sstq-eps1' (#2): key 'samples' must be an integer in [100, 1000000000000], got 'abc'``.

Cost. Every claim's kind estimates the memory and computing its parameters ask for
(:meth:`~fedaudit.experiments.kind.ClaimKind.estimate`); a claim estimated above
:data:`~fedaudit.experiments.kind.MEMORY_BUDGET` (8 GiB) or
:data:`~fedaudit.experiments.kind.TIME_BUDGET` (24 core-hours) is refused with the estimate and
what drives it, unless ``allow_large=True`` (``fedaudit run --allow-large``).

Seeds. A claim's seed is ``derive_seed(plan seed, "claim=<id>")`` (:func:`fedaudit.rng.derive_seed`:
the id's SHA-256 words as the ``spawn_key`` of ``SeedSequence(plan seed)``), so adding, removing
or reordering claims never changes another claim's result. A claim may pin its own ``seed``
instead (e.g. to replay one claim).

Engine. The ``[engine]`` table (:data:`ENGINE_KEYS`) says where the claims run; the runner
(:mod:`fedaudit.experiments.runner`) applies it with :func:`fedaudit.engine.engine_defaults`.
It never changes a result (every chunk and claim seed is fixed by the plan), so a run may
override it (``fedaudit run --backend/--workers/--address``, :func:`engine_options`) and still
resume the same plan; it is part of the plan's bytes and so of the report's ``plan_sha256``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from fedaudit.deprecation import warn_renamed
from fedaudit.engine import BACKENDS, MAX_WORKERS, check_run_options
from fedaudit.errors import FedAuditError
from fedaudit.experiments.deployment import check_deployment, claim_deployment
from fedaudit.experiments.kind import MEMORY_BUDGET, TIME_BUDGET, ClaimKind, ClaimSpec
from fedaudit.experiments.keys import Key, check_keys, key_error, show, unknown_keys
from fedaudit.experiments.kinds import CLAIM_KINDS, claim_kind
from fedaudit.json import MAX_DEPTH, check_nesting
from fedaudit.registry import did_you_mean
from fedaudit.reports.provenance import REFERENCE_RE

__all__ = ["COMMON_KEYS", "PLAN_KEYS", "ENGINE_KEYS", "MAX_ID_LENGTH", "Plan", "load_plan", "parse_plan",
           "claim_seed", "check_engine", "engine_options", "check_cost"]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: longest claim id: it names the claim's checkpoint file and work folder (a file name has at most 255 bytes)
MAX_ID_LENGTH = 64

#: keys every claim accepts
COMMON_KEYS: dict[str, Key] = {
    "id": Key("str", help=f"unique name of the claim ([A-Za-z0-9_.-], at most {MAX_ID_LENGTH} characters)"),
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

#: keys of the optional [engine] table (the same results on every setting)
ENGINE_KEYS: dict[str, Key] = {
    "backend": Key("str", None, choices=BACKENDS,
                   help="where the claims and their chunks run: process (local worker processes), serial (one "
                        "process) or ray (pip install 'fedaudit[ray]'); default process, or the environment "
                        "variable FEDAUDIT_BACKEND"),
    "workers": Key("int", None, low=1, high=MAX_WORKERS,
                   help="worker processes of backend 'process' (at most the machine's cores unless the run allows "
                        "large claims: fedaudit run --allow-large), or Ray tasks in flight / 2 (default: the "
                        "machine's cores, the cluster's CPUs)"),
    "address": Key("str", None,
                   help="backend = 'ray' only: 'auto' or '[ray://]host:port' of a running Ray cluster (default: a "
                        "new local Ray instance)"),
    "parallel_claims": Key("bool", True,
                           help="run the independent claims as parallel tasks (unless the backend is serial); the "
                                "Flower kinds and claims that set their own backend run alone, one after the other"),
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
    #: the validated [engine] table, every key of ENGINE_KEYS present (None: the engine's default)
    engine: Mapping[str, Any] = field(default_factory=lambda: check_engine("plan [engine]", {}))
    #: the validated [deployment] table, every key present (None: the plan has none)
    deployment: Mapping[str, Any] | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source).hexdigest()

    @property
    def references(self) -> tuple[str, ...]:
        """Every ``package.module:attr`` the plan names (a claim's kind, a mechanism, an aggregator
        stage of a '+'-joined spec, in any key, list or table), sorted: the plugins whose source
        hashes the report's manifest records (:func:`fedaudit.reports.provenance.plugin_sources`)."""
        found: set[str] = set()

        def walk(value: Any) -> None:
            if isinstance(value, str):
                found.update(part.strip() for part in value.split("+") if REFERENCE_RE.fullmatch(part.strip()))
            elif isinstance(value, Mapping):
                for k, v in value.items():
                    walk(k)
                    walk(v)
            elif isinstance(value, (list, tuple)):
                for v in value:
                    walk(v)

        for spec in self.claims:
            walk(spec.kind)
            walk(spec.params)
        return tuple(sorted(found))


def claim_seed(plan_seed: int, claim_id: str) -> int:
    """The seed of claim ``claim_id``: ``derive_seed(plan_seed, "claim=" + claim_id)``."""
    from fedaudit.rng import derive_seed

    return derive_seed(plan_seed, f"claim={claim_id}")


# ----------------------------------------------------------------------------- parsing
def load_plan(source: str | Path | Mapping[str, Any], *, allow_large: bool = False) -> Plan:
    """Read and validate a plan from a TOML file path or an already parsed mapping; with
    ``allow_large``, claims estimated above the budget are accepted (module docstring, Cost)."""
    if isinstance(source, Mapping):
        check_nesting(source, "plan")
        try:
            raw = json.dumps(source, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            raise FedAuditError(f"plan: not plain data ({exc})") from None
        return parse_plan(source, source_bytes=raw, allow_large=allow_large)
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
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise FedAuditError(f"plan {path}: arrays or inline tables nested deeper than the TOML reader can go "
                            f"(a plan nests {MAX_DEPTH} levels at most)") from None
    except ValueError as exc:  # int() of a literal beyond Python's digit limit (sys.get_int_max_str_digits)
        if "digits" not in str(exc):
            raise FedAuditError(f"plan {path} is not valid TOML: {exc}") from None
        raise FedAuditError(f"plan {path} holds an integer with more than {sys.get_int_max_str_digits()} digits, "
                            f"more than any plan key takes") from None
    return parse_plan(data, source_bytes=raw, path=str(path), allow_large=allow_large)


def parse_plan(data: Mapping[str, Any], *, source_bytes: bytes | None = None, path: str | None = None,
               allow_large: bool = False) -> Plan:
    """Validate a parsed plan (see the module docstring); raises one :class:`FedAuditError`.
    ``allow_large`` accepts claims estimated above the budget."""
    if not isinstance(data, Mapping):
        raise FedAuditError(f"plan must be a table, got {type(data).__name__}")
    check_nesting(data, f"plan {path}" if path else "plan")
    top = [k for k in data if k not in ("plan", "engine", "deployment", "claim")]
    if top:
        raise unknown_keys("plan file", top, ["plan", "engine", "deployment", "claim"],
                           "at the top level ([plan], [engine], [deployment] and [[claim]])")
    header = data.get("plan", {})
    if not isinstance(header, Mapping):
        raise FedAuditError("plan: [plan] must be a table with title and seed")
    extra = [k for k in header if k not in PLAN_KEYS]
    if extra:
        raise unknown_keys("plan", extra, list(PLAN_KEYS), "in [plan]")
    head = check_keys("plan", header, PLAN_KEYS)
    engine = data.get("engine", {})
    if not isinstance(engine, Mapping):
        raise FedAuditError("plan: [engine] must be a table with backend, workers, address and parallel_claims")
    engine = check_engine("plan [engine]", engine)
    deployment = None if data.get("deployment") is None else check_deployment(data["deployment"])
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
        spec = _parse_claim(index, raw, head["seed"], seen, allow_large, deployment)
        seen[spec.id] = index
        specs.append(spec)
    if source_bytes is None:
        source_bytes = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                  default=str).encode("utf-8")
    return Plan(title=head["title"], seed=head["seed"], claims=tuple(specs), source=source_bytes, path=path,
                engine=engine, deployment=deployment)


def check_engine(where: str, table: Mapping[str, Any]) -> dict[str, Any]:
    """An ``[engine]`` table checked against :data:`ENGINE_KEYS`, defaults filled in: unknown keys,
    bad values and an ``address`` without ``backend = 'ray'`` are one :class:`FedAuditError`
    naming ``where`` and the key."""
    extra = [k for k in table if k not in ENGINE_KEYS]
    if extra:
        raise unknown_keys(where, extra, list(ENGINE_KEYS), "in [engine]")
    out = check_keys(where, table, ENGINE_KEYS)
    if out["address"] is not None:
        if out["backend"] != "ray":
            raise key_error(where, "address", f"needs backend = 'ray' (the Ray cluster to join), got backend = "
                                              f"{show(out['backend'] if out['backend'] is not None else 'process')}")
        try:
            check_run_options("ray", None, out["address"])
        except FedAuditError:
            raise key_error(where, "address", "must be 'auto' or a Ray cluster address '[ray://]host:port' with a "
                                              f"port in [1, 65535] (e.g. '127.0.0.1:6379'), got "
                                              f"{show(out['address'])}") from None
    return out


def engine_options(plan: Plan, override: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The engine options a run of ``plan`` uses: its ``[engine]`` table with the keys of
    ``override`` that are not None in their place (``fedaudit run --backend/--workers/--address``),
    checked as the table is (:func:`check_engine`, naming ``engine``). An overriding ``backend``
    other than ``'ray'`` drops the plan's ``address`` (it names a Ray cluster)."""
    if override is None:
        return dict(plan.engine)
    if not isinstance(override, Mapping):
        raise FedAuditError(f"engine must be a dict of {', '.join(ENGINE_KEYS)}, got {type(override).__name__}")
    given = {k: v for k, v in override.items() if v is not None}
    merged = {**plan.engine, **given}
    if "backend" in given and "address" not in given and given["backend"] != "ray":
        merged["address"] = None
    return check_engine("engine", merged)


def _kind(where: str, name: str) -> tuple[str, ClaimKind]:
    """The kind's name as the report records it (registered names lower-cased; a former name of a
    kind, :attr:`ClaimKind.former_names`, becomes its name with one DeprecationWarning) and the kind."""
    key = name if ":" in name else name.lower()
    if key not in CLAIM_KINDS:
        names = CLAIM_KINDS.names()
        raise FedAuditError(f"{where}: key 'kind' must be one of {', '.join(repr(k) for k in names)} or "
                            f"'package.module:Class', got {show(name)}{did_you_mean(key, names)}")
    try:
        kind = claim_kind(key)
    except FedAuditError as exc:
        raise FedAuditError(f"{where}: key 'kind' names no usable claim kind: {exc}") from None
    if ":" not in key and key != kind.name and key in kind.former_names:
        warn_renamed(f"kind {key!r}", f"{kind.name!r}", where, stacklevel=4)
        key = kind.name
    return key, kind


def renamed_keys(where: str, raw: Mapping[str, Any], renames: Mapping[str, str]) -> Mapping[str, Any]:
    """``raw`` with each deprecated key of ``renames`` (old -> new) under its new name and one
    :class:`DeprecationWarning` per old key found (the CLI prints it as a one-line note); giving
    both names is an error."""
    found = [old for old in renames if old in raw]
    if not found:
        return raw
    out = dict(raw)
    for old in found:
        new = renames[old]
        if new in raw:
            raise key_error(where, old, f"is the deprecated name of {new!r}; give {new!r} only")
        warn_renamed(f"key {old!r}", f"{new!r}", where, stacklevel=4)
        out[new] = out.pop(old)
    return out


def check_cost(where: str, name: str, kind: ClaimKind, params: Mapping[str, Any]) -> None:
    """Refuse a claim whose estimated cost (:meth:`ClaimKind.estimate`) exceeds the budget: one
    :class:`FedAuditError` with the estimate, what drives it and how to run it anyway."""
    try:
        cost = kind.estimate(params)
    except Exception as exc:  # a user's kind raised while estimating: one line, exit 2
        raise FedAuditError(f"{where}: estimating the cost of kind {name!r} failed: {type(exc).__name__}: "
                            f"{exc}") from None
    if cost.over_budget():
        raise FedAuditError(f"{where}: too large to run without --allow-large (allow_large=True): estimated "
                            f"{cost.describe()}, over the budget of {MEMORY_BUDGET >> 30} GiB and "
                            f"{TIME_BUDGET / 3600:g} core-hours; lower those parameters, or pass --allow-large to "
                            f"run it anyway")


def _parse_claim(index: int, raw: Mapping[str, Any], plan_seed: int, seen: dict[str, int],
                 allow_large: bool = False, deployment: Mapping[str, Any] | None = None) -> ClaimSpec:
    rid = raw.get("id")
    where = f"claim {rid!r} (#{index})" if isinstance(rid, str) and rid.strip() else f"claim #{index}"
    if "id" not in raw:
        raise FedAuditError(f"{where}: missing required key 'id' (a unique name such as 'sstq-eps1')")
    if not isinstance(rid, str) or not _ID_RE.match(rid.strip()) or len(rid.strip()) > MAX_ID_LENGTH:
        shown = show(rid) if not isinstance(rid, str) or len(rid) <= 80 else f"{rid[:40]!r}… ({len(rid)} characters)"
        where = f"claim #{index}" if isinstance(rid, str) and len(rid) > 80 else where
        raise FedAuditError(f"{where}: key 'id' must be a string of letters, digits, '_', '.' or '-' of at most "
                            f"{MAX_ID_LENGTH} characters, got {shown}")
    rid = rid.strip()
    if rid in seen:
        raise FedAuditError(f"{where}: key 'id' duplicates claim #{seen[rid]}; claim ids must be unique")
    if "kind" not in raw:
        raise FedAuditError(f"{where}: missing required key 'kind' ({', '.join(CLAIM_KINDS.names())} or "
                            f"'package.module:Class')")
    common = check_keys(where, {k: raw[k] for k in COMMON_KEYS if k in raw}, COMMON_KEYS)
    name, kind = _kind(where, common["kind"])
    schema = kind.keys()
    raw = renamed_keys(where, raw, kind.renamed_keys)
    own_deployment = raw.get("deployment")
    raw = {k: v for k, v in raw.items() if k != "deployment"}
    unknown = [k for k in raw if k not in COMMON_KEYS and k not in schema]
    if unknown:
        raise unknown_keys(where, unknown, list(COMMON_KEYS) + list(schema) + ["deployment"], f"for kind {name!r}")
    params = check_keys(where, {k: raw[k] for k in schema if k in raw}, schema)
    try:
        kind.cross_check(where, params, common["expect"])
    except FedAuditError:
        raise
    except Exception as exc:  # a user's kind or component raised while the plan was checked: one line, exit 2
        raise FedAuditError(f"{where}: checking kind {name!r} failed: {type(exc).__name__}: {exc}") from None
    if not allow_large:
        check_cost(where, name, kind, params)
    try:
        dp = kind.dp_facts(params)
    except Exception as exc:  # a user's kind raised while stating its DP facts: one line, exit 2
        raise FedAuditError(f"{where}: kind {name!r} failed to state its DP facts: {type(exc).__name__}: "
                            f"{exc}") from None
    facts = claim_deployment(where, name, dp, deployment if deployment is not None else check_deployment({}),
                             own_deployment)
    seed = common["seed"] if common["seed"] is not None else claim_seed(plan_seed, rid)
    title = common["title"] or kind.default_title(params, common["expect"])
    return ClaimSpec(index=index, id=rid, kind=name, title=title, expect=common["expect"], seed=seed,
                     params=params, seed_pinned=common["seed"] is not None,
                     deployment=None if facts is None else {"dp": dict(dp), "facts": facts})
