"""``flwr run`` for real: a SuperLink and two SuperNodes on 127.0.0.1 run examples/flower_app (issue #22).

Flower 1.42's documented path. The SuperLink runs with ``--disable-runtime-dependency-installation``
(by default it would ``uv sync`` the app's dependencies and fail to resolve fedaudit: exit 608),
each SuperNode gets ``--node-config "partition-id=p num-partitions=2"``, and the ServerApp — a
process the SuperLink starts, not this one — hands its diagnostics and metrics back through the JSON
file named by the run config ``out``. Slow: five Flower processes plus one ClientApp process per
node and round (about 30 s on two idle cores).
"""

from __future__ import annotations

import importlib.util

import pytest
from tests.helpers import REPO

pytest.importorskip("flwr")
pytest.importorskip("psutil")

RUN_LOCAL = REPO / "examples" / "flower_app" / "run_local.py"


def _run_local():
    spec = importlib.util.spec_from_file_location("fedaudit_flower_run_local", RUN_LOCAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_flwr_run_on_a_local_superlink_and_two_supernodes_writes_the_servers_report(tmp_path):
    import psutil

    before = {p.pid for p in psutil.process_iter()}
    report = _run_local().deploy(clients=2, rounds=2, out=tmp_path / "run.json", workdir=tmp_path, timeout=240,
                                 run_config={"aggregator": "cwmed"})
    # every round ran on both partitions, in the ServerApp process, and its diagnostics came back
    assert [d["round"] for d in report["diagnostics"]] == [1, 2]
    assert all(d["partitions"] == [0, 1] and d["malformed"] == 0 and d["errors"] == 0 for d in report["diagnostics"])
    # the clients' own metric next to the robust diagnostics in Flower's aggregated MetricRecord
    for metrics in report["train_metrics"].values():
        assert {"train-loss", "clients", "malformed", "refusals", "nonfinite-rows"} <= set(metrics)
    assert report["evaluate_metrics"]["2"]["accuracy"] > 0.9
    assert len(report["final_model"]) == 650
    # nothing left running: every Flower process the deployment started was stopped
    leftover = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before
                and any("flwr" in part or "flower-" in part for part in (p.info["cmdline"] or []))]
    assert not leftover, [p.info for p in leftover]
