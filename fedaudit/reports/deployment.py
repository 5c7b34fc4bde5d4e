"""Deployment facts: what a DP claim must state, the hazards a plan leaves open, the registry export.

A plan's ``[deployment]`` table (validated by :mod:`fedaudit.experiments.deployment`) states the
facts NIST SP 800-226 (*Guidelines for Evaluating Differential Privacy Guarantees*, 2025) and the
transparency tiers of the Differential Privacy Deployments Registry (registry.opendp.org) expect
of a DP deployment: the privacy unit and neighbouring relation, the DP flavour, the trust
(deployment) model, the accounting, the quantities released without noise and the implementation.
The runner records them in the report's optional ``deployment`` object (schema 1.5), so the digest
and a signature cover them::

    {"plan":   {<the [deployment] table; every key, unset ones null>},
     "claims": [{"id", "kind", "expect", "mechanism_trust", "accountant_unit", "epsilon", "delta",
                 "facts": {<the plan's facts with the claim's own [claim.deployment] over them>}}, ...]}

This module reads only that object (never the claim kinds: reports sit below experiments):

* :data:`FIELDS` — every fact's plain name, in the order a rendering shows them;
* :data:`FACT_ORDER` / :func:`fact_change` — which change of a fact weakens the guarantee
  (``fedaudit diff`` counts it as a privacy regression);
* :func:`hazards` — the NIST privacy-pyramid hazards the recorded facts leave open, each phrased
  "not addressed by this plan: …" (only hazards that map to a missing or risky fact);
* :func:`fact_rows` / :func:`claim_rows` — the rows of the "Deployment" section every rendering
  puts at the top of the report (:mod:`fedaudit.reports.html`, ``markdown``, ``terminal``);
* :func:`registry_export` — the facts grouped by the registry's three tiers as JSON data
  (``fedaudit export-registry DIR``; :data:`REGISTRY_FORMAT` documents its fields).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

__all__ = ["PRIVACY_UNITS", "EXAMPLE_UNITS", "CLIENT_UNITS", "NEIGHBOURING", "DP_FLAVOURS", "TRUST_MODELS",
           "SAMPLING", "DTYPES", "CSPRNG", "PRNG", "CONTINUOUS_NOISE", "KNOWN_NOISE", "CLIPPING",
           "EXTERNAL_ACCOUNTANTS", "LARGE_EPSILON", "FIELDS", "FACT_ORDER", "FACT_REVIEW", "fact_change",
           "unit_level", "fact", "Hazard", "hazards", "hazard_claims", "fact_rows",
           "claim_rows", "CLAIM_COLUMNS", "REGISTRY_FORMAT", "REGISTRY_TIERS", "registry_export", "plain"]

#: privacy units the plan reference suggests (any other text is accepted as stated)
PRIVACY_UNITS: tuple[str, ...] = ("example", "record", "event", "client", "user", "user-day", "user-week", "device",
                                  "household", "person")
#: units that protect one example (one record, one event), not the person or client behind it
EXAMPLE_UNITS: frozenset[str] = frozenset({"example", "record", "event"})
#: units that protect a whole client, user or person (all their data, or all of it over a period)
CLIENT_UNITS: frozenset[str] = frozenset({"client", "user", "user-day", "user-week", "user-month", "device",
                                          "household", "person"})
NEIGHBOURING: tuple[str, ...] = ("add-remove", "replace-one")
DP_FLAVOURS: tuple[str, ...] = ("pure", "approximate", "renyi", "zcdp", "gdp")
TRUST_MODELS: tuple[str, ...] = ("local", "central", "shuffled", "secure-aggregation")
#: the sampling assumption the accounting makes
SAMPLING: tuple[str, ...] = ("none", "poisson", "fixed-size", "with-replacement")
DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16", "integer", "exact")
#: randomness sources that are cryptographically secure (lower-case names)
CSPRNG: frozenset[str] = frozenset({"csprng", "os-urandom", "getrandom", "secrets", "opendp", "chacha20",
                                    "aes-ctr-drbg", "hardware-rng"})
#: randomness sources that are fast statistical generators, predictable from their state
PRNG: frozenset[str] = frozenset({"numpy", "numpy-pcg64", "pcg64", "mt19937", "python-random", "torch",
                                  "torch-philox", "torch-mt19937", "jax-threefry"})
#: noise distributions sampled as floating-point numbers (Mironov 2012: the low bits leak)
CONTINUOUS_NOISE: frozenset[str] = frozenset({"laplace", "gaussian", "staircase", "exponential-continuous"})
KNOWN_NOISE: tuple[str, ...] = ("laplace", "gaussian", "discrete-laplace", "discrete-gaussian", "geometric",
                                "randomized-response", "exponential-mechanism", "staircase", "mechanism-specific")
#: where clipping (bounding each unit's contribution) can happen
CLIPPING: tuple[str, ...] = ("per-example", "per-client-update", "on-device", "server", "none")
#: accountants of other libraries a plan may name (fedaudit's own are fedaudit.accounting.ACCOUNTANTS
#: and the closed forms 'basic' and 'advanced')
EXTERNAL_ACCOUNTANTS: tuple[str, ...] = ("opacus-rdp", "opacus-prv", "opacus-gdp", "tf-privacy-rdp",
                                         "dp-accounting-pld", "dp-accounting-rdp", "prv-accountant", "autodp",
                                         "flwr-rdp", "opendp")
#: ε above which a claim's ε counts as large unless the plan gives a rationale. NIST SP 800-226
#: sets no number; this threshold is fedaudit's choice (ε > 10 bounds a likelihood ratio by e^10 ≈ 22000)
LARGE_EPSILON = 10.0

#: (key, plain name) of every fact, in rendering order; "accounting.x" and "implementation.x" are
#: keys of the sub-tables
FIELDS: tuple[tuple[str, str], ...] = (
    ("curator", "Curator (who runs the deployment)"),
    ("data_product", "Data product released"),
    ("intended_use", "Intended use"),
    ("privacy_unit", "Privacy unit (whose data one ε protects)"),
    ("privacy_unit_description", "Privacy unit, in detail"),
    ("max_contributions", "Most examples one person contributes"),
    ("neighbouring", "Neighbouring datasets"),
    ("dp_flavour", "DP flavour"),
    ("trust_model", "Trust model (who sees data before noise)"),
    ("population", "Population (privacy units in the data)"),
    ("epsilon_rationale", "Why this ε"),
    ("data_collection", "Data collection and storage"),
    ("unprotected", "Released without noise"),
    ("accounting.composed", "Composed across rounds and releases"),
    ("accounting.sampling", "Sampling assumption"),
    ("accounting.accountant", "Accountant"),
    ("implementation.randomness", "Randomness source"),
    ("implementation.noise", "Noise distribution"),
    ("implementation.dtype", "Noise number type"),
    ("implementation.float_mitigation", "Floating-point attack mitigation"),
    ("implementation.clipping", "Where clipping happens"),
    ("implementation.timing", "Timing side-channel mitigation"),
    ("implementation.security", "Protection of the curator / server"),
)

#: How ``fedaudit diff`` orders a fact's values (declared once, beside the facts): fact key ->
#: (rank of a value, higher = a stronger guarantee, None when the value is unranked; what a weaker
#: value means). A move to a lower rank is *worse* (a privacy regression), to a higher one *better*;
#: any other change of a fact, and a fact stated on one side only, is *changed* (an unstated fact
#: is caught by :func:`hazards`, whose newly present entries are worse).
FACT_ORDER: dict[str, tuple[Callable[[Any], int | None], str]] = {
    "privacy_unit": (lambda v: {"client": 1, "example": 0}.get(unit_level(v)),
                     "a smaller privacy unit: one example is protected, not the client or user behind it"),
    "dp_flavour": (lambda v: None if v is None else int(v == "pure"),
                   "pure ε-DP became a guarantee that allows a small probability of failure (δ) or is stated in "
                   "another definition"),
    "trust_model": (lambda v: {"local": 2, "shuffled": 1, "secure-aggregation": 1, "central": 0}.get(v),
                    "more must be trusted: a shuffler, the aggregation protocol or the server sees the units' data "
                    "before noise"),
    "implementation.randomness": (lambda v: None if v is None else int(str(v).lower() in CSPRNG),
                                  "the noise now comes from a generator that is not cryptographically secure "
                                  "(predictable from its state)"),
    "max_contributions": (lambda v: -v if isinstance(v, int) and not isinstance(v, bool) else None,
                          "one person may contribute more examples: group privacy (k·ε) protects a person less"),
}
#: facts whose every change is flagged for review: the new value is another kind of guarantee,
#: neither weaker nor stronger
FACT_REVIEW: dict[str, str] = {
    "neighbouring": "a different neighbouring relation (ε under replace-one can be up to twice ε under add/remove): "
                    "the two ε are not comparable, review",
}


def fact_change(key: str, old: Any, new: Any) -> tuple[str, str]:
    """``(assessment, why)`` of fact ``key`` moving from ``old`` to ``new`` (values as recorded,
    None when unstated; they differ): ``"worse"``, ``"better"`` or ``"changed"`` by
    :data:`FACT_ORDER` and :data:`FACT_REVIEW`; ``unprotected`` (a list) is worse when a quantity
    is newly listed (released without noise), better when one is no longer listed."""
    if key == "unprotected" and isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        added, dropped = [str(q) for q in new if q not in old], [str(q) for q in old if q not in new]
        if added:
            return "worse", "newly released without noise: " + ", ".join(added)
        if dropped:
            return "better", "no longer released without noise: " + ", ".join(dropped)
        return "changed", "the same quantities, listed otherwise"
    if key in FACT_REVIEW:
        return "changed", FACT_REVIEW[key]
    if key in FACT_ORDER and old is not None and new is not None:
        rank, weaker = FACT_ORDER[key]
        a, b = rank(old), rank(new)
        if a is not None and b is not None and a != b:
            return ("worse", weaker) if b < a else ("better", "")
    return "changed", ""


_PLAIN = {
    "add-remove": "add/remove one unit", "replace-one": "replace one unit",
    "pure": "pure ε-DP", "approximate": "approximate (ε, δ)-DP", "renyi": "Rényi DP", "zcdp": "zero-concentrated DP",
    "gdp": "Gaussian DP (f-DP)",
    "local": "local (each client randomizes its own data; nobody is trusted)",
    "central": "central (a trusted curator or server sees the data and adds the noise)",
    "shuffled": "shuffled (local reports, anonymised by a trusted shuffler)",
    "secure-aggregation": "secure aggregation (the server sees only the sum of client updates)",
    "none": "none", "poisson": "Poisson sampling", "fixed-size": "fixed-size sampling without replacement",
    "with-replacement": "sampling with replacement",
}


def plain(value: Any) -> str:
    """A fact's value in plain words: a known choice spelled out, a list joined, "not stated" for None."""
    if value is None:
        return "not stated"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) if value else "nothing (declared)"
    if isinstance(value, float):
        return f"{value:g}"
    return _PLAIN.get(str(value), str(value))


def fact(facts: Mapping[str, Any] | None, key: str) -> Any:
    """``facts[key]``, ``key`` "table.name" reading a sub-table; None when absent."""
    if not isinstance(facts, Mapping):
        return None
    head, _, tail = key.partition(".")
    value = facts.get(head)
    if tail:
        return value.get(tail) if isinstance(value, Mapping) else None
    return value


def unit_level(unit: Any) -> str | None:
    """``"example"`` or ``"client"`` for a privacy unit fedaudit can classify (case-insensitive;
    any "user-…" unit is client-level), else None."""
    if not isinstance(unit, str):
        return None
    u = unit.strip().lower()
    if u in EXAMPLE_UNITS:
        return "example"
    if u in CLIENT_UNITS or u.startswith("user-"):
        return "client"
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        out = float(value)
    except ValueError:
        return None
    return out if not math.isnan(out) else None


# ------------------------------------------------------------------------------ hazards
class Hazard(tuple):
    """``(id, text, claims)``: a NIST SP 800-226 hazard the plan leaves open, its sentence ("not
    addressed by this plan: …") and the ids of the claims it concerns (empty: the whole plan)."""

    __slots__ = ()

    def __new__(cls, id: str, text: str, claims: tuple[str, ...] = ()) -> "Hazard":
        return super().__new__(cls, (id, text, tuple(claims)))

    id = property(lambda self: self[0])
    text = property(lambda self: self[1])
    claims = property(lambda self: self[2])


def _deployed(deployment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The privacy claims a deployment stands behind: those expected to hold (regression cases,
    ``expect = "violation"``, audit known-bad systems and are not deployed)."""
    claims = deployment.get("claims") if isinstance(deployment, Mapping) else None
    return [c for c in (claims or []) if isinstance(c, Mapping) and c.get("expect", "pass") == "pass"]


def hazards(deployment: Mapping[str, Any] | None) -> list[Hazard]:
    """The hazards of NIST SP 800-226's privacy pyramid that the recorded deployment facts leave
    open, each mapped to a missing or risky fact (a hazard no fact can speak to is not listed):

    * the privacy unit unstated, or one example when a person may contribute several (no
      ``max_contributions``), or how each unit's contribution is bounded (clipping) unstated;
    * the neighbouring relation or the DP flavour unstated (ε values are then not comparable);
    * a large ε (above :data:`LARGE_EPSILON`) without ``epsilon_rationale``;
    * δ with no population to compare it with, or δ ≥ 1/population;
    * composition across rounds and releases, or the sampling assumption, unstated;
    * the quantities released without noise not listed (``unprotected`` absent; ``[]`` declares none);
    * the noise distribution or number type unstated, or continuous noise in floating point with no
      mitigation (floating-point attacks);
    * the randomness source unstated or not cryptographically secure;
    * timing side channels not addressed;
    * the trust model unstated, or a central curator / server whose protection is unstated;
    * data collection and storage unstated (the pyramid's base: data collection exposure).

    A facts object from the plan applies to every claim; a claim's own facts are checked claim by
    claim, and a hazard names the claims it concerns. Without any privacy claim expected to hold,
    nothing is deployed and no hazard is listed."""
    if not isinstance(deployment, Mapping):
        return []
    claims = _deployed(deployment)
    if not claims:
        return []
    found: dict[str, tuple[str, list[str]]] = {}

    def add(hid: str, text: str, claim: Mapping[str, Any]) -> None:
        found.setdefault(hid, (text, []))[1].append(str(claim.get("id")))

    for claim in claims:
        facts = claim.get("facts") if isinstance(claim.get("facts"), Mapping) else {}
        unit = fact(facts, "privacy_unit")
        if unit is None:
            add("privacy-unit", "the privacy unit (whose data one ε protects: an example, a client, a user-day) is "
                                "not stated", claim)
        elif unit_level(unit) == "example" and fact(facts, "max_contributions") is None:
            add("unit-too-small", f"the privacy unit is one {unit}, smaller than the person behind it; how many "
                                  f"{unit}s one person contributes (max_contributions) is not stated, so the "
                                  f"protection of a person (group privacy: k·ε) is unknown", claim)
        if fact(facts, "implementation.clipping") is None:
            add("contribution-bound", "how each unit's contribution is bounded (where clipping happens) is not "
                                      "stated", claim)
        if fact(facts, "neighbouring") is None:
            add("neighbouring", "the neighbouring relation (add/remove or replace one unit) is not stated; ε under "
                                "replace-one can be up to twice ε under add/remove", claim)
        if fact(facts, "dp_flavour") is None:
            add("flavour", "the DP flavour (pure, approximate, Rényi, zCDP, GDP) is not stated, so its ε cannot be "
                           "compared with others", claim)
        eps = _number(claim.get("epsilon"))
        if eps is not None and eps > LARGE_EPSILON and fact(facts, "epsilon_rationale") is None:
            add("large-epsilon", f"ε above {LARGE_EPSILON:g} (fedaudit's threshold; NIST SP 800-226 sets "
                                 f"none) is claimed without a stated rationale (epsilon_rationale): a large ε gives "
                                 f"little protection", claim)
        delta = _number(claim.get("delta"))
        population = _number(fact(facts, "population"))
        if delta is not None and delta > 0:
            if population is None:
                add("delta-population", "δ is not compared with the population size (population): δ must be far "
                                        "below 1/population", claim)
            elif delta >= 1.0 / population:
                add("delta-large", f"δ is at least 1/population (δ·population ≥ 1): the mechanism may release "
                                   f"some unit's data outright", claim)
        if fact(facts, "accounting.composed") is None:
            add("composition", "what is composed across rounds and releases (accounting.composed) is not stated: "
                               "privacy loss across releases is not accounted", claim)
        if fact(facts, "accounting.sampling") is None:
            add("sampling", "the sampling assumption of the accounting (accounting.sampling) is not stated", claim)
        if fact(facts, "unprotected") is None:
            add("unprotected", "the quantities released without noise (metrics, counts, participation, model "
                               "sizes) are not listed (unprotected = [] declares none)", claim)
        noise, dtype = fact(facts, "implementation.noise"), fact(facts, "implementation.dtype")
        if noise is None or dtype is None:
            add("floating-point", "the noise distribution and number type (implementation.noise, .dtype) are not "
                                  "stated, so floating-point vulnerabilities cannot be assessed", claim)
        elif (str(noise).lower() in CONTINUOUS_NOISE and str(dtype).startswith(("float", "bfloat"))
              and fact(facts, "implementation.float_mitigation") is None):
            add("floating-point", f"{noise} noise is sampled in {dtype} with no stated mitigation "
                                  f"(implementation.float_mitigation): floating-point attacks can read the data "
                                  f"from the noise's low bits", claim)
        source = fact(facts, "implementation.randomness")
        if source is None:
            add("randomness", "the randomness source (implementation.randomness) is not stated", claim)
        elif str(source).lower() not in CSPRNG:
            add("randomness", f"the randomness source {source!r} is not a cryptographically secure generator: its "
                              f"noise is predictable from the generator's state", claim)
        if fact(facts, "implementation.timing") is None:
            add("timing", "timing side channels (running time that depends on the data) are not addressed "
                          "(implementation.timing)", claim)
        trust = fact(facts, "trust_model")
        if trust is None:
            add("trust", "the trust model (who sees the data before noise is added) is not stated", claim)
        elif trust == "central" and fact(facts, "implementation.security") is None:
            add("trust", "the central curator / server sees every unit's data before noise; what protects it "
                         "(implementation.security) is not stated", claim)
        if fact(facts, "data_collection") is None:
            add("data-collection", "how the data is collected, stored and retained (data_collection) is not stated: "
                                   "DP protects the releases, not the data at rest", claim)
    every = len(claims)
    return [Hazard(hid, f"not addressed by this plan: {text}", () if len(ids) == every else tuple(ids))
            for hid, (text, ids) in found.items()]


def hazard_claims(deployment: Mapping[str, Any] | None) -> dict[str, tuple[str, frozenset[str]]]:
    """``{hazard id: (its text, the ids of the claims it concerns)}`` of :func:`hazards`, a
    plan-wide hazard naming every deployed claim: what ``fedaudit diff`` compares, so that a
    hazard that newly concerns one more claim is seen."""
    every = frozenset(str(c.get("id")) for c in _deployed(deployment)) if isinstance(deployment, Mapping) \
        else frozenset()
    return {h.id: (h.text, frozenset(h.claims) or every) for h in hazards(deployment)}


# ------------------------------------------------------------------------------ rows
def _differs(claims: list[Mapping[str, Any]], key: str) -> bool:
    values = {repr(fact(c.get("facts"), key)) for c in claims}
    return len(values) > 1


def fact_rows(deployment: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(plain name, value in words)`` of every fact of the plan's ``[deployment]`` table
    (:data:`FIELDS` order; unset: "not stated"). A fact some claim overrides reads "per claim"."""
    claims = deployment.get("claims") if isinstance(deployment.get("claims"), list) else []
    facts = deployment.get("plan") if isinstance(deployment.get("plan"), Mapping) else {}
    rows = []
    for key, name in FIELDS:
        value = fact(facts, key)
        text = plain(value)
        if claims and _differs(claims, key):
            text = f"{text} (claims override it: see below)" if value is not None else "per claim (see below)"
        rows.append((name, text))
    return rows


#: the per-claim columns of the Deployment section
CLAIM_COLUMNS: tuple[str, ...] = ("claim", "noise added", "privacy unit", "neighbours", "flavour", "trust model", "ε", "δ",
                                  "accountant", "its own facts")

_WHERE = {"local": "on the client", "shuffled": "on the client, then shuffled", "central": "on the server"}


def claim_rows(deployment: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One row per privacy claim (:data:`CLAIM_COLUMNS`): its id (marked "regression case" when
    it expects a violation), where its mechanism adds noise (on the client or the server), the
    effective privacy unit, neighbouring, flavour, trust model, its claimed ε and δ, the
    accountant, and the facts it states over the plan's ("—" when none)."""
    rows = []
    plan_facts = deployment.get("plan") if isinstance(deployment.get("plan"), Mapping) else {}
    for c in deployment.get("claims") or []:
        if not isinstance(c, Mapping):
            continue
        facts = c.get("facts") if isinstance(c.get("facts"), Mapping) else {}
        ident = str(c.get("id")) + (" (regression case)" if c.get("expect") == "violation" else "")
        eps, delta = _number(c.get("epsilon")), _number(c.get("delta"))
        own = "; ".join(f"{name.split(' (')[0]}: {plain(fact(facts, key))}" for key, name in FIELDS
                        if fact(facts, key) != fact(plan_facts, key)) or "—"
        rows.append((ident, _WHERE.get(str(c.get("mechanism_trust")), "—"),
                     str(fact(facts, "privacy_unit") or "not stated"),
                     str(fact(facts, "neighbouring") or "not stated"), str(fact(facts, "dp_flavour") or "not stated"),
                     str(fact(facts, "trust_model") or "not stated"), "—" if eps is None else f"{eps:g}",
                     "—" if delta is None else f"{delta:g}", str(fact(facts, "accounting.accountant") or "—"), own))
    return rows


# ------------------------------------------------------------------------------ registry export
#: the documented format of :func:`registry_export` (``fedaudit export-registry``)
REGISTRY_FORMAT = "fedaudit-dp-registry-export/1"

#: registry tier -> (export field, fact key or None when derived) of every field the tier asks for.
#: The tiers follow registry.opendp.org/transparency-tiers: tier 1 the curator, intended use, data
#: product and publication date; tier 2 the DP flavour, privacy unit, privacy-loss parameters and
#: deployment model; tier 3 the data domain's unprotected quantities, a detailed privacy unit, the
#: accounting (composition) and implementation & security. The field names are fedaudit's own
#: (the registry's entry form was not available to copy): this table is the mapping.
REGISTRY_TIERS: dict[str, tuple[tuple[str, str | None], ...]] = {
    "tier_1": (("curator", "curator"), ("intended_use", "intended_use"), ("data_product", "data_product"),
               ("publication_date", None)),
    "tier_2": (("dp_flavour", "dp_flavour"), ("privacy_unit", "privacy_unit"), ("neighbouring", "neighbouring"),
               ("privacy_loss", None), ("deployment_model", "trust_model")),
    "tier_3": (("privacy_unit_description", "privacy_unit_description"), ("max_contributions", "max_contributions"),
               ("population", "population"), ("unprotected_quantities", "unprotected"),
               ("epsilon_rationale", "epsilon_rationale"), ("data_collection", "data_collection"),
               ("accounting", "accounting"), ("implementation", "implementation")),
}


def registry_export(report: Mapping[str, Any], *, verification: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The registry entry of report ``report`` (its JSON data) as JSON data, format
    :data:`REGISTRY_FORMAT`: ``tier_1``, ``tier_2``, ``tier_3`` (fields per :data:`REGISTRY_TIERS`;
    an unstated one is null), ``tier`` (the highest tier whose fields are all stated, 0 for none),
    ``missing`` (per tier, the fields not stated; ``max_contributions`` only where a unit is one
    example), ``hazards`` (:func:`hazards`) and ``source``
    (the report's title, schema version, digest, plan hash, fedaudit version, and ``verification``:
    what ``verify`` said of it). ``privacy_loss`` lists every privacy claim expected to hold, with
    its ε, δ, verdict and the facts that differ from the plan's. A report without deployment facts
    (schema before 1.5, or no privacy claim) exports every tier empty."""
    deployment = report.get("deployment") if isinstance(report.get("deployment"), Mapping) else {}
    facts = deployment.get("plan") if isinstance(deployment.get("plan"), Mapping) else {}
    manifest = report.get("manifest") if isinstance(report.get("manifest"), Mapping) else {}
    verdicts = {c.get("id"): c for c in report.get("claims") or [] if isinstance(c, Mapping)}
    losses = []
    for c in _deployed(deployment):
        own = c.get("facts") if isinstance(c.get("facts"), Mapping) else {}
        claim = verdicts.get(c.get("id"), {})
        losses.append({"claim": c.get("id"), "kind": c.get("kind"), "title": claim.get("title"),
                       "epsilon": c.get("epsilon"), "delta": c.get("delta"), "verdict": claim.get("verdict"),
                       "mechanism": c.get("mechanism_trust"),
                       "differs_from_plan": {k: fact(own, k) for k, _ in FIELDS
                                             if fact(own, k) != fact(facts, k)}})
    derived = {"publication_date": str(manifest.get("finished") or "")[:10] or None,
               "privacy_loss": losses or None}
    # how many examples a person contributes matters only when the unit is one example
    example_unit = unit_level(facts.get("privacy_unit")) == "example" or any(
        unit_level(fact(c.get("facts"), "privacy_unit")) == "example" for c in _deployed(deployment))
    out: dict[str, Any] = {"format": REGISTRY_FORMAT}
    missing: dict[str, list[str]] = {}
    tier = 0
    for name, fields in REGISTRY_TIERS.items():
        entry = {field: derived[field] if key is None else facts.get(key) for field, key in fields}
        out[name] = entry
        missing[name] = [f for f, v in entry.items() if (v is None or (isinstance(v, Mapping) and any(
            x is None for x in v.values()))) and not (f == "max_contributions" and not example_unit)]
        if not missing[name] and tier == int(name[-1]) - 1:
            tier = int(name[-1])
    out["tier"] = tier
    out["missing"] = missing
    out["hazards"] = [{"id": h.id, "text": h.text, "claims": list(h.claims)} for h in hazards(deployment)]
    out["source"] = {"title": report.get("title"), "schema_version": report.get("schema_version"),
                     "digest": report.get("digest"), "signed": report.get("signature") is not None,
                     "plan_sha256": manifest.get("plan_sha256"), "fedaudit": manifest.get("fedaudit"),
                     "verification": dict(verification) if verification is not None else None}
    return out
