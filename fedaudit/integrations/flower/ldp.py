"""Local-DP client mods for Flower: each client sends a fedaudit mechanism's report of its update,
the server decodes it, and a per-client ledger refuses a client once its budget is spent.

**Client** — :func:`ldp_mod` returns a Flower mod ``(msg, context, call_next) -> Message`` for
``ClientApp(mods=[...])`` or ``@app.train(mods=[...])``. On a TRAIN message (other messages pass
through untouched) it

1. reads the partition id p (``context.node_config["partition-id"]``) and the round r (the
   ``"server-round"`` FedAvg writes into the train config), and checks the sent model has
   d = ``mechanism.dim`` parameters;
2. with a budget: refuses the client when one more use would exceed it (below), *before* training;
3. calls ``call_next`` (the client trains) and forms the update u = x_reply − x_sent ∈ ℝ^d, the
   arrays flattened in key order as float64 (:func:`~.records.flatten`);
4. encodes one report y = ``mechanism.encode(u[None, :], rng)``. By default rng is seeded with 128
   fresh bits of OS entropy (``secrets.randbits``) for every report: nothing in the app code, the
   node config or the messages determines it, so a server that knows every configuration value
   cannot recompute the noise and read u back. Only with the explicit opt-in ``simulation_seed``
   (simulations and audits, never deployments) is rng = ``derive_generator(simulation_seed,
   "flower-ldp;partition=<p>;round=<r>")`` — never a Flower node id, which is random in every run —
   so that a simulation repeats bit for bit;
5. replaces the reply's ArrayRecord (same record key) by ``{REPORT_KEY: y}``, a float64 array of
   shape (``mechanism.report_width``,) laid out as ``mechanism.report_layout`` says, and adds to the
   reply's MetricRecord ``"partition-id"`` = p, ``"bits"`` = ``mechanism.bits_per_report``,
   ``"ldp-epsilon"`` / ``"ldp-delta"`` (the claimed guarantee per report), ``"ldp-round"`` = r and
   ``"ldp-mechanism"`` (a 56-bit fingerprint of the mechanism, which the decoder checks).

The client's data leave it only as y: everything the server sees is a post-processing of one
(ε, δ)-LDP report per round (the mechanism clips u to its input domain, e.g. the ``clip`` ball).

**Server** — :func:`ldp_decoder` returns the ``decoder(rows, replies) -> rows`` hook of
:class:`~.strategy.RobustStrategy`: it reads every reply's report and returns
``mechanism.decode(reports)`` (n, d), unbiased, E[decode(M(u))] = u for u in the mechanism's input
domain (the clipped update otherwise; Laplace and Gaussian up to their grid rounding, ≤ grid/2 per
coordinate), so any fedaudit rule then aggregates decoded updates. A
report holding NaN or ±inf, or one the mechanism rejects (a Byzantine client's), is decoded to a
NaN row, which fedaudit's rules treat as Byzantine, and is listed in the round's ``malformed``. Each round's bits are logged (:class:`LDPRound`).

**Ledger** — two ledgers, on purpose:

- *the client enforces* (refusal). Its account is the snapshot of ``ledger`` taken when the mod is
  built (uses before, keyed by partition id) plus its own uses, composed by ``Ledger``
  (``method``: basic, advanced or pld); it runs round r only if
  ``Ledger.can_run(p, mechanism, budget, delta=budget_delta, method=method)``. Its own uses live

  * in a **persistent ledger file** on the node (:class:`~.ledger_file.LedgerFile`), named by
    ``ledger_path`` or the node config key ``ldp-ledger-path``: every report of every run is
    charged there, under a file lock and written atomically, *before* it leaves the node, so a
    second ``flwr run`` of the app finds the budget already spent and is refused. This is the
    deployed client's account;
  * otherwise in ``context.state[STATE_KEY]`` (the rounds it reported in; ``STATE_KEY:<value>``
    per value of the ``scope`` config key), which Flower keeps per node for **one run** — the
    simulation engine stores each node's Context in the driver and hands it to whichever Ray
    actor runs the node, a deployed SuperNode keeps it for the run, and a new run starts empty
    (the mod warns once when a budget has no persistent ledger). A Python ``Ledger`` inside the mod
    would not do: Ray actors hold pickled copies and are reused by different nodes.

  Local DP also means the client does not trust the server to stop it, and stock FedAvg sends the
  same config to every node, so the server could not send per-client budgets anyway;
- *the server records* (the authoritative account of what was released): the decoder charges
  ``ledger.record(p, mechanism, round=r)`` for every report it receives — the ServerApp runs in the
  caller's process in :func:`~.simulation.run_flower`, so that Ledger is the caller's own object
  (under ``flwr run`` the ServerApp must write it out). Given a budget too, a report from a client
  already past it is excluded by :class:`~.strategy.RobustStrategy` through
  :meth:`LDPDecoder.screen` — dropped as a Byzantine row, not charged, counted in
  :meth:`LDPDecoder.metrics` — instead of ending the run; the decoder called directly raises
  :class:`~fedaudit.errors.FedAuditError` on it (the client ignored its budget).

A refused client replies with a Flower error ``Error(code=REFUSED_CODE, reason=...)`` and does not
train (when the persistent ledger refuses only under its lock, after training — another process charged
the partition meanwhile — the report is withheld the same way). Every Flower strategy, stock FedAvg included, aggregates only replies without an error, so a
refused client never contributes; :func:`is_refusal` tells a refusal from a failure (RobustStrategy
counts both in its diagnostics' ``errors`` and lists the reasons).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from fedaudit.accounting.composition import METHODS
from fedaudit.accounting.ledger import Ledger, LedgerEntry
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import make_guarantee
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.ledger_file import NODE_CONFIG_KEY, LedgerFile, LedgerRecord
from fedaudit.integrations.flower.records import REFUSED_CODE, flatten
from fedaudit.integrations.flower.strategy import PARTITION_KEY
from fedaudit.json import jsonable
from fedaudit.mechanisms.base import Mechanism
from fedaudit.rng import derive_generator
from fedaudit.validation import check_choice, check_int, check_positive, check_real

require_flwr()

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, MetricRecord  # noqa: E402

__all__ = ["ldp_mod", "LDPMod", "ldp_decoder", "LDPDecoder", "LDPRound", "is_refusal", "REPORT_KEY",
           "REFUSED_CODE", "STATE_KEY"]

#: The key of the one array in an LDP reply's ArrayRecord: the report, float64 (report_width,).
REPORT_KEY = "ldp-report"
#: The ``context.state`` record holding the rounds a client has reported in (its own ledger).
STATE_KEY = "fedaudit-ldp"


def _check_mechanism(mechanism: Any) -> Mechanism:
    if not isinstance(mechanism, Mechanism):
        raise FedAuditError(f"mechanism must be a fedaudit Mechanism (e.g. make_mechanism('sstq', d, 1.0)), "
                            f"got {type(mechanism).__name__}")
    if mechanism.guarantee is None:
        raise FedAuditError(f"mechanism {mechanism!r} claims no LDP guarantee (epsilon=None): an LDP mod needs "
                            "a private mechanism")
    return mechanism


def _check_budget(budget: Any, budget_delta: Any, method: Any) -> tuple[float | None, float, str]:
    budget = None if budget is None else check_positive("budget", budget)
    budget_delta = check_real("budget_delta", budget_delta, low=0.0, high=1.0, open_high=True)
    return budget, budget_delta, check_choice("method", method, METHODS)


def _fingerprint(mechanism: Mechanism) -> int:
    """56 bits of SHA-256 of the mechanism's canonical JSON (name, parameters, dim, guarantee): the
    decoder's check that a report was encoded by the mechanism it decodes with."""
    text = json.dumps(jsonable(mechanism.to_dict()), sort_keys=True, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:7], "little")


def is_refusal(message: Any) -> bool:
    """True for a reply of a client that :func:`ldp_mod` refused for the round (budget spent)."""
    return isinstance(message, Message) and message.has_error() and message.error.code == REFUSED_CODE


def _config_value(msg: Message, key: str, why: str) -> Any:
    for record in msg.content.config_records.values():
        if key in record:
            return record[key]
    raise FedAuditError(f"the train message has no {key!r} in its ConfigRecord; {why}")


def _partition_id(context: Context) -> int:
    if "partition-id" not in context.node_config:
        raise FedAuditError(f"context.node_config has no 'partition-id' (keys: {sorted(context.node_config)}); "
                            "ldp_mod keys seeds and budgets by partition id, never by the random Flower node id")
    return check_int("partition-id", context.node_config["partition-id"], low=0)


def _one_array_record(msg: Message, what: str) -> tuple[str, ArrayRecord]:
    records = msg.content.array_records
    if len(records) != 1:
        raise FedAuditError(f"ldp_mod needs exactly one ArrayRecord in the {what}, found {len(records)}")
    return next(iter(records.items()))


class LDPMod:
    """The client mod of :func:`ldp_mod` (a picklable callable, as Ray needs)."""

    def __init__(self, mechanism: Mechanism, *, ledger: Ledger | None = None, budget: float | None = None,
                 budget_delta: float = 0.0, method: str = "basic", scope: str | None = None,
                 ledger_path: str | os.PathLike | None = None, simulation_seed: int | None = None):
        self.mechanism = _check_mechanism(mechanism)
        self._fingerprint = _fingerprint(self.mechanism)
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise FedAuditError(f"scope must be None or the name of a train-config key, got scope={scope!r}")
        if scope is not None and ledger_path is not None:
            raise FedAuditError(f"scope={scope!r} and ledger_path cannot be combined: scope lets a train-config value "
                                "(chosen by the server) open a fresh account, a persistent ledger is one account per "
                                "partition")
        self.scope = scope
        self.budget, self.budget_delta, self.method = _check_budget(budget, budget_delta, method)
        if ledger is not None and not isinstance(ledger, Ledger):
            raise FedAuditError(f"ledger must be None or a fedaudit.accounting.Ledger, got {type(ledger).__name__}")
        #: uses before this run, frozen when the mod is built (the same in-process and in Ray actors)
        self.prior: tuple[LedgerEntry, ...] = () if ledger is None else ledger.entries()
        self.ledger_file = None if ledger_path is None else LedgerFile(ledger_path)
        self.simulation_seed = None if simulation_seed is None else check_int("simulation_seed", simulation_seed,
                                                                              low=0)
        self._warned = False

    def __repr__(self) -> str:
        budget = "" if self.budget is None else (f", budget={self.budget:g}, budget_delta={self.budget_delta:g}, "
                                                 f"method={self.method!r}")
        scope = "" if self.scope is None else f", scope={self.scope!r}"
        path = "" if self.ledger_file is None else f", ledger_path={str(self.ledger_file.path)!r}"
        seed = "" if self.simulation_seed is None else f", simulation_seed={self.simulation_seed}"
        return f"LDPMod({self.mechanism!r}{budget}{scope}{path}{seed})"

    def _generator(self, partition: int, server_round: int) -> np.random.Generator:
        """The report's randomness: fresh OS entropy (128 bits from ``secrets``) per report, or, with
        ``simulation_seed``, ``derive_generator(simulation_seed, "flower-ldp;partition=<p>;round=<r>")``."""
        if self.simulation_seed is None:
            return np.random.default_rng(secrets.randbits(128))
        return derive_generator(self.simulation_seed, f"flower-ldp;partition={partition};round={server_round}")

    def _ledger_file(self, context: Context) -> LedgerFile | None:
        """The persistent account: ``ledger_path``, else the node config's ``ldp-ledger-path``, else None."""
        configured = context.node_config.get(NODE_CONFIG_KEY)
        if configured is None:
            return self.ledger_file
        node = LedgerFile(configured, what=f"node config {NODE_CONFIG_KEY!r}")
        if self.ledger_file is not None and node.path != self.ledger_file.path:
            raise FedAuditError(f"ldp_mod(ledger_path={str(self.ledger_file.path)!r}) and node config "
                                f"{NODE_CONFIG_KEY}={str(node.path)!r} name different ledgers; set one of them")
        if self.scope is not None:
            raise FedAuditError(f"ldp_mod(scope={self.scope!r}) cannot run on a node with a persistent ledger "
                                f"({NODE_CONFIG_KEY}): scope lets the server's config open fresh accounts")
        return node

    def _account(self, partition: int, context: Context, state_key: str,
                 records: tuple[LedgerRecord, ...] | None) -> Ledger:
        """The client's ledger: its entries in the prior ledger, then one use per report of this run
        (``context.state[state_key]``) or, with a persistent ledger, per record of the ledger file (every run)."""
        ledger = Ledger()
        for entry in self.prior:
            if entry.client == partition:
                ledger.record(partition, entry.use, round=entry.round, relation=entry.relation)
        if records is not None:
            for rec in records:
                use = self.mechanism if rec.mechanism == self._fingerprint else make_guarantee(rec.epsilon, rec.delta)
                ledger.record(partition, use, round=rec.round)
        elif state_key in context.state:
            for r in context.state[state_key]["rounds"]:
                ledger.record(partition, self.mechanism, round=int(r))
        return ledger

    def _admits(self, ledger: Ledger, partition: int) -> bool:
        return self.budget is None or ledger.can_run(partition, self.mechanism, self.budget,
                                                     delta=self.budget_delta, method=self.method)

    def _refusal(self, msg: Message, partition: int, server_round: int, ledger: Ledger,
                 where: str = "") -> Message | None:
        """The refusal reply when one more use would exceed the budget, else None."""
        if self._admits(ledger, partition):
            return None
        spent = ledger.spent(partition, method=self.method, delta=self.budget_delta)
        return Message(Error(code=REFUSED_CODE, reason=(
            f"fedaudit ldp_mod: partition {partition} refused in round {server_round}: one more report at "
            f"ε={self.mechanism.epsilon:g}, δ={self.mechanism.delta:g} would exceed its budget ε={self.budget:g} "
            f"at δ={self.budget_delta:g} ({self.method} composition; spent ε={spent.epsilon:g}, "
            f"δ={spent.delta:g} over {spent.count} uses{where})")), reply_to=msg)

    def _warn_per_run(self) -> None:
        if self.budget is None or self.simulation_seed is not None or self._warned:
            return
        self._warned = True
        warnings.warn(f"ldp_mod's budget ε={self.budget:g} lasts one run only (context.state is per run, so "
                      f"submitting the app again spends it again); give the node a persistent ledger with "
                      f"ldp_mod(..., ledger_path=...) or node config {NODE_CONFIG_KEY}", UserWarning, stacklevel=3)

    def __call__(self, msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        if msg.metadata.message_type.split(".")[0] != MessageType.TRAIN:
            return call_next(msg, context)
        partition = _partition_id(context)
        server_round = check_int("server-round", _config_value(
            msg, "server-round", "ldp_mod keys each report and its ledger entry by (partition id, round) and needs "
            "it (FedAvg-based strategies send it)"), low=0)
        book = self._ledger_file(context)
        state_key = STATE_KEY
        if self.scope is not None:
            value = _config_value(msg, self.scope, f"ldp_mod(scope={self.scope!r}) keeps one account per value of it")
            state_key = f"{STATE_KEY}:{value}"
        _, sent = _one_array_record(msg, "train message")
        x_sent, layout = flatten(sent)
        if layout.dim != self.mechanism.dim:
            raise FedAuditError(f"mechanism dim={self.mechanism.dim} must equal the model's d={layout.dim} "
                                f"parameters ({layout.summary()})")
        where = "" if book is None else f" recorded in {book.path}"
        if book is None:
            self._warn_per_run()
        if self.budget is not None:  # refuse before training
            records = None if book is None else book.entries(partition)
            refusal = self._refusal(msg, partition, server_round,
                                    self._account(partition, context, state_key, records), where)
            if refusal is not None:
                return refusal
        out = call_next(msg, context)
        if out.has_error():
            return out
        key, returned = _one_array_record(out, "client's reply")
        x_new, new_layout = flatten(returned)
        if new_layout.keys != layout.keys or new_layout.shapes != layout.shapes:
            raise FedAuditError(f"the client replied arrays {new_layout.summary()}, which do not match the sent "
                                f"model's {layout.summary()}")
        metrics = out.content.metric_records
        if len(metrics) > 1:
            raise FedAuditError(f"ldp_mod needs at most one MetricRecord in the client's reply, found {len(metrics)}")
        if book is not None:  # charge before the report leaves the node (write-ahead), re-checked under the lock
            record = LedgerRecord(partition=partition, run=int(context.run_id), round=server_round,
                                  mechanism=self._fingerprint, name=self.mechanism.name,
                                  epsilon=float(self.mechanism.epsilon), delta=float(self.mechanism.delta))
            charged, before = book.charge(record, lambda recs: self._admits(
                self._account(partition, context, state_key, recs), partition))
            if not charged:
                return self._refusal(msg, partition, server_round,
                                     self._account(partition, context, state_key, before), where)
        report = self.mechanism.encode((x_new - x_sent)[None, :], self._generator(partition, server_round))[0]
        out.content[key] = ArrayRecord({REPORT_KEY: Array(np.ascontiguousarray(report, dtype=np.float64))})
        mkey, record_m = next(iter(metrics.items())) if metrics else ("metrics", MetricRecord())
        record_m[PARTITION_KEY] = partition
        record_m["bits"] = int(self.mechanism.bits_per_report)
        record_m["ldp-epsilon"] = float(self.mechanism.epsilon)
        record_m["ldp-delta"] = float(self.mechanism.delta)
        record_m["ldp-round"] = server_round
        record_m["ldp-mechanism"] = self._fingerprint
        out.content[mkey] = record_m
        if book is None:
            rounds = list(context.state[state_key]["rounds"]) if state_key in context.state else []
            context.state[state_key] = ConfigRecord({"rounds": rounds + [server_round]})
        return out


_SEED_REMOVED = ("ldp_mod(seed=...) was removed: a seed in app code lets the server recompute every report's "
                 "randomness and read the update back. Deployments draw each report from fresh OS entropy (the "
                 "default); for a reproducible simulation or audit pass simulation_seed=... instead")


def ldp_mod(mechanism: Mechanism, *, ledger: Ledger | None = None, budget: float | None = None,
            budget_delta: float = 0.0, method: str = "basic", scope: str | None = None,
            ledger_path: str | os.PathLike | None = None, simulation_seed: int | None = None,
            seed: Any = None) -> LDPMod:
    """A Flower client mod that sends ``mechanism``'s report of the client's update instead of the update.

    ``mechanism`` is any fedaudit :class:`~fedaudit.mechanisms.Mechanism` with a claimed guarantee and
    ``dim`` = the model's parameter count (``make_mechanism("sstq", d, 1.0)``, PrivUnitG, vqSGD,
    Laplace, Gaussian, …). ``budget`` (ε > 0, or None for no limit) at δ = ``budget_delta`` under
    ``method`` composition is each client's total; ``ledger`` holds uses made before this run
    (read once, now).

    Where the account lives: with ``ledger_path`` (an absolute path on the node) or the node config
    key ``ldp-ledger-path``, in that :class:`~.ledger_file.LedgerFile`, across runs; otherwise in
    ``context.state``, which lasts one run (the mod warns once: the budget is then spent again by
    every new run). ``scope`` (None: one account per client for the whole run) names a train-config
    key whose value gets its own in-run account — e.g. the experiment label when several strategies
    run one after another in one simulation, as :func:`~.simulation.run_flower` does; it cannot be
    combined with a persistent ledger (the server chooses config values).

    Randomness: by default each report draws from a generator seeded with 128 fresh bits of OS
    entropy (``secrets``), so nobody — the server included, knowing every configuration value — can
    recompute it. ``simulation_seed`` is for simulations and audits only: reports then come from
    ``derive_generator(simulation_seed, "flower-ldp;partition=<p>;round=<r>")`` and repeat bit for
    bit, which is exactly what lets anyone who knows the seed strip the noise; never ship it in a
    deployed app. (``seed=`` was removed for that reason and is an error.) See the module docstring
    for the wire layout, the refusal and the two ledgers.
    """
    if seed is not None:
        raise FedAuditError(_SEED_REMOVED)
    return LDPMod(mechanism, ledger=ledger, budget=budget, budget_delta=budget_delta, method=method, scope=scope,
                  ledger_path=ledger_path, simulation_seed=simulation_seed)


@dataclass(frozen=True)
class LDPRound:
    """One round's reports at the server: ``partitions`` (in reply order), ``bits_per_report`` and their
    ``total_bits``, the per-report guarantee (``epsilon``, ``delta``), and the partitions whose report
    was malformed (NaN or ±inf, or rejected by the mechanism's decode: decoded to NaN rows)."""

    round: int
    partitions: tuple[int, ...]
    bits_per_report: int
    total_bits: int
    epsilon: float
    delta: float
    malformed: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"round": self.round, "partitions": list(self.partitions),
                         "bits_per_report": self.bits_per_report, "total_bits": self.total_bits,
                         "epsilon": self.epsilon, "delta": self.delta, "malformed": list(self.malformed)})

    def summary(self) -> str:
        bad = f", {len(self.malformed)} malformed" if self.malformed else ""
        return (f"LDP round {self.round}: {len(self.partitions)} reports × {self.bits_per_report} bits = "
                f"{self.total_bits} bits, ε={self.epsilon:g}, δ={self.delta:g} per report{bad}")


class LDPDecoder:
    """The server hook of :func:`ldp_decoder`: ``decoder(rows, replies) -> (n, d)`` decoded update rows.

    ``rows`` is the strategy's view of the replies, or None, and only its length is used (a reply
    carries a report, not the model's layout); the reports are read from each reply's ``REPORT_KEY``
    array. ``rounds`` logs every call (:class:`LDPRound`); ``ledger`` (if any) is charged one use of
    the mechanism per report, keyed by partition id.
    """

    def __init__(self, mechanism: Mechanism, *, ledger: Ledger | None = None, budget: float | None = None,
                 budget_delta: float = 0.0, method: str = "basic"):
        self.mechanism = _check_mechanism(mechanism)
        self.budget, self.budget_delta, self.method = _check_budget(budget, budget_delta, method)
        if ledger is not None and not isinstance(ledger, Ledger):
            raise FedAuditError(f"ledger must be None or a fedaudit.accounting.Ledger, got {type(ledger).__name__}")
        if budget is not None and ledger is None:
            raise FedAuditError("budget needs a ledger: the decoder checks each report against the ledger it charges")
        self.ledger = ledger
        self._fingerprint = _fingerprint(self.mechanism)
        self._rounds: list[LDPRound] = []
        self._over_budget: dict[int, list[int]] = {}

    @property
    def rounds(self) -> tuple[LDPRound, ...]:
        return tuple(self._rounds)

    def __repr__(self) -> str:
        return f"LDPDecoder({self.mechanism!r}, rounds={len(self._rounds)})"

    def _read(self, msg: Message) -> tuple[np.ndarray, int, int]:
        if msg.has_error():
            raise FedAuditError(f"the decoder got an error reply (code {msg.error.code}): pass only valid replies")
        metrics = next(iter(msg.content.metric_records.values()), None)
        where = f"the reply from node {msg.metadata.src_node_id}"
        if metrics is None or "ldp-round" not in metrics or PARTITION_KEY not in metrics:
            raise FedAuditError(f"{where} has no LDP metrics ('ldp-round', {PARTITION_KEY!r}): is ldp_mod in its "
                                "ClientApp's mods?")
        partition = check_int(PARTITION_KEY, metrics[PARTITION_KEY], low=0)
        where = f"partition {partition}'s reply"
        mech = self.mechanism
        if metrics.get("ldp-mechanism") != self._fingerprint:
            raise FedAuditError(f"{where} was encoded by another mechanism (bits={metrics.get('bits')}, "
                                f"ldp-epsilon={metrics.get('ldp-epsilon')}, ldp-delta={metrics.get('ldp-delta')}) than "
                                f"the decoder's {mech!r} (bits={mech.bits_per_report}, epsilon={mech.epsilon}, "
                                f"delta={mech.delta}): client and server use different mechanisms")
        records = msg.content.array_records
        record = next(iter(records.values())) if len(records) == 1 else None
        if record is None or list(record.keys()) != [REPORT_KEY]:
            raise FedAuditError(f"{where} must hold one ArrayRecord with the single array {REPORT_KEY!r}")
        report = record[REPORT_KEY].numpy()
        if report.shape != (self.mechanism.report_width,):
            raise FedAuditError(f"{where}: the report has shape {report.shape}, expected "
                                f"({self.mechanism.report_width},) ({self.mechanism.report_layout})")
        return report.astype(np.float64, copy=False), partition, check_int("ldp-round", metrics["ldp-round"], low=0)

    def screen(self, msg: Message) -> str | None:
        """Why :class:`~.strategy.RobustStrategy` must drop this reply before decoding (None: keep it):
        no LDP metrics, another mechanism's fingerprint, a report of the wrong shape, or — with a
        budget — a partition already past it. A report past the budget is excluded and counted
        (``metrics(r)["ldp-over-budget"]``), not charged: the server does not use it."""
        try:
            _, partition, server_round = self._read(msg)
        except FedAuditError as err:
            return str(err)
        if self.budget is not None and not self.ledger.can_run(partition, self.mechanism, self.budget,
                                                               delta=self.budget_delta, method=self.method):
            self._over_budget.setdefault(server_round, []).append(partition)
            return (f"partition {partition} sent a report past its budget ε={self.budget:g} at "
                    f"δ={self.budget_delta:g} ({self.method}) in round {server_round}: excluded")
        return None

    def metrics(self, server_round: int) -> dict[str, float | int]:
        """Round ``server_round``'s LDP figures for Flower's aggregated metrics: ``ldp-bits`` (total bits
        of the reports decoded), ``ldp-reports``, ``ldp-over-budget`` (reports excluded past the budget)
        and ``ldp-epsilon-spent`` = max over partitions p of ε spent by p so far (``ledger.spent`` under
        ``method`` at δ = ``budget_delta``; without a ledger, the decoded reports composed the same way)."""
        done = [r for r in self._rounds if r.round == server_round]
        ledger = self.ledger
        if ledger is None:
            ledger = Ledger()
            for r in self._rounds:
                for p in r.partitions:
                    ledger.record(p, self.mechanism, round=r.round)
        spent = [ledger.spent(p, method=self.method, delta=self.budget_delta).epsilon for p in ledger.clients()]
        return {"ldp-bits": sum(r.total_bits for r in done), "ldp-reports": sum(len(r.partitions) for r in done),
                "ldp-over-budget": len(self._over_budget.get(server_round, ())),
                "ldp-epsilon-spent": float(max(spent, default=0.0))}

    def __call__(self, rows: Any, replies: Iterable[Message]) -> np.ndarray:
        replies = list(replies)
        if rows is not None and len(rows) != len(replies):
            raise FedAuditError(f"the decoder got {len(rows)} rows for {len(replies)} replies")
        if not replies:
            raise FedAuditError("the decoder got no replies")
        read = [self._read(m) for m in replies]
        reports = np.stack([r for r, _, _ in read])
        partitions = tuple(p for _, p, _ in read)
        server_rounds = {r for _, _, r in read}
        if len(server_rounds) != 1:
            raise FedAuditError(f"the replies come from different rounds {sorted(server_rounds)}")
        server_round = server_rounds.pop()
        if self.budget is not None:
            over = [p for p in partitions if not self.ledger.can_run(p, self.mechanism, self.budget,
                                                                     delta=self.budget_delta, method=self.method)]
            if over:
                raise FedAuditError(f"round {server_round}: partitions {over} sent a report past their budget "
                                    f"ε={self.budget:g} at δ={self.budget_delta:g} ({self.method}): the clients "
                                    "did not refuse, so the run's privacy claim no longer holds")
        decoded, ok = self._decode(reports)
        if self.ledger is not None:
            for p in partitions:
                self.ledger.record(p, self.mechanism, round=server_round)
        bits = int(self.mechanism.bits_per_report)
        self._rounds.append(LDPRound(server_round, partitions, bits, bits * len(partitions),
                                     float(self.mechanism.epsilon), float(self.mechanism.delta),
                                     tuple(p for p, good in zip(partitions, ok) if not good)))
        return decoded

    def _decode(self, reports: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(decoded rows, ok): ``mechanism.decode`` of the well-formed reports, NaN rows for the others — a
        report with NaN or ±inf, one the mechanism rejects (e.g. a vqSGD vertex index out of range) or
        one that decodes to a non-finite row. Decoded at once; row by row only to find a rejected one."""
        ok = np.isfinite(reports).all(axis=1)
        decoded = np.full((reports.shape[0], self.mechanism.dim), np.nan)
        try:
            decoded[ok] = self.mechanism.decode(reports[ok])
        except FedAuditError:
            for i in np.flatnonzero(ok):
                try:
                    decoded[i] = self.mechanism.decode(reports[i:i + 1])[0]
                except FedAuditError:
                    ok[i] = False
        ok &= np.isfinite(decoded).all(axis=1)
        decoded[~ok] = np.nan
        return decoded, ok


def ldp_decoder(mechanism: Mechanism, *, ledger: Ledger | None = None, budget: float | None = None,
                budget_delta: float = 0.0, method: str = "basic") -> LDPDecoder:
    """The server side of :func:`ldp_mod`: ``RobustStrategy(..., decoder=ldp_decoder(mechanism, ledger=L))``.

    Decodes the n reports of a round to ``mechanism.decode(reports)`` (unbiased update estimates),
    logs bits per report per round, charges ``ledger`` one use per report, and with ``budget`` (which
    needs ``ledger``) raises when a report comes from a client past its budget.
    """
    return LDPDecoder(mechanism, ledger=ledger, budget=budget, budget_delta=budget_delta, method=method)
