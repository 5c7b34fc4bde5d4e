"""A Flower strategy (Message API, ``flwr.serverapp.strategy``) that aggregates with any fedaudit rule.

Each round of :class:`RobustStrategy` (a subclass of Flower's ``FedAvg``, so sampling, the
train/evaluate configs and ``start(...)`` are Flower's own):

1. error replies are split off and counted (``diagnostics[r]["errors"]``, refusals of an LDP budget
   also as ``refusals``), never dropped silently;
2. every other reply is screened (:meth:`RobustStrategy.screen`) before anything reaches Flower's
   aggregation helpers: a malformed reply (wrong arrays, other metric keys, a non-finite metric,
   a missing, negative, NaN, fractional or duplicated ``"partition-id"``, …) is a Byzantine row —
   dropped, counted (``malformed``) and named with its reason (``malformed_replies``);
3. the valid replies are sorted by the ``"partition-id"`` each client reports in its MetricRecord
   (reply arrival order and Flower node ids change from run to run; partition ids do not);
4. reply i becomes the update row u_i = x_i − x_global, x_i cast to the model's dtypes first
   (:func:`~.records.as_held`: the rule sees values as the model holds them, so float64 1e300 sent
   to a float32 model is an ``inf`` row), flattened in key order;
5. an optional ``decoder(rows, replies) -> rows`` maps the rows (e.g. LDP reports to estimates);
   with a decoder, replies may carry another layout than the model (a report): ``rows`` is then
   None and the decoder returns the (n, d) update rows from the replies alone;
6. attack-in-the-loop: the rows of the Byzantine positions B (``choose_byzantine`` or a fixed set of
   partition ids) are replaced with ``attack(U_honest, |B|, rng)``;
7. the rule F (``make_aggregator(spec, f)`` or a callable) aggregates the n rows (a fedaudit rule
   also gets one NaN row per malformed reply, so it runs with f − m on the rest);
8. the new global model is x_global + F(u_1, …, u_n), cast to the model's dtypes and required finite.

Threat model of step 6: the attacker is *omniscient* — it sees every honest update of the round
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

import collections
from logging import INFO, WARNING
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from fedaudit.defenses.base import Aggregator
from fedaudit.defenses.registry import make_aggregator
from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.records import REFUSED_CODE, Layout, as_held, flatten, unflatten
from fedaudit.rng import derive_generator
from fedaudit.validation import check_int

require_flwr()

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.common.logger import log  # noqa: E402
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
    try:
        number = None if isinstance(value, (list, bool, str)) else float(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not np.isfinite(number) or not number.is_integer() or number < 0:
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
    """Steps 3 and 6–8 of the module docstring, shared by :class:`RobustStrategy` (Message API) and
    :class:`~.legacy.LegacyRobustStrategy` (``flwr.server.strategy``): ``aggregate_rows`` turns one
    round's update rows, sorted by partition id, into the new global model and its diagnostics.

    ``diagnostics`` holds one dict per round: ``round``, ``clients`` (valid replies), ``errors``
    (error replies or failures) and their ``error_reasons`` and ``error_codes`` (Flower error codes
    of the Message API; empty for the legacy API), ``refusals`` (error replies with ldp's
    ``REFUSED_CODE``), ``malformed`` and ``malformed_replies`` (dicts ``node``, ``partition`` as
    claimed, ``reason``; Message API only), ``partitions`` (sorted), ``byzantine`` (partition ids),
    ``nonfinite_rows`` (rows with a NaN or ±inf entry as the rule received them, malformed ones
    included; fedaudit rules treat them as Byzantine), ``breakdown`` (None, or the
    :class:`~fedaudit.errors.AggregatorBreakdown` message of a skipped round),
    ``dist_to_honest_mean`` = ‖F(U) − mean of the honest finite rows‖₂ (None when no such row is
    known), ``aggregate_norm``, and with a decoder that has ``metrics`` its ``decoder`` figures.

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
                           error_codes: Sequence[int] = (), *, malformed: Sequence[dict[str, Any]] = ()
                           ) -> dict[str, Any]:
        """Diagnostics of a round with no valid reply (nothing is aggregated; the global model is kept);
        returns the round's metrics."""
        diag = self._diag(server_round, [], error_reasons, error_codes, malformed)
        self.diagnostics.append(diag)
        return self._metrics(diag)

    @staticmethod
    def _diag(server_round: int, pids: Any, error_reasons: Sequence[str], error_codes: Sequence[int],
              malformed: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"round": int(server_round), "clients": len(pids), "errors": len(error_reasons),
                "error_reasons": list(error_reasons), "error_codes": [int(c) for c in error_codes],
                "refusals": sum(int(c) == REFUSED_CODE for c in error_codes),
                "malformed": len(malformed), "malformed_replies": [dict(m) for m in malformed],
                "partitions": np.asarray(pids, dtype=np.int64).tolist(), "byzantine": [], "nonfinite_rows": 0,
                "breakdown": None, "dist_to_honest_mean": None, "aggregate_norm": None}

    @staticmethod
    def _metrics(diag: dict[str, Any]) -> dict[str, Any]:
        """The round's diagnostics as Flower MetricRecord values (ints and floats; absent when None)."""
        metrics = {"clients": diag["clients"], "errors": diag["errors"], "refusals": diag["refusals"],
                   "malformed": diag["malformed"], "byzantine": len(diag["byzantine"]),
                   "nonfinite-rows": diag["nonfinite_rows"], "breakdown": int(diag["breakdown"] is not None)}
        for key in ("aggregate_norm", "dist_to_honest_mean"):
            if diag[key] is not None:
                metrics[key.replace("_", "-")] = diag[key]
        return metrics

    def aggregate_rows(self, server_round: int, global_vector: np.ndarray, rows: np.ndarray, pids: np.ndarray,
                       error_reasons: Sequence[str] = (), error_codes: Sequence[int] = (), *,
                       malformed: Sequence[dict[str, Any]] = (),
                       held: Callable[[np.ndarray], np.ndarray] | None = None
                       ) -> tuple[np.ndarray | None, dict[str, Any]]:
        """(x_global + F(U) as the model holds it, round metrics) for the (n, d) update rows U of
        partitions ``pids`` (sorted), or (None, metrics) when the rule broke down (the global model is kept).

        The Byzantine rows are replaced by the attack first (module docstring, step 6). Each of the
        m ``malformed`` replies (dicts ``node``, ``partition``, ``reason``, already dropped by the
        caller) is a Byzantine row: a fedaudit rule gets m NaN rows after the n valid ones, so it drops
        them and runs with f − m on the rest (:mod:`fedaudit.defenses.base`); a callable rule gets
        the n valid rows only. More non-finite rows than the rule tolerates
        (:class:`~fedaudit.errors.AggregatorBreakdown`) skip the round: ``breakdown`` names why and
        None is returned. ``held(x)`` maps a float64 vector to the values the model stores
        (:func:`~.records.as_held`; identity when None): the new model is checked after it, so a
        value that overflows the model's dtype is caught; a non-finite new model raises FedAuditError
        (the rule let an overflow through). The round's diagnostics are appended.
        """
        rows = np.array(rows, dtype=np.float64)  # a copy: the attack writes into it
        diag = self._diag(server_round, pids, error_reasons, error_codes, malformed)
        byz = self._byzantine_positions(pids, server_round)
        honest = np.setdiff1d(np.arange(len(pids)), byz)
        clean = honest[np.isfinite(rows[honest]).all(axis=1)] if honest.size else honest
        honest_mean = rows[clean].mean(axis=0) if clean.size else None
        if self.attack is not None and byz.size:
            if not honest.size:
                raise FedAuditError(f"round {server_round}: all {len(pids)} clients are Byzantine; the attack "
                                    "needs at least one honest update")
            attack_rng = derive_generator(self.seed, f"flower-attack;round={server_round}")
            rows[byz] = np.asarray(self.attack(rows[honest], int(byz.size), attack_rng), dtype=np.float64)
        diag["byzantine"] = np.asarray(pids)[byz].tolist()
        diag["nonfinite_rows"] = int(np.count_nonzero(~np.isfinite(rows).all(axis=1))) + len(malformed)
        self.diagnostics.append(diag)
        if malformed and isinstance(self.rule, Aggregator):
            rows = np.vstack([rows, np.full((len(malformed), rows.shape[1]), np.nan)])
        try:
            agg = self._aggregate(rows, server_round)
        except AggregatorBreakdown as err:
            diag["breakdown"] = str(err)
            return None, self._metrics(diag)
        new = global_vector + agg
        if held is not None:
            new = held(new)
        if not np.isfinite(new).all():
            raise FedAuditError(f"round {server_round}: the new global model is not finite as the model holds it "
                                f"({int(np.count_nonzero(~np.isfinite(new)))} of {new.size} entries): rule "
                                f"{self.aggregator_name!r} let a non-finite or overflowing update through")
        if honest_mean is not None and np.isfinite(honest_mean).all():
            diag["dist_to_honest_mean"] = float(np.linalg.norm(agg - honest_mean))
        diag["aggregate_norm"] = float(np.linalg.norm(agg))
        return new, self._metrics(diag)

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

    def summary(self) -> None:
        """Flower's start-up summary, saying how this strategy aggregates (FedAvg's says 'Weighted by')."""
        log(INFO, "\t├──> Sampling:")
        log(INFO, "\t│\t├──Fraction: train (%.2f) | evaluate ( %.2f)", self.fraction_train,
            self.fraction_evaluate)
        log(INFO, "\t│\t├──Minimum nodes: train (%d) | evaluate (%d)", self.min_train_nodes,
            self.min_evaluate_nodes)
        log(INFO, "\t│\t└──Minimum available nodes: %d", self.min_available_nodes)
        log(INFO, "\t├──> Aggregation: fedaudit rule %r (f=%d) over update rows, unweighted: '%s' is not used",
            self.aggregator_name, self.f, self.weighted_by_key)
        log(INFO, "\t│\t└──Malformed replies are Byzantine rows: dropped, counted in the round's metrics")
        log(INFO, "\t└──> Keys in records:")
        log(INFO, "\t\t├── Client metrics weighted by: '%s'", self.weighted_by_key)
        log(INFO, "\t\t├── ArrayRecord key: '%s'", self.arrayrecord_key)
        log(INFO, "\t\t└── ConfigRecord key: '%s'", self.configrecord_key)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        """FedAvg's configuration; the round's global arrays are kept to form the updates."""
        self._global = flatten(arrays)
        return super().configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round: int,
                        replies: Iterable[Message]) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Steps 1–8 of the module docstring; returns (new global arrays, round metrics).

        Every reply is screened (:meth:`screen`) before anything reaches Flower's helpers; a
        malformed one is a Byzantine row (dropped, counted in ``malformed``, named with its reason
        in the diagnostics' ``malformed_replies``), never an exception. The metrics are the
        clients' own (``train_metrics_aggr_fn`` over the valid replies, Flower's weighted mean by
        ``num-examples`` by default, ``partition-id`` left out) updated with the round's diagnostics
        and, with a decoder that has ``metrics(server_round)``, its metrics (LDP bits, ε spent).
        """
        replies = list(replies)
        valid, errors = self._check_and_log_replies(replies, is_train=True, validate=False)
        reasons, codes = [m.error.reason for m in errors], [m.error.code for m in errors]
        if self._global is None:
            raise FedAuditError("aggregate_train was called before configure_train: the round's global arrays "
                                "are unknown")
        g, layout = self._global
        signature = _reference_signature(valid)
        kept, malformed = [], []
        for msg in valid:
            outcome = self.screen(msg, layout, signature)
            if isinstance(outcome, str):
                malformed.append({"node": int(msg.metadata.src_node_id), "partition": _claimed_pid(msg),
                                  "reason": outcome})
            else:
                kept.append((msg, *outcome))
        kept, duplicates = drop_duplicates(kept, lambda msg: int(msg.metadata.src_node_id))
        malformed += duplicates
        log_malformed(server_round, malformed)
        if not kept:
            return None, MetricRecord(self.record_empty_round(server_round, reasons, codes, malformed=malformed))
        valid = [msg for msg, _, _ in kept]
        pids = np.array([pid for _, pid, _ in kept], dtype=np.int64)
        rows = None
        if all(x is not None for _, _, x in kept):
            rows = np.stack([x for _, _, x in kept]) - g
        if self.decoder is not None:
            rows = self._decode(rows, valid, (len(valid), layout.dim), server_round)
        new, metrics = self.aggregate_rows(server_round, g, rows, pids, reasons, codes, malformed=malformed,
                                           held=lambda x: as_held(x, layout))
        decoder_metrics = getattr(self.decoder, "metrics", None)
        if callable(decoder_metrics):
            extra = dict(decoder_metrics(server_round))
            self.diagnostics[-1]["decoder"] = extra
            metrics.update(extra)
        client = self._client_metrics(valid)
        client.update(metrics)
        return (None if new is None else unflatten(new, layout)), client

    # ------------------------------------------------------------------ steps

    def screen(self, msg: Message, layout: Layout, signature: frozenset | None) -> str | tuple[int, np.ndarray | None]:
        """(partition id, the reply's flat model as the model holds it, or None when a decoder reads the
        reply) for a well-formed reply, else the reason it is malformed (a string). Well-formed means:
        one ArrayRecord and one MetricRecord; ``partition-id`` an integer ≥ 0; ``num-examples`` a
        finite number ≥ 0; every metric finite, with the keys (and list lengths) of the round's most
        common MetricRecord ``signature``; and either arrays with the global model's names and
        shapes, of a real dtype, cast to the model's dtypes (:func:`~.records.as_held`), or — with a
        decoder — whatever its ``screen(reply)`` (if it has one) accepts."""
        content = msg.content
        if len(content.array_records) != 1 or len(content.metric_records) != 1:
            return (f"expected one ArrayRecord and one MetricRecord, got {len(content.array_records)} and "
                    f"{len(content.metric_records)}")
        record = next(iter(content.metric_records.values()))
        if signature is not None and _signature(record) != signature:
            mine, ref = {k for k, _ in _signature(record)}, {k for k, _ in signature}
            return (f"metric keys differ from the round's: extra {sorted(mine - ref)}, missing {sorted(ref - mine)}"
                    + ("" if mine != ref else " (a list metric of another length)"))
        bad = [k for k, v in record.items() if not np.isfinite(np.asarray(v, dtype=np.float64)).all()]
        if bad:
            return f"metric {bad[0]!r} is not finite: {record[bad[0]]!r}"
        if PARTITION_KEY not in record:
            return f"no {PARTITION_KEY!r} in its MetricRecord (keys: {sorted(record.keys())})"
        try:
            pid = partition_id(record[PARTITION_KEY], f"node {msg.metadata.src_node_id}")
        except FedAuditError as err:
            return str(err)
        weight = record.get(self.weighted_by_key)
        if isinstance(weight, list) or weight is None or weight < 0:
            return f"{self.weighted_by_key!r} must be a number >= 0, got {weight!r}"
        arrays = next(iter(content.array_records.values()))
        if self.decoder is not None:
            check = getattr(self.decoder, "screen", None)
            reason = check(msg) if callable(check) else None
            if reason is not None:
                return str(reason)
            return pid, _model_vector(arrays, layout, strict=False)
        x = _model_vector(arrays, layout, strict=True)
        return (pid, x) if not isinstance(x, str) else x

    def _client_metrics(self, valid: list[Message]) -> MetricRecord:
        """``train_metrics_aggr_fn`` (Flower's weighted mean by default) of the valid replies' metrics,
        without ``partition-id``; empty when their ``num-examples`` sum to 0."""
        weights = [next(iter(m.content.metric_records.values()))[self.weighted_by_key] for m in valid]
        if not sum(weights) > 0:
            return MetricRecord()
        contents = []
        for msg in valid:
            (key, record), = msg.content.metric_records.items()
            contents.append(RecordDict({key: MetricRecord({k: v for k, v in record.items() if k != PARTITION_KEY})}))
        return self.train_metrics_aggr_fn(contents, self.weighted_by_key)

    def _decode(self, rows: np.ndarray | None, replies: list[Message], shape: tuple[int, int],
                server_round: int) -> np.ndarray:
        out = np.asarray(self.decoder(rows, replies), dtype=np.float64)
        if out.shape != shape:
            raise FedAuditError(f"round {server_round}: decoder returned shape {out.shape}, expected "
                                f"{shape} (one update row per reply, in the model's layout)")
        return out


def drop_duplicates(kept: list[tuple[Any, int, Any]], node: Callable[[Any], Any]
                    ) -> tuple[list[tuple[Any, int, Any]], list[dict[str, Any]]]:
    """(the (reply, partition id, row) triples whose id no other reply claims, sorted by id; a malformed
    entry for each of the others). The server cannot tell the honest claimant of a duplicated id
    from an impostor, so every claimant is dropped."""
    counts = collections.Counter(pid for _, pid, _ in kept)
    malformed = [{"node": node(reply), "partition": pid,
                  "reason": f"{counts[pid]} replies claim {PARTITION_KEY}={pid}"}
                 for reply, pid, _ in kept if counts[pid] > 1]
    return sorted((k for k in kept if counts[k[1]] == 1), key=lambda k: k[1]), malformed


def log_malformed(server_round: int, malformed: Sequence[dict[str, Any]]) -> None:
    for m in malformed:
        log(WARNING, "\t> round %s: malformed reply from node %s dropped as a Byzantine row: %s",
            server_round, m["node"], m["reason"])


def _signature(record: Any) -> frozenset:
    """The keys of a MetricRecord with the length of each list value (-1 for a scalar)."""
    return frozenset((k, len(v) if isinstance(v, list) else -1) for k, v in record.items())


def _reference_signature(replies: list[Message]) -> frozenset | None:
    """The most common MetricRecord signature among the replies with one MetricRecord (ties: the
    larger, then the lexicographically first key list), None when there is none. Honest clients
    share one signature, so with fewer than half of the replies Byzantine it is theirs."""
    sigs = [_signature(next(iter(m.content.metric_records.values()))) for m in replies
            if len(m.content.metric_records) == 1]
    if not sigs:
        return None
    counts = collections.Counter(sigs)
    return min(counts, key=lambda s: (-counts[s], -len(s), sorted(s)))


def _claimed_pid(msg: Message) -> Any:
    """The partition id a reply claims, as JSON-safe as it came (None when absent or unreadable)."""
    records = msg.content.metric_records
    value = next(iter(records.values())).get(PARTITION_KEY) if len(records) == 1 else None
    if isinstance(value, (bool, list)) or value is None:
        return None
    return int(value) if float(value).is_integer() else float(value)


def _model_vector(arrays: ArrayRecord, layout: Layout, *, strict: bool) -> np.ndarray | None | str:
    """The reply's arrays in ``layout``'s key order as the model holds them (float64, d); when they
    are not the model's names and shapes of a real dtype: the reason (``strict``) or None."""
    keys = set(arrays.keys())
    if keys != set(layout.keys):
        return (f"arrays {sorted(keys)} are not the global model's {list(layout.keys)}") if strict else None
    parts = []
    for key, shape in zip(layout.keys, layout.shapes):
        try:
            a = arrays[key].numpy()
        except Exception as err:  # a Byzantine client controls the bytes: any decoding failure is its
            return f"array {key!r} cannot be read: {type(err).__name__}" if strict else None
        if a.shape != shape or a.dtype.kind not in "fiub":
            return (f"array {key!r} is {a.dtype.name}{list(a.shape)}, the global model's is "
                    f"{layout.dtypes[layout.keys.index(key)]}{list(shape)}") if strict else None
        with np.errstate(over="ignore", invalid="ignore"):
            parts.append(a.ravel().astype(np.float64))
    return as_held(np.concatenate(parts), layout)
