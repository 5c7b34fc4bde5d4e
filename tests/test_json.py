"""Every JSON fedaudit writes is strict: no NaN/Infinity tokens, one convention for non-finite numbers.

The convention (:mod:`fedaudit.json`): +inf, -inf and nan become the strings "inf", "-inf" and
"nan"; None stays null and means "absent". Every class in the package with a ``to_dict`` is
discovered by scanning the package, built with non-finite fields where it has any, and its
``json.dumps(x.to_dict(), allow_nan=False)`` parsed by a strict parser.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import pkgutil

import numpy as np
import pytest

import fedaudit
from fedaudit import json as fjson
from fedaudit.cli import main
from fedaudit.errors import FedAuditError

SPECIALS = ("inf", "-inf", "nan")


def _raise(name):
    raise ValueError(f"non-standard JSON token {name}")


def strict_loads(text: str):
    """The strict reader the tests hold every output to (stdlib, independent of fedaudit.json)."""
    return json.loads(text, parse_constant=_raise)


def strict_round_trip(d):
    """``d`` dumped with allow_nan=False and parsed strictly (fails on NaN/Infinity anywhere)."""
    return strict_loads(json.dumps(d, allow_nan=False))


def specials_in(value) -> set[str]:
    """The convention strings found anywhere in JSON data."""
    if isinstance(value, str):
        return {value} & set(SPECIALS)
    if isinstance(value, dict):
        return set().union(*(specials_in(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(specials_in(v) for v in value)) if value else set()
    return set()


# ------------------------------------------------------------------------------ discovery
def _discover() -> dict[str, type]:
    """Every class defined in the fedaudit package whose own namespace defines ``to_dict``."""
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(fedaudit.__path__, "fedaudit."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and "to_dict" in vars(obj):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


CLASSES = _discover()


# ------------------------------------------------------------------------------ generic builder
def _value(annotation: str, special: float):
    """A value of the annotated type carrying ``special`` wherever a float can sit."""
    a = annotation.replace(" ", "")
    a = a.removesuffix("|None").removeprefix("None|")
    if a == "float":
        return special
    if a == "int":
        return 3
    if a == "bool":
        return True
    if a == "str":
        return "x"
    if a in ("np.ndarray", "numpy.ndarray"):
        return np.array([special, 1.0, np.float32(special)])
    if a.startswith("dict"):
        return {"a": special, "b": [1.0, np.float64(special)], "c": {"d": special}}
    if a.startswith(("list[float", "list[int|float")):
        return [1.5, special]
    if a.startswith("list[int"):
        return [1, 2]
    if a.startswith("list[str"):
        return ["a"]
    if a.startswith("list"):
        return [{"a": special}] if "dict" in a else [special]
    if a.startswith("tuple[int"):
        return (1, 2)
    if a.startswith("tuple[float"):
        return (special, 2.0)
    if a.startswith("tuple[str"):
        return ("a",)
    raise LookupError(annotation)


def _generic(cls: type) -> list[object]:
    """Instances of a dataclass with every float field +inf, then -inf, then nan."""
    if not dataclasses.is_dataclass(cls):
        raise LookupError(f"{cls.__name__} is not a dataclass")
    out = []
    for special in (math.inf, -math.inf, math.nan):
        kwargs = {f.name: _value(str(f.type), special) for f in dataclasses.fields(cls)
                  if f.init and (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                                 or "float" in str(f.type))}
        out.append(cls(**kwargs))
    return out


# ------------------------------------------------------------------------------ explicit builders
def _mechanisms():
    from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism

    out = [make_mechanism(name, 8, 1.0, k=2) for name in MECHANISMS.names()]
    for name in MECHANISMS.names():  # non-private variants where a mechanism has one
        try:
            out.append(make_mechanism(name, 8, None, k=2))
        except (FedAuditError, TypeError):
            pass
    return out


def _variance():
    from fedaudit.audit.variance import MSEResult, VarianceCurve

    r = MSEResult("sstq", math.nan, -math.inf, math.inf, math.inf, 0.1, 3.0, 10, 0.95, None, {"k": 4, "clip": math.inf})
    return [VarianceCurve(16, 1.0, 4, (4,), (4.0,), (r,), (r,), r, r, r, math.nan, -math.inf, 10, 0)]


def _search_budget():
    cls = CLASSES["fedaudit.audit.robustness_search.budget.SearchBudget"]
    return [cls(), cls(evals=10, restarts=1, dims=(1,), embedded=False, time_s=0.5)]


def _kappa():
    from fedaudit.defenses.kappa import KappaBound

    return [KappaBound("krum", 11, 3, v, "f/(n-2f)", "ref", False, "") for v in (math.inf, math.nan, 2.5)]


def _breakdown():
    from fedaudit.errors import AggregatorBreakdown

    return [AggregatorBreakdown("cwtm", 10, 4, 3)]


def _stress_config():
    from fedaudit.audit.stress import StressConfig

    return StressConfig(aggregators=("cwtm",), attacks=("alie",), fs=(1,), betas=(0.5,), dataset="digits",
                        data_path=None, optimizer="dgd", rounds=2, lr=0.1, n_honest=4, mu=0.0, seed=0)


def _stress():
    from fedaudit.audit.stress import StressResult

    summary = {"cells": [{"final_loss": math.nan, "final_accuracy": None, "worst": -math.inf}],
               "complete": True, "missed_target": [], "betas": [math.inf]}
    return [_stress_config(), StressResult(_stress_config(), "out", summary, ("a",), (), ("h.png",), math.inf)]


def _reports():
    from fedaudit.reports.model import Claim, Manifest, Report

    m = Manifest.collect(b"plan", 2**80, 0.0, 1.0, command="fedaudit run")
    c = Claim(id="c", kind="ldp", title="t", expect="pass", verdict="PASS",
              evidence={"eps": math.inf, "tpr": np.float64(math.nan), "ci": np.array([-math.inf, 1.0])},
              runtime_s=math.inf)
    return [m, c, Report(m, [c]).seal(None)]


def _claim_spec():
    from fedaudit.experiments.kind import ClaimSpec

    return [ClaimSpec(1, "c", "ldp", "t", "pass", 3, {"epsilon": math.inf, "grid": [math.nan, 1.0]})]


def _evidence():
    from fedaudit.experiments.kind import Evidence

    return [Evidence(holds=True, violated=False, evidence={"eps": math.inf, "ci": [math.nan, -math.inf]},
                     summary="s", plots=({"type": "curves", "y": [math.inf]},))]


def _round_trips():
    from fedaudit.experiments.showcase import RoundTrip
    from fedaudit.mechanisms.laplace import Laplace

    return [RoundTrip("laplace", Laplace(4, 1.0), math.inf, math.nan)]


def _ledger():
    from fedaudit.accounting.ledger import Ledger
    from fedaudit.guarantees import ApproxLDP

    ledger = Ledger()
    ledger.record("a", ApproxLDP(1.0, 1e-6), round=0)
    ledger.record(3, 0.5)
    return [ledger]


def _verify_result():
    from fedaudit.reports.integrity import VerifyResult

    return [VerifyResult(ok=False, schema_ok=True, digest_ok=True, signature="absent",
                         problems=["artifact report.md: changed"], artifacts={"report.md": "changed"},
                         content_digest="ab" * 32)]


def _canary_runs():
    from fedaudit.audit.canaries import train_with_canaries

    kw = dict(max_grad_norm=1.0, sample_rate=0.2, steps=3, canaries=20, dataset="synthetic", seed=0)
    return [train_with_canaries(noise_multiplier=1.0, threat=t, **kw) for t in ("white-box", "black-box")]


def _dpsgd_audits():
    from fedaudit.audit.dpsgd_audit import audit_dpsgd

    kw = dict(sample_rate=0.2, steps=3, canaries=60, dataset="synthetic", seed=0)
    return [audit_dpsgd(noise_multiplier=1.0, **kw), audit_dpsgd(noise_multiplier=0.1, claimed_noise_multiplier=1.0, **kw)]


def _fedavg_audits():
    from fedaudit.audit.dp_fedavg_audit import audit_dp_fedavg

    kw = dict(sample_rate=0.5, rounds=2, canaries=40, clients=5, seed=0)
    return [audit_dp_fedavg(noise_multiplier=2.0, **kw),
            audit_dp_fedavg(noise_multiplier=0.4, claimed_noise_multiplier=4.0, **kw)]


def _gated():
    from fedaudit.mechanisms.gated import ClientUpdate, GatedSparseUpload

    upload = GatedSparseUpload(10, 3)
    update = ClientUpdate(np.linspace(-1, 1, 10), np.arange(10.0))
    return upload, update, upload.select(update)


def _federated_data():
    from fedaudit.fl.sparse_data import scarce_regression

    return [scarce_regression(d=40, support=4, samples=30, clients=3, val_samples=10, test_samples=10, rng=0)]


def _local_dp_mod_calibration():
    from fedaudit.integrations.flower.local_dp_audit import local_dp_mod_epsilon

    return [local_dp_mod_epsilon(1, 1, 1, 1e-5)]


def _local_dp_mod_audits():
    from fedaudit.integrations.flower.local_dp_audit import audit_local_dp_mod

    audit = audit_local_dp_mod(epsilon=4.0, real_calls=100, samples=1000, seed=0)
    return [audit, audit.real]


def _flower():
    from fedaudit.integrations.flower.records import Layout
    from fedaudit.integrations.flower.simulation import FlowerRun, StrategyOutcome, StrategySpec

    spec = StrategySpec("nnm+cwtm", f=2, attack="alie", attack_params={"z": 30})
    outs = [StrategyOutcome(name=spec.name, spec=spec, accuracy=(0.1, v), final_model=np.array([v, 1.0]),
                            diagnostics=({"round": 1, "dist_to_honest_mean": v},), errors=0,
                            client_byzantine=(3, 7), wall_time_s=v) for v in (math.inf, -math.inf, math.nan)]
    runs = [FlowerRun(clients=10, rounds=1, seed=0, dataset="digits", model="logreg", local_steps=1, lr=0.5,
                      partition="iid", num_cpus=2, outcomes=(o,), wall_time_s=v, info={"flwr": "1.42.0"})
            for o, v in zip(outs, (math.inf, -math.inf, math.nan))]
    return [Layout(("w", "b"), ((2, 3), ()), ("float32", "float64"))], outs, runs


def _worst_pair_audits():
    from fedaudit.audit.sparse_upload import WorstPairAudit, worst_pair
    from fedaudit.mechanisms.gated import GatedPrivateUpload

    pair = worst_pair(GatedPrivateUpload(8, 2, 1.0))
    return [WorstPairAudit(epsilon_lower=v, epsilon_claimed=1.0, violation=False, epsilon_pair=pair.epsilon_pair,
                           pair_exact=True, tightness=v, mode="likelihood-ratio", samples=100, confidence=0.95,
                           max_certifiable=v, seed=0, runtime_s=v, pair=pair, ldp={"event": {"threshold": v}})
            for v in (math.inf, -math.inf, math.nan)]


VALUES = (math.inf, -math.inf, math.nan)


def _generic_of(qualname: str) -> list[object]:
    """The generic +inf, -inf, nan instances of a nested result type the generic builder handles."""
    return _generic(CLASSES[qualname])


def _opacus_audits():
    from fedaudit.accounting.result import Account
    from fedaudit.audit.canary_verdict import GDPAudit
    from fedaudit.audit.opacus_canaries import OpacusAudit

    runs = _generic_of("fedaudit.audit.one_run.OneRunAudit")
    out = []
    for v, run, gdp in zip(VALUES, runs, _generic(GDPAudit)):
        engine = Account(v, 1e-5, method="opacus-rdp", parameters={"orders": [1.5, v]})
        out.append(OpacusAudit(accountant=engine, one_run=run, one_run_fdp=dataclasses.replace(run, curve="dp"),
                               gdp=gdp, violation=True, violated_by=("steinke",), delta=v, confidence=v,
                               canaries=20, canaries_in=9, threat="white-box", engine_mechanism="rdp",
                               accountants=(Account(v, 1e-5, method="pld"), Account(2.0, 1e-5, method="rdp")),
                               below_bound=("opacus-rdp",), engine_under_reports=True, history=((v, 0.01, 3),),
                               steps=3, canary_steps=3, seed=0, noise_ratio=v, hook_seconds=v, seconds=v))
    return out + [dataclasses.replace(out[0], threat="black-box", noise_ratio=None)]


def _central_dp_runs():
    from fedaudit.integrations.flower.central_dp import CentralDpRound, CentralDpRun

    out = []
    for v in VALUES:
        rnd = CentralDpRound(round=1, clip=v, clip_next=v, noise_rms=v, z_effective=v, clipped=2,
                             canary_in=(True, False), scores=(v, 0.5))
        out.append(CentralDpRun(wrapper="server-adaptive", noise_multiplier=v, z_used=v, clipping_norm=v, clients=4,
                                canaries=2, rounds=(rnd,), delta=v, eps_flower_run=v, d=10, seed=0,
                                settings={"canary_scale": v, "lr": 0.5}, wall_time_s=v))
    return out + [dataclasses.replace(out[0], wrapper="client-fixed", eps_flower_run=None, settings={})]


def _central_dp_audits():
    from fedaudit.integrations.flower.central_dp import CentralDpAudit

    return [CentralDpAudit(wrapper="server-fixed", z_claimed=v, eps_claim=v, delta=v, one_run=run, violation=True)
            for v, run in zip(VALUES, _generic_of("fedaudit.audit.one_run.OneRunAudit"))]


def _diff_changes():
    from fedaudit.reports.diff import MISSING, Change

    return [Change("epsilon", v, MISSING) for v in VALUES] + \
        [Change("grid", MISSING, [1.0, v]) for v in VALUES] + \
        [Change("params", {"clip": np.float64(v)}, np.array([v, 1.0])) for v in VALUES]


def _fact_changes():
    from fedaudit.reports.diff import MISSING, FactChange

    return [FactChange("population", "deployment population", v, MISSING, "changed", "") for v in VALUES] + \
        [FactChange("self-test null", "self-test null", MISSING, [1.0, v], "worse", "why") for v in VALUES]


def _tracked():
    from fedaudit.guarantees import Bound
    from fedaudit.reports.diff import Tracked

    return Tracked("epsilon_lower", "certified ε", bound=Bound.LOWER, ci="ci", guarantee="privacy")


def _quantity_changes():
    from fedaudit.reports.diff import QuantityChange, Tolerance, assess

    out = []
    for v in VALUES:
        assessment, basis = assess(1.0, v, None, None, "higher", Tolerance())  # the real rule, non-finite side
        out.append(QuantityChange(_tracked(), 1.0, v, (v, 2.0), (-math.inf, v), assessment, basis, "privacy"))
    return out + [QuantityChange(_tracked(), None, math.inf, None, None, "not comparable", "one side", None)]


def _claim_diffs():
    from fedaudit.reports.diff import ClaimDiff

    changes, quantities = _diff_changes(), _quantity_changes()
    return [ClaimDiff("c", "ldp", "privacy", "PASS", "FAIL", "PASS", "FAIL", "bad", quantities=(q,), config=(ch,),
                      notes=("n",), self_tests=(f,), deployment=(f,))
            for q, ch, f in zip(quantities, changes, _fact_changes())] + \
        [ClaimDiff("d", "ldp", None, "FAIL", "PASS", "FAIL", "PASS", "good", quantities=tuple(quantities),
                   config=tuple(changes), numbers_compared=False)]


def _report_diffs():
    from fedaudit.reports.diff import ClaimRef, PlanDiff, ReportDiff, Tolerance, compare_reports
    from fedaudit.reports.model import Claim, Report

    changes, ref = _diff_changes(), ClaimRef("r", "ldp", "PASS", "good", "privacy")
    out = [ReportDiff("old", "new", tuple(_claim_diffs()), (ref,), (ref,),
                      PlanDiff("a" * 64, "b" * 64, tables=tuple(changes), diff=("-x", "+y"), cut=3),
                      tuple(changes), Tolerance(rel=0.1, abs=0.0), fail_on=f, deployment=tuple(_fact_changes()))
           for f in ("privacy", "any", "none")]
    old = _reports()[2]
    c = old.claims[0]
    new = Report(old.manifest, [Claim(id=c.id, kind=c.kind, title=c.title, expect=c.expect, verdict="FAIL",
                                      evidence={"epsilon_lower": math.nan, "ci": [-math.inf, math.inf]},
                                      runtime_s=math.nan)]).seal(None)
    old = Report(old.manifest, [Claim(id=c.id, kind=c.kind, title=c.title, expect=c.expect, verdict="PASS",
                                      evidence={"epsilon_lower": math.inf, "ci": [1.0, math.inf]})]).seal(None)
    return out + [compare_reports(old, new, tracked=lambda claim: [_tracked()])]  # the real comparison


def _ed25519_checks():
    from fedaudit.reports.signatures import Ed25519Check, PublicKey, statement_for

    key = PublicKey(None, "ab" * 32, "ci")
    statement = statement_for(_reports()[2].to_dict(), key, "2025-01-01T00:00:00Z")  # binds a report with inf/nan
    return [Ed25519Check(s, key.fingerprint, "ci", "ci", "2025-01-01T00:00:00Z", statement, p)
            for s, p in (("verified", []), ("unverified", []), ("invalid", ["signature: bad"]))] + \
        [Ed25519Check("absent")]


def _calibration_point(v, violation=True):
    from fedaudit.targets.base import CalibrationPoint

    return CalibrationPoint(epsilon=v, delta=1e-5, scale=v, delta_achieved=v, epsilon_true=v, violation=violation)


def _calibration_checks():
    from fedaudit.targets.base import CalibrationCheck, CalibrationPoint

    refused = CalibrationPoint(1.0, 1e-5, None, None, None, False, refused="epsilon must be > 0")
    return [CalibrationCheck(library="lib", version="1.0", mechanism="Gaussian", claim={"epsilon": v, "delta": 1e-5},
                             params={"sigma": np.float64(v), "grid": [v, 1.0]}, method="exact", exact=True,
                             own=_calibration_point(v), grid=[_calibration_point(v), _calibration_point(2.0, False),
                                                              refused], tolerance=v, notes=["n"])
            for v in VALUES] + \
        [CalibrationCheck("lib", "1.0", "Laplace", {}, {}, "exact", False, _calibration_point(1.0, False), [])]


def _black_box_audits():
    from fedaudit.targets.base import BlackBoxAudit

    return [BlackBoxAudit(library="lib", version="1.0", mechanism="Gaussian", epsilon_claimed=v, delta_claimed=v,
                          x0=[0.0, v], x1=[1.0, v], audit=audit, real_calls=10, calls_per_second=v,
                          reproducible=False, vectorised=5, equivalence_calls=3, seconds=v, notes=["n"])
            for v, audit in zip(VALUES, _generic_of("fedaudit.audit.ldp.LDPAudit"))]


BUILDERS = {
    "fedaudit.audit.opacus_canaries.OpacusAudit": _opacus_audits,
    "fedaudit.integrations.flower.central_dp.CentralDpRun": _central_dp_runs,
    "fedaudit.integrations.flower.central_dp.CentralDpAudit": _central_dp_audits,
    "fedaudit.reports.diff.Change": _diff_changes,
    "fedaudit.reports.diff.FactChange": _fact_changes,
    "fedaudit.reports.diff.QuantityChange": _quantity_changes,
    "fedaudit.reports.diff.ClaimDiff": _claim_diffs,
    "fedaudit.reports.diff.ReportDiff": _report_diffs,
    "fedaudit.reports.signatures.Ed25519Check": _ed25519_checks,
    "fedaudit.targets.base.CalibrationCheck": _calibration_checks,
    "fedaudit.targets.base.BlackBoxAudit": _black_box_audits,
    "fedaudit.audit.sparse_upload.WorstPairAudit": _worst_pair_audits,
    "fedaudit.integrations.flower.records.Layout": lambda: _flower()[0],
    "fedaudit.integrations.flower.simulation.StrategyOutcome": lambda: _flower()[1],
    "fedaudit.integrations.flower.simulation.FlowerRun": lambda: _flower()[2],
    "fedaudit.integrations.flower.local_dp_audit.LocalDpModCalibration": _local_dp_mod_calibration,
    "fedaudit.integrations.flower.local_dp_audit.LocalDpModAudit": lambda: [_local_dp_mod_audits()[0]],
    "fedaudit.integrations.flower.local_dp_audit.ProjectionAudit": lambda: [_local_dp_mod_audits()[1]],
    "fedaudit.fl.sparse_data.FederatedData": _federated_data,
    "fedaudit.mechanisms.gated_wire.ClientUpdate": lambda: [_gated()[1]],
    "fedaudit.mechanisms.gated_wire.SparsePacket": lambda: [_gated()[2]],
    "fedaudit.mechanisms.gated.GatedSparseUpload": lambda: [_gated()[0]],
    "fedaudit.audit.canaries.CanaryRun": _canary_runs,
    "fedaudit.audit.dpsgd_audit.DPSGDAudit": _dpsgd_audits,
    "fedaudit.audit.dp_fedavg_audit.DPFedAvgAudit": _fedavg_audits,
    "fedaudit.accounting.ledger.Ledger": _ledger,
    "fedaudit.accounting.ledger.LedgerEntry": lambda: list(_ledger()[0].entries()),
    "fedaudit.reports.integrity.VerifyResult": _verify_result,
    "fedaudit.experiments.showcase.RoundTrip": _round_trips,
    "fedaudit.audit.variance.VarianceCurve": _variance,
    "fedaudit.experiments.kind.Evidence": _evidence,
    "fedaudit.mechanisms.base.Mechanism": _mechanisms,
    "fedaudit.audit.robustness_search.budget.SearchBudget": _search_budget,
    "fedaudit.defenses.kappa.KappaBound": _kappa,
    "fedaudit.errors.AggregatorBreakdown": _breakdown,
    "fedaudit.audit.stress.StressConfig": lambda: [_stress_config()],
    "fedaudit.audit.stress.StressResult": _stress,
    "fedaudit.reports.model.Claim": _reports,
    "fedaudit.reports.model.Manifest": _reports,
    "fedaudit.reports.model.Report": _reports,
    "fedaudit.experiments.kind.ClaimSpec": _claim_spec,
}


def _dicts(obj) -> list[dict]:
    """``obj.to_dict()``, and again with each boolean keyword (``include_points``, ...) set."""
    out = [obj.to_dict()]
    for p in inspect.signature(obj.to_dict).parameters.values():
        if isinstance(p.default, bool):
            out.append(obj.to_dict(**{p.name: not p.default}))
    return out


def test_discovery_finds_the_result_types():
    names = {k.rsplit(".", 1)[1] for k in CLASSES}
    assert {"LDPAudit", "RobustnessAudit", "MSEResult", "VarianceCurve", "PairSearch", "Trace", "GossipTrace",
            "StressResult", "Claim", "Report", "Manifest", "OracleFit"} <= names


@pytest.mark.parametrize("key", sorted(CLASSES))
def test_to_dict_is_strict_json(key):
    cls = CLASSES[key]
    if key in BUILDERS:
        objects = BUILDERS[key]()
    else:
        try:
            objects = _generic(cls)
        except (LookupError, TypeError, FedAuditError) as exc:
            pytest.fail(f"{key} has a to_dict but no builder here; add one to BUILDERS ({exc})")
    assert objects
    carried = set()
    for obj in objects:
        for d in _dicts(obj):
            parsed = strict_round_trip(d)  # raises on a NaN/Infinity token anywhere
            assert parsed == strict_loads(fjson.dumps(d))
            carried |= specials_in(parsed)
    if key not in BUILDERS:  # built with ±inf and nan in every float field: all three must come through
        floats = [f for f in dataclasses.fields(cls) if "float" in str(f.type) or "ndarray" in str(f.type)
                  or str(f.type).startswith("dict")]
        if floats:
            assert carried == set(SPECIALS), f"{key}: non-finite values came out as {carried or 'nothing'}"


def test_builders_carry_non_finite_values_through():
    """The hand-built instances hold inf/nan; the convention strings (not null) must come out."""
    from fedaudit.defenses.kappa import KappaBound

    assert [KappaBound("krum", 11, 3, v, "", "", False, "").to_dict()["kappa"] for v in (math.inf, math.nan)] \
        == ["inf", "nan"]
    config, result = _stress()
    assert specials_in(strict_round_trip(result.to_dict())) == set(SPECIALS)
    assert strict_round_trip(config.to_dict())["betas"] == [0.5]  # validated finite: nothing to convert
    spec = _claim_spec()[0].to_dict()
    assert strict_round_trip(spec)["params"] == {"epsilon": "inf", "grid": ["nan", 1.0]}
    curve = strict_round_trip(_variance()[0].to_dict())
    assert (curve["slope_private"], curve["slope_nonprivate"]) == ("nan", "-inf")
    assert curve["sstq"][0]["mse"] == "nan" and curve["vqsgd"]["params"]["clip"] == "inf"
    report = _reports()[2].to_dict()
    assert strict_round_trip(report)["claims"][0]["evidence"] == {"eps": "inf", "tpr": "nan", "ci": ["-inf", 1.0]}


def test_gossip_and_variance_use_the_convention():
    from fedaudit.audit.variance import MSEResult
    from fedaudit.fl.gossip import GossipTrace

    arr = np.array([1.0, math.nan, math.inf, -math.inf])
    g = GossipTrace("cs+", None, 3, 1.0, (0, 1), (), arr, arr, arr, True, None).to_dict()
    assert strict_round_trip(g)["consensus_error"] == [1.0, "nan", "inf", "-inf"]  # nan is not null (absent)
    r = MSEResult("sstq", math.nan, math.nan, math.inf, math.inf, 0.0, 3.0, 10, 0.95, 0).to_dict()
    assert strict_round_trip(r)["normalized_mse"] == "inf" and r["mse"] == "nan"


# ------------------------------------------------------------------------------ the helper itself
def test_jsonable_and_dumps():
    torch = pytest.importorskip("torch")
    data = {"a": np.array([[1.0, np.nan], [np.inf, -np.inf]]), "b": (np.float32(np.inf), np.int64(3)),
            "c": torch.tensor([float("nan"), 2.0]), 4: np.bool_(False), "d": None}
    assert fjson.jsonable(data) == {"a": [[1.0, "nan"], ["inf", "-inf"]], "b": ["inf", 3], "c": ["nan", 2.0],
                                    "4": False, "d": None}
    text = fjson.dumps({"x": math.nan, "y": [math.inf]})
    assert "NaN" not in text and "Infinity" not in text and strict_loads(text) == {"x": "nan", "y": ["inf"]}
    assert fjson.from_special("-inf") == -math.inf and math.isnan(fjson.from_special("nan"))
    assert fjson.from_special("x") == "x" and fjson.from_special(1.5) == 1.5
    with pytest.raises(FedAuditError, match=r"value b\[1\] is not JSON data: object"):
        fjson.jsonable({"b": [1, object()]})
    with pytest.raises(FedAuditError, match="key of type tuple"):
        fjson.jsonable({(1, 2): 1})


def test_strict_loads_rejects_tokens_and_duplicate_keys():
    assert fjson.loads('{"a": "nan", "b": [1, 2]}') == {"a": "nan", "b": [1, 2]}
    for token in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(FedAuditError, match=f"non-standard JSON constant {token}"):
            fjson.loads(f'{{"x": [1, {token}]}}')
    with pytest.raises(FedAuditError, match="duplicate key 'eps'"):
        fjson.loads('{"outer": {"eps": 1.0, "eps": 9.0}}')
    with pytest.raises(FedAuditError, match="not valid JSON"):
        fjson.loads('{"a": ')
    with pytest.raises(FedAuditError, match="not UTF-8"):
        fjson.loads(b'{"a": "\xff"}')


def test_write_names_an_unwritable_path(tmp_path):
    path = fjson.write(tmp_path / "r.json", {"v": -math.inf})
    assert strict_loads(path.read_text(encoding="utf-8")) == {"v": "-inf"}
    with pytest.raises(FedAuditError, match="cannot write JSON to .*missing"):
        fjson.write(tmp_path / "missing" / "r.json", {})


# ------------------------------------------------------------------------------ CLI writers
def test_cli_variance_json_is_strict(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["audit", "variance", "--dim", "16", "--ks", "4", "--json", str(out), "--quiet"]) == 0
    text = out.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    data = strict_loads(text)
    assert data["kind"] == "variance" and data["evidence"]["curve"]["ks"] == [4]
    # one k: the log-log slope is undefined, written as the string "nan" (not a NaN token, not null)
    assert data["evidence"]["slope_private"] == "nan" and data["evidence"]["slope_nonprivate"] == "nan"
    assert "slope of MSE on d/k undefined (1 value(s) of k: a slope needs two)" in data["summary"]


def test_written_report_is_strict(tmp_path):
    from fedaudit.reports import write_report

    report = _reports()[2]
    paths = write_report(report, tmp_path / "r", formats=("json",))
    text = paths["json"].read_text(encoding="utf-8")
    data = strict_loads(text)
    assert data["claims"][0]["runtime_s"] == "inf" and "NaN" not in text


def test_finite_or_none_records_non_finite_as_absent():
    from fedaudit.json import finite_or_none

    assert finite_or_none(2) == 2.0 and isinstance(finite_or_none(np.float32(1.5)), float)
    assert [finite_or_none(v) for v in (None, math.inf, -math.inf, math.nan)] == [None] * 4
