"""Declarative audit plans: parse a TOML plan and validate every claim before anything runs.

A plan is a TOML file::

    [plan]
    title = "SSTQ compliance"      # optional
    seed = 0                       # root seed (integer >= 0), default 0

    [[claim]]
    id = "sstq-eps1"               # unique; [A-Za-z0-9_.-]
    kind = "ldp"                   # ldp | variance | robustness | stress | convergence
    title = "SSTQ is 1-LDP"        # optional (a default is derived from the parameters)
    expect = "pass"                # "pass" (default) or "violation"
    mechanism = "sstq"             # kind-specific keys, see SCHEMAS / `describe_schema()`
    ...

Validation is all-or-nothing and happens before any claim runs: an unknown key, a wrong type,
an out-of-range value, a duplicate id or an unknown kind raises one :class:`FedAuditError` that
names the claim and the key, e.g.
``claim 'sstq-eps1' (#2): key 'samples' must be an integer >= 100, got 'abc'``.
Integer keys accept whole floats (``samples = 2e5``); float keys accept integers.

Aggregator keywords. Robustness, stress and convergence claims take ``aggregator_params``, the
keywords of :func:`fedaudit.defenses.registry.make_aggregator` (``aggregator_params = { s = 2 }``
for ``"bucketing+cwtm"``; a stress grid may name specs, ``{ "bucketing+cwtm" = { s = 2 } }``).
The rule is built once at parse time, so an unknown keyword, a missing required one (bucketing's
``s``) or a rejected value is one error naming the claim, the key and the valid keywords. A
stage that takes a ``seed`` the plan leaves unset gets one derived from the claim's seed.

Seeds. A claim's seed is ``derive_seed(plan seed, "claim=<id>")``
(:func:`fedaudit.engine.derive_seed`: the id's SHA-256 words as the ``spawn_key`` of
``SeedSequence(plan seed)``), so adding, removing or reordering claims never changes another
claim's result. A claim may pin its own ``seed`` instead (e.g. to replay one claim).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError

__all__ = ["Key", "SCHEMAS", "COMMON_KEYS", "PLAN_KEYS", "ClaimSpec", "Plan", "load_plan", "parse_plan",
           "claim_seed", "describe_schema"]

_REQUIRED = object()
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


# ----------------------------------------------------------------------------- key schema
@dataclass(frozen=True)
class Key:
    """One plan key: its type, default (``_REQUIRED`` when it must be given), range and choices.

    ``type`` is one of ``int``, ``float``, ``str``, ``bool``, ``list[int]``, ``list[float]``,
    ``list[str]``, ``table[int]`` and ``table[float]`` (a TOML inline table of name → number) and
    ``params`` (an inline table of keyword → number, string or boolean, e.g. the keywords of an
    aggregator: ``{ s = 2 }``; the kind's cross-check decides which keywords exist).
    ``low``/``high`` bound numbers (and every element of a list or table); ``choices`` limits
    strings (and list elements); ``min_items`` the length of a list.
    """

    type: str
    default: Any = _REQUIRED
    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    choices: tuple[str, ...] | None = None
    min_items: int = 1
    help: str = ""

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def describe(self) -> str:
        """What a valid value looks like, e.g. "an integer >= 100", "a number in (0, 1)"."""
        base = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
                "list[int]": "a list of integers", "list[float]": "a list of numbers",
                "list[str]": "a list of strings", "table[int]": "a table of name = integer",
                "table[float]": "a table of name = number",
                "params": "a table of keyword = number, string or boolean"}[self.type]
        if self.choices is not None:
            opts = ", ".join(repr(c) for c in self.choices)
            return f"one of {opts}" if self.type == "str" else f"{base} from {opts}"
        return base + _range_text(self.low, self.high, self.open_low, self.open_high)


def _fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else f"{v:g}"


def _range_text(low, high, open_low=False, open_high=False) -> str:
    if low is None and high is None:
        return ""
    if high is None:
        return f" {'>' if open_low else '>='} {_fmt_num(low)}"
    if low is None:
        return f" {'<' if open_high else '<='} {_fmt_num(high)}"
    return f" in {'(' if open_low else '['}{_fmt_num(low)}, {_fmt_num(high)}{')' if open_high else ']'}"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 80 else text[:77] + "..."
    return repr(value)


class _Bad(Exception):
    """A value failed its key's check (message completed by the caller)."""


def _in_range(v: float, key: Key) -> bool:
    if key.low is not None and (v <= key.low if key.open_low else v < key.low):
        return False
    if key.high is not None and (v >= key.high if key.open_high else v > key.high):
        return False
    return True


def _scalar(value: Any, kind: str, key: Key) -> Any:
    if kind == "int":
        if isinstance(value, bool):
            raise _Bad
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or not _in_range(value, key):
            raise _Bad
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Bad
        value = float(value)
        if not math.isfinite(value) or not _in_range(value, key):
            raise _Bad
        return value
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise _Bad
        value = value.strip()
        if key.choices is not None:
            value = value.lower()
            if value not in key.choices:
                raise _Bad
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise _Bad
        return value
    raise AssertionError(kind)  # pragma: no cover


def _coerce(value: Any, key: Key) -> Any:
    """Check ``value`` against ``key``; return the normalised value or raise :class:`_Bad`."""
    if key.type.startswith("list["):
        inner = key.type[5:-1]
        if inner == "str" and isinstance(value, str):  # "alie,ipm" or "alie"
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or len(value) < key.min_items:
            raise _Bad
        out = [_scalar(v, inner, key) for v in value]
        return list(dict.fromkeys(out))  # drop repeats, keep order
    if key.type == "params":
        return _params_table(value, nested=True)
    if key.type.startswith("table["):
        inner = key.type[6:-1]
        if not isinstance(value, dict) or not value:
            raise _Bad
        return {str(k).strip().lower(): _scalar(v, inner, key) for k, v in value.items()}
    return _scalar(value, key.type, key)


def _params_table(value: Any, nested: bool) -> dict[str, Any]:
    """A keyword table: keyword -> finite number, non-empty string or boolean (keywords lower-cased).
    With ``nested``, a value may itself be such a table (one level: a per-aggregator table)."""
    if not isinstance(value, dict):
        raise _Bad
    out: dict[str, Any] = {}
    for k, v in value.items():
        name = str(k).strip().lower()
        if not name:
            raise _Bad
        if isinstance(v, dict):
            if not nested:
                raise _Bad
            out[name] = _params_table(v, nested=False)
        elif isinstance(v, bool) or (isinstance(v, str) and v.strip()):
            out[name] = v.strip() if isinstance(v, str) else v
        elif isinstance(v, (int, float)) and math.isfinite(v):
            out[name] = v
        else:
            raise _Bad
    return out


# ----------------------------------------------------------------------------- schemas
def _names(module: str, attr: str) -> tuple[str, ...]:
    import importlib

    return tuple(getattr(importlib.import_module(module), attr))


def _mechanisms() -> tuple[str, ...]:
    return _names("fedaudit.mechanisms.registry", "MECHANISM_NAMES")


def _optimizers() -> tuple[str, ...]:
    return _names("fedaudit.fl.stress", "OPTIMIZER_NAMES")


def _datasets() -> tuple[str, ...]:
    return _names("fedaudit.fl.data", "DATASET_NAMES")


#: keys every claim accepts
COMMON_KEYS: dict[str, Key] = {
    "id": Key("str", help="unique name of the claim ([A-Za-z0-9_.-])"),
    "kind": Key("str", choices=("ldp", "variance", "robustness", "stress", "convergence")),
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


def _schemas() -> dict[str, dict[str, Key]]:
    mechanisms = _mechanisms()
    optimizers = _optimizers()
    datasets = _datasets()
    return {
        "ldp": {
            "mechanism": Key("str", choices=mechanisms, help="registry name of the randomizer"),
            "dim": Key("int", 64, low=1, high=1_000_000, help="input dimension (categories for rr)"),
            "epsilon": Key("float", 1.0, low=0, open_low=True, help="the mechanism's ε parameter"),
            "delta": Key("float", 1e-5, low=0, high=1, open_high=True, help="the mechanism's δ parameter (gaussian)"),
            "k": Key("int", None, low=1, help="SSTQ coordinates per report (default dim // 16)"),
            "levels": Key("int", 4, low=2, help="quantization levels"),
            "clip": Key("float", 1.0, low=0, open_low=True, help="L2 clip radius of the inputs"),
            "rotate": Key("bool", True, help="SSTQ random rotation"),
            "claimed_epsilon": Key("float", None, low=0, open_low=True,
                                   help="the ε claim under audit (default: the mechanism's ε)"),
            "claimed_delta": Key("float", None, low=0, high=1, open_high=True,
                                 help="the δ claim under audit (default: the mechanism's δ)"),
            "pair": Key("str", "antipodal", choices=("antipodal", "flat", "zero-boundary", "search"),
                        help="the audited input pair, or 'search' for the worst pair found"),
            "samples": Key("int", 200_000, low=100, help="draws per input for the certified bound"),
            "search_samples": Key("int", 20_000, low=200, help="draws per input per searched candidate"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
            "test": Key("str", "auto", help="distinguisher: auto, likelihood-ratio, black-box, column, ..."),
            "curve": Key("bool", True, help="also certify at samples/16 and samples/4 (epsilon_vs_samples plot)"),
            "min_pair_power": Key("float", None, low=0, high=1, open_low=True,
                                  help="least pair power (the pair's exact ε / the claimed ε) for a 'no violation' "
                                       "result to count; below it (or unknown) the verdict is INCONCLUSIVE"),
        },
        "variance": {
            "dim": Key("int", 1024, low=1, high=1_000_000),
            "ks": Key("list[int]", low=1, help="SSTQ k values (each <= dim)"),
            "epsilon": Key("float", 1.0, low=0, open_low=True),
            "levels": Key("int", 2, low=2),
            "clip": Key("float", 1.0, low=0, open_low=True),
            "samples": Key("int", 20_000, low=100, help="reports per measurement"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
            "max_mse": Key("float", None, low=0, open_low=True,
                           help="bound on the private SSTQ MSE at every k (CI upper end must meet it)"),
            "max_slope": Key("float", None, help="bound on the log-log slope of private SSTQ MSE on d/k (CI upper end)"),
            "min_slope": Key("float", None, help="bound on the slope from below (CI lower end)"),
        },
        "robustness": {
            "aggregator": Key("str", help="registry spec, e.g. cwtm or nnm+cwtm"),
            "n": Key("int", low=1, high=1000),
            "f": Key("int", low=0),
            "d": Key("int", 100, low=1, high=100_000),
            "trials": Key("int", 200, low=1),
            "attacks": Key("list[str]", ["all"], help="attack names or 'all'"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params), "
                                                          "e.g. { s = 2 } for bucketing"),
            "search_evals": Key("int", 60, low=0),
            "max_nu": Key("float", None, low=0, open_low=True,
                          help="largest acceptable ν̂ (the published bound must also hold)"),
        },
        "stress": {
            "aggregators": Key("list[str]", help="registry specs"),
            "aggregator_params": Key("params", None,
                                     help="make_aggregator keywords for every aggregator ({ s = 2 }), or per "
                                          "spec ({ \"bucketing+cwtm\" = { s = 2 } })"),
            "attacks": Key("list[str]", help="attack names (or labelflip)"),
            "fs": Key("list[int]", [1], low=0),
            "betas": Key("list[float]", [1.0], low=0, open_low=True),
            "dataset": Key("str", "digits", choices=datasets),
            "data_path": Key("str", None),
            "optimizer": Key("str", "dgd", choices=optimizers),
            "rounds": Key("int", 100, low=1),
            "lr": Key("float", 0.1, low=0, open_low=True),
            "n_honest": Key("int", 20, low=2),
            "mu": Key("float", 1e-2, low=0),
            "optimal_attack": Key("bool", True),
            "workers": Key("int", None, low=1),
            "backend": Key("str", "process", choices=("process", "serial", "ray")),
            "min_accuracy": Key("float", None, low=0, high=1,
                                help="every cell's final test accuracy must reach it"),
            "max_loss": Key("float", None, low=0, open_low=True,
                            help="every cell's final honest loss must stay below it"),
        },
        "convergence": {
            "optimizers": Key("list[str]", choices=optimizers, help="optimizers to compare"),
            "baseline": Key("str", None, choices=optimizers, help="reference for speedups (default: the first)"),
            "dataset": Key("str", "digits", choices=datasets),
            "data_path": Key("str", None),
            "n_honest": Key("int", 20, low=2),
            "f": Key("int", 1, low=0),
            "beta": Key("float", 5.0, low=0, open_low=True),
            "aggregator": Key("str", "nnm+cwtm"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params), "
                                                          "e.g. { s = 2 } for bucketing"),
            "attack": Key("str", "alie"),
            "optimal_attack": Key("bool", True),
            "mu": Key("float", 1e-2, low=0),
            "rounds": Key("int", 100, low=2),
            "lr": Key("float", 0.1, low=0, open_low=True, help="step size of dgd and dnag"),
            "momentum": Key("float", 0.9, low=0, high=1, open_high=True, help="dnag momentum"),
            "eta": Key("float", None, low=0, open_low=True, help="PIGS step (default 1/(2Δ̂))"),
            "target_loss": Key("float", None, low=0, open_low=True,
                               help="the target honest loss L* (default: the baseline's final level plus "
                                    "target_eps of its gap to the best loss reached)"),
            "target_eps": Key("float", 0.05, low=0, help="relative tolerance of the default target loss"),
            "plateau_window": Key("int", None, low=1, help="w: rounds over which a plateau's relative change is "
                                                        "taken (default min(10, rounds - 1))"),
            "plateau_tol": Key("float", 0.01, low=0, high=1, open_low=True,
                               help="τ: a plateau changes the loss by at most τ (relative) over w rounds"),
            "max_rounds": Key("table[int]", None, low=0, help="optimizer = most rounds to reach the target loss"),
            "min_speedup": Key("table[float]", None, low=0, open_low=True,
                               help="optimizer = least speedup over the baseline (ratio of rounds to the target loss)"),
            "max_final_loss": Key("float", None, low=0, open_low=True, help="every optimizer's final honest loss"),
            "min_final_accuracy": Key("float", None, low=0, high=1, help="every optimizer's final test accuracy"),
        },
    }


class _LazySchemas(Mapping):
    """SCHEMAS, built on first use (the registries are imported lazily)."""

    _cache: dict[str, dict[str, Key]] | None = None

    def _get(self) -> dict[str, dict[str, Key]]:
        if self._cache is None:
            type(self)._cache = _schemas()
        return self._cache

    def __getitem__(self, kind: str) -> dict[str, Key]:
        return self._get()[kind]

    def __iter__(self):
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


#: kind -> {key: Key} (kind-specific keys; COMMON_KEYS apply to every kind)
SCHEMAS: Mapping[str, dict[str, Key]] = _LazySchemas()


def describe_schema() -> str:
    """The plan schema as text (one line per key)."""
    lines = ["[plan]"] + [f"  {k}: {v.describe()}" + ("" if v.required else f" (default {_show(v.default)})")
                          for k, v in PLAN_KEYS.items()]
    lines.append("[[claim]] (every kind)")
    lines += [f"  {k}: {v.describe()}" + (" (required)" if v.required else f" (default {_show(v.default)})")
              for k, v in COMMON_KEYS.items()]
    for kind, keys in SCHEMAS.items():
        lines.append(f"kind = {kind!r}")
        lines += [f"  {k}: {v.describe()}" + (" (required)" if v.required else f" (default {_show(v.default)})")
                  for k, v in keys.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- model
@dataclass(frozen=True)
class ClaimSpec:
    """A validated claim: common fields and the kind's parameters with defaults filled in."""

    index: int  # 1-based position in the plan
    id: str
    kind: str
    title: str
    expect: str
    seed: int
    params: dict[str, Any] = field(repr=False)
    seed_pinned: bool = False

    @property
    def where(self) -> str:
        return f"claim {self.id!r} (#{self.index})"

    def to_dict(self) -> dict[str, Any]:
        from fedaudit.json import jsonable  # TOML allows inf/nan: strict JSON strings

        return {"id": self.id, "kind": self.kind, "title": self.title, "expect": self.expect, "seed": self.seed,
                "seed_rule": "pinned in the plan" if self.seed_pinned else "derive_seed(plan seed, 'claim=<id>')",
                "params": jsonable(dict(self.params))}


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
    from fedaudit.engine import derive_seed

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


def _unknown(where: str, bad: list[str], valid: list[str], what: str) -> FedAuditError:
    hint = difflib.get_close_matches(bad[0], valid, n=1)
    keys = ", ".join(repr(b) for b in bad)
    return FedAuditError(f"{where}: unknown key{'s' if len(bad) > 1 else ''} {keys}"
                         + (f" (did you mean {hint[0]!r}?)" if hint else "")
                         + f"; valid keys {what}: {', '.join(valid)}")


def _check_keys(where: str, table: Mapping[str, Any], schema: Mapping[str, Key]) -> dict[str, Any]:
    """Type/range-check every key of ``table`` against ``schema`` and fill defaults."""
    out: dict[str, Any] = {}
    for name, key in schema.items():
        if name not in table or table[name] is None:
            if key.required:
                raise FedAuditError(f"{where}: missing required key {name!r} ({key.describe()})")
            out[name] = key.default
            continue
        try:
            out[name] = _coerce(table[name], key)
        except _Bad:
            raise FedAuditError(f"{where}: key {name!r} must be {key.describe()}, got {_show(table[name])}") from None
    return out


def parse_plan(data: Mapping[str, Any], *, source_bytes: bytes | None = None, path: str | None = None) -> Plan:
    """Validate a parsed plan (see the module docstring); raises one :class:`FedAuditError`."""
    if not isinstance(data, Mapping):
        raise FedAuditError(f"plan must be a table, got {type(data).__name__}")
    top = [k for k in data if k not in ("plan", "claim")]
    if top:
        raise _unknown("plan file", top, ["plan", "claim"], "at the top level ([plan] and [[claim]])")
    header = data.get("plan", {})
    if not isinstance(header, Mapping):
        raise FedAuditError("plan: [plan] must be a table with title and seed")
    extra = [k for k in header if k not in PLAN_KEYS]
    if extra:
        raise _unknown("plan", extra, list(PLAN_KEYS), "in [plan]")
    head = _check_keys("plan", header, PLAN_KEYS)
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


def _parse_claim(index: int, raw: Mapping[str, Any], plan_seed: int, seen: dict[str, int]) -> ClaimSpec:
    rid = raw.get("id")
    where = f"claim {rid!r} (#{index})" if isinstance(rid, str) and rid.strip() else f"claim #{index}"
    if "id" not in raw:
        raise FedAuditError(f"{where}: missing required key 'id' (a unique name such as 'sstq-eps1')")
    if not isinstance(rid, str) or not _ID_RE.match(rid.strip()):
        raise FedAuditError(f"{where}: key 'id' must be a string of letters, digits, '_', '.' or '-', "
                            f"got {_show(rid)}")
    rid = rid.strip()
    if rid in seen:
        raise FedAuditError(f"{where}: key 'id' duplicates claim #{seen[rid]}; claim ids must be unique")
    if "kind" not in raw:
        raise FedAuditError(f"{where}: missing required key 'kind' ({COMMON_KEYS['kind'].describe()})")
    common = _check_keys(where, {k: raw[k] for k in COMMON_KEYS if k in raw}, COMMON_KEYS)
    kind = common["kind"]
    schema = SCHEMAS[kind]
    unknown = [k for k in raw if k not in COMMON_KEYS and k not in schema]
    if unknown:
        raise _unknown(where, unknown, list(COMMON_KEYS) + list(schema), f"for kind {kind!r}")
    params = _check_keys(where, {k: raw[k] for k in schema if k in raw}, schema)
    _CROSS[kind](where, params, common["expect"])
    seed = common["seed"] if common["seed"] is not None else claim_seed(plan_seed, rid)
    title = common["title"] or _default_title(kind, params, common["expect"])
    return ClaimSpec(index=index, id=rid, kind=kind, title=title, expect=common["expect"], seed=seed,
                     params=params, seed_pinned=common["seed"] is not None)


# ----------------------------------------------------------------------------- cross-key checks
def _fail(where: str, key: str, message: str) -> FedAuditError:
    return FedAuditError(f"{where}: key {key!r} {message}")


def _need_check(where: str, params: dict[str, Any], expect: str, keys: tuple[str, ...]) -> None:
    if expect == "violation" and all(params.get(k) is None for k in keys):
        raise FedAuditError(f"{where}: expect = 'violation' needs a bound to violate; set one of "
                            f"{', '.join(repr(k) for k in keys)}")


def _cross_ldp(where: str, p: dict[str, Any], expect: str) -> None:
    from fedaudit.audit.ldp import TESTS
    from fedaudit.mechanisms.registry import make_mechanism

    if p["k"] is not None and p["k"] > p["dim"]:
        raise _fail(where, "k", f"must be an integer in [1, dim={p['dim']}], got {p['k']}")
    names = [t.strip().lower() for t in p["test"].split(",") if t.strip()]
    if not names or any(t not in TESTS and t != "lr" for t in names):
        raise _fail(where, "test", f"must be one of {', '.join(repr(t) for t in TESTS)} (comma-separated allowed), "
                                   f"got {_show(p['test'])}")
    p["test"] = ",".join(names)
    if p["mechanism"] == "rr" and p["dim"] < 2:
        raise _fail(where, "dim", f"must be an integer >= 2 for mechanism 'rr' (categories), got {p['dim']}")
    if p["mechanism"] == "rr" and p["pair"] != "search":
        p["pair"] = "one-hot"  # e_0 vs e_1: rr takes categories, not vectors
    try:
        make_mechanism(p["mechanism"], p["dim"], p["epsilon"], k=p["k"], levels=p["levels"], clip=p["clip"],
                       delta=p["delta"], rotate=p["rotate"])
    except FedAuditError as exc:
        raise FedAuditError(f"{where}: mechanism {p['mechanism']!r} rejects its parameters: {exc}") from None
    if p["curve"] and p["samples"] < 1600:
        p["curve"] = False  # samples/16 would fall below the audit's minimum of 100


def _cross_variance(where: str, p: dict[str, Any], expect: str) -> None:
    big = [k for k in p["ks"] if k > p["dim"]]
    if big:
        raise _fail(where, "ks", f"must list integers in [1, dim={p['dim']}], got {big[0]}")
    if p["min_slope"] is not None and p["max_slope"] is not None and p["min_slope"] > p["max_slope"]:
        raise _fail(where, "min_slope", f"must be <= max_slope={p['max_slope']:g}, got {p['min_slope']:g}")
    if (p["min_slope"] is not None or p["max_slope"] is not None) and len(p["ks"]) < 2:
        raise _fail(where, "ks", "must list at least two k values to fit a slope")
    _need_check(where, p, expect, ("max_mse", "max_slope", "min_slope"))


def _check_attacks(where: str, key: str, names: list[str], allow_all: bool, allow_labelflip: bool) -> None:
    from fedaudit.attacks.byzantine import ATTACK_NAMES

    valid = list(ATTACK_NAMES) + (["labelflip"] if allow_labelflip else [])
    if allow_all and "all" in names:
        if len(names) > 1:
            raise _fail(where, key, f"must be 'all' or a list of attack names, not both, got {_show(names)}")
        return
    bad = [a for a in names if a not in valid]
    if bad:
        raise _fail(where, key, f"names unknown attack {bad[0]!r}; valid: {', '.join(valid)}"
                                + (" or 'all'" if allow_all else ""))


def _spec_names_valid(spec: str) -> bool:
    """True when every '+'-joined name of ``spec`` is registered and only the last is an aggregator."""
    from fedaudit.defenses.registry import AGGREGATOR_NAMES, PREAGGREGATOR_NAMES

    *pre, last = [part.strip().lower() for part in spec.split("+")]
    return last in AGGREGATOR_NAMES and all(name in PREAGGREGATOR_NAMES for name in pre)


def _accepted_keywords(spec: str) -> list[str]:
    """The keywords the stages of ``spec`` accept (the registry's reading of their constructors)."""
    from fedaudit.defenses import registry

    classes = {**registry._AGGREGATORS, **registry._PREAGGREGATORS}
    out: list[str] = []
    for name in spec.split("+"):
        cls = classes.get(name.strip().lower())
        if cls is not None:
            out += [k for k in registry._keywords(cls) if k not in out]
    return out


def _check_aggregator(where: str, key: str, spec: str, f: int, n: int, n_key: str,
                      params: Mapping[str, Any] | None = None, params_key: str = "aggregator_params") -> None:
    """Build ``make_aggregator(spec, f, **params)`` once at parse time: a bad name blames ``key``,
    a keyword no stage takes, a missing required keyword or a rejected value blames ``params_key``."""
    from fedaudit.defenses.registry import make_aggregator

    params = dict(params or {})
    try:
        rule = make_aggregator(spec, f, **params)
    except FedAuditError as exc:
        if not _spec_names_valid(spec):
            raise _fail(where, key, f"is not a valid aggregator: {exc}") from None
        accepted = _accepted_keywords(spec)
        unknown = [k for k in params if k not in accepted]
        if unknown:
            raise _fail(where, params_key, f"names {unknown[0]!r}, which no stage of {spec!r} takes; valid keywords: "
                                           f"{', '.join(accepted) or 'none'}") from None
        raise _fail(where, params_key, f"is rejected by {spec!r}: {exc}"
                    + ("" if params else f" (set {params_key} = {{ ... }})")) from None
    need = rule.min_n(rule.f) if hasattr(rule, "min_n") else 2 * f + 1
    if n < need:
        raise FedAuditError(f"{where}: key {n_key!r} is too small: {spec} needs n >= {need} for f={f}, got n={n}")


def _flat_params(where: str, p: dict[str, Any]) -> None:
    """Robustness and convergence take one aggregator: its keyword table must be flat."""
    table = p["aggregator_params"]
    nested = [k for k, v in (table or {}).items() if isinstance(v, dict)]
    if nested:
        raise _fail(where, "aggregator_params", f"must be a table of keyword = number, string or boolean, got a "
                                                f"table under {nested[0]!r}")
    p["aggregator_params"] = table or None


def _cross_robustness(where: str, p: dict[str, Any], expect: str) -> None:
    if p["n"] <= 2 * p["f"]:
        raise _fail(where, "f", f"must satisfy n > 2f (n={p['n']}), got f={p['f']}")
    _check_attacks(where, "attacks", p["attacks"], allow_all=True, allow_labelflip=False)
    p["attacks"] = "all" if p["attacks"] == ["all"] else p["attacks"]
    _flat_params(where, p)
    _check_aggregator(where, "aggregator", p["aggregator"], p["f"], p["n"], "n", p["aggregator_params"])
    p["aggregator"] = p["aggregator"].lower()


def _cross_stress(where: str, p: dict[str, Any], expect: str) -> None:
    from fedaudit.fl.stress import StressConfig

    p["aggregators"] = [a.lower() for a in p["aggregators"]]
    p["attacks"] = [a.lower() for a in p["attacks"]]
    _check_attacks(where, "attacks", p["attacks"], allow_all=False, allow_labelflip=True)
    big = [f for f in p["fs"] if f >= p["n_honest"]]
    if big:
        raise _fail(where, "fs", f"must list integers in [0, n_honest - 1 = {p['n_honest'] - 1}], got {big[0]}")
    p["aggregator_params"] = _params_per_spec(where, p["aggregators"], p["aggregator_params"])
    for spec in p["aggregators"]:
        for f in p["fs"]:
            _check_aggregator(where, "aggregators", spec, f, p["n_honest"] + f, "n_honest",
                              (p["aggregator_params"] or {}).get(spec))
    if p["min_accuracy"] is None and p["max_loss"] is None:
        raise FedAuditError(f"{where}: set 'min_accuracy' or 'max_loss' (the requirement every cell must meet)")
    if p["dataset"] == "mnist" and p["data_path"] is None:
        raise _fail(where, "data_path", "is required for dataset 'mnist' (local IDX directory or .npz)")
    try:
        StressConfig(**_stress_config_kw(p, seed=0))
    except FedAuditError as exc:
        raise FedAuditError(f"{where}: {exc}") from None


def _params_per_spec(where: str, specs: list[str], table: dict[str, Any] | None) -> dict[str, dict] | None:
    """A stress grid's keyword table as spec -> keywords. A flat table applies to every listed
    spec; a table of tables names specs (each must be listed). Mixing the two forms is an error."""
    if not table:
        return None
    nested = {k: v for k, v in table.items() if isinstance(v, dict)}
    if not nested:
        return {spec: dict(table) for spec in specs}
    if len(nested) != len(table):
        flat = next(k for k in table if k not in nested)
        raise _fail(where, "aggregator_params", f"mixes a keyword ({flat!r}) with per-aggregator tables; use either "
                                                "{ s = 2 } for every aggregator or { \"bucketing+cwtm\" = { s = 2 } }")
    stray = [k for k in nested if k not in specs]
    if stray:
        raise _fail(where, "aggregator_params", f"names aggregator {stray[0]!r}, which is not in 'aggregators' "
                                                f"({', '.join(specs)})")
    return {k: dict(v) for k, v in nested.items() if v}


def _stress_config_kw(p: dict[str, Any], seed: int) -> dict[str, Any]:
    return dict(aggregators=tuple(p["aggregators"]), attacks=tuple(p["attacks"]), fs=tuple(p["fs"]),
                betas=tuple(p["betas"]), dataset=p["dataset"], data_path=p["data_path"], optimizer=p["optimizer"],
                rounds=p["rounds"], lr=p["lr"], n_honest=p["n_honest"], mu=p["mu"], seed=seed,
                optimal_attack=p["optimal_attack"], aggregator_params=p.get("aggregator_params"))


def _cross_convergence(where: str, p: dict[str, Any], expect: str) -> None:
    opts = p["optimizers"]
    if p["baseline"] is None:
        p["baseline"] = opts[0]
    elif p["baseline"] not in opts:
        raise _fail(where, "baseline", f"must be one of the compared optimizers ({', '.join(opts)}), "
                                       f"got {p['baseline']!r}")
    for key in ("max_rounds", "min_speedup"):
        table = p[key]
        if table is None:
            continue
        bad = [name for name in table if name not in opts]
        if bad:
            raise _fail(where, key, f"names optimizer {bad[0]!r}, which is not compared; use one of "
                                    f"{', '.join(opts)}")
        if key == "max_rounds":
            over = [name for name, v in table.items() if v > p["rounds"]]
            if over:
                raise _fail(where, key, f"gives {over[0]} = {table[over[0]]}, more than rounds = {p['rounds']}")
    if p["min_speedup"] is not None and p["baseline"] in p["min_speedup"]:
        raise _fail(where, "min_speedup", f"cannot constrain the baseline {p['baseline']!r} against itself")
    if p["f"] >= p["n_honest"]:
        raise _fail(where, "f", f"must be an integer in [0, n_honest - 1 = {p['n_honest'] - 1}], got {p['f']}")
    p["attack"] = p["attack"].lower()
    p["aggregator"] = p["aggregator"].lower()
    _check_attacks(where, "attack", [p["attack"]], allow_all=False, allow_labelflip=True)
    _flat_params(where, p)
    _check_aggregator(where, "aggregator", p["aggregator"], p["f"], p["n_honest"] + p["f"], "n_honest",
                      p["aggregator_params"])
    if p["plateau_window"] is None:
        p["plateau_window"] = min(10, p["rounds"] - 1)
    if p["plateau_window"] >= p["rounds"]:
        raise _fail(where, "plateau_window", f"must be an integer in [1, rounds - 1 = {p['rounds'] - 1}], "
                                             f"got {p['plateau_window']}")
    if p["dataset"] == "mnist" and p["data_path"] is None:
        raise _fail(where, "data_path", "is required for dataset 'mnist' (local IDX directory or .npz)")
    _need_check(where, p, expect, ("max_rounds", "min_speedup", "max_final_loss", "min_final_accuracy"))


_CROSS: dict[str, Callable[[str, dict[str, Any], str], None]] = {
    "ldp": _cross_ldp, "variance": _cross_variance, "robustness": _cross_robustness,
    "stress": _cross_stress, "convergence": _cross_convergence,
}


# ----------------------------------------------------------------------------- titles
def _default_title(kind: str, p: dict[str, Any], expect: str) -> str:
    if kind == "ldp":
        eps = p["claimed_epsilon"] if p["claimed_epsilon"] is not None else p["epsilon"]
        name = {"sstq": "SSTQ", "sstq-sketch": "SSTQ sketch (as published)", "vqsgd": "vqSGD",
                "privunitg": "PrivUnitG", "rr": "randomized response"}.get(p["mechanism"], p["mechanism"])
        k = f", k={p['k']}" if p["mechanism"].startswith("sstq") and p["k"] is not None else ""
        verb = "is not" if expect == "violation" else "is"
        return f"{name} (d={p['dim']}{k}) {verb} {eps:g}-LDP"
    if kind == "variance":
        bits = []
        if p["max_mse"] is not None:
            bits.append(f"MSE ≤ {p['max_mse']:g}")
        if p["min_slope"] is not None or p["max_slope"] is not None:
            lo = "−∞" if p["min_slope"] is None else f"{p['min_slope']:g}"
            hi = "∞" if p["max_slope"] is None else f"{p['max_slope']:g}"
            bits.append(f"slope on d/k in [{lo}, {hi}]")
        tail = (": " + ", ".join(bits)) if bits else ""
        return f"SSTQ MSE vs d/k at d={p['dim']}, ε={p['epsilon']:g}{tail}"
    if kind == "robustness":
        attacks = "all attacks" if p["attacks"] == "all" else "/".join(a.upper() for a in p["attacks"])
        bound = f", ν ≤ {p['max_nu']:g}" if p["max_nu"] is not None else ""
        return f"{p['aggregator'].upper()} is robust at n={p['n']}, f={p['f']} under {attacks}{bound}"
    if kind == "stress":
        req = []
        if p["min_accuracy"] is not None:
            req.append(f"accuracy ≥ {p['min_accuracy']:g}")
        if p["max_loss"] is not None:
            req.append(f"loss ≤ {p['max_loss']:g}")
        verb = "keeps" if len(p["aggregators"]) == 1 else "keep"
        return (f"{', '.join(a.upper() for a in p['aggregators'])} {verb} {' and '.join(req)} "
                f"under {', '.join(p['attacks'])} on {p['dataset']}")
    return f"{' vs '.join(o.upper() for o in p['optimizers'])} on {p['dataset']} ({p['aggregator']}, {p['attack']}, f={p['f']})"
