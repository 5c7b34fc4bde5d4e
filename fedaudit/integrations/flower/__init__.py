"""fedaudit inside Flower (flwr ≥ 1.42, Message API): robust strategies, Byzantine clients and simulations.

Needs the extra ``pip install 'fedaudit[flower]'``; importing this package without flwr raises one
:class:`~fedaudit.errors.FedAuditError` saying so (``import fedaudit`` itself never imports flwr).

- :class:`RobustStrategy` — a ``FedAvg`` that aggregates update rows with any fedaudit rule, with
  attack-in-the-loop and per-round diagnostics; :func:`choose_byzantine` — the seeded choice;
  :class:`LegacyRobustStrategy` — the same for the legacy ``flwr.server.strategy`` API;
  :class:`RobustAggregation` — the round logic both share.
- :func:`byzantine_mod` — non-omniscient Byzantine clients (label flip, attacks on their own update) as client mods.
- :func:`run_flower` — a real ``flwr.simulation.run_simulation`` (Ray) of several :class:`StrategySpec` on one
  grid of digits clients, returning a :class:`FlowerRun` of :class:`StrategyOutcome`.
- :func:`ldp_mod` / :func:`ldp_decoder` — client-side local DP with any fedaudit mechanism (fresh OS entropy
  per report), decoded at the server, with a per-client budget (:mod:`.ldp`) kept across runs in a
  :class:`LedgerFile` on the node.
- :func:`local_dp_mod_epsilon` / :func:`audit_local_dp_mod` — the white-box and black-box audit of Flower's
  own ``LocalDpMod`` (:mod:`.local_dp_audit`).
- :func:`flatten` / :func:`unflatten` / :class:`Layout` — ``ArrayRecord`` ⇄ flat float64 row.
"""

from fedaudit.integrations.flower._flwr import require_flwr

require_flwr()

from fedaudit.integrations.flower.records import Layout, flatten, unflatten  # noqa: E402
from fedaudit.integrations.flower.strategy import (  # noqa: E402
    PARTITION_KEY,
    STRATEGY_KEY,
    RobustAggregation,
    RobustStrategy,
    choose_byzantine,
)
from fedaudit.integrations.flower.legacy import LegacyRobustStrategy  # noqa: E402
from fedaudit.integrations.flower.byzantine import byzantine_mod  # noqa: E402
from fedaudit.integrations.flower.simulation import (  # noqa: E402
    FlowerRun,
    StrategyOutcome,
    StrategySpec,
    run_flower,
)

from fedaudit.integrations.flower.ldp import is_refusal, ldp_decoder, ldp_mod  # noqa: E402
from fedaudit.integrations.flower.ledger_file import LedgerFile  # noqa: E402
from fedaudit.integrations.flower.local_dp_audit import audit_local_dp_mod, local_dp_mod_epsilon  # noqa: E402

__all__ = ["require_flwr", "Layout", "flatten", "unflatten", "RobustAggregation", "RobustStrategy",
           "LegacyRobustStrategy", "choose_byzantine", "PARTITION_KEY", "STRATEGY_KEY", "byzantine_mod",
           "StrategySpec", "StrategyOutcome", "FlowerRun", "run_flower", "ldp_mod", "ldp_decoder", "is_refusal", "LedgerFile",
           "audit_local_dp_mod", "local_dp_mod_epsilon"]
