"""A malformed reply is a Byzantine row of RobustStrategy, never the end of the run (issue #22).

Unit level: ``aggregate_train`` on real Flower ``Message``/``RecordDict`` objects, one test per kind
of malformed reply (wrong shape, missing/extra array, extra/missing metric key, duplicate, negative,
NaN or fractional partition id, unreadable bytes, …); each used to raise (FedAuditError, Flower's
``InconsistentMessageReplies`` or a ValueError) in round 1. The float32 model: a float64 reply is
cast to float32 before the rule sees it, so 1e300 is an ``inf`` row the rule drops, and the new
model is checked as float32 holds it. The end-to-end run in a real simulation is in
tests/integrations/flower/test_simulation.py.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Error, Message, MessageType, Metadata, MetricRecord, RecordDict

from fedaudit.defenses import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower import RobustStrategy, flatten
from fedaudit.integrations.flower.records import Layout, as_held

N, SHAPES = 7, {"W": (2, 3), "b": (2,)}
D = 8
BAD = 5  # the partition whose reply is malformed


def _metadata(node: int) -> Metadata:
    return Metadata(run_id=0, message_id=f"m{node}", src_node_id=node, dst_node_id=0, reply_to_message_id="x",
                    group_id="", created_at=time.time(), ttl=3600.0, message_type=MessageType.TRAIN)


def _arrays(vec: np.ndarray, dtype=np.float32) -> dict:
    return {"W": Array(np.asarray(vec[:6], dtype=dtype).reshape(2, 3)), "b": Array(np.asarray(vec[6:], dtype=dtype))}


def _message(arrays: dict, metrics: dict, node: int, *, records=None) -> Message:
    content = records if records is not None else {"arrays": ArrayRecord(arrays), "metrics": MetricRecord(metrics)}
    return Message(RecordDict(content), metadata=_metadata(node))


def _metrics(pid, loss=0.5, examples=10) -> dict:
    return {"num-examples": examples, "partition-id": pid, "train-loss": loss}


def _honest(models: np.ndarray, skip=()) -> list[Message]:
    return [_message(_arrays(models[p]), _metrics(p, loss=0.1 * p), node=100 + p) for p in range(N) if p not in skip]


@pytest.fixture
def setup():
    rng = np.random.default_rng(7)
    g = rng.normal(size=D).astype(np.float32)
    models = (g + rng.normal(scale=0.1, size=(N, D))).astype(np.float32).astype(np.float64)
    return g.astype(np.float64), models


def _strategy(g: np.ndarray, spec="cwtm", f=2) -> RobustStrategy:
    s = RobustStrategy(spec, f=f)
    s._global = flatten(ArrayRecord(_arrays(g)))  # what configure_train stores
    return s


def _bad(kind: str, models: np.ndarray) -> Message:
    x, node = models[BAD], 100 + BAD
    ok = _metrics(BAD)
    if kind == "wrong-shape":
        return _message({"W": Array(x[:6].astype(np.float32).reshape(3, 2)), "b": _arrays(x)["b"]}, ok, node)
    if kind == "missing-array":
        return _message({"W": _arrays(x)["W"]}, ok, node)
    if kind == "extra-array":
        return _message({**_arrays(x), "c": Array(np.zeros(1, dtype=np.float32))}, ok, node)
    if kind == "renamed-array":
        return _message({"W": _arrays(x)["W"], "bias": _arrays(x)["b"]}, ok, node)
    if kind == "complex-array":
        return _message({"W": Array(x[:6].reshape(2, 3).astype(np.complex64)), "b": _arrays(x)["b"]}, ok, node)
    if kind == "unreadable-bytes":
        junk = Array(dtype="float32", shape=(2,), stype="numpy.ndarray", data=b"not an npy")
        return _message({"W": _arrays(x)["W"], "b": junk}, ok, node)
    if kind == "extra-metric":
        return _message(_arrays(x), {**ok, "extra": 1.0}, node)
    if kind == "missing-metric":
        return _message(_arrays(x), {k: v for k, v in ok.items() if k != "train-loss"}, node)
    if kind == "list-metric":
        return _message(_arrays(x), {**ok, "train-loss": [0.5, 0.5]}, node)
    if kind == "nan-metric":
        return _message(_arrays(x), {**ok, "train-loss": float("nan")}, node)
    if kind == "negative-examples":
        return _message(_arrays(x), {**ok, "num-examples": -3}, node)
    if kind in ("negative-pid", "nan-pid", "fractional-pid", "missing-pid"):
        value = {"negative-pid": -1, "nan-pid": float("nan"), "fractional-pid": 2.5, "missing-pid": None}[kind]
        metrics = {**ok, "partition-id": value} if value is not None else {k: v for k, v in ok.items()
                                                                           if k != "partition-id"}
        metrics.setdefault("train-loss", 0.5)
        if value is None:
            metrics["other"] = 0.0  # same number of keys, other names
        return _message(_arrays(x), metrics, node)
    if kind == "two-metric-records":
        return _message({}, {}, node, records={"arrays": ArrayRecord(_arrays(x)), "metrics": MetricRecord(ok),
                                               "more": MetricRecord({"a": 1.0})})
    if kind == "no-array-record":
        return _message({}, {}, node, records={"metrics": MetricRecord(ok)})
    raise AssertionError(kind)


KINDS = ["wrong-shape", "missing-array", "extra-array", "renamed-array", "complex-array", "unreadable-bytes",
         "extra-metric", "missing-metric", "list-metric", "nan-metric", "negative-examples", "negative-pid",
         "nan-pid", "fractional-pid", "missing-pid", "two-metric-records", "no-array-record"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_malformed_reply_is_dropped_counted_and_named_and_the_round_goes_on(kind, setup):
    g, models = setup
    strategy = _strategy(g)
    replies = _honest(models, skip=[BAD]) + [_bad(kind, models)]
    arrays, metrics = strategy.aggregate_train(1, replies[::-1])
    d = strategy.diagnostics[-1]
    assert d["malformed"] == 1 and metrics["malformed"] == 1 and d["clients"] == N - 1
    (m,) = d["malformed_replies"]
    assert m["node"] == 100 + BAD and isinstance(m["reason"], str) and m["reason"]
    # the malformed reply is a Byzantine row: the rule drops it and runs with f - 1 on the rest
    valid = [p for p in range(N) if p != BAD]
    expected = make_aggregator("cwtm", 1)(models[valid] - g)
    np.testing.assert_array_equal(flatten(arrays)[0], as_held(g + expected, strategy._global[1]))
    assert flatten(arrays)[1].dtypes == ("float32", "float32")
    # the clients' own metrics stay next to the diagnostics (Flower's weighted mean by num-examples)
    assert metrics["train-loss"] == pytest.approx(np.mean([0.1 * p for p in valid]))
    assert "partition-id" not in metrics and "num-examples" not in metrics


@pytest.mark.parametrize("kind, reason", [
    ("wrong-shape", r"array 'W' is float32\[3, 2\], the global model's is float32\[2, 3\]"),
    ("missing-array", r"arrays \['W'\] are not the global model's \['W', 'b'\]"),
    ("extra-metric", r"extra \['extra'\], missing \[\]"),
    ("missing-metric", r"extra \[\], missing \['train-loss'\]"),
    ("negative-pid", "'partition-id' must be an integer >= 0, got -1"),
    ("nan-pid", "metric 'partition-id' is not finite: nan"),
    ("fractional-pid", "'partition-id' must be an integer >= 0, got 2.5"),
    ("unreadable-bytes", "array 'b' cannot be read"),
    ("nan-metric", "metric 'train-loss' is not finite"),
])
def test_the_reason_names_what_is_wrong(kind, reason, setup):
    g, models = setup
    strategy = _strategy(g)
    strategy.aggregate_train(1, _honest(models, skip=[BAD]) + [_bad(kind, models)])
    assert re.search(reason, strategy.diagnostics[-1]["malformed_replies"][0]["reason"])


def test_a_duplicated_partition_id_drops_every_claimant(setup):
    g, models = setup
    strategy = _strategy(g)
    impostor = _message(_arrays(models[BAD] + 5.0), _metrics(2), node=999)  # claims partition 2's id
    arrays, metrics = strategy.aggregate_train(1, _honest(models) + [impostor])
    d = strategy.diagnostics[-1]
    assert metrics["malformed"] == 2 and sorted(m["node"] for m in d["malformed_replies"]) == [102, 999]
    assert d["partitions"] == [0, 1, 3, 4, 5, 6]
    assert all("2 replies claim partition-id=2" in m["reason"] for m in d["malformed_replies"])
    keep = [0, 1, 3, 4, 5, 6]
    np.testing.assert_array_equal(flatten(arrays)[0], as_held(g + make_aggregator("cwtm", 0)(models[keep] - g),
                                                              strategy._global[1]))


def test_float64_replies_are_cast_to_the_float32_model_and_1e300_is_a_nonfinite_row(setup):
    g, models = setup
    strategy = _strategy(g, "cwtm", f=1)
    replies = _honest(models, skip=[BAD, 0])
    replies.append(_message(_arrays(models[0] + 1e-9, dtype=np.float64), _metrics(0), node=100))  # rounds to f32
    replies.append(_message(_arrays(np.full(D, 1e300), dtype=np.float64), _metrics(BAD), node=100 + BAD))
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert metrics["malformed"] == 0 and metrics["nonfinite-rows"] == 1
    rows = models - g
    rows[0] = (models[0] + 1e-9).astype(np.float32).astype(np.float64) - g  # what the float32 model holds
    expected = make_aggregator("cwtm", 0)(np.delete(rows, BAD, axis=0))
    out = flatten(arrays)[0]
    np.testing.assert_array_equal(out, as_held(g + expected, strategy._global[1]))
    assert np.isfinite(out).all()


def test_an_aggregate_that_overflows_the_model_dtype_is_an_error_not_an_inf_model(setup):
    g, models = setup
    strategy = _strategy(g, "mean", f=0)
    replies = _honest(models, skip=[BAD]) + [_message(_arrays(np.full(D, 1e300), dtype=np.float64),
                                                      _metrics(BAD), node=100 + BAD)]
    # float64 1e300 is inf in float32: a non-finite row the mean drops (1 of 7 <= its tolerance 3)
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert np.isfinite(flatten(arrays)[0]).all() and metrics["nonfinite-rows"] == 1
    np.testing.assert_array_equal(flatten(arrays)[0], as_held(g + (np.delete(models, BAD, 0) - g).mean(axis=0),
                                                              strategy._global[1]))
    # every row finite in float32; a rule that extrapolates (2 × mean) lands at 3e38 + 0.8e38: finite in
    # float64, inf as float32 holds it -> an error, never a committed inf model
    strategy = RobustStrategy(lambda X: 2.0 * X.mean(axis=0))
    strategy._global = flatten(ArrayRecord(_arrays(np.full(D, 3e38))))
    big = [_message(_arrays(np.full(D, 3.4e38)), _metrics(p), node=100 + p) for p in range(N)]
    with pytest.raises(FedAuditError, match="not finite as the model holds it"):
        strategy.aggregate_train(2, big)


def test_more_malformed_replies_than_the_rule_tolerates_skip_the_round_and_keep_the_model(setup):
    g, models = setup
    strategy = _strategy(g, "cwtm", f=1)
    replies = _honest(models, skip=[4, BAD]) + [_bad("negative-pid", models), _bad("wrong-shape", models)]
    arrays, metrics = strategy.aggregate_train(1, replies)
    assert arrays is None and metrics["breakdown"] == 1 and metrics["malformed"] == 2
    assert "2 of 7 input rows contain NaN" in strategy.diagnostics[-1]["breakdown"]


def test_a_round_of_only_malformed_replies_keeps_the_model_and_reports_them(setup):
    g, models = setup
    strategy = _strategy(g)
    arrays, metrics = strategy.aggregate_train(1, [_bad("wrong-shape", models)])
    assert arrays is None and metrics["malformed"] == 1 and metrics["clients"] == 0


def test_as_held_casts_each_slice_to_its_dtype():
    layout = Layout(keys=("a", "i"), shapes=((2,), (2,)), dtypes=("float32", "int8"))
    out = as_held(np.array([1e300, 0.1, 3.0, 7.0]), layout)
    assert out[0] == np.inf and out[1] == np.float64(np.float32(0.1)) and out[2:].tolist() == [3.0, 7.0]
    assert np.isnan(as_held(np.array([0.0, 0.0, 300.0, 1.0]), layout)[2:]).all()  # outside int8: not wrapped


def test_a_report_past_the_server_budget_is_excluded_and_counted_with_bits_and_epsilon_in_the_metrics():
    from tests.integrations.flower.test_ldp import OLD, Client, _context, _train

    from fedaudit.accounting import Ledger
    from fedaudit.integrations.flower.ldp import REFUSED_CODE, ldp_decoder, ldp_mod
    from fedaudit.mechanisms import make_mechanism

    mech = make_mechanism("laplace", 15, 1.0)
    ledger = Ledger()
    for r in (1, 2, 3):
        ledger.record(2, mech, round=r)  # partition 2 has spent its budget of 3 before this run
    decoder = ldp_decoder(mech, ledger=ledger, budget=3.0)
    strategy = RobustStrategy("mean", decoder=decoder)
    strategy._global = flatten(ArrayRecord({k: Array(v) for k, v in OLD.items()}))
    mod = ldp_mod(mech)  # no budget on the clients: partition 2 does not refuse
    replies = [mod(_train(4), _context(p), Client()) for p in range(4)]
    replies.append(Message(Error(code=REFUSED_CODE, reason="budget spent"), metadata=_metadata(500)))
    arrays, metrics = strategy.aggregate_train(4, replies)
    assert arrays is not None and metrics["clients"] == 3 and metrics["malformed"] == 1
    assert "past its budget" in strategy.diagnostics[-1]["malformed_replies"][0]["reason"]
    assert metrics["refusals"] == 1 and metrics["errors"] == 1
    assert metrics["ldp-over-budget"] == 1 and metrics["ldp-reports"] == 3
    assert metrics["ldp-bits"] == 3 * mech.bits_per_report
    assert metrics["ldp-epsilon-spent"] == 3.0 and ledger.spent(2).epsilon == 3.0  # excluded, not charged
    assert ledger.spent(0).epsilon == 1.0
    assert strategy.diagnostics[-1]["decoder"]["ldp-over-budget"] == 1


def test_the_start_up_summary_says_the_model_is_not_weighted_by_num_examples():
    import logging

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    seen = Lines()
    logging.getLogger("flwr").addHandler(seen)
    try:
        RobustStrategy("nnm+cwtm", f=2).summary()
    finally:
        logging.getLogger("flwr").removeHandler(seen)
    text = "\n".join(seen.lines)
    assert "fedaudit rule 'nnm+cwtm' (f=2) over update rows, unweighted: 'num-examples' is not used" in text
    assert "Weighted by" not in text and "Client metrics weighted by: 'num-examples'" in text
