"""LDP client mods and their server decoder, driven with real Flower Messages (the one real simulation is slow).

Independent computations: the report equals ``mechanism.encode`` of the update computed here by
hand (arrays raveled in key order, float64) on the generator ``derive_generator(seed, key)``; the
decoded rows equal ``mechanism.decode`` of those reports; the ledger is checked against budgets
whose arithmetic is exact (ε = 1 per round, budget 3).
"""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, Metadata, MetricRecord,  # noqa: E402
                      RecordDict)

from tests.helpers import assert_unbiased, z_tolerance  # noqa: E402
from fedaudit.accounting import Ledger, compose  # noqa: E402
from fedaudit.defenses import make_aggregator  # noqa: E402
from fedaudit.errors import FedAuditError  # noqa: E402
from fedaudit.integrations.flower import RobustStrategy, flatten, unflatten  # noqa: E402
from fedaudit.integrations.flower.ledger_file import LEDGER_FORMAT, NODE_CONFIG_KEY, LedgerFile  # noqa: E402
from fedaudit.integrations.flower.ldp import (REFUSED_CODE, REPORT_KEY, STATE_KEY, LDPRound, is_refusal,  # noqa: E402
                                              ldp_decoder, ldp_mod)
from fedaudit.json import dumps, loads as strict_loads  # noqa: E402
from fedaudit.mechanisms import make_mechanism  # noqa: E402
from fedaudit.rng import derive_generator  # noqa: E402

# a budget without a persistent ledger warns that it lasts one run (checked in its own test below)
pytestmark = pytest.mark.filterwarnings("ignore:ldp_mod's budget:UserWarning")

SHAPES = {"W": ((3, 4), np.float32), "b": ((3,), np.float64)}
D = 15
OLD = {"W": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "b": np.array([0.5, -0.25, 2.0])}
STEP = np.linspace(-0.2, 0.3, D)  # the client's update, norm 0.76 < clip 1


def _new(step: np.ndarray = STEP) -> dict[str, np.ndarray]:
    return {"W": (OLD["W"] + step[:12].reshape(3, 4)).astype(np.float32), "b": OLD["b"] + step[12:]}


def _update(new: dict[str, np.ndarray]) -> np.ndarray:
    """u = new − old, by hand: each array as float64, raveled, in key order."""
    return np.concatenate([new[k].astype(np.float64).ravel() - OLD[k].astype(np.float64).ravel() for k in SHAPES])


def _meta(message_type: str = MessageType.TRAIN) -> Metadata:
    # explicit Metadata: a Message built the short way needs a run (flower_facts §2)
    return Metadata(run_id=0, message_id="m", src_node_id=0, dst_node_id=7, reply_to_message_id="", group_id="",
                    created_at=time.time(), ttl=3600.0, message_type=message_type)


def _train(server_round: int, arrays: dict | None = None, message_type: str = MessageType.TRAIN,
           experiment: str = "a") -> Message:
    arrays = OLD if arrays is None else arrays
    return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                               "config": ConfigRecord({"server-round": server_round, "lr": 0.1,
                                                       "experiment": experiment})}),
                   metadata=_meta(message_type))


def _context(partition: int | None = 0, run_id: int = 0, **node_config) -> Context:
    config = {} if partition is None else {"partition-id": partition, "num-partitions": 10}
    return Context(run_id=run_id, node_id=99, node_config={**config, **node_config}, state=RecordDict(),
                   run_config={})


class Client:
    """call_next: the client 'trains' to ``new`` and reports num-examples; counts its calls."""

    def __init__(self, new: dict | None = None):
        self.new, self.calls = _new() if new is None else new, 0

    def __call__(self, msg: Message, context: Context) -> Message:
        self.calls += 1
        return Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in self.new.items()}),
                                   "metrics": MetricRecord({"num-examples": 5})}), reply_to=msg)


MECHANISMS = {"sstq": dict(k=4), "privunitg": {}, "vqsgd": {}, "laplace": {}, "gaussian": {}}


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_round_trip_through_messages_equals_the_mechanisms_own_encode_and_decode(name):
    mech = make_mechanism(name, D, 2.0, **MECHANISMS[name])
    mod, client = ldp_mod(mech, simulation_seed=11), Client()
    replies = [mod(_train(3), _context(p), client) for p in (4, 1, 6)]
    expected = np.stack([mech.encode(_update(client.new)[None, :],
                                     derive_generator(11, f"flower-ldp;partition={p};round=3"))[0] for p in (4, 1, 6)])
    got = np.stack([r.content["arrays"][REPORT_KEY].numpy() for r in replies])
    assert got.dtype == np.float64 and got.shape == (3, mech.report_width)
    assert np.array_equal(got, expected)  # bit-identical
    assert list(replies[0].content["arrays"].keys()) == [REPORT_KEY]
    metrics = replies[0].content["metrics"]
    assert dict(metrics) == {"num-examples": 5, "partition-id": 4, "bits": mech.bits_per_report,
                             "ldp-epsilon": 2.0, "ldp-delta": mech.delta, "ldp-round": 3,
                             "ldp-mechanism": metrics["ldp-mechanism"]}
    assert 0 <= metrics["ldp-mechanism"] < 2**56
    decoder = ldp_decoder(mech)
    decoded = decoder(None, replies)
    assert np.array_equal(decoded, mech.decode(expected))
    assert decoder.rounds == (LDPRound(3, (4, 1, 6), mech.bits_per_report, 3 * mech.bits_per_report, 2.0,
                                       mech.delta),)


def test_simulation_seeded_reports_differ_by_partition_and_round_and_repeat_with_the_seed():
    mech = make_mechanism("gaussian", D, 1.0)

    def report(partition, server_round, seed=0):
        out = ldp_mod(mech, simulation_seed=seed)(_train(server_round), _context(partition), Client())
        return out.content["arrays"][REPORT_KEY].numpy()

    assert np.array_equal(report(2, 5), report(2, 5))
    assert not np.array_equal(report(2, 5), report(3, 5))
    assert not np.array_equal(report(2, 5), report(2, 6))
    assert not np.array_equal(report(2, 5), report(2, 5, seed=1))


@pytest.mark.parametrize("name", ["privunitg", "gaussian"])
def test_decoded_reports_are_unbiased_for_the_update(name):
    mech, n = make_mechanism(name, D, 8.0), 1200
    client = Client(_new(STEP * (0.95 / np.linalg.norm(STEP))))  # inside the clip ball: E[decode] = u
    mod, u = ldp_mod(mech, simulation_seed=5), _update(client.new)
    replies = [mod(_train(1), _context(p), client) for p in range(n)]
    decoded = ldp_decoder(mech)(np.zeros((n, mech.report_width)), replies)
    assert decoded.shape == (n, D) and np.isfinite(decoded).all()
    assert_unbiased(decoded, u, n_assertions=2)
    # the tolerance is tight enough to see a bias of half the largest coordinate (e.g. a lost rescaling)
    assert z_tolerance(2 * D) * decoded.std(axis=0, ddof=1).max() / np.sqrt(n) < 0.5 * np.abs(u).max()


def test_bits_are_logged_per_round_and_serialise_strictly():
    mech = make_mechanism("sstq", D, 1.0, k=2)
    mod, decoder = ldp_mod(mech), ldp_decoder(mech)
    for r in (1, 2):
        decoder(None, [mod(_train(r), _context(p), Client()) for p in range(4)])
    assert [x.round for x in decoder.rounds] == [1, 2]
    assert all(x.bits_per_report == mech.bits_per_report and x.total_bits == 4 * mech.bits_per_report
               for x in decoder.rounds)
    for x in decoder.rounds:
        assert strict_loads(dumps(x.to_dict())) == {"round": x.round, "partitions": [0, 1, 2, 3],
                                                     "bits_per_report": mech.bits_per_report,
                                                     "total_bits": 4 * mech.bits_per_report, "epsilon": 1.0,
                                                     "delta": 0.0, "malformed": []}
    assert f"4 reports × {mech.bits_per_report} bits = {4 * mech.bits_per_report} bits" in decoder.rounds[0].summary()
    assert repr(decoder) == f"LDPDecoder({mech!r}, rounds=2)"


def _run_rounds(mod, context, rounds, decoder=None):
    """Accepted rounds and refused replies of one client over ``rounds`` (one mod call each)."""
    accepted, refused, client = [], [], Client()
    for r in rounds:
        out = mod(_train(r), context, client)
        if is_refusal(out):
            refused.append(out)
        else:
            accepted.append(r)
            if decoder is not None:
                decoder(None, [out])
    return accepted, refused, client


def test_ledger_refuses_exactly_at_the_budget_without_training():
    mech = make_mechanism("laplace", D, 1.0)
    server = Ledger()
    accepted, refused, client = _run_rounds(ldp_mod(mech, budget=3.0), _context(0), range(1, 6),
                                            ldp_decoder(mech, ledger=server))
    assert accepted == [1, 2, 3] and len(refused) == 2
    assert client.calls == 3  # refused rounds do not train
    assert refused[0].error.code == REFUSED_CODE and "refused in round 4" in refused[0].error.reason
    assert "budget ε=3 at δ=0" in refused[0].error.reason and "spent ε=3" in refused[0].error.reason
    assert server.spent(0).epsilon == 3.0 and [e.round for e in server.entries(0)] == [1, 2, 3]


def test_the_account_lives_in_context_state_not_in_the_mod_object():
    # in a Ray simulation each call may run in a different actor holding its own pickled copy of the mod
    mech = make_mechanism("laplace", D, 1.0)
    mod, context = ldp_mod(mech, budget=3.0), _context(2)
    outcomes = [is_refusal(pickle.loads(pickle.dumps(mod))(_train(r), context, Client())) for r in range(1, 6)]
    assert outcomes == [False, False, False, True, True]
    assert list(context.state[STATE_KEY]["rounds"]) == [1, 2, 3]
    # a fresh node (fresh Context) starts with its own, empty account
    assert not is_refusal(mod(_train(4), _context(3), Client()))


def test_scope_keeps_one_account_per_value_of_a_config_key():
    # run_flower runs several strategies one after another on the same nodes (the same Contexts)
    mech = make_mechanism("laplace", D, 1.0)
    shared, scoped, context_a, context_b = ldp_mod(mech, budget=2.0), ldp_mod(mech, budget=2.0, scope="experiment"), \
        _context(0), _context(0)
    assert [is_refusal(shared(_train(r, experiment=e), context_a, Client())) for e in "ab" for r in (1, 2)] == \
        [False, False, True, True]
    assert [is_refusal(scoped(_train(r, experiment=e), context_b, Client())) for e in "ab" for r in (1, 2, 3)] == \
        [False, False, True] * 2
    assert sorted(context_b.state.keys()) == [f"{STATE_KEY}:a", f"{STATE_KEY}:b"]
    msg = Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in OLD.items()}),
                              "config": ConfigRecord({"server-round": 1})}), metadata=_meta())
    with pytest.raises(FedAuditError, match=r"no 'experiment' in its ConfigRecord; ldp_mod\(scope='experiment'\)"):
        scoped(msg, _context(0), Client())


def test_prior_ledger_entries_count_per_partition_and_are_read_once():
    mech = make_mechanism("laplace", D, 1.0)
    prior = Ledger()
    prior.record(0, 2.0, round=0)
    mod = ldp_mod(mech, ledger=prior, budget=3.0)
    prior.record(1, 5.0)  # after the mod was built: not seen
    assert _run_rounds(mod, _context(0), range(1, 4))[0] == [1]
    assert _run_rounds(mod, _context(1), range(1, 5))[0] == [1, 2, 3]


def test_an_approximate_dp_report_is_refused_by_a_pure_budget_and_accepted_under_its_delta():
    mech = make_mechanism("gaussian", D, 1.0, delta=1e-5)
    assert _run_rounds(ldp_mod(mech, budget=10.0), _context(0), [1])[0] == []
    accepted = _run_rounds(ldp_mod(mech, budget=2.5, budget_delta=1e-4), _context(0), range(1, 5))[0]
    assert accepted == [1, 2]  # basic: ε 1+1 ≤ 2.5 < 3, δ 2e-5 ≤ 1e-4


def test_the_budget_composes_by_the_chosen_method():
    mech = make_mechanism("gaussian", D, 1.0, delta=1e-5)
    pld = max(k for k in range(1, 13) if compose([mech] * k, "pld", 1e-4).epsilon <= 3.0)
    accepted = {m: _run_rounds(ldp_mod(mech, budget=3.0, budget_delta=1e-4, method=m), _context(0), range(1, 13))[0]
                for m in ("basic", "pld")}
    assert accepted == {"basic": [1, 2, 3], "pld": list(range(1, pld + 1))} and pld > 3


def test_the_server_ledger_rejects_a_client_that_did_not_refuse():
    mech = make_mechanism("laplace", D, 1.0)
    decoder = ldp_decoder(mech, ledger=Ledger(), budget=3.0)
    mod, context = ldp_mod(mech), _context(5)  # no budget on the client
    for r in (1, 2, 3):
        decoder(None, [mod(_train(r), context, Client())])
    with pytest.raises(FedAuditError, match=r"round 4: partitions \[5\] sent a report past their budget"):
        decoder(None, [mod(_train(4), context, Client())])
    assert decoder.ledger.spent(5).epsilon == 3.0


def test_a_non_finite_report_decodes_to_a_nan_row_and_is_logged():
    mech = make_mechanism("privunitg", D, 2.0)
    mod = ldp_mod(mech)
    replies = [mod(_train(1), _context(p), Client()) for p in range(3)]
    bad = replies[1].content["arrays"][REPORT_KEY].numpy()
    bad[0] = np.nan
    replies[1].content["arrays"] = ArrayRecord({REPORT_KEY: Array(bad)})
    decoder = ldp_decoder(mech)
    decoded = decoder(None, replies)
    assert np.isnan(decoded[1]).all() and np.isfinite(decoded[[0, 2]]).all()
    assert decoder.rounds[0].malformed == (1,) and "1 malformed" in decoder.rounds[0].summary()


def test_a_report_the_mechanism_rejects_is_malformed_not_a_crash():
    mech = make_mechanism("vqsgd", D, 2.0)
    mod = ldp_mod(mech)
    replies = [mod(_train(1), _context(p), Client()) for p in range(4)]
    replies[2].content["arrays"] = ArrayRecord({REPORT_KEY: Array(np.array([1e9]))})  # no such vertex
    with pytest.raises(FedAuditError, match="vertex indices"):
        mech.decode(np.array([[1e9]]))
    decoder = ldp_decoder(mech)
    decoded = decoder(None, replies)
    good = [0, 1, 3]
    assert np.isnan(decoded[2]).all()
    assert np.array_equal(decoded[good], mech.decode(np.stack([replies[i].content["arrays"][REPORT_KEY].numpy()
                                                               for i in good])))
    assert decoder.rounds[0].malformed == (2,)


def test_other_messages_pass_through_untouched():
    mod, context, client = ldp_mod(make_mechanism("laplace", D, 1.0), budget=1.0), _context(0), Client()
    out = mod(_train(1, message_type=MessageType.EVALUATE), context, client)
    assert list(out.content["arrays"].keys()) == ["W", "b"] and STATE_KEY not in context.state
    assert client.calls == 1


def test_mechanism_dim_mismatch_fails_before_training():
    client = Client()
    with pytest.raises(FedAuditError, match=r"mechanism dim=16 must equal the model's d=15"):
        ldp_mod(make_mechanism("laplace", 16, 1.0))(_train(1), _context(0), client)
    assert client.calls == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(budget=-1.0), r"budget must be a finite real number > 0, got budget=-1"),
    (dict(budget=0.0), r"budget must be a finite real number > 0"),
    (dict(budget_delta=1.0), r"budget_delta must be a finite real number in \[0, 1\)"),
    (dict(method="rdp"), r"method must be one of 'basic', 'advanced', 'pld'"),
    (dict(simulation_seed=-1), r"simulation_seed must be an integer >= 0"),
    (dict(seed=0), r"ldp_mod\(seed=...\) was removed: .* pass simulation_seed=... instead"),
    (dict(ledger_path="ledger.json"), r"ledger_path must be an absolute file path"),
    (dict(ledger_path="/no/such/dir/ledger.json"), r"its directory /no/such/dir does not exist"),
    (dict(ledger_path="/tmp", budget=1.0), r"ledger_path /tmp is a directory"),
    (dict(ledger_path="/tmp/x.json", scope="experiment"), r"scope='experiment' and ledger_path cannot be combined"),
    (dict(ledger={}), r"ledger must be None or a fedaudit.accounting.Ledger"),
    (dict(scope=""), r"scope must be None or the name of a train-config key"),
])
def test_bad_mod_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        ldp_mod(make_mechanism("laplace", D, 1.0), **kwargs)


def test_bad_mechanisms_and_decoder_arguments():
    with pytest.raises(FedAuditError, match="mechanism must be a fedaudit Mechanism"):
        ldp_mod("laplace")
    with pytest.raises(FedAuditError, match="claims no LDP guarantee"):
        ldp_mod(make_mechanism("vqsgd", D, None))
    with pytest.raises(FedAuditError, match="budget needs a ledger"):
        ldp_decoder(make_mechanism("laplace", D, 1.0), budget=1.0)


def test_missing_partition_id_or_round_is_a_clear_error():
    mod = ldp_mod(make_mechanism("laplace", D, 1.0))
    with pytest.raises(FedAuditError, match="no 'partition-id'"):
        mod(_train(1), _context(None), Client())
    msg = Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in OLD.items()})}), metadata=_meta())
    with pytest.raises(FedAuditError, match="no 'server-round'"):
        mod(msg, _context(0), Client())


def test_decoder_rejects_replies_of_another_mechanism_or_without_a_report():
    laplace, gaussian = make_mechanism("laplace", D, 1.0), make_mechanism("gaussian", D, 1.0)
    reply = ldp_mod(laplace)(_train(1), _context(0), Client())
    for other in (gaussian, make_mechanism("laplace", D, 1.0, clip=2.0)):  # same bits and ε as laplace
        with pytest.raises(FedAuditError, match="client and server use different mechanisms"):
            ldp_decoder(other)(None, [reply])
    plain = Client()(_train(1), _context(0))
    with pytest.raises(FedAuditError, match="is ldp_mod in its ClientApp's mods"):
        ldp_decoder(laplace)(None, [plain])
    with pytest.raises(FedAuditError, match="2 rows for 1 replies"):
        ldp_decoder(laplace)(np.zeros((2, D)), [reply])


def test_robust_strategy_aggregates_the_decoded_reports_and_skips_refusals():
    mech, server = make_mechanism("privunitg", D, 4.0), Ledger()
    strategy = RobustStrategy("nnm+cwtm", f=2, decoder=ldp_decoder(mech, ledger=server), seed=3)
    strategy._global = flatten(ArrayRecord({k: Array(v) for k, v in OLD.items()}))  # as configure_train does
    mod, steps = ldp_mod(mech, budget=4.0, simulation_seed=0), np.random.default_rng(0).normal(0, 0.1, (10, D))
    contexts = [_context(p) for p in range(10)]
    contexts[7].state[STATE_KEY] = ConfigRecord({"rounds": [0]})  # partition 7 has spent its budget
    replies = [mod(_train(1), contexts[p], Client(_new(steps[p]))) for p in (4, 0, 9, 1, 2, 3, 5, 6, 7, 8)]
    arrays, _ = strategy.aggregate_train(1, replies)
    kept = [p for p in range(10) if p != 7]
    reports = np.stack([mech.encode(_update(_new(steps[p]))[None, :],
                                    derive_generator(0, f"flower-ldp;partition={p};round=1"))[0] for p in kept])
    rule = make_aggregator("nnm+cwtm", 2)
    expected = strategy._global[0] + rule(mech.decode(reports), rng=derive_generator(3, "flower-rule;round=1"))
    np.testing.assert_array_equal(flatten(arrays)[0], flatten(unflatten(expected, strategy._global[1]))[0])
    assert strategy.diagnostics[-1]["errors"] == 1 and strategy.diagnostics[-1]["partitions"] == kept
    assert "partition 7 refused in round 1" in strategy.diagnostics[-1]["error_reasons"][0]
    assert strategy.decoder.rounds[0].partitions == tuple(kept)
    assert [server.spent(p).count for p in range(10)] == [0 if p == 7 else 1 for p in range(10)]


# ----------------------------------------------------------------------------- private randomness (issue #22)


def _report(mod, partition=2, server_round=5, client=None):
    return mod(_train(server_round), _context(partition), client or Client()).content["arrays"][REPORT_KEY].numpy()


def test_default_reports_draw_fresh_randomness_per_report():
    mech = make_mechanism("gaussian", D, 1.0)
    one, two = ldp_mod(mech), ldp_mod(mech)  # the same configuration, as two nodes of one app would have
    a, b, c = _report(one), _report(two), _report(one)
    assert not np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(b, c)
    # the old default (seed 0) is not what a default mod draws
    seeded = mech.encode(_update(_new())[None, :], derive_generator(0, "flower-ldp;partition=2;round=5"))[0]
    assert not any(np.array_equal(seeded, r) for r in (a, b, c))


@pytest.mark.parametrize("name", ["privunitg", "laplace", "gaussian"])
def test_a_server_knowing_every_config_value_cannot_recompute_a_default_report(name):
    """The attack of issue #22: the server knows the mechanism, the round, the partition and every seed the
    app or fedaudit could use, recomputes the report of each candidate update and picks the one that
    matches. With the explicit simulation seed it identifies the true update every time (so the test can
    fail); with the default randomness no candidate's recomputed report ever matches."""
    mech = make_mechanism(name, D, 2.0)
    rng = np.random.default_rng(1)
    known_seeds = (0, 1, 7)  # the old default seed, and any other the server might guess
    hits = {"default": 0, "simulation": 0}
    trials = 10
    for trial in range(trials):
        candidates = [STEP * (0.9 / np.linalg.norm(STEP))] + [rng.normal(0, 0.2, D) for _ in range(3)]
        true = int(rng.integers(len(candidates)))
        client = Client(_new(candidates[true]))
        u = [_update(_new(c)) for c in candidates]
        for label, mod in (("default", ldp_mod(mech)), ("simulation", ldp_mod(mech, simulation_seed=7))):
            y = _report(mod, partition=3, server_round=trial + 1, client=client)
            matches = {i for i in range(len(candidates)) for s in known_seeds
                       if np.array_equal(y, mech.encode(u[i][None, :], derive_generator(
                           s, f"flower-ldp;partition=3;round={trial + 1}"))[0])}
            hits[label] += matches == {true}
            if label == "default":
                assert matches == set()
    assert hits == {"default": 0, "simulation": trials}


def test_a_budget_without_a_persistent_ledger_warns_once_that_it_lasts_one_run(tmp_path):
    mech = make_mechanism("laplace", D, 1.0)
    mod = ldp_mod(mech, budget=3.0)
    with pytest.warns(UserWarning, match=r"ldp_mod's budget ε=3 lasts one run only .* ldp-ledger-path"):
        mod(_train(1), _context(0), Client())
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod(_train(2), _context(0), Client())  # once per mod
        ldp_mod(mech, budget=3.0, ledger_path=tmp_path / "l.json")(_train(1), _context(0), Client())
        ldp_mod(mech, budget=3.0, simulation_seed=0)(_train(1), _context(0), Client())


# ----------------------------------------------------------------------------- the persistent ledger (issue #22)


def _one_run(mod_kwargs, run_id, rounds=range(1, 6), partition=0, **node_config):
    """One Flower run of one node, as a second ``flwr run`` would be: a freshly built mod (app code loaded
    again), a fresh Context (empty state, new run id)."""
    mod = ldp_mod(make_mechanism("laplace", D, 1.0), **mod_kwargs)
    return _run_rounds(mod, _context(partition, run_id=run_id, **node_config), rounds)


def test_without_a_persistent_ledger_every_run_spends_the_budget_again():
    # the bug of issue #22: context.state is per run
    assert _one_run({"budget": 3.0}, 1)[0] == [1, 2, 3]
    assert _one_run({"budget": 3.0}, 2)[0] == [1, 2, 3]


def test_two_runs_sharing_a_ledger_file_refuse_on_the_second_once_the_budget_is_spent(tmp_path):
    path = tmp_path / "ldp-ledger.json"
    accepted, refused, client = _one_run({"budget": 3.0, "ledger_path": str(path)}, 101)
    assert accepted == [1, 2, 3] and len(refused) == 2 and client.calls == 3
    accepted, refused, client = _one_run({"budget": 3.0, "ledger_path": str(path)}, 102)
    assert accepted == [] and len(refused) == 5 and client.calls == 0  # refused before training
    assert refused[0].error.code == REFUSED_CODE and is_refusal(refused[0])
    assert f"spent ε=3, δ=0 over 3 uses recorded in {path})" in refused[0].error.reason
    doc = strict_loads(path.read_text())
    assert doc["format"] == LEDGER_FORMAT and doc["version"] == 1
    assert [(e["partition"], e["run"], e["round"], e["epsilon"], e["delta"], e["name"]) for e in doc["entries"]] == \
        [(0, 101, r, 1.0, 0.0, "laplace") for r in (1, 2, 3)]
    # another partition sharing the file has its own account
    assert _one_run({"budget": 3.0, "ledger_path": str(path)}, 102, partition=4)[0] == [1, 2, 3]
    assert [e.partition for e in LedgerFile(path).entries()] == [0, 0, 0, 4, 4, 4]


def test_the_node_config_names_the_ledger_file(tmp_path):
    path = str(tmp_path / "node-ledger.json")
    assert _one_run({"budget": 2.0}, 1, **{NODE_CONFIG_KEY: path})[0] == [1, 2]
    assert _one_run({"budget": 2.0}, 2, **{NODE_CONFIG_KEY: path})[0] == []
    assert _one_run({"budget": 2.0, "ledger_path": path}, 3, **{NODE_CONFIG_KEY: path})[0] == []
    with pytest.raises(FedAuditError, match="name different ledgers"):
        _one_run({"ledger_path": str(tmp_path / "other.json")}, 4, **{NODE_CONFIG_KEY: path})
    with pytest.raises(FedAuditError, match=r"node config 'ldp-ledger-path' must be an absolute file path"):
        _one_run({}, 5, **{NODE_CONFIG_KEY: "relative.json"})
    with pytest.raises(FedAuditError, match=r"scope='experiment'\) cannot run on a node with a persistent ledger"):
        _one_run({"scope": "experiment"}, 6, **{NODE_CONFIG_KEY: path})


def test_without_a_budget_the_ledger_file_still_records_every_report(tmp_path):
    path = tmp_path / "l.json"
    assert _one_run({"ledger_path": path}, 7, rounds=(1, 2))[0] == [1, 2]
    assert [(e.run, e.round) for e in LedgerFile(path).entries(0)] == [(7, 1), (7, 2)]


def test_the_ledger_file_composes_like_the_in_run_account(tmp_path):
    # entries of the mod's own mechanism enter the composition as the mechanism (exact PLD), not as (ε, δ)
    mech = make_mechanism("gaussian", D, 1.0, delta=1e-5)
    kwargs = dict(budget=3.0, budget_delta=1e-4, method="pld")
    in_run = _run_rounds(ldp_mod(mech, **kwargs), _context(0), range(1, 6))[0]
    persisted = _run_rounds(ldp_mod(mech, ledger_path=tmp_path / "l.json", **kwargs), _context(0), range(1, 6))[0]
    assert persisted == in_run and len(in_run) > 3


def test_a_corrupt_ledger_file_is_an_error_not_an_empty_account(tmp_path):
    path = tmp_path / "l.json"
    mod = ldp_mod(make_mechanism("laplace", D, 1.0), budget=3.0, ledger_path=path)
    for text, match in (("{", "is not valid JSON"), ('{"format": "x"}', "is not a fedaudit LDP ledger"),
                        ('{"format": "fedaudit-ldp-ledger", "version": 1, "entries": [{"partition": 0}]}',
                         r"entries\[0\] must be an object with keys")):
        path.write_text(text)
        client = Client()
        with pytest.raises(FedAuditError, match=match):
            mod(_train(1), _context(0), client)
        assert client.calls == 0


def _charge_rounds(path: str, worker: int, queue) -> None:
    mod = ldp_mod(make_mechanism("laplace", D, 1.0), budget=6.0, ledger_path=path)
    accepted, _, _ = _run_rounds(mod, _context(0, run_id=worker), range(1, 6))
    queue.put(len(accepted))


def test_concurrent_processes_never_overspend_a_shared_ledger(tmp_path):
    # four processes (e.g. Ray actors, or two runs of one node at once) charge one partition: the lock makes
    # the read-check-write one step, so exactly budget/ε = 6 reports are released in total
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue, path = ctx.Queue(), str(tmp_path / "l.json")
    procs = [ctx.Process(target=_charge_rounds, args=(path, w, queue)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
    assert sum(queue.get(timeout=5) for _ in procs) == 6
    assert len(LedgerFile(path).entries(0)) == 6


# ----------------------------------------------------------------------------- one real Flower simulation (slow)

SIM_D, SIM_NODES = 6, 4


def _sim_step(partition: int, server_round: int) -> np.ndarray:
    return 0.05 * (partition + 1) * np.cos(np.arange(SIM_D) + server_round)


def _sim_train(msg: Message, context: Context) -> Message:
    """The simulated client: x ← x + step(partition, round) (deterministic, so the driver can recompute u)."""
    pid, server_round = int(context.node_config["partition-id"]), int(msg.content["config"]["server-round"])
    x = msg.content["arrays"]["x"].numpy()
    return Message(RecordDict({"arrays": ArrayRecord({"x": Array(x + _sim_step(pid, server_round))}),
                               "metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)


def _simulate(mod, mech, monkeypatch, rounds: int = 5):
    """One real Flower simulation (Ray) of SIM_NODES nodes running ``mod``: (refused per round, reports per round,
    the server's decoder, wall seconds)."""
    # Flower's Ray backend rewrites os.environ["PYTHONPATH"] (flower_facts §3): monkeypatch restores it afterwards
    if "PYTHONPATH" in os.environ:
        monkeypatch.setenv("PYTHONPATH", os.environ["PYTHONPATH"])
    else:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation

    client_app = ClientApp()
    client_app.train(mods=[mod])(_sim_train)
    decoder, out = ldp_decoder(mech, ledger=Ledger()), {"refused": {}, "reports": {}}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        deadline = time.monotonic() + 60
        while len(grid.get_node_ids()) < SIM_NODES and time.monotonic() < deadline:
            time.sleep(0.1)  # nodes register after the ServerApp starts (flower_facts §3)
        for r in range(1, rounds + 1):
            msgs = [Message(RecordDict({"arrays": ArrayRecord({"x": Array(np.zeros(SIM_D))}),
                                        "config": ConfigRecord({"server-round": r})}),
                            dst_node_id=node, message_type=MessageType.TRAIN) for node in sorted(grid.get_node_ids())]
            replies = list(grid.send_and_receive(msgs, timeout=120))
            out["refused"][r] = sum(is_refusal(m) for m in replies)
            valid = sorted((m for m in replies if not m.has_error()), key=lambda m: m.content["metrics"]["partition-id"])
            if valid:
                decoder(None, valid)
                out["reports"][r] = [m.content["arrays"][REPORT_KEY].numpy() for m in valid]

    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=SIM_NODES,
                   backend_config={"init_args": {"num_cpus": 2, "include_dashboard": False, "logging_level": "ERROR",
                                                 "log_to_driver": False},
                                   "client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    return out["refused"], out["reports"], decoder, time.perf_counter() - t0


@pytest.mark.slow
def test_real_simulation_keeps_each_nodes_account_across_ray_actors(monkeypatch):
    """Ray actors hold pickled copies of the mod and serve different nodes: the budget must follow the node.

    Slow (a Ray instance of its own): in the fast suite, the shared simulation of
    tests/integrations/flower/test_simulation.py fails on the same bugs — a budget kept in the mod object or reports
    seeded by node id — through test_ldp_run_is_the_numpy_recomputation_of_the_seeded_reports and
    test_a_strategy_with_its_own_ldp_mod_and_decoder (ten nodes on two actors)."""
    mech = make_mechanism("laplace", SIM_D, 1.0)
    refused, reports, decoder, wall = _simulate(ldp_mod(mech, budget=3.0, simulation_seed=4), mech, monkeypatch)
    assert refused == {1: 0, 2: 0, 3: 0, 4: SIM_NODES, 5: SIM_NODES}, refused
    for r in (1, 2, 3):  # seeded by (seed, partition id, round) through Ray, never by the random node ids
        expected = [mech.encode(_sim_step(p, r)[None, :], derive_generator(4, f"flower-ldp;partition={p};round={r}"))[0]
                    for p in range(SIM_NODES)]
        assert all(np.array_equal(a, b) for a, b in zip(reports[r], expected))
    assert [x.partitions for x in decoder.rounds] == [tuple(range(SIM_NODES))] * 3
    assert {decoder.ledger.spent(p).epsilon for p in range(SIM_NODES)} == {3.0}
    assert wall < 90, f"the simulation took {wall:.0f} s"


@pytest.mark.slow
def test_two_real_simulations_sharing_a_ledger_file_refuse_the_second_run(monkeypatch, tmp_path):
    """Issue #22: two separate Flower runs (two run_simulation calls, each with a fresh state for every node) with
    one ledger file on disk, written by the Ray actors' processes: the second run is refused outright. The
    message-level twin in the fast suite is
    test_two_runs_sharing_a_ledger_file_refuse_on_the_second_once_the_budget_is_spent."""
    mech, path = make_mechanism("laplace", SIM_D, 1.0), tmp_path / "ldp-ledger.json"
    first, _, decoder, _ = _simulate(ldp_mod(mech, budget=3.0, ledger_path=path), mech, monkeypatch, rounds=4)
    assert first == {1: 0, 2: 0, 3: 0, 4: SIM_NODES}, first
    second, _, later, _ = _simulate(ldp_mod(mech, budget=3.0, ledger_path=path), mech, monkeypatch, rounds=2)
    assert second == {1: SIM_NODES, 2: SIM_NODES}, second
    assert later.rounds == ()
    entries = LedgerFile(path).entries()
    assert sorted((e.partition, e.round) for e in entries) == [(p, r) for p in range(SIM_NODES) for r in (1, 2, 3)]
    assert len({e.run for e in entries}) == 1
