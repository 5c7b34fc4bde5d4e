"""The ClientApp: ``local-steps`` gradient steps on this SuperNode's partition.

The partition comes from the SuperNode's ``--node-config "partition-id=<p> num-partitions=<N>"``;
the reply carries ``num-examples``, ``partition-id`` and ``train-loss``. With ``ldp-epsilon`` > 0 the
update leaves the node only as a Laplace report (:func:`fedaudit.integrations.flower.ldp_mod`),
refused once ``ldp-budget`` is spent.
"""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedaudit.integrations.flower import flatten, ldp_mod, unflatten

from fedaudit_flower_app.task import data, mechanism, model

app = ClientApp()


def _ldp(msg: Message, context: Context, call_next):
    """ldp_mod built from the run config (a mod sees the run config only through the Context)."""
    cfg = context.run_config
    mech = mechanism(float(cfg["ldp-epsilon"]))
    if mech is None:
        return call_next(msg, context)
    budget = float(cfg["ldp-budget"]) or None
    return ldp_mod(mech, budget=budget, seed=int(cfg["seed"]))(msg, context, call_next)


@app.train(mods=[_ldp])
def train(msg: Message, context: Context) -> Message:
    pid, n = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    cfg = context.run_config
    parts, _ = data(int(cfg["seed"]), n)
    A, y = parts[pid]
    m = model()
    x, layout = flatten(msg.content["arrays"])
    for _ in range(int(cfg["local-steps"])):
        x = x - float(cfg["lr"]) * m.grad(x, A, y)
    metrics = MetricRecord({"num-examples": int(y.size), "partition-id": pid, "train-loss": float(m.loss(x, A, y))})
    return Message(RecordDict({"arrays": unflatten(x, layout), "metrics": metrics}), reply_to=msg)
