"""Plan-time checks of the components a claim names (mechanisms, aggregator specs, their keywords,
attacks), shared by the claim kinds that build a randomizer, a server rule or an attack.

Each check builds or looks up the component once, before anything runs, so a wrong name, a
keyword no stage takes or a rejected value is one :class:`~fedaudit.errors.FedAuditError` naming
the claim and the key.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.keys import key_error, show

__all__ = ["check_mechanism_key", "load_sampler", "build_mechanism", "normalise_spec", "check_attacks", "check_aggregator", "accepted_keywords", "flat_params",
           "params_per_spec", "optimizer_names", "dataset_names"]


def check_mechanism_key(where: str, p: dict[str, Any]) -> None:
    """Normalise ``p["mechanism"]`` (registered names are case-insensitive; ``module:attr`` as
    given) and refuse a name the mechanism registry cannot resolve."""
    from fedaudit.mechanisms.registry import MECHANISMS

    if ":" not in p["mechanism"]:
        p["mechanism"] = p["mechanism"].lower()
    try:
        MECHANISMS.factory(p["mechanism"])
    except FedAuditError as exc:
        raise key_error(where, "mechanism", f"is not a mechanism: {exc}") from None


def check_common_keywords(where: str, p: Mapping[str, Any], keys: Mapping[str, Any]) -> None:
    """Refuse a common mechanism key (``k``, ``levels``, ``clip``, ``delta``, ``rotate``) set to
    something other than its default when the claim's mechanism does not take it (``rr`` takes
    none of them): :func:`build_mechanism` would drop it silently, so the claim would not audit
    what it says. One line naming the key (the CLI: its flag) and the mechanism, with the ones it
    takes. A key at its default is the default's, given or not; a factory with ``**keywords``
    takes them all."""
    from fedaudit.mechanisms.registry import COMMON_KEYWORDS, MECHANISMS

    accepted = MECHANISMS.accepted(p["mechanism"])
    if accepted is None:
        return
    for name in COMMON_KEYWORDS:
        if name in keys and name not in accepted and p[name] != keys[name].default:
            takes = [k for k in COMMON_KEYWORDS if k in accepted]
            which = ", ".join(takes) if takes else "none of " + ", ".join(COMMON_KEYWORDS)
            raise key_error(where, name, f"is not a parameter of mechanism {p['mechanism']!r}, which ignores it "
                                         f"(it takes {which}); leave it unset")


def load_sampler(where: str, reference: str) -> Any:
    """The black-box sampler ``package.module:function`` of an ldp claim's ``sampler`` key."""
    from fedaudit.registry import load_reference

    try:
        fn = load_reference(reference, what="sampler")
    except FedAuditError as exc:
        raise key_error(where, "sampler", f"is not a sampler: {exc}") from None
    if not callable(fn):
        raise key_error(where, "sampler", f"must name a function sampler(x, size, rng), got {reference!r}, which is "
                                          f"not callable")
    return fn


def build_mechanism(p: Mapping[str, Any]) -> Any:
    """The mechanism of a claim's parameters (``make_mechanism`` with the plan keys ``mechanism``,
    ``dim``, ``epsilon``, ``k``, ``levels``, ``clip``, ``delta`` and ``rotate``, and the
    factory's own keywords from ``mechanism_params``)."""
    from fedaudit.mechanisms.registry import make_mechanism

    return make_mechanism(p["mechanism"], p["dim"], p["epsilon"], k=p["k"], levels=p["levels"], clip=p["clip"],
                          delta=p["delta"], rotate=p["rotate"], params=p.get("mechanism_params"))


def normalise_spec(spec: str) -> str:
    """``spec`` with every registered stage name lower-cased; ``module:attr`` stages kept as given."""
    return "+".join(part.strip() if ":" in part else part.strip().lower() for part in spec.split("+"))


def check_attacks(where: str, key: str, names: list[str], allow_all: bool, allow_labelflip: bool) -> None:
    """Every name of ``names`` is a registered attack (or ``labelflip`` / ``all`` where allowed)."""
    from fedaudit.attacks.registry import ATTACKS

    valid = list(ATTACKS.names()) + (["labelflip"] if allow_labelflip else [])
    if allow_all and "all" in names:
        if len(names) > 1:
            raise key_error(where, key, f"must be 'all' or a list of attack names, not both, got {show(names)}")
        return
    bad = [a for a in names if a not in valid]
    if bad:
        raise key_error(where, key, f"names unknown attack {bad[0]!r}; valid: {', '.join(valid)}"
                                    + (" or 'all'" if allow_all else ""))


def _spec_names_valid(spec: str) -> bool:
    """True when every '+'-joined stage of ``spec`` is registered in its place or a reference
    that imports."""
    from fedaudit.defenses.registry import spec_stages

    try:
        for name, registry in spec_stages(spec):
            registry.factory(name)
    except FedAuditError:
        return False
    return True


def _needs_keywords(spec: str) -> bool:
    """True when a stage of ``spec`` has a required keyword (besides ``f``): then a failed build
    without ``aggregator_params`` is the missing keywords' fault, not the spec's."""
    from fedaudit.defenses.registry import spec_stages

    return any(registry.required(name) for name, registry in spec_stages(spec))


def accepted_keywords(spec: str) -> list[str] | None:
    """The keywords the stages of ``spec`` accept (their registries' reading of the factories;
    None when a stage takes any keyword)."""
    from fedaudit.defenses.registry import spec_stages

    out: list[str] = []
    for name, registry in spec_stages(spec):
        accepted = registry.accepted(name)
        if accepted is None:
            return None
        out += [k for k in accepted if k not in out]
    return out


def check_aggregator(where: str, key: str, spec: str, f: int, n: int, n_key: str,
                     params: Mapping[str, Any] | None = None, params_key: str = "aggregator_params") -> None:
    """Build ``make_aggregator(spec, f, **params)`` once at parse time: a bad name, or a reference
    that builds no rule from ``f`` alone (``builtins:print``), blames ``key``; a keyword no stage
    takes, a missing required keyword or a rejected value blames ``params_key``;
    ``n`` below the rule's least number of clients blames ``n_key``."""
    from fedaudit.defenses.registry import make_aggregator

    params = dict(params or {})
    try:
        rule = make_aggregator(spec, f, **params)
    except FedAuditError as exc:
        if not _spec_names_valid(spec) or (not params and not _needs_keywords(spec)):
            # a wrong name, or a reference that cannot be built from f alone (builtins:print): the spec is wrong
            raise key_error(where, key, f"is not a valid aggregator: {exc}") from None
        accepted = accepted_keywords(spec)
        unknown = [k for k in params if accepted is not None and k not in accepted]
        if unknown:
            raise key_error(where, params_key, f"names {unknown[0]!r}, which no stage of {spec!r} takes; valid "
                                               f"keywords: {', '.join(accepted) or 'none'}") from None
        raise key_error(where, params_key, f"is rejected by {spec!r}: {exc}"
                        + ("" if params else f" (set {params_key} = {{ ... }})")) from None
    need = rule.min_n(rule.f) if hasattr(rule, "min_n") else 2 * f + 1
    if n < need:
        raise FedAuditError(f"{where}: key {n_key!r} is too small: {spec} needs n >= {need} for f={f}, got n={n}")


def flat_params(where: str, p: dict[str, Any]) -> None:
    """A claim of one aggregator: its ``aggregator_params`` must be a flat keyword table (None if empty)."""
    table = p["aggregator_params"]
    nested = [k for k, v in (table or {}).items() if isinstance(v, dict)]
    if nested:
        raise key_error(where, "aggregator_params", f"must be a table of keyword = number, string or boolean, "
                                                    f"got a table under {nested[0]!r}")
    p["aggregator_params"] = table or None


def params_per_spec(where: str, specs: list[str], table: dict[str, Any] | None) -> dict[str, dict] | None:
    """A grid's keyword table as spec -> keywords. A flat table applies to every listed spec; a
    table of tables names specs (each must be listed). Mixing the two forms is an error."""
    if not table:
        return None
    nested = {k: v for k, v in table.items() if isinstance(v, dict)}
    if not nested:
        return {spec: dict(table) for spec in specs}
    if len(nested) != len(table):
        flat = next(k for k in table if k not in nested)
        raise key_error(where, "aggregator_params", f"mixes a keyword ({flat!r}) with per-aggregator tables; use "
                                                    "either { s = 2 } for every aggregator or "
                                                    "{ \"bucketing+cwtm\" = { s = 2 } }")
    stray = [k for k in nested if k not in specs]
    if stray:
        raise key_error(where, "aggregator_params", f"names aggregator {stray[0]!r}, which is not in 'aggregators' "
                                                    f"({', '.join(specs)})")
    return {k: dict(v) for k, v in nested.items() if v}


def optimizer_names() -> tuple[str, ...]:
    """The optimizers a plan may name (:data:`fedaudit.fl.registry.OPTIMIZERS`)."""
    from fedaudit.fl.registry import OPTIMIZERS

    return OPTIMIZERS.names()


def dataset_names() -> tuple[str, ...]:
    """The datasets a plan may name (:data:`fedaudit.fl.registry.DATASETS`)."""
    from fedaudit.fl.registry import DATASETS

    return DATASETS.names()
