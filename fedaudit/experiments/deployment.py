"""A plan's ``[deployment]`` table and each claim's ``[claim.deployment]``: the facts a reviewer expects.

The table states what NIST SP 800-226 and the DP Deployments Registry's transparency tiers ask of
a DP claim (:mod:`fedaudit.reports.deployment` lists the facts, the hazards left open and the
registry export)::

    [deployment]
    privacy_unit = "client"            # example, record, client, user, user-day, … (free text accepted)
    neighbouring = "replace-one"       # add-remove | replace-one
    dp_flavour = "pure"                # pure | approximate | renyi | zcdp | gdp
    trust_model = "local"              # local | central | shuffled | secure-aggregation
    unprotected = ["round count"]      # released without noise ([] declares nothing)

    [deployment.accounting]
    composed = "50 rounds of one report per client; no other release"
    sampling = "none"                  # none | poisson | fixed-size | with-replacement
    accountant = "pld"                 # fedaudit.accounting.ACCOUNTANTS, basic/advanced, or a known external one

    [deployment.implementation]
    randomness = "numpy-pcg64"         # the generator the noise is drawn from
    noise = "randomized-response"
    dtype = "integer"
    clipping = "on-device"

A claim may override any fact for itself (``[claim.deployment]`` after its ``[[claim]]``, or an
inline ``deployment = { … }``); sub-tables merge key by key. Every key is checked (one
:class:`~fedaudit.errors.FedAuditError` naming the table, the key and the allowed values), and then
every privacy claim against what its kind declares (:meth:`ClaimKind.dp_facts`):

* a local mechanism (each client randomizes its own report) cannot have a central or
  secure-aggregation trust model, a central one (noise added by the server) neither local nor
  shuffled, and a claim whose ε assumes a shuffler needs ``trust_model = "shuffled"``;
* a client-level privacy unit (client, user, user-day, …) cannot be checked by an accountant that
  counts examples (DP-SGD's per-example sampling and clipping);
* a flavour the mechanism cannot give (pure DP of Gaussian noise) is refused;
* the accountant must be one of fedaudit's (:data:`fedaudit.accounting.ACCOUNTANTS`, ``basic``,
  ``advanced``) or a known external one (:data:`~fedaudit.reports.deployment.EXTERNAL_ACCOUNTANTS`),
  and when the claim computes its ε with a fedaudit accountant, that one.

Facts a plan leaves unset are recorded as null: the report lists the hazards they leave open.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.keys import Key, check_keys, key_error, show, unknown_keys
from fedaudit.reports.deployment import (CLIPPING, DP_FLAVOURS, DTYPES, EXTERNAL_ACCOUNTANTS, KNOWN_NOISE,
                                         NEIGHBOURING, PRIVACY_UNITS, SAMPLING, TRUST_MODELS, unit_level)

__all__ = ["DEPLOYMENT_KEYS", "ACCOUNTING_KEYS", "IMPLEMENTATION_KEYS", "SUB_TABLES", "check_deployment",
           "claim_deployment", "accountant_names", "report_deployment"]

#: keys of the [deployment] table (and of a claim's own deployment table)
DEPLOYMENT_KEYS: dict[str, Key] = {
    "curator": Key("str", None, help="who runs the deployment and holds the data (registry tier 1)"),
    "data_product": Key("str", None, help="what is released: a model, statistics, reports (registry tier 1)"),
    "intended_use": Key("str", None, help="what the release is for (registry tier 1)"),
    "privacy_unit": Key("str", None, help=f"whose data one ε protects: {', '.join(PRIVACY_UNITS)} or your own words"),
    "privacy_unit_description": Key("str", None, help="the privacy unit in detail (registry tier 3)"),
    "max_contributions": Key("int", None, low=1, help="most examples (records) one person contributes: group "
                                                      "privacy over an example-level unit"),
    "neighbouring": Key("str", None, choices=NEIGHBOURING, help="the neighbouring relation of the guarantee"),
    "dp_flavour": Key("str", None, choices=DP_FLAVOURS, help="the DP definition the ε is stated in"),
    "trust_model": Key("str", None, choices=TRUST_MODELS,
                       help="who sees the data before noise: local, central (trusted curator), shuffled, "
                            "secure-aggregation"),
    "population": Key("int", None, low=1, help="privacy units in the data: δ should be far below 1/population"),
    "epsilon_rationale": Key("str", None, help="why the claimed ε is acceptable (NIST: large ε protects little)"),
    "data_collection": Key("str", None, help="how the data is collected, stored and retained"),
    "unprotected": Key("list[str]", None, min_items=0,
                       help="quantities released without noise (metrics, counts, participation); [] declares none"),
}

#: keys of [deployment.accounting]
ACCOUNTING_KEYS: dict[str, Key] = {
    "composed": Key("str", None, help="what is composed across rounds and releases"),
    "sampling": Key("str", None, choices=SAMPLING, help="the sampling assumption of the accounting"),
    "accountant": Key("str", None, help="the accountant: fedaudit.accounting.ACCOUNTANTS, basic, advanced, or "
                                        + ", ".join(EXTERNAL_ACCOUNTANTS)),
}

#: keys of [deployment.implementation]
IMPLEMENTATION_KEYS: dict[str, Key] = {
    "randomness": Key("str", None, help="the generator the noise is drawn from (e.g. csprng, os-urandom, "
                                        "numpy-pcg64, torch)"),
    "noise": Key("str", None, help=f"the noise distribution: {', '.join(KNOWN_NOISE)} or your own words"),
    "dtype": Key("str", None, choices=DTYPES, help="the number type the noise is sampled and added in"),
    "float_mitigation": Key("str", None, help="what defeats floating-point attacks (snapping, discrete noise)"),
    "clipping": Key("str", None, help=f"where each unit's contribution is bounded: {', '.join(CLIPPING)} or your "
                                      f"own words"),
    "timing": Key("str", None, help="what keeps running time from depending on the data"),
    "security": Key("str", None, help="what protects the curator or server that sees data before noise"),
}

#: the sub-tables of [deployment] and their keys
SUB_TABLES: dict[str, dict[str, Key]] = {"accounting": ACCOUNTING_KEYS, "implementation": IMPLEMENTATION_KEYS}


def _check_table(where: str, table: Any, *, fill: bool) -> dict[str, Any]:
    """The deployment table ``table`` checked key by key (defaults filled with ``fill``, else only
    the keys given); one :class:`FedAuditError` naming ``where`` and the key."""
    if not isinstance(table, Mapping):
        raise FedAuditError(f"{where}: must be a table of deployment facts, got {show(table)}")
    valid = [*DEPLOYMENT_KEYS, *SUB_TABLES]
    extra = [k for k in table if k not in valid]
    if extra:
        raise unknown_keys(where, extra, valid, "in a deployment table")
    given = {k: v for k, v in table.items() if k in DEPLOYMENT_KEYS}
    out = check_keys(where, given, DEPLOYMENT_KEYS) if fill else \
        {k: v for k, v in check_keys(where, given, DEPLOYMENT_KEYS).items() if k in given}
    for name, schema in SUB_TABLES.items():
        sub = table.get(name, {} if fill else None)
        if sub is None:
            continue
        inner = f"{where}.{name}"
        if not isinstance(sub, Mapping):
            raise FedAuditError(f"{inner}: must be a table with {', '.join(schema)}, got {show(sub)}")
        bad = [k for k in sub if k not in schema]
        if bad:
            raise unknown_keys(inner, bad, list(schema), f"in [deployment.{name}]")
        checked = check_keys(inner, sub, schema)
        out[name] = checked if fill else {k: v for k, v in checked.items() if k in sub}
    accountant = (out.get("accounting") or {}).get("accountant")
    if accountant is not None:
        if accountant.lower() not in accountant_names():
            raise key_error(f"{where}.accounting", "accountant",
                            f"must be one of fedaudit's accountants ({', '.join(accountant_names(external=False))}) "
                            f"or a known external one ({', '.join(EXTERNAL_ACCOUNTANTS)}), got {show(accountant)}")
        out["accounting"]["accountant"] = accountant.lower()
    return out


def accountant_names(*, external: bool = True) -> tuple[str, ...]:
    """Every accountant a deployment may name: fedaudit's registered ones, the closed forms
    ``basic`` and ``advanced`` and, with ``external``,
    :data:`~fedaudit.reports.deployment.EXTERNAL_ACCOUNTANTS`."""
    from fedaudit.accounting import ACCOUNTANTS
    from fedaudit.accounting.composition import CLOSED_FORMS

    return (*CLOSED_FORMS, *ACCOUNTANTS.names(), *(EXTERNAL_ACCOUNTANTS if external else ()))


def check_deployment(table: Any) -> dict[str, Any]:
    """The plan's ``[deployment]`` table checked, every key present (unset ones None, sub-tables
    included)."""
    return _check_table("plan [deployment]", table, fill=True)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in base.items()}
    for k, v in over.items():
        if isinstance(v, Mapping):
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


#: the trust models a mechanism that randomizes in a given place can run under
_TRUST_FOR: dict[str, tuple[str, ...]] = {"local": ("local", "shuffled"), "shuffled": ("shuffled",),
                                          "central": ("central", "secure-aggregation")}
_WHY = {"local": "a local randomizer: each client randomizes its own report",
        "shuffled": "its ε assumes the reports are shuffled by a trusted shuffler",
        "central": "noise is added centrally, to what clients send"}


def claim_deployment(where: str, kind_name: str, dp: Mapping[str, Any] | None, plan_facts: Mapping[str, Any],
                     own: Any) -> dict[str, Any] | None:
    """The effective deployment facts of one claim: the plan's with the claim's own table ``own``
    (None: none) over them, cross-checked against ``dp`` (the kind's :meth:`ClaimKind.dp_facts`:
    ``trust``, ``unit``, ``flavours``, ``accountant``). Returns None for a claim that makes no DP
    claim (``dp`` None); its own deployment table is then an error."""
    if dp is None:
        if own is not None:
            raise FedAuditError(f"{where}: key 'deployment' applies to privacy claims only; kind {kind_name!r} makes "
                                f"no differential-privacy claim")
        return None
    if not isinstance(dp, Mapping) or dp.get("trust") not in (*_TRUST_FOR, None) \
            or dp.get("unit") not in ("example", "client", None):
        raise FedAuditError(f"{where}: kind {kind_name!r} states malformed DP facts {show(dict(dp) if isinstance(dp, Mapping) else dp)} "
                            f"(trust must be local, shuffled, central or None; unit example, client or None)")
    facts = _merge(plan_facts, {} if own is None else _check_table(f"{where} deployment", own, fill=False))
    src = "the plan's [deployment]" if own is None else "its deployment facts (the claim's over the plan's)"
    trust = dp.get("trust")
    if trust in _TRUST_FOR and facts.get("trust_model") is not None and facts["trust_model"] not in _TRUST_FOR[trust]:
        allowed = _TRUST_FOR[trust]
        raise FedAuditError(f"{where}: key 'trust_model' of {src} must be "
                            f"{' or '.join(repr(a) for a in allowed)} for kind {kind_name!r} ({_WHY[trust]}), got "
                            f"{facts['trust_model']!r}; override it in this claim's [claim.deployment]")
    if dp.get("unit") == "example" and unit_level(facts.get("privacy_unit")) == "client":
        raise FedAuditError(f"{where}: key 'privacy_unit' of {src} is {facts['privacy_unit']!r} (client "
                            f"level), but kind {kind_name!r} is checked by an example-level accountant (per-example "
                            f"sampling and clipping): it proves nothing per client; state privacy_unit = 'example' "
                            f"for this claim, or audit it with kind 'dp-fedavg'")
    flavours = dp.get("flavours")
    if flavours and facts.get("dp_flavour") is not None and facts["dp_flavour"] not in flavours:
        raise FedAuditError(f"{where}: key 'dp_flavour' of {src} must be one of "
                            f"{', '.join(repr(f) for f in flavours)} for kind {kind_name!r}, got "
                            f"{facts['dp_flavour']!r}")
    mine = (facts.get("accounting") or {}).get("accountant")
    used = dp.get("accountant")
    if mine is not None and used is not None and mine in accountant_names(external=False) \
            and mine != str(used).lower():
        raise FedAuditError(f"{where}: key 'accountant' of {src} [accounting] is {mine!r}, but this "
                            f"claim computes its ε with accountant {used!r}")
    return facts


def report_deployment(plan: Any) -> dict[str, Any] | None:
    """The report's ``deployment`` object of a validated plan (:mod:`fedaudit.reports.deployment`):
    the plan's facts and, per privacy claim, its kind's view (where its mechanism randomizes, the
    unit its accountant counts, its claimed ε and δ) and its effective facts. None when the plan
    has no [deployment] table and no privacy claim."""
    claims = [c for c in plan.claims if c.deployment is not None]
    if plan.deployment is None and not claims:
        return None
    facts = plan.deployment if plan.deployment is not None else check_deployment({})
    return {"plan": facts,
            "claims": [{"id": c.id, "kind": c.kind, "expect": c.expect,
                        "mechanism_trust": c.deployment["dp"].get("trust"),
                        "accountant_unit": c.deployment["dp"].get("unit"),
                        "epsilon": c.deployment["dp"].get("epsilon"), "delta": c.deployment["dp"].get("delta"),
                        "facts": c.deployment["facts"]} for c in claims]}
