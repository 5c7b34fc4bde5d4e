"""The robust strategy for Flower's legacy API (``flwr.server.strategy``, ``aggregate_fit``).

Flower 1.42 still runs ``ServerApp(server_fn=...)`` with a ``flwr.server.strategy.Strategy`` and
``NumPyClient`` clients. :class:`LegacyRobustStrategy` is that API's ``FedAvg`` with the
aggregation of :class:`~.strategy.RobustAggregation`: the fit results are sorted by the
``"partition-id"`` each client returns in its fit metrics, turned into update rows
u_i = x_i − x_global (the parameter list flattened in order), attacked (attack-in-the-loop, same
threat model as :class:`~.strategy.RobustStrategy`), aggregated by the fedaudit rule F, and the new
global model is x_global + F(U). Failures are counted in the diagnostics (with their reasons) and the
valid results are aggregated. There is no decoder hook here: LDP mods use the Message API.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.records import Layout, as_held, flatten, unflatten
from fedaudit.integrations.flower.strategy import PARTITION_KEY, RobustAggregation, partition_id, wait_for_clients

require_flwr()

from flwr.app import ArrayRecord  # noqa: E402
from flwr.common import FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server.client_manager import ClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg as LegacyFedAvg  # noqa: E402

__all__ = ["LegacyRobustStrategy"]


def _flatten_list(ndarrays: list[np.ndarray]) -> tuple[np.ndarray, Layout]:
    return flatten(ArrayRecord(ndarrays))


class LegacyRobustStrategy(RobustAggregation, LegacyFedAvg):
    """Legacy ``FedAvg`` (``configure_fit`` / ``aggregate_fit``) aggregating update rows with a fedaudit rule.

    ``aggregator``, ``f``, ``attack``, ``byzantine``, ``seed`` and ``diagnostics`` are those of
    :class:`~.strategy.RobustAggregation`; ``num_clients`` sets the defaults of
    ``min_available_clients`` and ``min_fit_clients``; ``**fedavg_kwargs`` go to
    ``flwr.server.strategy.FedAvg``. Clients must return ``{"partition-id": p}`` in their fit metrics.
    """

    def __init__(self, aggregator: str | Callable[[Any], Any] = "mean", *, f: int = 0, attack: Any = None,
                 byzantine: None | str | Sequence[int] = None, seed: int = 0, num_clients: int | None = None,
                 **fedavg_kwargs: Any):
        RobustAggregation.__init__(self, aggregator, f=f, attack=attack, byzantine=byzantine, seed=seed)
        self.num_clients = wait_for_clients(num_clients, fedavg_kwargs, ("min_available_clients", "min_fit_clients"))
        LegacyFedAvg.__init__(self, **fedavg_kwargs)
        self._global: tuple[np.ndarray, Layout] | None = None

    def configure_fit(self, server_round: int, parameters: Parameters,
                      client_manager: ClientManager) -> list[tuple[ClientProxy, Any]]:
        """FedAvg's configuration; the round's global parameters are kept to form the updates."""
        self._global = _flatten_list(parameters_to_ndarrays(parameters))
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round: int, results: list[tuple[ClientProxy, FitRes]],
                      failures: list[tuple[ClientProxy, FitRes] | BaseException]
                      ) -> tuple[Parameters | None, dict[str, Scalar]]:
        """The robust round of :class:`~.strategy.RobustAggregation` on the fit results."""
        reasons = [repr(f) if isinstance(f, BaseException) else f"status {f[1].status.code.name}" for f in failures]
        if not results:
            self.record_empty_round(server_round, reasons)
            return None, {}
        if self._global is None:
            raise FedAuditError("aggregate_fit was called before configure_fit: the round's global parameters "
                                "are unknown")
        g, layout = self._global
        fits = [res for _, res in results]
        pids = np.array([self._partition_id(res) for res in fits], dtype=np.int64)
        order = self.sort_order(pids, server_round)
        pids, fits = pids[order], [fits[i] for i in order]
        rows = np.empty((len(fits), layout.dim))
        for i, res in enumerate(fits):
            x, lay = _flatten_list(parameters_to_ndarrays(res.parameters))
            if lay.shapes != layout.shapes:
                raise FedAuditError(f"round {server_round}: partition {pids[i]} returned parameters "
                                    f"{lay.summary()}, which do not match the global model's {layout.summary()}")
            np.subtract(x, g, out=rows[i])
        new, metrics = self.aggregate_rows(server_round, g, rows, pids, reasons, held=lambda x: as_held(x, layout))
        if new is None:  # the rule broke down: the global model is kept
            return None, metrics
        return ndarrays_to_parameters(unflatten(new, layout).to_numpy_ndarrays()), metrics

    def _partition_id(self, res: FitRes) -> int:
        if PARTITION_KEY not in res.metrics:
            raise FedAuditError(f"a fit result has no {PARTITION_KEY!r} in its metrics (keys: "
                                f"{sorted(res.metrics)}); LegacyRobustStrategy orders and attacks clients by the "
                                "partition id they report")
        return partition_id(res.metrics[PARTITION_KEY], "a fit result")
