"""The robust strategy for Flower's legacy API (``flwr.server.strategy``, ``aggregate_fit``).

Flower 1.42 still runs ``ServerApp(server_fn=...)`` with a ``flwr.server.strategy.Strategy`` and
``NumPyClient`` clients. :class:`LegacyRobustStrategy` is that API's ``FedAvg`` with the
aggregation of :class:`~.strategy.RobustAggregation`: the fit results are sorted by the
``"partition-id"`` each client returns in its fit metrics, turned into update rows
u_i = x_i − x_global (the parameter list flattened in order), attacked (attack-in-the-loop, same
threat model as :class:`~.strategy.RobustStrategy`), aggregated by the fedaudit rule F, and the new
global model is x_global + F(U) as the model holds it. Failures are counted in the diagnostics (with
their reasons) and the valid results are aggregated; a malformed fit result (no integer
``partition-id`` ≥ 0, a duplicated one, parameters of other shapes or unreadable) is a Byzantine
row, dropped and named in the diagnostics' ``malformed_replies``, as in the Message API. There is no
decoder hook here: LDP mods use the Message API.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.records import Layout, as_held, flatten, unflatten
from fedaudit.integrations.flower.strategy import (PARTITION_KEY, RobustAggregation, drop_duplicates, log_malformed,
                                                   partition_id, wait_for_clients)

require_flwr()

from flwr.app import ArrayRecord  # noqa: E402
from flwr.common import FitRes, Parameters, Scalar, ndarrays_to_parameters, parameters_to_ndarrays  # noqa: E402
from flwr.server.client_manager import ClientManager  # noqa: E402
from flwr.server.client_proxy import ClientProxy  # noqa: E402
from flwr.server.strategy import FedAvg as LegacyFedAvg  # noqa: E402

__all__ = ["LegacyRobustStrategy"]


def _flatten_list(ndarrays: list[np.ndarray]) -> tuple[np.ndarray, Layout]:
    return flatten(ArrayRecord(ndarrays))


def _node(proxy: Any) -> str | None:
    """The client proxy's id (the legacy API's name for a node), None when there is no proxy."""
    cid = getattr(proxy, "cid", None)
    return None if cid is None else str(cid)


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
        kept, malformed = [], []
        for proxy, res in results:
            outcome = self._screen(res, layout)
            if isinstance(outcome, str):
                pid = res.metrics.get(PARTITION_KEY) if isinstance(res.metrics, dict) else None
                malformed.append({"node": _node(proxy), "partition": pid if isinstance(pid, int) else None,
                                  "reason": outcome})
            else:
                kept.append((proxy, *outcome))
        kept, duplicates = drop_duplicates(kept, _node)
        malformed += duplicates
        log_malformed(server_round, malformed)
        if not kept:
            self.record_empty_round(server_round, reasons, malformed=malformed)
            return None, {}
        pids = np.array([pid for _, pid, _ in kept], dtype=np.int64)
        rows = np.stack([x for _, _, x in kept]) - g
        new, metrics = self.aggregate_rows(server_round, g, rows, pids, reasons, malformed=malformed,
                                           held=lambda x: as_held(x, layout))
        if new is None:  # the rule broke down: the global model is kept
            return None, metrics
        return ndarrays_to_parameters(unflatten(new, layout).to_numpy_ndarrays()), metrics

    def _screen(self, res: FitRes, layout: Layout) -> str | tuple[int, np.ndarray]:
        """(partition id, the returned parameters as the model holds them) or why the fit result is
        malformed: no integer ``partition-id`` ≥ 0 in its metrics, or parameters that cannot be read
        or are not the global model's shapes of a real dtype (a Byzantine row, as in the Message API)."""
        if PARTITION_KEY not in res.metrics:
            return f"no {PARTITION_KEY!r} in its fit metrics (keys: {sorted(res.metrics)})"
        try:
            pid = partition_id(res.metrics[PARTITION_KEY], "a fit result")
            x, lay = _flatten_list(parameters_to_ndarrays(res.parameters))
        except FedAuditError as err:
            return str(err)
        except Exception as err:  # the client controls the bytes: any decoding failure is its
            return f"parameters cannot be read: {type(err).__name__}"
        if lay.shapes != layout.shapes:
            return f"returned parameters {lay.summary()}, which do not match the global model's {layout.summary()}"
        return pid, as_held(x, layout)
