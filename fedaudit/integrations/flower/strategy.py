"""A Flower strategy (Message API, ``flwr.serverapp.strategy``) that aggregates with any fedaudit rule.

Each round of :class:`RobustStrategy` (a subclass of Flower's ``FedAvg``, so sampling, the
train/evaluate configs and ``start(...)`` are Flower's own):

1. error replies are split off and counted (``diagnostics[r]["errors"]``), never dropped silently;
2. the valid replies are sorted by the ``"partition-id"`` each client reports in its MetricRecord
   (reply arrival order and Flower node ids change from run to run; partition ids do not);
3. reply i becomes the update row u_i = x_i − x_global (:func:`~.records.flatten`, key order);
4. an optional ``decoder(rows, replies) -> rows`` maps the rows (e.g. LDP reports to estimates);
   with a decoder, replies may carry another layout than the model (a report): ``rows`` is then
   None and the decoder returns the (n, d) update rows from the replies alone;
5. attack-in-the-loop: the rows of the Byzantine positions B (``choose_byzantine`` or a fixed set of
   partition ids) are replaced with ``attack(U_honest, |B|, rng)``;
6. the rule F (``make_aggregator(spec, f)`` or a callable) aggregates the n rows;
7. the new global model is x_global + F(u_1, …, u_n).

Threat model of step 5: the attacker is *omniscient* — it sees every honest update of the round
before choosing its own, as in ALIE (Baruch et al., NeurIPS 2019), IPM (Xie et al., UAI 2019) and
MinMax (Shejwalkar & Houmansadr, NDSS 2021). A real Flower client cannot see the others'
updates, so these attacks are applied at the server, just before aggregation; attacks that need
only the client's own data or update run as client mods (:mod:`.byzantine`).

Attacks act on updates, not parameters: ALIE's μ ± zσ is the same either way, but IPM's −τ·μ on
parameters would negate the whole model. ``aggregator="mean"`` is the *unweighted* mean of the
updates, i.e. Flower's FedAvg (weighted by ``num-examples``) when the clients hold equally many
examples; robust rules are unweighted by construction.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from fedaudit.defenses.base import Aggregator
from fedaudit.defenses.registry import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.records import Layout, flatten, unflatten
from fedaudit.rng import derive_generator
from fedaudit.validation import check_int

require_flwr()

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402

__all__ = ["RobustAggregation", "RobustStrategy", "choose_byzantine", "partition_id", "PARTITION_KEY",
           "STRATEGY_KEY"]

#: The MetricRecord key through which every client reports its partition id (0..N−1).
PARTITION_KEY = "partition-id"
#: The train-config key naming the strategy being run (``run_flower`` sets it to ``StrategySpec.name``), so
#: client mods can act for one of several strategies that share a ClientApp.
STRATEGY_KEY = "fedaudit-strategy"


def choose_byzantine(n: int, f: int, seed: int, server_round: int) -> np.ndarray:
    """Sorted positions, among the n replies of a round sorted by partition id, of its f Byzantine clients.

    f draws without replacement from ``derive_generator(seed, "flower-byzantine;round=<r>")``: a
    function of (seed, round) only — never of Flower node ids, which are random in every run.
    """
    n = check_int("n", n, low=1)
    f = check_int("f", f, low=0, high=n)
    server_round = check_int("server_round", server_round, low=0)
    rng = derive_generator(check_int("seed", seed, low=0), f"flower-byzantine;round={server_round}")
    return np.sort(rng.choice(n, size=f, replace=False)).astype(np.int64)


def partition_id(value: Any, where: str) -> int:
    """A reported ``"partition-id"`` as an int ≥ 0, else FedAuditError naming ``where`` (the reply)."""
    if isinstance(value, (list, bool, str)) or float(value) != int(value) or int(value) < 0:
        raise FedAuditError(f"{PARTITION_KEY!r} must be an integer >= 0, got {value!r} from {where}")
    return int(value)


def _partition_ids(value: Any) -> tuple[int, ...]:
    try:
        ids = tuple(int(check_int("byzantine", p, low=0)) for p in value)
    except TypeError:
        raise FedAuditError(f"byzantine must be None, 'seeded' or a list of partition ids (integers >= 0), "
                            f"got byzantine={value!r}") from None
    if len(set(ids)) != len(ids):
        raise FedAuditError(f"byzantine partition ids must be distinct, got byzantine={list(ids)}")
    return tuple(sorted(ids))


def wait_for_clients(num_clients: int | None, kwargs: dict[str, Any], keys: tuple[str, str]) -> int | None:
    """Default Flower's two minimum-client settings ``keys`` in ``kwargs`` to ``num_clients`` (≥ 1) when it
    is given, so round 1 does not start with the first nodes that happen to have registered."""
    if num_clients is not None:
        num_clients = check_int("num_clients", num_clients, low=1)
        for key in keys:
            kwargs.setdefault(key, num_clients)
    return num_clients


class RobustAggregation:
    """Steps 2 and 5–7 of the module docstring, shared by :class:`RobustStrategy` (Message API) and
    :class:`~.legacy.LegacyRobustStrategy` (``flwr.server.strategy``): ``aggregate_rows`` turns one
    round's update rows, sorted by partition id, into the new global model and its diagnostics.

    ``diagnostics`` holds one dict per round: ``round``, ``clients`` (valid replies), ``errors``
    (error replies or failures) and their ``error_reasons`` and ``error_codes`` (Flower error codes
    of the Message API; empty for the legacy API), ``partitions`` (sorted),
    ``byzantine`` (partition ids), ``nonfinite_rows`` (rows with a NaN or ±inf entry as the rule
    received them; fedaudit rules treat them as Byzantine), ``dist_to_honest_mean`` =
    ‖F(U) − mean of the honest rows‖₂ (None when no honest row is known), ``aggregate_norm``.

    Parameters
    ----------
    aggregator : a :func:`~fedaudit.defenses.make_aggregator` spec (``"mean"``, ``"cwtm"``,
        ``"nnm+cwtm"``, ``"nnm+pkg.mod:Rule"``, …) built with ``f``, or a callable (n, d) -> (d,).
    f : the number of Byzantine clients the rule tolerates and, with an attack, the number attacked.
    attack : None, an attack name of :data:`fedaudit.attacks.ATTACKS` (default keywords) or a
        callable ``attack(honest, f, rng) -> (f, d)`` such as ``ALIE(z=30)``; applied at the server.
    byzantine : which clients are Byzantine: ``"seeded"`` (f positions per round by
        :func:`choose_byzantine`; the default when an attack is given), a list of partition ids
        (the same clients every round, e.g. the ones running a Byzantine client mod), or None
        (nobody is known to be Byzantine).
    seed : root of the Byzantine choice, the attack's and the rule's randomness (per round).
    """

    def __init__(self, aggregator: str | Callable[[Any], Any] = "mean", *, f: int = 0, attack: Any = None,
                 byzantine: None | str | Sequence[int] = None, seed: int = 0):
        self.f = check_int("f", f, low=0)
        self.seed = check_int("seed", seed, low=0)
        if isinstance(aggregator, str):
            self.aggregator_name = aggregator
            self.rule = make_aggregator(aggregator, self.f)
        elif callable(aggregator):
            self.aggregator_name = getattr(aggregator, "name", type(aggregator).__name__)
            self.rule = aggregator
        else:
            raise FedAuditError(f"aggregator must be a make_aggregator spec such as 'nnm+cwtm' or a callable "
                                f"(n, d) -> (d,), got {type(aggregator).__name__}")
        if isinstance(attack, str):
            from fedaudit.attacks.registry import make_attack

            attack = make_attack(attack)
        if attack is not None and not callable(attack):
            raise FedAuditError(f"attack must be None, an attack name or a callable attack(honest, f, rng), "
                                f"got {type(attack).__name__}")
        if attack is not None and self.f == 0:
            raise FedAuditError("attack needs f >= 1 Byzantine clients, got f=0")
        self.attack = attack
        if byzantine is None and attack is not None:
            byzantine = "seeded"
        if isinstance(byzantine, str):
            if byzantine != "seeded":
                raise FedAuditError(f"byzantine must be None, 'seeded' or a list of partition ids, "
                                    f"got byzantine={byzantine!r}")
            self.byzantine: None | str | tuple[int, ...] = "seeded"
        else:
            self.byzantine = None if byzantine is None else _partition_ids(byzantine)
        self.diagnostics: list[dict[str, Any]] = []

    def __repr__(self) -> str:
        attack = "" if self.attack is None else f", attack={self.attack!r}, byzantine={self.byzantine!r}"
        return f"{type(self).__name__}(aggregator={self.aggregator_name!r}, f={self.f}{attack}, seed={self.seed})"

    def sort_order(self, pids: Sequence[int], server_round: int) -> np.ndarray:
        """The permutation that sorts the round's replies by partition id (distinct ids required)."""
        pids = np.asarray(pids, dtype=np.int64)
        if np.unique(pids).size != pids.size:
            raise FedAuditError(f"round {server_round}: two replies report the same {PARTITION_KEY!r}: "
                                f"{sorted(pids.tolist())}")
        return np.argsort(pids, kind="stable")

    def record_empty_round(self, server_round: int, error_reasons: Sequence[str],
                           error_codes: Sequence[int] = ()) -> None:
        """Diagnostics of a round with no valid reply (nothing is aggregated; the global model is kept)."""
        self.diagnostics.append({"round": int(server_round), "clients": 0, "errors": len(error_reasons),
                                 "error_reasons": list(error_reasons), "error_codes": [int(c) for c in error_codes],
                                 "partitions": [], "byzantine": [], "nonfinite_rows": 0, "dist_to_honest_mean": None,
                                 "aggregate_norm": None})

    def aggregate_rows(self, server_round: int, global_vector: np.ndarray, rows: np.ndarray, pids: np.ndarray,
                       error_reasons: Sequence[str] = (),
                       error_codes: Sequence[int] = ()) -> tuple[np.ndarray, dict[str, Any]]:
        """(x_global + F(U), round metrics) for the (n, d) update rows U of partitions ``pids`` (sorted).

        The Byzantine rows are replaced by the attack first (module docstring, step 5); a
        non-finite new global model raises FedAuditError; the round's diagnostics are appended.
        """
        rows = np.array(rows, dtype=np.float64)  # a copy: the attack writes into it
        byz = self._byzantine_positions(pids, server_round)
        honest = np.setdiff1d(np.arange(len(pids)), byz)
        honest_mean = rows[honest].mean(axis=0) if honest.size else None
        if self.attack is not None and byz.size:
            if not honest.size:
                raise FedAuditError(f"round {server_round}: all {len(pids)} clients are Byzantine; the attack "
                                    "needs at least one honest update")
            attack_rng = derive_generator(self.seed, f"flower-attack;round={server_round}")
            rows[byz] = np.asarray(self.attack(rows[honest], int(byz.size), attack_rng), dtype=np.float64)
        nonfinite = int(np.count_nonzero(~np.isfinite(rows).all(axis=1)))
        agg = self._aggregate(rows, server_round)
        new = global_vector + agg
        if not np.isfinite(new).all():
            raise FedAuditError(f"round {server_round}: the new global model is not finite "
                                f"({int(np.count_nonzero(~np.isfinite(new)))} of {new.size} entries): rule "
                                f"{self.aggregator_name!r} let a non-finite or overflowing update through")
        dist = None
        if honest_mean is not None and np.isfinite(honest_mean).all():
            dist = float(np.linalg.norm(agg - honest_mean))
        diag = {"round": int(server_round), "clients": len(pids), "errors": len(error_reasons),
                "error_reasons": list(error_reasons), "error_codes": [int(c) for c in error_codes],
                "partitions": np.asarray(pids).tolist(),
                "byzantine": np.asarray(pids)[byz].tolist(), "nonfinite_rows": nonfinite,
                "dist_to_honest_mean": dist, "aggregate_norm": float(np.linalg.norm(agg))}
        self.diagnostics.append(diag)
        metrics = {"clients": len(pids), "errors": len(error_reasons), "byzantine": int(byz.size),
                   "nonfinite-rows": nonfinite, "aggregate-norm": diag["aggregate_norm"]}
        if dist is not None:
            metrics["dist-to-honest-mean"] = dist
        return new, metrics

    def _byzantine_positions(self, pids: np.ndarray, server_round: int) -> np.ndarray:
        if self.byzantine is None:
            return np.empty(0, dtype=np.int64)
        if self.byzantine == "seeded":
            if self.f >= len(pids):
                raise FedAuditError(f"round {server_round}: f={self.f} Byzantine clients need more than f "
                                    f"replies, got {len(pids)}")
            return choose_byzantine(len(pids), self.f, self.seed, server_round)
        return np.flatnonzero(np.isin(pids, self.byzantine))

    def _aggregate(self, rows: np.ndarray, server_round: int) -> np.ndarray:
        if isinstance(self.rule, Aggregator):
            agg = self.rule(rows, rng=derive_generator(self.seed, f"flower-rule;round={server_round}"))
        else:
            agg = self.rule(rows)
        agg = np.asarray(agg, dtype=np.float64)
        if agg.shape != (rows.shape[1],):
            raise FedAuditError(f"aggregator {self.aggregator_name!r} returned shape {agg.shape}, expected "
                                f"({rows.shape[1]},)")
        return agg


class RobustStrategy(RobustAggregation, FedAvg):
    """Flower ``FedAvg`` whose aggregation is a fedaudit rule over update rows, with optional attack-in-the-loop.

    ``aggregator``, ``f``, ``attack``, ``byzantine``, ``seed`` and ``diagnostics`` are those of
    :class:`RobustAggregation`. Further:

    decoder : optional ``decoder(rows (n, d) or None, replies) -> rows (n, d)``, called on the
        sorted update rows and their reply Messages before the attack and the rule (rows is None
        when the replies do not carry the model's layout, e.g. LDP reports).
    num_clients : when given, ``min_available_nodes`` and ``min_train_nodes`` default to it, so
        round 1 waits for every node (with Flower's default 2, round 1 samples whichever 2 nodes
        registered first).
    **fedavg_kwargs : passed to ``flwr.serverapp.strategy.FedAvg``.
    """

    def __init__(self, aggregator: str | Callable[[Any], Any] = "mean", *, f: int = 0, attack: Any = None,
                 byzantine: None | str | Sequence[int] = None, decoder: Callable[..., Any] | None = None,
                 seed: int = 0, num_clients: int | None = None, **fedavg_kwargs: Any):
        RobustAggregation.__init__(self, aggregator, f=f, attack=attack, byzantine=byzantine, seed=seed)
        if decoder is not None and not callable(decoder):
            raise FedAuditError(f"decoder must be None or a callable (rows, replies) -> rows, "
                                f"got {type(decoder).__name__}")
        self.decoder = decoder
        self.num_clients = wait_for_clients(num_clients, fedavg_kwargs, ("min_available_nodes", "min_train_nodes"))
        FedAvg.__init__(self, **fedavg_kwargs)
        self._global: tuple[np.ndarray, Layout] | None = None

    # ------------------------------------------------------------------ Flower hooks

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """FedAvg's configuration; the round's global arrays are kept to form the updates."""
        self._global = flatten(arrays)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Steps 1–7 of the module docstring; returns (new global arrays, round metrics)."""
        valid, errors = self._check_and_log_replies(list(replies), is_train=True)
        reasons, codes = [m.error.reason for m in errors], [m.error.code for m in errors]
        if not valid:
            self.record_empty_round(server_round, reasons, codes)
            return None, None
        if self._global is None:
            raise FedAuditError("aggregate_train was called before configure_train: the round's global arrays "
                                "are unknown")
        g, layout = self._global
        pids = np.array([self._partition_id(m) for m in valid], dtype=np.int64)
        order = self.sort_order(pids, server_round)
        pids, valid = pids[order], [valid[i] for i in order]
        rows = self._update_rows(valid, pids, g, layout, server_round)
        if self.decoder is not None:
            rows = self._decode(rows, valid, (len(valid), layout.dim), server_round)
        new, metrics = self.aggregate_rows(server_round, g, rows, pids, reasons, codes)
        return unflatten(new, layout), MetricRecord(metrics)

    # ------------------------------------------------------------------ steps

    def _partition_id(self, msg: Message) -> int:
        record = next(iter(msg.content.metric_records.values()))
        where = f"node {msg.metadata.src_node_id}"
        if PARTITION_KEY not in record:
            raise FedAuditError(f"a reply from {where} has no {PARTITION_KEY!r} in its MetricRecord (keys: "
                                f"{sorted(record.keys())}); RobustStrategy orders and attacks clients by the "
                                "partition id they report")
        return partition_id(record[PARTITION_KEY], where)

    def _update_rows(self, valid: list[Message], pids: np.ndarray, g: np.ndarray, layout: Layout,
                     server_round: int) -> np.ndarray | None:
        """(n, d) rows x_i − x_global; None when a reply has another layout and a decoder will read them."""
        flat = [flatten(msg.content[self.arrayrecord_key]) for msg in valid]
        bad = [i for i, (_, lay) in enumerate(flat) if lay.keys != layout.keys or lay.shapes != layout.shapes]
        if bad and self.decoder is not None:
            return None
        if bad:
            raise FedAuditError(f"round {server_round}: partition {pids[bad[0]]} replied arrays "
                                f"{flat[bad[0]][1].summary()}, which do not match the global model's "
                                f"{layout.summary()}")
        return np.stack([x for x, _ in flat]) - g

    def _decode(self, rows: np.ndarray | None, replies: list[Message], shape: tuple[int, int],
                server_round: int) -> np.ndarray:
        out = np.asarray(self.decoder(rows, replies), dtype=np.float64)
        if out.shape != shape:
            raise FedAuditError(f"round {server_round}: decoder returned shape {out.shape}, expected "
                                f"{shape} (one update row per reply, in the model's layout)")
        return out
