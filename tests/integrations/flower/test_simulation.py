"""The real Flower simulation engine (``flwr.simulation.run_simulation``, Ray, 2 CPUs): one call in the fast suite.

It runs eight strategies on one grid of 10 digits clients, and every test here reads that one run.
The attack-free FedAvg run, the server-attacked runs and the LDP run are each checked against the
same federated training recomputed in numpy without Flower (so seeding by partition and round
rather than by Flower's random node ids, and each node's privacy account across Ray actors, are
checked on one simulation). The ``flower`` claim kind is checked through ``run_plan`` on this run's
outcomes; its own real simulation, which must repeat these runs exactly, is ``slow``.
"""

from __future__ import annotations

import numpy as np
import pytest
from tests.helpers import check_rederived

pytest.importorskip("flwr")

from fedaudit.defenses import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.fl.data import load_digits_dataset
from fedaudit.fl.models import LogisticModel
from fedaudit.fl.partition import partition
from fedaudit.integrations.flower import choose_byzantine
from flwr.app import Array  # noqa: E402

from fedaudit.accounting.ledger import Ledger
from fedaudit.attacks import ALIE
from fedaudit.integrations.flower.ldp import REFUSED_CODE, ldp_decoder, ldp_mod
from fedaudit.integrations.flower.simulation import StrategySpec, run_flower
from fedaudit.integrations.flower.strategy import STRATEGY_KEY
from fedaudit.mechanisms import make_mechanism
from fedaudit.rng import derive_generator, derive_seed

CLIENTS, ROUNDS, SEED, STEPS, LR = 10, 5, 0, 20, 0.5
MALFORMED_PARTITION = 3


def _malformed_mod(msg, context, call_next):
    """Partition 3 sends a malformed reply, of another kind each round: a wrong-shaped W (round 1), an
    extra metric key (2), partition 0's id (3: a duplicate), a NaN partition id (4), no array b (5)."""
    from flwr.app import ArrayRecord, MetricRecord

    out = call_next(msg, context)
    if int(context.node_config["partition-id"]) != MALFORMED_PARTITION:
        return out
    r = int(msg.content["config"]["server-round"])
    arrays, metrics = out.content["arrays"], out.content["metrics"]
    if r == 1:
        out.content["arrays"] = ArrayRecord({"W": Array(arrays["W"].numpy().T.copy()), "b": arrays["b"]})
    elif r == 2:
        out.content["metrics"] = MetricRecord({**dict(metrics), "extra": 1.0})
    elif r in (3, 4):
        out.content["metrics"] = MetricRecord({**dict(metrics), "partition-id": 0 if r == 3 else float("nan")})
    else:
        out.content["arrays"] = ArrayRecord({"W": arrays["W"]})
    return out


ALIE30 = {"z": 30}
MECH = make_mechanism("gaussian", 64 * 10 + 10, 4.0, clip=2.0)
BUDGET = {"budget": 3 * 4.0, "budget_delta": 1e-4}  # three reports per client, then refused
LEDGER = Ledger()
DECODER = ldp_decoder(MECH, ledger=LEDGER, **BUDGET)
SPECS = [
    StrategySpec("mean"),
    StrategySpec("nnm+cwtm", f=2),
    StrategySpec("mean", f=2, attack="alie", attack_params=ALIE30),
    StrategySpec("nnm+cwtm", f=2, attack="alie", attack_params=ALIE30),
    StrategySpec("nnm+cwtm", f=2, client_attack="nonfinite"),
    StrategySpec("mean", f=3, client_attack="labelflip"),
    StrategySpec("mean", f=2, client_attack="signflip", client_attack_params={"scale": 4.0}),
    StrategySpec("mean", label="mean/ldp", client_mods=(ldp_mod(MECH, simulation_seed=SEED, scope=STRATEGY_KEY, **BUDGET),),
                 decoder=DECODER),
    StrategySpec("nnm+cwtm", f=2, label="nnm+cwtm/malformed", client_mods=(_malformed_mod,)),
]


@pytest.fixture(scope="module")
def run():
    """The one simulation. Flower's Ray backend joins a Ray already running in this process (the session's
    shared one, tests/conftest.py ``ray_local``, when an earlier module started it) but always ends with
    ``ray.shutdown()``; here it keeps that Ray running for the later modules (a restart costs 10-15 s)."""
    import os
    import sys

    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

    ticks, pythonpath = [], os.environ.get("PYTHONPATH")
    ray = sys.modules.get("ray")
    shared = ray is not None and ray.is_initialized()
    def stop_the_actors_only(backend: RayBackend) -> None:
        if backend.pool:
            backend.pool.terminate_all_actors()

    import logging

    class Seen(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    seen = Seen()
    logging.getLogger("flwr").addHandler(seen)
    with pytest.MonkeyPatch.context() as mp:
        if shared:
            mp.setattr(RayBackend, "terminate", stop_the_actors_only)
        out = run_flower(clients=CLIENTS, rounds=ROUNDS, strategies=SPECS, seed=SEED, local_steps=STEPS, lr=LR,
                         num_cpus=2, progress=ticks.append)
    logging.getLogger("flwr").removeHandler(seen)
    assert not [m for m in seen.messages if "DEPRECATED" in m]  # Flower's deprecation notice kept out
    assert sum(ticks) == ROUNDS * len(SPECS)
    assert os.environ.get("PYTHONPATH") == pythonpath  # Flower's Ray backend rewrites it; run_flower restores it
    assert ray is None or ray.is_initialized() == shared
    return out


def _numpy_run(aggregate) -> tuple[list[float], np.ndarray]:
    """The same federated training without Flower: x ← x + aggregate(r, U_r), U_r[p] = GD_p^STEPS(x) − x on
    partition p (all ten, in partition order); returns (accuracy after rounds 0..ROUNDS, final x)."""
    data = load_digits_dataset(rng=derive_seed(SEED, "flower-data"))
    parts = partition(data.y_train, CLIENTS, "iid", rng=derive_seed(SEED, "flower-partition"), min_size=1)
    model = LogisticModel(data.n_features, 10, mu=0.0)
    x, acc = model.init(), []
    acc.append(model.accuracy(x, data.X_test, data.y_test))
    for r in range(1, ROUNDS + 1):
        rows = []
        for idx in parts:
            z = x.copy()
            for _ in range(STEPS):
                z = z - LR * model.grad(z, data.X_train[idx], data.y_train[idx])
            rows.append(z - x)
        x = x + aggregate(r, np.array(rows))
        acc.append(model.accuracy(x, data.X_test, data.y_test))
    return acc, x


def _fedavg(r: int, U: np.ndarray) -> np.ndarray:
    return make_aggregator("mean", 0)(U)


def _server_round(rule: str, alie: bool):
    """The server's round: with ``alie``, rows B = choose_byzantine(seed, r) ← ALIE(z=30) of the honest rows
    on derive_generator(seed, "flower-attack;round=r"); then the rule (f=2) on
    derive_generator(seed, "flower-rule;round=r")."""
    def aggregate(r: int, U: np.ndarray) -> np.ndarray:
        if alie:
            byz = choose_byzantine(CLIENTS, 2, SEED, r)
            honest = np.setdiff1d(np.arange(CLIENTS), byz)
            U[byz] = ALIE(**ALIE30)(U[honest], 2, derive_generator(SEED, f"flower-attack;round={r}"))
        return make_aggregator(rule, 2)(U, rng=derive_generator(SEED, f"flower-rule;round={r}"))
    return aggregate


def _ldp_mean(r: int, U: np.ndarray) -> np.ndarray:
    """Rounds 1-3: the mean of decode(reports), report p = encode(U[p]) on derive_generator(seed,
    "flower-ldp;partition=p;round=r"); rounds 4-5 every client's budget refuses it and the model is kept."""
    if r > 3:
        return np.zeros(U.shape[1])
    reports = np.stack([MECH.encode(U[p][None, :], derive_generator(SEED, f"flower-ldp;partition={p};round={r}"))[0]
                        for p in range(CLIENTS)])
    return make_aggregator("mean", 0)(MECH.decode(reports))


def test_every_strategy_ran_every_round_with_no_client_error(run):
    assert [o.name for o in run.outcomes] == [s.name for s in SPECS]
    for o in run.outcomes:
        assert len(o.accuracy) == ROUNDS + 1 and [d["round"] for d in o.diagnostics] == list(range(1, ROUNDS + 1))
        if o.name == "mean/ldp":
            continue  # refusals: test_a_strategy_with_its_own_ldp_mod_and_decoder
        assert o.errors == 0, o.diagnostics
        if o.name == "nnm+cwtm/malformed":
            continue  # test_a_malformed_client_is_a_byzantine_row_every_round_and_the_run_completes
        assert all(d["clients"] == CLIENTS and d["partitions"] == list(range(CLIENTS)) for d in o.diagnostics)
    assert run.wall_time_s > 0 and run.info["flwr"] >= "1.42"


def test_attack_free_fedavg_is_the_numpy_recomputation(run):
    acc, x = _numpy_run(_fedavg)
    o = run["mean/none"]
    assert list(o.accuracy) == acc
    np.testing.assert_allclose(o.final_model, x, rtol=1e-12, atol=1e-12)
    assert o.final_accuracy > 0.9


@pytest.mark.parametrize("name", ["nnm+cwtm/none", "mean/alie", "nnm+cwtm/alie"])
def test_robust_and_server_attacked_runs_are_the_numpy_recomputation(run, name):
    """The attacked clients, the attack and the rule are seeded by (seed, round) only, never by Flower's
    node ids or the Ray actor that trained a client."""
    rule, attack = name.split("/")
    acc, x = _numpy_run(_server_round(rule, alie=attack == "alie"))
    assert list(run[name].accuracy) == acc
    np.testing.assert_allclose(run[name].final_model, x, rtol=1e-12, atol=1e-12)


def test_ldp_run_is_the_numpy_recomputation_of_the_seeded_reports(run):
    """Ten nodes on two Ray actors, each actor holding its own pickled copy of the mod: the reports are seeded
    by (seed, partition, round) and each node's budget follows the node (three reports, then refusals), so the
    run equals the recomputation with every client reporting in rounds 1-3 and none after."""
    acc, x = _numpy_run(_ldp_mean)
    assert list(run["mean/ldp"].accuracy) == acc
    np.testing.assert_allclose(run["mean/ldp"].final_model, x, rtol=1e-12, atol=1e-12)


def test_alie_hurts_fedavg_and_nnm_cwtm_stays_close_to_attack_free(run):
    clean = run["mean/none"].final_accuracy
    fedavg, robust = run["mean/alie"].final_accuracy, run["nnm+cwtm/alie"].final_accuracy
    assert clean - fedavg >= 0.10, (clean, fedavg)
    assert clean - robust <= 0.03, (clean, robust)
    for name in ("mean/alie", "nnm+cwtm/alie"):
        assert run[name].byzantine == tuple(tuple(choose_byzantine(CLIENTS, 2, SEED, r).tolist())
                                            for r in range(1, ROUNDS + 1))
    # diagnostics: the robust aggregate stays much closer to the honest mean than FedAvg's
    d_mean = [d["dist_to_honest_mean"] for d in run["mean/alie"].diagnostics]
    d_rob = [d["dist_to_honest_mean"] for d in run["nnm+cwtm/alie"].diagnostics]
    assert all(a > 5 * b for a, b in zip(d_mean, d_rob))


def test_client_side_nonfinite_rows_are_counted_and_dropped(run):
    o = run["nnm+cwtm/nonfinite"]
    parts = tuple(choose_byzantine(CLIENTS, 2, SEED, 0).tolist())
    assert o.client_byzantine == parts
    assert all(d["nonfinite_rows"] == 2 and tuple(d["byzantine"]) == parts for d in o.diagnostics)
    assert np.isfinite(o.final_model).all() and o.final_accuracy > 0.9
    assert all(d["nonfinite_rows"] == 0 for d in run["mean/none"].diagnostics)


def test_a_malformed_client_is_a_byzantine_row_every_round_and_the_run_completes(run):
    """Partition 3 replies malformed in every round (five kinds, :func:`_malformed_mod`); each used to end
    the run in round 1. Now each is dropped, counted and named, and the rule (f = 2) gets it as a NaN row:
    the run equals the numpy recomputation with the rule on the remaining rows plus one NaN row per
    malformed reply (round 3: partition 0 and the impostor both claim id 0, so both are dropped)."""
    o = run["nnm+cwtm/malformed"]
    assert [d["malformed"] for d in o.diagnostics] == [1, 1, 2, 1, 1]
    assert all(d["clients"] == CLIENTS - d["malformed"] and d["breakdown"] is None for d in o.diagnostics)
    reasons = [[m["reason"] for m in d["malformed_replies"]] for d in o.diagnostics]
    assert "array 'W' is float64[64, 10]" in reasons[0][0] and "extra ['extra']" in reasons[1][0]
    assert reasons[2] == ["2 replies claim partition-id=0"] * 2 and "not finite" in reasons[3][0]
    assert "are not the global model's ['W', 'b']" in reasons[4][0]

    def aggregate(r: int, U: np.ndarray) -> np.ndarray:
        drop = [0, MALFORMED_PARTITION] if r == 3 else [MALFORMED_PARTITION]
        rows = np.vstack([np.delete(U, drop, axis=0), np.full((len(drop), U.shape[1]), np.nan)])
        return make_aggregator("nnm+cwtm", 2)(rows, rng=derive_generator(SEED, f"flower-rule;round={r}"))

    acc, x = _numpy_run(aggregate)
    assert list(o.accuracy) == acc
    np.testing.assert_allclose(o.final_model, x, rtol=1e-12, atol=1e-12)


def test_client_side_model_and_data_poisoning_change_the_run(run):
    clean = run["mean/none"]
    flip, sign = run["mean/labelflip"], run["mean/signflip"]
    assert len(flip.client_byzantine) == 3 and len(sign.client_byzantine) == 2
    assert not np.array_equal(flip.final_model, clean.final_model)
    assert sign.final_accuracy < clean.final_accuracy - 0.05
    # sign flip at scale 4 of 2 clients out of 10: the aggregate is (8·ū_h − 8·ū_b)/10, far from the honest mean
    assert all(d["dist_to_honest_mean"] > 0.5 * d["aggregate_norm"] for d in sign.diagnostics)


CLAIM = {"id": "fl", "kind": "flower", "seed": SEED, "clients": CLIENTS, "rounds": ROUNDS, "lr": LR,
         "local_steps": STEPS, "aggregator": "nnm+cwtm", "attack": "alie", "attack_params": ALIE30, "f": 2,
         "min_accuracy": 0.9, "max_accuracy_drop": 0.03}


def _check_flower_claim(report, run) -> None:
    """The claim's evidence, verdict and summary are those of the module run's clean, attacked and
    FedAvg-attacked strategies, and the report is schema-valid."""
    import json

    import jsonschema

    from fedaudit.reports import load_schema

    (c,) = report.claims
    assert c.error is None and c.verdict == "PASS", c.summary
    ev, runs = c.evidence, c.evidence["runs"]
    for mine, theirs in (("clean", "nnm+cwtm/none"), ("attacked", "nnm+cwtm/alie"), ("fedavg-attacked", "mean/alie")):
        assert runs[mine]["accuracy"] == list(run[theirs].accuracy)
        assert runs[mine]["byzantine"] == [list(b) for b in run[theirs].byzantine]
    assert ev["accuracy_fedavg_attacked"] == run["mean/alie"].final_accuracy
    assert ev["accuracy_attacked"] == run["nnm+cwtm/alie"].final_accuracy
    assert ev["accuracy_clean"] == run["nnm+cwtm/none"].final_accuracy
    assert ev["accuracy_clean"] - ev["accuracy_attacked"] == ev["accuracy_drop"] <= 0.03
    assert ev["client_errors"] == 0 and ev["attack_at"] == "server"
    assert "FedAvg under the same attack" in c.summary and "min_accuracy 0.9 met" in c.summary
    assert (ev["min_accuracy"], ev["max_accuracy_drop"], ev["ldp"]) == (0.9, 0.03, None)
    check_rederived(c, flips=[(lambda e: e.update(accuracy_attacked=0.89), "FAIL"),
                              (lambda e: e.update(accuracy_clean=e["accuracy_attacked"] + 0.031), "FAIL"),
                              (lambda e: e.update(client_errors=1), "FAIL")],
                    missing=[lambda e: e.pop("max_accuracy_drop"), lambda e: e.pop("ldp")])
    jsonschema.validate(json.loads(json.dumps(report.seal().to_dict())), load_schema())


def _spec_key(spec: StrategySpec) -> dict:
    return {k: v for k, v in spec.to_dict().items() if k not in ("label", "name")}


def test_the_flower_claim_kind_asks_run_flower_for_this_modules_runs(run, monkeypatch):
    """The ``flower`` claim kind through ``run_plan``, its simulation served from the module's run: the kind
    must call run_flower with the claim's settings (keywords of run_flower's own signature) and ask for
    strategies equal (but for their labels) to the module's, and report those runs. The kind's own real
    simulation: test_same_seed_same_attacked_clients_and_accuracy_through_the_flower_claim_kind (slow)."""
    import dataclasses
    import inspect

    from fedaudit.experiments.runner import run_plan
    from fedaudit.integrations.flower import simulation

    by_spec, calls = {repr(_spec_key(o.spec)): o for o in run.outcomes}, []

    def served(**kwargs):
        inspect.signature(run_flower).bind(**kwargs)
        calls.append(kwargs)
        outcomes = tuple(dataclasses.replace(by_spec[repr(_spec_key(s))], name=s.name, spec=s)
                         for s in kwargs["strategies"])
        for _ in range(ROUNDS * len(outcomes)):
            kwargs["progress"](1)
        return dataclasses.replace(run, outcomes=outcomes)

    monkeypatch.setattr(simulation, "run_flower", served)
    report = run_plan({"plan": {"title": "flower", "seed": 0}, "claim": [CLAIM]})
    (call,) = calls
    assert {k: call[k] for k in ("clients", "rounds", "seed", "local_steps", "lr", "dataset", "partition",
                                 "beta")} == {"clients": CLIENTS, "rounds": ROUNDS, "seed": SEED,
                                              "local_steps": STEPS, "lr": LR, "dataset": "digits",
                                              "partition": "iid", "beta": None}
    assert [s.name for s in call["strategies"]] == ["clean", "attacked", "fedavg-attacked"]
    _check_flower_claim(report, run)


@pytest.mark.slow
def test_same_seed_same_attacked_clients_and_accuracy_through_the_flower_claim_kind(run):
    """A second real simulation: the ``flower`` claim kind with its seed pinned to SEED runs NNM+CWTM clean and
    attacked and FedAvg under the same ALIE, so all three must repeat the first simulation's runs exactly.
    In the fast suite the kind's wiring is test_the_flower_claim_kind_asks_run_flower_for_this_modules_runs and
    the runs' seeding the numpy recomputations (test_robust_and_server_attacked_runs_are_the_numpy_recomputation)."""
    from fedaudit.experiments.runner import run_plan

    _check_flower_claim(run_plan({"plan": {"title": "flower", "seed": 0}, "claim": [CLAIM]}), run)


def test_a_strategy_with_its_own_ldp_mod_and_decoder(run):
    """Only the ``mean/ldp`` run sends reports. Every client reports in rounds 1-3, then its budget (3 reports)
    refuses it: rounds 4 and 5 are 10 refusals each, the model is kept, and the server's ledger shows 3 uses."""
    o = run["mean/ldp"]
    assert np.isfinite(o.final_model).all()
    assert [r.round for r in DECODER.rounds] == [1, 2, 3]
    assert all(sorted(r.partitions) == list(range(CLIENTS)) and r.total_bits == CLIENTS * MECH.bits_per_report
               for r in DECODER.rounds)
    assert [d["clients"] for d in o.diagnostics] == [CLIENTS] * 3 + [0, 0]
    assert [d["error_codes"] for d in o.diagnostics] == [[]] * 3 + [[REFUSED_CODE] * CLIENTS] * 2
    assert o.errors == 2 * CLIENTS and o.accuracy[3] == o.accuracy[4] == o.accuracy[5]
    assert all(LEDGER.spent(p).count == 3 and LEDGER.spent(p, delta=1e-4).epsilon == 12.0 for p in range(CLIENTS))
    assert not np.array_equal(o.final_model, run["mean/none"].final_model)
    assert o.spec.to_dict()["decoder"].startswith("LDPDecoder(")


def test_results_are_strict_json_and_summarised(run):
    import json

    text = json.dumps(run.to_dict(), allow_nan=False)
    assert "nnm+cwtm/alie" in text and "mean/alie" in run.summary()
    assert run["mean/alie"].summary().startswith("mean/alie: accuracy")
    with pytest.raises(KeyError, match="no strategy named"):
        run["krum/none"]


@pytest.mark.parametrize("kwargs, match", [
    ({"clients": 1}, "clients must be"),
    ({"rounds": 0}, "rounds must be"),
    ({"dataset": "cifar"}, "dataset must be"),
    ({"model": "resnet"}, "model must be"),
    ({"lr": 0}, "lr must be"),
    ({"num_cpus": 0}, "num_cpus must be"),
    ({"strategies": []}, "at least one"),
    ({"strategies": StrategySpec()}, "a list"),
    ({"strategies": [StrategySpec(), StrategySpec()]}, "distinct names"),
    ({"strategies": [{"aggregator": "mean", "bogus": 1}]}, "bad strategy"),
    ({"strategies": [StrategySpec("nnm+cwtm", f=2)], "clients": 4}, "clients must be at least"),
    ({"client_mods": [3]}, "client_mods must be"),
    ({"progress": 3}, "progress must be"),
    ({"partition": "gamma"}, "partition must be"),
    ({"partition": "dirichlet"}, "needs beta"),
    ({"beta": -1.0}, "beta must be"),
])
def test_bad_input_is_rejected_before_any_simulation(kwargs, match):
    kwargs = {"strategies": [StrategySpec()], **kwargs}
    with pytest.raises(FedAuditError, match=match):
        run_flower(**kwargs)


@pytest.mark.parametrize("kwargs, match", [
    ({"aggregator": "nosuch"}, "nosuch"),
    ({"attack": "alie"}, "needs f >= 1"),
    ({"f": 1, "attack": "alie", "client_attack": "labelflip"}, "not both"),
    ({"f": 1, "attack": "nosuch"}, "unknown attack"),
    ({"f": 1, "attack": "alie", "attack_params": {"q": 1}}, "takes no keyword .q."),
    ({"f": 1, "client_attack": "labelflip", "client_attack_params": {"p": 1}}, "takes no parameters"),
    ({"attack_params": 3}, "attack_params must be a mapping"),
    ({"label": ""}, "label must be"),
])
def test_bad_strategy_specs(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        StrategySpec(**kwargs)


def test_optimal_attack_spec_line_searches_against_its_own_rule():
    from fedaudit.attacks import Optimal

    attack = StrategySpec("cwtm", f=2, attack="optimal-alie").server_attack()
    assert isinstance(attack, Optimal) and attack.attack.name == "alie"


@pytest.mark.slow
def test_legacy_strategy_in_a_real_simulation_repeats_the_message_api_run(run):
    """``ServerApp(server_fn=...)`` + ``NumPyClient`` + LegacyRobustStrategy, same data, seeds and attack:
    the accuracies equal the Message-API run's exactly."""
    from flwr.client import ClientApp, NumPyClient
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerApp, ServerAppComponents, ServerConfig
    from flwr.simulation import run_simulation

    from fedaudit.attacks import ALIE
    from fedaudit.integrations.flower.legacy import LegacyRobustStrategy
    from fedaudit.integrations.flower.simulation import backend_config

    data = load_digits_dataset(rng=derive_seed(SEED, "flower-data"))
    parts = partition(data.y_train, CLIENTS, "iid", rng=derive_seed(SEED, "flower-partition"), min_size=1)
    model = LogisticModel(data.n_features, 10, mu=0.0)

    class Client(NumPyClient):
        def __init__(self, pid):
            self.pid = pid

        def fit(self, parameters, config):
            A, y = data.X_train[parts[self.pid]], data.y_train[parts[self.pid]]
            x = np.concatenate([p.ravel() for p in parameters])
            for _ in range(STEPS):
                x = x - LR * model.grad(x, A, y)
            return [x[:640].reshape(10, 64), x[640:]], int(y.size), {"partition-id": self.pid}

    accuracy = {}

    def evaluate(server_round, ndarrays, config):
        accuracy[server_round] = model.accuracy(np.concatenate([a.ravel() for a in ndarrays]), data.X_test,
                                                data.y_test)
        return 0.0, {}

    def server_fn(context):
        strategy = LegacyRobustStrategy("nnm+cwtm", f=2, attack=ALIE(z=30), seed=SEED, num_clients=CLIENTS,
                                        fraction_evaluate=0.0, evaluate_fn=evaluate,
                                        initial_parameters=ndarrays_to_parameters([np.zeros((10, 64)),
                                                                                   np.zeros(10)]))
        return ServerAppComponents(strategy=strategy, config=ServerConfig(num_rounds=ROUNDS))

    run_simulation(ServerApp(server_fn=server_fn),
                   ClientApp(client_fn=lambda ctx: Client(int(ctx.node_config["partition-id"])).to_client()),
                   num_supernodes=CLIENTS, backend_config=backend_config(2))
    assert [accuracy[r] for r in range(ROUNDS + 1)] == list(run["nnm+cwtm/alie"].accuracy)
