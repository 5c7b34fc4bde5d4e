"""fedaudit inside Flower (flwr ≥ 1.42, Message API): robust strategies, Byzantine clients and simulations.

Needs the extra ``pip install 'fedaudit[flower]'``; importing this package without flwr raises one
:class:`~fedaudit.errors.FedAuditError` saying so (``import fedaudit`` itself never imports flwr).

- :class:`RobustStrategy` — a ``FedAvg`` that aggregates update rows with any fedaudit rule, with
  attack-in-the-loop and per-round diagnostics; :func:`choose_byzantine` — the seeded choice.
- :func:`byzantine_mod` — non-omniscient Byzantine clients (label flip, attacks on their own update) as client mods.
- :func:`run_flower` — a real ``flwr.simulation.run_simulation`` (Ray) of several :class:`StrategySpec` on one
  grid of digits clients, returning a :class:`FlowerRun` of :class:`StrategyOutcome`.
- :func:`flatten` / :func:`unflatten` / :class:`Layout` — ``ArrayRecord`` ⇄ flat float64 row.
"""

from fedaudit.integrations.flower._flwr import require_flwr

require_flwr()

from fedaudit.integrations.flower.records import Layout, flatten, unflatten  # noqa: E402
from fedaudit.integrations.flower.strategy import PARTITION_KEY, RobustStrategy, choose_byzantine  # noqa: E402
from fedaudit.integrations.flower.byzantine import byzantine_mod  # noqa: E402
from fedaudit.integrations.flower.simulation import (  # noqa: E402
    FlowerRun,
    StrategyOutcome,
    StrategySpec,
    run_flower,
)

__all__ = ["require_flwr", "Layout", "flatten", "unflatten", "RobustStrategy", "choose_byzantine", "PARTITION_KEY",
           "byzantine_mod", "StrategySpec", "StrategyOutcome", "FlowerRun", "run_flower"]
