"""RobustStrategy driven directly with constructed Flower reply Messages (no simulation).

The aggregate is checked against an independent computation: ``make_aggregator(spec, f)`` applied
to the same update rows, sorted by partition id, exactly.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, MessageType, Metadata, MetricRecord, RecordDict

from fedaudit.attacks import ALIE, IPM, NonFinite
from fedaudit.defenses import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower import Layout, RobustStrategy, choose_byzantine, flatten, unflatten
from fedaudit.rng import derive_generator

N, SHAPES = 10, {"W": (3, 4), "b": (3,)}


def _metadata(node: int, *, reply_to: str = "", message_type: str = MessageType.TRAIN) -> Metadata:
    # explicit Metadata: a Message built the short way needs a run (flower_facts §2)
    return Metadata(run_id=0, message_id=f"m{node}", src_node_id=node, dst_node_id=0, reply_to_message_id=reply_to,
                    group_id="", created_at=time.time(), ttl=3600.0, message_type=message_type)


def _record(vec: np.ndarray) -> ArrayRecord:
    out, off = {}, 0
    for k, s in SHAPES.items():
        size = int(np.prod(s))
        out[k] = Array(vec[off:off + size].reshape(s).copy())
        off += size
    return ArrayRecord(out)


def _reply(vec: np.ndarray, pid: int, node: int, examples: int = 7) -> Message:
    content = RecordDict({"arrays": _record(vec),
                          "metrics": MetricRecord({"num-examples": examples, "partition-id": pid})})
    return Message(content=content, metadata=_metadata(node, reply_to="x"))


def _error(node: int) -> Message:
    return Message(Error(code=6, reason="client crashed"), metadata=_metadata(node, reply_to="x"))


D = sum(int(np.prod(s)) for s in SHAPES.values())


def _round(strategy: RobustStrategy, global_vec: np.ndarray, models: np.ndarray, server_round: int = 1,
           order=None, extra=()):
    """configure_train's bookkeeping without a Grid, then aggregate_train on the replies in ``order``."""
    strategy._global = flatten(_record(global_vec))  # what configure_train stores
    order = range(len(models)) if order is None else order
    replies = [_reply(models[p], p, node=1000 + 37 * p) for p in order] + list(extra)
    return strategy.aggregate_train(server_round, replies)


def _vec(arrays: ArrayRecord) -> np.ndarray:
    return flatten(arrays)[0]


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    return rng.normal(size=D), rng.normal(size=(N, D))


def test_flatten_unflatten_round_trip_keeps_keys_shapes_dtypes_exactly():
    rec = ArrayRecord({"w": Array(np.arange(6, dtype=np.float32).reshape(2, 3) / 3),
                       "n": Array(np.array([1, -2], dtype=np.int64)), "s": Array(np.array(3.25))})
    x, layout = flatten(rec)
    assert x.dtype == np.float64 and x.shape == (9,) and layout.dim == 9
    assert layout == Layout(("w", "n", "s"), ((2, 3), (2,), ()), ("float32", "int64", "float64"))
    back = unflatten(x, layout)
    assert list(back.keys()) == ["w", "n", "s"]
    for k in rec.keys():
        assert back[k].numpy().dtype == rec[k].numpy().dtype and back[k].numpy().shape == rec[k].numpy().shape
        np.testing.assert_array_equal(back[k].numpy(), rec[k].numpy())
    with pytest.raises(FedAuditError, match=r"shape \(9,\)"):
        unflatten(np.zeros(8), layout)
    with pytest.raises(FedAuditError, match="ArrayRecord"):
        flatten({"w": np.zeros(3)})
    with pytest.raises(FedAuditError, match="empty"):
        flatten(ArrayRecord({}))


@pytest.mark.parametrize("spec", ["mean", "cwtm", "nnm+cwtm", "krum", "cwmed"])
def test_aggregate_equals_the_fedaudit_rule_on_the_sorted_update_rows_exactly(spec, data):
    g, models = data
    strategy = RobustStrategy(spec, f=2, seed=5, num_clients=N)
    arrays, metrics = _round(strategy, g, models, order=[7, 2, 9, 0, 4, 1, 8, 3, 6, 5])
    expected = g + np.asarray(make_aggregator(spec, 2)(models - g))
    np.testing.assert_array_equal(_vec(arrays), expected)
    assert metrics["clients"] == N and metrics["errors"] == 0
    d = strategy.diagnostics[-1]
    assert d["partitions"] == list(range(N)) and d["byzantine"] == [] and d["nonfinite_rows"] == 0
    assert d["dist_to_honest_mean"] == pytest.approx(np.linalg.norm(expected - models.mean(axis=0)), rel=1e-12)


def test_a_callable_rule_and_the_reply_order_do_not_matter(data):
    g, models = data
    first = RobustStrategy(lambda X: np.median(X, axis=0))
    a, _ = _round(first, g, models, order=range(N))
    b, _ = _round(RobustStrategy(lambda X: np.median(X, axis=0)), g, models, order=range(N - 1, -1, -1))
    np.testing.assert_array_equal(_vec(a), _vec(b))
    np.testing.assert_array_equal(_vec(a), g + np.median(models - g, axis=0))


def test_fedavg_mean_on_equal_sizes_matches_flower_fedavg(data):
    from flwr.serverapp.strategy import FedAvg

    g, models = data
    ours, _ = _round(RobustStrategy("mean"), g, models)
    theirs, _ = FedAvg().aggregate_train(1, [_reply(models[p], p, node=5 + p) for p in range(N)])
    np.testing.assert_allclose(_vec(ours), _vec(theirs), rtol=0, atol=1e-12)


def test_attack_in_the_loop_replaces_the_seeded_positions_with_the_attack_on_the_honest_rows(data):
    g, models = data
    attack = ALIE(z=30)
    strategy = RobustStrategy("nnm+cwtm", f=2, attack=attack, seed=11, num_clients=N)
    arrays, metrics = _round(strategy, g, models, server_round=3, order=[3, 1, 0, 2, 9, 8, 7, 6, 5, 4])
    byz = choose_byzantine(N, 2, 11, 3)
    honest = np.setdiff1d(np.arange(N), byz)
    U = models - g
    U[byz] = attack(U[honest], 2, derive_generator(11, "flower-attack;round=3"))
    np.testing.assert_array_equal(_vec(arrays), g + make_aggregator("nnm+cwtm", 2)(U))
    d = strategy.diagnostics[-1]
    assert d["byzantine"] == byz.tolist() and metrics["byzantine"] == 2
    assert d["dist_to_honest_mean"] == pytest.approx(
        np.linalg.norm(make_aggregator("nnm+cwtm", 2)(U) - (models - g)[honest].mean(axis=0)), rel=1e-12)
    # the mean is dragged far from the honest mean, the robust rule is not
    mean = RobustStrategy("mean", f=2, attack=attack, seed=11)
    _round(mean, g, models, server_round=3)
    assert mean.diagnostics[-1]["dist_to_honest_mean"] > 10 * d["dist_to_honest_mean"]


def test_choose_byzantine_is_a_function_of_seed_and_round_only():
    a = [choose_byzantine(10, 2, 7, r).tolist() for r in range(1, 6)]
    assert a == [choose_byzantine(10, 2, 7, r).tolist() for r in range(1, 6)]
    assert len({tuple(x) for x in a}) > 1  # the choice changes from round to round
    assert a != [choose_byzantine(10, 2, 8, r).tolist() for r in range(1, 6)]
    assert all(len(set(x)) == 2 and all(0 <= i < 10 for i in x) for x in a)
    with pytest.raises(FedAuditError, match="f must be"):
        choose_byzantine(3, 4, 0, 1)


def test_fixed_byzantine_partitions_and_ipm(data):
    g, models = data
    strategy = RobustStrategy("mean", f=2, attack=IPM(tau=2.0), byzantine=[8, 3], seed=1)
    arrays, _ = _round(strategy, g, models)
    U = models - g
    honest = [i for i in range(N) if i not in (3, 8)]
    U[[3, 8]] = IPM(tau=2.0)(U[honest], 2, derive_generator(1, "flower-attack;round=1"))
    np.testing.assert_array_equal(_vec(arrays), g + U.mean(axis=0))
    assert strategy.diagnostics[-1]["byzantine"] == [3, 8]


def test_nonfinite_byzantine_rows_are_counted_and_the_aggregate_stays_finite(data):
    g, models = data
    for spec in ("mean", "nnm+cwtm"):
        strategy = RobustStrategy(spec, f=2, attack=NonFinite("mixed"), seed=2)
        arrays, metrics = _round(strategy, g, models)
        assert strategy.diagnostics[-1]["nonfinite_rows"] == 2 and metrics["nonfinite-rows"] == 2
        assert np.isfinite(_vec(arrays)).all()
        honest = np.setdiff1d(np.arange(N), choose_byzantine(N, 2, 2, 1))
        # fedaudit rules drop the r non-finite rows and run with f - r on the rest (defenses.base)
        np.testing.assert_array_equal(_vec(arrays), g + make_aggregator(spec, 0)((models - g)[honest]))


def test_a_rule_that_lets_nan_through_is_an_error_not_a_silent_nan(data):
    g, models = data
    strategy = RobustStrategy(lambda X: X.mean(axis=0), f=1, attack=NonFinite(), seed=0)
    with pytest.raises(FedAuditError, match="not finite"):
        _round(strategy, g, models)


def test_error_replies_are_counted_and_the_rest_aggregated(data):
    g, models = data
    strategy = RobustStrategy("mean")
    arrays, metrics = _round(strategy, g, models[:8], extra=[_error(1), _error(2)])
    np.testing.assert_array_equal(_vec(arrays), g + make_aggregator("mean", 0)(models[:8] - g))
    d = strategy.diagnostics[-1]
    assert d["errors"] == 2 and metrics["errors"] == 2 and d["error_reasons"] == ["client crashed"] * 2
    arrays, metrics = strategy.aggregate_train(2, [_error(3)])  # nothing to aggregate: the model is kept
    assert arrays is None and metrics["errors"] == 1 and metrics["clients"] == 0
    assert strategy.diagnostics[-1]["errors"] == 1 and strategy.diagnostics[-1]["clients"] == 0


def test_decoder_hook_sees_the_sorted_update_rows_and_the_replies(data):
    g, models = data
    seen = {}

    def decoder(rows, replies):
        seen["pids"] = [int(m.content["metrics"]["partition-id"]) for m in replies]
        seen["rows"] = rows.copy()
        return 2.0 * rows

    arrays, _ = _round(RobustStrategy("mean", decoder=decoder), g, models, order=[4, 0, 9, 1, 2, 3, 5, 6, 7, 8])
    assert seen["pids"] == list(range(N))
    np.testing.assert_array_equal(seen["rows"], models - g)
    np.testing.assert_array_equal(_vec(arrays), g + (2.0 * (models - g)).mean(axis=0))
    # replies in another layout (a report per client): the decoder gets rows=None and reads the replies
    reports = [Message(RecordDict({"arrays": ArrayRecord({"report": Array(np.full(4, float(p)))}),
                                   "metrics": MetricRecord({"num-examples": 1, "partition-id": p})}),
                       metadata=_metadata(50 + p, reply_to="x")) for p in (2, 0, 1)]
    def from_reports(rows, replies):
        seen["none"] = rows is None
        return np.stack([np.full(D, m.content["arrays"]["report"].numpy()[0]) for m in replies])

    strategy = RobustStrategy("mean", decoder=from_reports)
    strategy._global = flatten(_record(g))
    arrays, _ = strategy.aggregate_train(1, reports)
    assert seen["none"] is True
    np.testing.assert_array_equal(_vec(arrays), g + 1.0)
    with pytest.raises(FedAuditError, match="decoder returned shape"):
        _round(RobustStrategy("mean", decoder=lambda rows, replies: rows[:3]), g, models)


def test_configure_defaults_wait_for_every_node():
    s = RobustStrategy("mean", num_clients=12)
    assert s.min_available_nodes == 12 and s.min_train_nodes == 12
    assert RobustStrategy("mean", num_clients=12, min_train_nodes=3).min_train_nodes == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"aggregator": "nosuchrule"}, "nosuchrule"),
    ({"aggregator": 3}, "aggregator must be"),
    ({"f": -1}, "f must be"),
    ({"attack": "alie", "f": 0}, "attack needs f >= 1"),
    ({"attack": "nosuch", "f": 1}, "unknown attack"),
    ({"attack": 5, "f": 1}, "attack must be"),
    ({"byzantine": "random", "f": 1}, "byzantine must be"),
    ({"byzantine": [1, 1], "f": 2}, "distinct"),
    ({"byzantine": [-1], "f": 1}, "byzantine must be"),
    ({"decoder": 1}, "decoder must be"),
    ({"num_clients": 0}, "num_clients must be"),
    ({"seed": -2}, "seed must be"),
])
def test_bad_input_names_the_parameter(kwargs, match):
    kwargs = {"aggregator": "mean", **kwargs}
    with pytest.raises(FedAuditError, match=match):
        RobustStrategy(kwargs.pop("aggregator"), **kwargs)


def test_misuse_of_the_strategy_still_raises(data):
    # malformed replies are Byzantine rows, not errors (tests/integrations/flower/test_malformed.py); misuse still raises
    g, models = data
    with pytest.raises(FedAuditError, match="before configure_train"):
        RobustStrategy("mean").aggregate_train(1, [_reply(models[0], 0, 5)])
    with pytest.raises(FedAuditError, match="need more than f"):
        _round(RobustStrategy("mean", f=2, attack="ipm"), g, models[:2])


def test_importing_fedaudit_does_not_import_flwr_and_a_missing_flwr_is_one_clear_error():
    code = ("import sys, fedaudit, fedaudit.integrations, fedaudit.experiments.kinds\n"
            "from fedaudit.experiments.kinds import claim_kind; claim_kind('flower').keys()\n"
            "assert 'flwr' not in sys.modules\n"
            "sys.modules['flwr'] = None\n"
            "from fedaudit.errors import FedAuditError\n"
            "try:\n    import fedaudit.integrations.flower\n"
            "except FedAuditError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "pip install 'fedaudit[flower]'" in out.stdout


# ----------------------------------------------------------------------------- Byzantine client mods


def _train_message(vec: np.ndarray, server_round: int = 2, **config) -> Message:
    config = ConfigRecord({"server-round": server_round, **config})
    return Message(RecordDict({"arrays": _record(vec), "config": config}),
                   metadata=_metadata(0, message_type=MessageType.TRAIN))


def _context(pid: int):
    from flwr.app import Context

    return Context(run_id=0, node_id=1, node_config={"partition-id": pid, "num-partitions": N}, state=RecordDict(),
                   run_config={})


def _trainer(trained: np.ndarray, seen: dict):
    def call_next(msg, ctx):
        seen["config"] = dict(msg.content["config"])
        return Message(RecordDict({"arrays": _record(trained),
                                   "metrics": MetricRecord({"num-examples": 1, "partition-id": 0})}), reply_to=msg)
    return call_next


def test_byzantine_mod_attacks_only_its_partitions_own_update(data):
    from fedaudit.attacks import SignFlip
    from fedaudit.integrations.flower import byzantine_mod

    g, models = data
    mod = byzantine_mod(SignFlip(scale=3.0), [4, 7], seed=9)
    seen = {}
    out = mod(_train_message(g), _context(4), _trainer(models[0], seen))
    np.testing.assert_allclose(_vec(out.content["arrays"]), g - 3.0 * (models[0] - g), rtol=0, atol=1e-14)
    honest = mod(_train_message(g), _context(5), _trainer(models[0], seen))
    np.testing.assert_array_equal(_vec(honest.content["arrays"]), models[0])
    nan = byzantine_mod("nonfinite", [4])(_train_message(g), _context(4), _trainer(models[0], seen))
    assert np.isnan(_vec(nan.content["arrays"])).all()


def test_byzantine_mod_label_flip_flags_the_train_config_and_when_gates_it(data):
    from fedaudit.integrations.flower import byzantine_mod
    from fedaudit.integrations.flower.byzantine import LABEL_FLIP_KEY
    from fedaudit.integrations.flower.strategy import STRATEGY_KEY

    g, models = data
    seen = {}
    byzantine_mod("labelflip", [2])(_train_message(g), _context(2), _trainer(models[0], seen))
    assert seen["config"][LABEL_FLIP_KEY] is True
    gated = byzantine_mod("labelflip", [2], when="run-a")
    gated(_train_message(g, **{STRATEGY_KEY: "run-b"}), _context(2), _trainer(models[0], seen))
    assert LABEL_FLIP_KEY not in seen["config"]
    gated(_train_message(g, **{STRATEGY_KEY: "run-a"}), _context(2), _trainer(models[0], seen))
    assert seen["config"][LABEL_FLIP_KEY] is True


@pytest.mark.parametrize("args, match", [
    (("nosuch", [1]), "unknown attack"),
    ((3, [1]), "attack must be"),
    (("signflip", 5), "partitions must be"),
    (("signflip", [-1]), "partitions must be"),
])
def test_byzantine_mod_bad_input(args, match):
    from fedaudit.integrations.flower import byzantine_mod

    with pytest.raises(FedAuditError, match=match):
        byzantine_mod(*args)


# ----------------------------------------------------------------------------- legacy API


def _fit_res(vec: np.ndarray, pid: int):
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters

    return None, FitRes(status=Status(Code.OK, ""), parameters=ndarrays_to_parameters(_record(vec).to_numpy_ndarrays()),
                        num_examples=7, metrics={"partition-id": pid})


def test_legacy_strategy_aggregates_exactly_like_the_message_api_one(data):
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays

    from fedaudit.integrations.flower.legacy import LegacyRobustStrategy

    g, models = data
    legacy = LegacyRobustStrategy("nnm+cwtm", f=2, attack=ALIE(z=30), seed=4, num_clients=N)
    assert legacy.min_available_clients == N and legacy.min_fit_clients == N
    legacy._global = flatten(_record(g))
    params, metrics = legacy.aggregate_fit(
        3, [_fit_res(models[p], p) for p in (9, 1, 5, 0, 2, 4, 3, 8, 7, 6)], [RuntimeError("boom")])
    got = np.concatenate([a.ravel() for a in parameters_to_ndarrays(params)])
    ours, _ = _round(RobustStrategy("nnm+cwtm", f=2, attack=ALIE(z=30), seed=4), g, models, server_round=3)
    np.testing.assert_array_equal(got, _vec(ours))
    d = legacy.diagnostics[-1]
    assert d["errors"] == 1 and d["error_reasons"] == ["RuntimeError('boom')"] and metrics["errors"] == 1
    assert d["byzantine"] == choose_byzantine(N, 2, 4, 3).tolist()
    assert legacy.aggregate_fit(4, [], [RuntimeError("x")]) == (None, {})
    # malformed fit results are Byzantine rows here too: no partition id, a duplicated one, other shapes
    no_pid, other_shape = _fit_res(models[0], 0), _fit_res(models[1], 1)
    no_pid[1].metrics.clear()
    other_shape[1].parameters = ndarrays_to_parameters([models[1][:5]])
    results = [no_pid, other_shape, _fit_res(models[2], 3)] + [_fit_res(models[p], p) for p in range(2, N)]
    legacy = LegacyRobustStrategy("cwtm", f=4)
    legacy._global = flatten(_record(g))
    params, metrics = legacy.aggregate_fit(5, results, [])
    d = legacy.diagnostics[-1]
    assert d["malformed"] == 4 and metrics["malformed"] == 4 and d["partitions"] == [2, 4, 5, 6, 7, 8, 9]
    reasons = " | ".join(m["reason"] for m in d["malformed_replies"])
    assert "no 'partition-id'" in reasons and "do not match the global model's" in reasons
    assert "2 replies claim partition-id=3" in reasons
    keep = [2, 4, 5, 6, 7, 8, 9]
    expected = make_aggregator("cwtm", 0)((models - g)[keep])
    got = np.concatenate([a.ravel() for a in parameters_to_ndarrays(params)])
    np.testing.assert_array_equal(got, g + expected)
