"""The ServerApp: RobustStrategy for ``num-server-rounds`` rounds, then one JSON file at ``out``.

Under ``flwr run`` this function runs in a process the SuperLink starts, not in the user's shell,
so nothing it holds (``strategy.diagnostics``, the LDP ledger, Flower's ``Result``) reaches the
user unless it is written somewhere: it is written to the run-config path ``out`` (relative paths
from the SuperLink's working directory) as strict JSON, and the path is logged.
"""

from __future__ import annotations

import os

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from fedaudit.accounting import Ledger
from fedaudit.integrations.flower import RobustStrategy, flatten, ldp_decoder
from fedaudit.json import dumps

from fedaudit_flower_app.task import data, initial_arrays, mechanism, model

app = ServerApp()


def _records(by_round) -> dict[str, dict]:
    return {str(r): dict(rec) for r, rec in by_round.items()}


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    n, seed = int(cfg["num-clients"]), int(cfg["seed"])
    mech = mechanism(float(cfg["ldp-epsilon"]))
    ledger = Ledger() if mech is not None else None
    decoder = None
    if mech is not None:
        decoder = ldp_decoder(mech, ledger=ledger, budget=float(cfg["ldp-budget"]) or None)
    strategy = RobustStrategy(str(cfg["aggregator"]), f=int(cfg["f"]), seed=seed, decoder=decoder, num_clients=n,
                              fraction_train=1.0, fraction_evaluate=0.0)
    _, (A_test, y_test) = data(seed, n)
    m = model()

    def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        return MetricRecord({"accuracy": m.accuracy(flatten(arrays)[0], A_test, y_test)})

    result = strategy.start(grid=grid, initial_arrays=ArrayRecord({k: Array(v) for k, v in initial_arrays().items()}),
                            num_rounds=int(cfg["num-server-rounds"]), train_config=ConfigRecord({}),
                            evaluate_fn=central)
    out = os.path.abspath(str(cfg["out"]))
    report = {"run_config": dict(cfg), "diagnostics": strategy.diagnostics,
              "train_metrics": _records(result.train_metrics_clientapp),
              "evaluate_metrics": _records(result.evaluate_metrics_serverapp),
              "final_model": flatten(result.arrays)[0] if result.arrays is not None else None,
              "ledger": None if ledger is None else ledger.to_dict()}
    tmp = out + ".part"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(dumps(report))
    os.replace(tmp, out)  # whole or absent: a reader polling for the file never sees half of it
    log(20, "fedaudit: diagnostics, metrics and ledger written to %s", out)
