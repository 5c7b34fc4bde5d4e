"""Claim kind ``flower``: keys, cross-checks, the strategies it runs, its title and work units (no simulation).

In the fast suite the kind runs through ``run_plan`` on the outcomes of the one simulation of
``tests/integrations/flower/test_simulation.py`` (its call of ``run_flower`` checked keyword by keyword); its own
real simulation (which must reproduce that one exactly) is ``slow`` there, and the shipped plan
through ``fedaudit run`` is ``slow`` here.
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("flwr")

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kinds import claim_kind
from fedaudit.experiments.plan import load_plan
from fedaudit.plans import plan_path

FL = {"id": "fl", "kind": "flower", "min_accuracy": 0.9}


def plan(*claims):
    return {"plan": {"title": "flower", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


def _spec(**overrides):
    return load_plan(plan({**FL, **overrides})).claims[0]


def test_defaults_title_and_the_three_strategies_it_runs():
    spec = _spec()
    p = spec.params
    assert (p["clients"], p["rounds"], p["aggregator"], p["attack"], p["f"]) == (10, 5, "nnm+cwtm", "alie", 2)
    assert spec.title == ("NNM+CWTM keeps accuracy ≥ 0.9 in a Flower simulation of 10 clients under ALIE on f=2 "
                          "clients")
    kind = claim_kind("flower")
    specs = kind._specs(p)
    assert [s.name for s in specs] == ["clean", "attacked", "fedavg-attacked"]
    assert [(s.aggregator, s.attack, s.client_attack) for s in specs] == [
        ("nnm+cwtm", None, None), ("nnm+cwtm", "alie", None), ("mean", "alie", None)]
    assert kind.work_units(p) == 15


def test_client_side_attacks_and_no_attack():
    kind = claim_kind("flower")
    p = _spec(attack="labelflip", f=3, compare_fedavg=False).params
    assert [(s.name, s.attack, s.client_attack, s.f) for s in kind._specs(p)] == [
        ("clean", None, None, 3), ("attacked", None, "labelflip", 3)]
    p = _spec(attack="signflip", attack_at="clients", attack_params={"scale": 2.0}).params
    attacked = kind._specs(p)[1]
    assert attacked.client_attack == "signflip" and dict(attacked.client_attack_params) == {"scale": 2.0}
    p = _spec(attack="none", aggregator="mean").params
    assert [s.name for s in kind._specs(p)] == ["clean"] and kind.work_units(p) == 5
    p = _spec(attack="optimal-ipm").params
    assert type(kind._specs(p)[1].server_attack()).__name__ == "Optimal"


def test_with_a_mechanism_every_run_gets_its_own_ldp_mod_decoder_and_ledger():
    from fedaudit.integrations.flower.ldp import LDPDecoder

    spec = _spec(mechanism="Gaussian", epsilon=4.0, clip=2.0, budget=12.0)
    assert spec.params["mechanism"] == "gaussian"
    assert spec.title.endswith("clients sending gaussian reports at ε = 4 within a budget ε ≤ 12")
    specs = claim_kind("flower")._specs(spec.params, seed=3)
    decoders = [s.decoder for s in specs]
    assert all(isinstance(d, LDPDecoder) and d.budget == 12.0 for d in decoders)
    assert len({id(d.ledger) for d in decoders}) == 3 and all(len(s.client_mods) == 1 for s in specs)
    # a claim is a simulation: its reports opt in to the claim's seed explicitly, so the report repeats
    assert {s.client_mods[0].simulation_seed for s in specs} == {3}
    assert decoders[0].mechanism.dim == 650 and decoders[0].mechanism.epsilon == 4.0
    assert decoders[0].budget_delta == pytest.approx(5 * 1e-5)  # rounds · delta by default


@pytest.mark.parametrize("overrides, match", [
    ({"min_accuracy": None}, "'min_accuracy' or 'max_accuracy_drop' must be set"),
    ({"min_accuracy": 1.5}, "min_accuracy"),
    ({"f": 5}, "clients > 2f"),
    ({"aggregator": "nosuch"}, "'aggregator' is not a valid aggregator"),
    ({"attack": "nosuch"}, "unknown attack 'nosuch'"),
    ({"attack": "optimal-labelflip"}, "unknown attack 'labelflip'"),
    ({"attack": "labelflip", "attack_at": "server"}, "must be 'clients'"),
    ({"attack": "alie", "attack_at": "clients"}, "needs the other clients' updates"),
    ({"attack": "optimal-alie", "attack_at": "clients"}, "must be 'server'"),
    ({"attack": "none", "max_accuracy_drop": 0.1}, "needs an attack"),
    ({"attack": "labelflip", "attack_params": {"p": 1}}, "must be empty"),
    ({"attack_params": {"q": 1}}, "'attack_params' is rejected"),
    ({"attack_params": {"variant": "bogus"}}, "'attack_params' is rejected"),
    ({"dataset": "cifar"}, "dataset"),
    ({"attack_at": "nowhere"}, "attack_at"),
    ({"clients": 1}, "clients"),
    ({"partition": "gamma"}, "partition"),
    ({"epsilon": 1.0}, "'epsilon' needs a mechanism"),
    ({"budget": 3.0}, "'budget' needs a mechanism"),
    ({"mechanism": "nosuch", "epsilon": 1.0}, "'mechanism' is not a mechanism"),
    ({"mechanism": "gaussian"}, "'epsilon' must be set"),
    ({"mechanism": "gaussian", "epsilon": 2.0, "budget": 1.0}, "'budget' must be at least"),
    ({"mechanism": "sstq", "epsilon": 1.0, "clip": 0}, "clip"),
    ({"partition": "dirichlet"}, "'beta' must be set"),
])
def test_bad_keys_are_refused_when_the_plan_is_loaded(overrides, match):
    with pytest.raises(FedAuditError, match=match):
        _spec(**overrides)


def test_shipped_plan_parses():
    with plan_path("flower") as path:
        robust, privunitg, gaussian = load_plan(path).claims
    assert {c.kind for c in (robust, privunitg, gaussian)} == {"flower"}
    assert robust.seed == privunitg.seed == gaussian.seed == 0 and robust.seed_pinned
    assert robust.params["attack_params"] == {"z": 30} and robust.params["max_accuracy_drop"] == 0.03
    assert privunitg.expect == "pass" and privunitg.params["mechanism"] == "privunitg"
    assert gaussian.expect == "violation" and gaussian.params["mechanism"] == "gaussian"
    assert gaussian.params["budget"] == 12.0


@pytest.mark.slow
def test_shipped_plan_passes_through_fedaudit_run(tmp_path):
    import json

    from fedaudit.cli import main

    with plan_path("flower") as path:
        code = main(["run", str(path), "--out", str(tmp_path / "out")])
    assert code == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    robust, privunitg, gaussian = report["claims"]
    assert robust["verdict"] == privunitg["verdict"] == gaussian["verdict"] == "PASS"
    ev = robust["evidence"]
    assert ev["accuracy_clean"] - ev["accuracy_attacked"] <= 0.03
    assert ev["accuracy_clean"] - ev["accuracy_fedavg_attacked"] >= 0.10
    for claim, budget in ((privunitg, 24.0), (gaussian, 12.0)):
        ev = claim["evidence"]
        assert ev["ldp"]["spent_max"] == budget and ev["client_errors"] == 0
        assert ev["refused"] == {"clean": 20, "attacked": 20, "fedavg-attacked": 20}
    assert privunitg["evidence"]["accuracy_attacked"] >= 0.65 > privunitg["evidence"]["accuracy_fedavg_attacked"]
    assert gaussian["evidence"]["accuracy_attacked"] < 0.5
