"""Stress grids: train under every (aggregator, attack, f, β) and map where robust training breaks.

A grid is ``aggregators × attacks × f × β``. Each cell builds a federation (``n_honest`` honest
clients holding a Dirichlet(β) split of the dataset, ``f`` Byzantine clients running the attack,
ℓ2 regularisation μ, the server aggregating with the rule) and runs the optimizer for ``rounds``
rounds from x0 = 0, recording the honest loss L_H(x_t) and the test accuracy every round.

Seeds. Cell ``c`` with canonical key ``"aggregator=…;attack=…;f=…;beta=…"`` gets
``seed_c = derive_seed(root_seed, key_c)`` (:func:`fedaudit.rng.derive_seed`: the key's
SHA-256 words as the ``spawn_key`` of ``SeedSequence(root_seed)``); the optimizer's run (one
oracle stream per round, see :func:`fedaudit.fl.training.run`) is seeded with
``derive_seed(seed_c, "optimizer")``. The honest clients' data split is a function of the β part
of the key only: ``partition_seed = derive_seed(root_seed, "partition;beta=…")`` seeds
``Federation.build``, so every aggregator, attack and f at the same β trains on the *same*
honest shards (common random numbers: differences between cells of one column of a heatmap
are due to the defense and the attack, not to a different draw of the heterogeneity). The
train/test split is shared by every cell (seeded with the root seed). A cell's result is
therefore a function of (run configuration, root seed, cell key) only — not of the grid's
order, its other cells, the number of workers or the backend.

Breakdown rule (``breakdown`` = any of the following, with the reasons listed):

* ``aggregator breakdown at round k`` — round k's aggregate raised
  :class:`~fedaudit.errors.AggregatorBreakdown` (more non-finite inputs than the rule
  tolerates, e.g. ``declared_f`` below the true f under the NonFinite attack); training stops
  there, the cell has ``aggregator_breakdown = {"round", "rule", "n", "nonfinite",
  "tolerated", "message"}`` and null final loss and accuracy;
* ``loss not finite``  — the final honest loss is NaN or ±inf, including a run that
  :func:`~fedaudit.fl.training.run` stopped early as diverged (non-finite iterate, or
  loss > 10⁶·L(x0)) or that raised on non-finite values; such a cell has ``diverged: true`` and
  null final loss and accuracy;
* ``loss > 10×L(x0)`` — the final honest loss exceeds ten times the loss at the start point;
* ``accuracy < chance+0.05`` — the final test accuracy is below 1/n_classes + 0.05.

Files in ``out_dir``: ``cells.jsonl`` (one JSON object per finished cell, appended, flushed and
fsynced as each cell completes — a crash loses only the cells still running; rerunning skips
every cell whose key is already there; a torn last line is dropped), ``config.json`` (the run
configuration the cells belong to; a rerun with a different configuration is refused),
``summary.json`` and, when :func:`run_stress` is given ``draw`` (e.g.
:func:`fedaudit.reports.heatmap.plot_heatmaps`), ``heatmap_<aggregator>.png`` (worst case over
attacks of final accuracy and of final loss on the f × β grid). JSON follows :mod:`fedaudit.json`: a non-finite number in a
trace is the string ``"inf"``, ``"-inf"`` or ``"nan"``; ``null`` means absent (the final loss
and accuracy of a run that diverged or broke down, marked by ``diverged`` /
``aggregator_breakdown``).

Finished cells are evidence, not verdicts. A rerun reloads them into the summary (and a plan's
stress claim into a report it may sign), and whoever can write ``out_dir`` could edit one. So
``cells.jsonl`` is a tamper-evident chain (:mod:`fedaudit.chain`): its first line is the header
``{"format": "fedaudit-stress-cells", "version": 1, "config_id", "run_config", "nonce", "key_id",
"mac"}`` (the run configuration, a fresh random nonce, the name of this user's fedaudit secret and
the header's HMAC under ``derive_key(secret, "stress-cells", nonce)``); every cell line carries
``seq`` (1, 2, … in the order cells finished), ``prev`` (the MAC of the line before) and its own
``mac``. :func:`load_cells` checks every MAC and the chain, so an edited cell, one copied from
another run, two swapped or one deleted before the last are refused; then it validates each cell
(:func:`_cell_problem`: the types and ranges of what the summary reads, the key naming the cell's
fields, the seeds derived from the root seed and the key, the run's settings, the final loss and
accuracy equal to the last entries of the trace, ``breakdown`` as the breakdown rule gives it).
A refused file is one :class:`~fedaudit.errors.CheckpointError` naming the file and the line
(the CLI exits 2 and writes no summary; a plan run stops without a report); removing the file
computes its cells again. The file is resumed by the user, on the machine, that wrote it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedaudit.audit.convergence import rounds_to_target
from fedaudit import chain
from fedaudit import json as fjson
from fedaudit.engine import check_run_options, run_tasks
from fedaudit.errors import CheckpointError, FedAuditError, writing
from fedaudit.fl.data import load_dataset
from fedaudit.fl.federation import Federation
from fedaudit.fl.registry import OPTIMIZERS, lookup, make_optimizer
from fedaudit.fl.training import run
from fedaudit.json import finite_or_none, jsonable
from fedaudit.rng import derive_seed
from fedaudit.validation import check_int, check_positive, check_real

__all__ = [
    "BREAKDOWN_LOSS_FACTOR",
    "BREAKDOWN_ACCURACY_MARGIN",
    "StressConfig",
    "Cell",
    "StressResult",
    "run_stress",
    "run_cell",
    "cell_seed",
    "partition_seed",
    "load_cells",
    "summarize",
]

#: Breakdown when the final loss exceeds this multiple of the loss at x0.
BREAKDOWN_LOSS_FACTOR = 10.0
#: Breakdown when the final accuracy is below chance (1/n_classes) plus this margin.
BREAKDOWN_ACCURACY_MARGIN = 0.05

CELLS_FILE = "cells.jsonl"
#: the ``format`` of the header line of ``cells.jsonl``, and its version
CELLS_FORMAT = "fedaudit-stress-cells"
_CELLS_VERSION = 1
#: the fields :class:`fedaudit.chain.Chain` adds to a cell record
_CHAIN_FIELDS = ("seq", "prev", "mac")
#: the :meth:`StressConfig.run_config` entries a cell is checked against
_RUN_KEYS = {"dataset", "optimizer", "rounds", "lr", "n_honest", "mu", "seed"}
#: the advice of every refused cells file
_AGAIN = "remove it to compute its cells again"
CONFIG_FILE = "config.json"
SUMMARY_FILE = "summary.json"


# ----------------------------------------------------------------------------- configuration


def _names(what: str, values: Iterable[str]) -> tuple[str, ...]:
    if isinstance(values, str):
        values = values.split(",")
    out: list[str] = []
    for v in values:
        if not isinstance(v, str):
            raise FedAuditError(f"{what} must be names, got {v!r}")
        v = _canonical(v)
        if v and v not in out:
            out.append(v)
    if not out:
        raise FedAuditError(f"{what} must name at least one entry")
    return tuple(out)


def _canonical(name: str) -> str:
    """A name or '+'-joined spec in canonical form: registered names lowercase, ``module:attr``
    references kept as written."""
    return "+".join(p.strip() if ":" in p else p.strip().lower() for p in name.split("+"))


def _unique(values: Iterable[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return tuple(out)


def _fmt_beta(beta: float) -> str:
    """Canonical text of β for keys: shortest round-trip repr of the float (1.0, 0.5, 0.001)."""
    return repr(float(beta))


@dataclass(frozen=True)
class Cell:
    """One grid point. ``key`` is the canonical string that names it (and seeds it)."""

    aggregator: str
    attack: str
    f: int
    beta: float

    @property
    def key(self) -> str:
        return f"aggregator={self.aggregator};attack={self.attack};f={self.f};beta={_fmt_beta(self.beta)}"


@dataclass(frozen=True)
class StressConfig:
    """A stress grid and the training run every cell performs.

    Grid axes: ``aggregators`` (registry specs such as ``"cwtm"``, ``"nnm+cwtm"`` or
    ``"nnm+pkg.mod:Rule"``), ``attacks`` (names of ``fedaudit.attacks.ATTACKS``, ``module:attr``
    references or ``"labelflip"``), ``fs`` (Byzantine counts, each
    < ``n_honest``) and ``betas`` (Dirichlet concentrations > 0; smaller = more heterogeneous).
    Run: ``optimizer`` (a name of :data:`fedaudit.fl.registry.OPTIMIZERS` or a ``module:attr``
    reference, built by :func:`~fedaudit.fl.registry.make_optimizer`) for ``rounds`` rounds — ``dgd`` and ``dnag``
    (momentum 0.9) with step size ``lr``; ``robust-accelerated`` takes L and μ from the
    federation and ``pigs`` its default η (1/(2·1.25·Δ̂), Δ̂ the max along the run), so ``lr``
    does not apply to them — ``n_honest`` honest clients, regularisation ``mu``,
    ``optimal_attack`` (line-search the
    attack's scale against the aggregator each round). ``target_accuracy`` only affects the
    report (rounds to reach it), never the training. ``aggregator_params`` maps an aggregator
    spec to the keywords :func:`~fedaudit.defenses.registry.make_aggregator` gets for it (e.g.
    ``{"bucketing+cwtm": {"s": 2}}``); specs not named get none. ``declared_f`` (default: each
    cell's f) is the Byzantine count every rule is configured for; below a cell's f it models a
    server that underestimates the adversary. Validated on construction.
    """

    aggregators: tuple[str, ...] = ("cwtm", "nnm+cwtm", "krum", "gm")
    attacks: tuple[str, ...] = ("alie", "ipm", "signflip", "minmax")
    fs: tuple[int, ...] = (1, 3, 5)
    betas: tuple[float, ...] = (0.5, 1.0, 5.0)
    dataset: str = "digits"
    data_path: str | None = None
    optimizer: str = "dgd"
    rounds: int = 300
    lr: float = 0.1
    n_honest: int = 20
    mu: float = 1e-2
    seed: int = 0
    optimal_attack: bool = True
    target_accuracy: float | None = None
    aggregator_params: dict[str, dict[str, Any]] | None = None
    declared_f: int | None = None

    def params_for(self, spec: str) -> dict[str, Any]:
        """The make_aggregator keywords of one aggregator spec (empty when none were given)."""
        return dict((self.aggregator_params or {}).get(spec, {}))

    def __post_init__(self) -> None:
        from fedaudit.attacks.registry import make_attack
        from fedaudit.defenses.registry import make_aggregator

        set_ = functools.partial(object.__setattr__, self)
        set_("aggregators", _names("aggregators", self.aggregators))
        set_("attacks", _names("attacks", self.attacks))
        if isinstance(self.fs, (int, np.integer)):
            set_("fs", (self.fs,))
        if isinstance(self.betas, (int, float, np.number)):
            set_("betas", (self.betas,))
        set_("n_honest", check_int("n_honest", self.n_honest, low=2))
        set_("fs", _unique(check_int("f", f, low=0, high=self.n_honest - 1, high_name="n_honest - 1")
                           for f in self.fs))
        set_("betas", _unique(check_positive("beta", b) for b in self.betas))
        if not self.fs or not self.betas:
            raise FedAuditError("the grid needs at least one f and one beta")
        set_("rounds", check_int("rounds", self.rounds, low=1))
        set_("lr", check_positive("lr", self.lr))
        set_("mu", check_real("mu", self.mu, low=0.0))
        set_("seed", check_int("seed", self.seed, low=0))
        set_("optimal_attack", bool(self.optimal_attack))
        if not isinstance(self.dataset, str) or not self.dataset.strip():
            raise FedAuditError(f"dataset must be a name such as 'digits', got {self.dataset!r}")
        set_("dataset", self.dataset.strip().lower())
        if self.data_path is not None:
            set_("data_path", str(self.data_path))
        opt = _canonical(str(self.optimizer))
        lookup(OPTIMIZERS, opt)
        set_("optimizer", opt)
        if self.target_accuracy is not None:
            set_("target_accuracy", check_real("target_accuracy", self.target_accuracy, low=0.0, high=1.0))
        for name in self.attacks:
            if name != "labelflip":  # data poisoning, handled by Federation itself
                try:
                    make_attack(name)
                except FedAuditError as exc:  # the registry's message lists the valid names
                    raise FedAuditError(f"{exc} (or labelflip)") from None
        params = {str(k).strip().lower(): dict(v) for k, v in (self.aggregator_params or {}).items()}
        stray = [k for k in params if k not in self.aggregators]
        if stray:
            raise FedAuditError(f"aggregator_params names {stray[0]!r}, which is not in the grid's aggregators")
        set_("aggregator_params", params or None)
        if self.declared_f is not None:
            set_("declared_f", check_int("declared_f", self.declared_f, low=0))
        for spec in self.aggregators:
            for f in self.fs:
                rule_f = f if self.declared_f is None else self.declared_f
                rule = make_aggregator(spec, rule_f, **self.params_for(spec))  # raises with the registry's list of valid names
                need = rule.min_n(rule_f) if hasattr(rule, "min_n") else 2 * rule_f + 1
                if self.n_honest + f < need:
                    raise FedAuditError(f"aggregator {spec!r} needs n >= {need} clients for f={f}, got "
                                        f"n = n_honest + f = {self.n_honest + f}; raise n_honest or lower f")

    def cells(self) -> list[Cell]:
        """The grid in aggregator, attack, f, β order."""
        return [Cell(a, t, f, b) for a in self.aggregators for t in self.attacks for f in self.fs for b in self.betas]

    def run_config(self) -> dict[str, Any]:
        """What every cell's training depends on besides its key (must match to resume a directory)."""
        return {"dataset": self.dataset, "data_path": self.data_path, "optimizer": self.optimizer,
                "rounds": self.rounds, "lr": self.lr, "n_honest": self.n_honest, "mu": self.mu,
                "seed": self.seed, "optimal_attack": self.optimal_attack,
                **({"aggregator_params": self.aggregator_params} if self.aggregator_params else {}),
                **({"declared_f": self.declared_f} if self.declared_f is not None else {})}

    @property
    def config_id(self) -> str:
        # deliberately the stdlib json.dumps (ensure_ascii, no fedaudit.json conversion): the id
        # hashes this exact text, and changing the serialisation would change every config_id
        text = json.dumps(self.run_config(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(aggregators=list(self.aggregators), attacks=list(self.attacks), fs=list(self.fs),
                 betas=list(self.betas), config_id=self.config_id)
        return d


def cell_seed(root_seed: int, cell: Cell | str) -> int:
    """The cell's seed: :func:`fedaudit.rng.derive_seed` of the root seed and the cell key."""
    return derive_seed(root_seed, cell.key if isinstance(cell, Cell) else cell)


def partition_seed(root_seed: int, beta: float) -> int:
    """Seed of the honest data split at β (shared by all aggregators, attacks and f of a column)."""
    return derive_seed(root_seed, f"partition;beta={_fmt_beta(beta)}")


# ----------------------------------------------------------------------------- one cell


@functools.lru_cache(maxsize=4)
def _dataset(name: str, path: str | None, seed: int):
    """The train/test data of a grid (cached: every cell of a worker shares it). ``seed`` is the
    grid's root seed, the dataset's own entry point (its train/test split)."""
    return load_dataset(name, path=path, rng=seed)


def _number(x: Any) -> float | str:
    """A trace value under the :mod:`fedaudit.json` convention: non-finite → "inf"/"-inf"/"nan"."""
    return jsonable(float(x))


def _breakdown(final_loss: float, initial_loss: float, final_acc: float | None, n_classes: int | None) -> list[str]:
    reasons = []
    if not math.isfinite(final_loss):
        reasons.append("loss not finite")
    elif math.isfinite(initial_loss) and final_loss > BREAKDOWN_LOSS_FACTOR * initial_loss:
        reasons.append(f"loss > {BREAKDOWN_LOSS_FACTOR:g}×L(x0)")
    if final_acc is not None and n_classes:
        if not math.isfinite(final_acc) or final_acc < 1.0 / n_classes + BREAKDOWN_ACCURACY_MARGIN:
            reasons.append(f"accuracy < chance+{BREAKDOWN_ACCURACY_MARGIN:g}")
    return reasons


def run_cell(task: tuple[StressConfig, Cell, int]) -> dict[str, Any]:
    """Train one cell and return its JSON record (top-level and picklable, for :func:`run_tasks`)."""
    config, cell, seed = task
    start = time.perf_counter()
    data = _dataset(config.dataset, config.data_path, config.seed)
    part_seed = partition_seed(config.seed, cell.beta)
    fed = Federation.build(data, n_honest=config.n_honest, f=cell.f, scheme="dirichlet", beta=cell.beta,
                           mu=config.mu, aggregator=cell.aggregator, attack=cell.attack,
                           optimal_attack=config.optimal_attack, rng=part_seed,
                           aggregator_kw=config.params_for(cell.aggregator), declared_f=config.declared_f)
    x0 = np.zeros(fed.dim)
    n_classes = int(data.n_classes)
    error = None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        initial_loss = float(fed.honest_loss(x0))
        initial_acc = fed.test_accuracy(x0)
        try:
            optimizer = make_optimizer(config.optimizer, settings={"lr": config.lr, "momentum": 0.9})
            trace = run(optimizer, fed, x0, config.rounds, rng=derive_seed(seed, "optimizer"))
        except (FedAuditError, ArithmeticError) as exc:  # training blew up on non-finite values
            trace, error = None, f"{type(exc).__name__}: {exc}"
    diverged = trace is None or trace.diverged
    rule_broke = None if trace is None else trace.breakdown
    stopped = diverged or rule_broke is not None
    rounds = [] if trace is None else [int(r) for r in trace.rounds]
    losses = [] if trace is None else [_number(v) for v in trace.loss]
    accs = [] if trace is None else [None if a is None else _number(a) for a in trace.test_acc]
    # a run that diverged or broke down (stopped early) has no final loss or accuracy
    final_loss = float("inf") if stopped else float(trace.loss[-1])
    final_acc = None if stopped else finite_or_none(trace.test_acc[-1])
    final_grad = None if stopped else finite_or_none(trace.grad_norm[-1])
    best_acc = max([a for a in accs if isinstance(a, float)], default=None)
    reasons = _breakdown(final_loss, initial_loss, final_acc, n_classes)
    if error is not None:
        reasons.insert(0, "training raised: " + error)
    elif rule_broke is not None:
        reasons = [f"aggregator breakdown at round {rule_broke['round']}: {rule_broke['nonfinite']} of "
                   f"{rule_broke['n']} rows non-finite, {rule_broke['rule']} tolerates {rule_broke['tolerated']}"]
    elif diverged:
        reasons.insert(0, f"diverged (run stopped early; last recorded round {rounds[-1]})")
    return {
        "key": cell.key, "aggregator": cell.aggregator, "attack": cell.attack, "f": cell.f, "beta": cell.beta,
        "n_honest": config.n_honest, "dataset": config.dataset, "optimizer": config.optimizer,
        "rounds": config.rounds, "lr": config.lr, "mu": config.mu,
        "initial_loss": finite_or_none(initial_loss), "initial_accuracy": finite_or_none(initial_acc),
        "final_loss": finite_or_none(final_loss), "final_grad_norm": final_grad,
        "final_accuracy": finite_or_none(final_acc), "best_accuracy": best_acc,
        "target_accuracy": config.target_accuracy,
        "rounds_to_target": None if stopped else rounds_to_target(rounds, accs, config.target_accuracy),
        "breakdown": bool(reasons), "breakdown_reasons": reasons, "n_classes": n_classes,
        "runtime_s": round(time.perf_counter() - start, 4), "seed": seed, "partition_seed": part_seed,
        "root_seed": config.seed,
        "config_id": config.config_id,
        "diverged": diverged,
        "aggregator_breakdown": rule_broke,
        # the optimizer's own choices, e.g. PIGS's η and the Δ̂ estimates it came from
        "optimizer_info": None if trace is None else jsonable(trace.info),
        "declared_f": cell.f if config.declared_f is None else config.declared_f,
        "trace": {"round": rounds, "loss": losses, "accuracy": accs},
    }


# ----------------------------------------------------------------------------- files


def load_cells(out_dir: str | os.PathLike, config: StressConfig | None = None, *,
               repair: bool = False) -> dict[str, dict]:
    """Finished cells in ``out_dir/cells.jsonl`` by key, each authenticated and validated.

    The file is a chain (:mod:`fedaudit.chain`, format in the module docstring). A torn last line
    (a kill in the middle of a write) is ignored, and with ``repair=True`` cut off the file so the
    next append starts on a fresh line. With ``config``, a file of another run configuration
    (``config_id`` differs) is an error: one directory holds one run configuration. Everything
    else that is not what fedaudit wrote is a :class:`~fedaudit.errors.CheckpointError` naming the
    file and the line: a header or a cell that fails its authentication, a missing or moved cell
    (the chain breaks), a file that cannot be authenticated here (another user's or machine's
    secret), a cell recorded twice, and a cell whose fields are not a cell of this run
    (:func:`_cell_problem`).
    """
    if config is not None and not isinstance(config, StressConfig):
        raise FedAuditError(f"config must be a StressConfig or None, got {type(config).__name__}")
    return _read_cells(Path(out_dir) / CELLS_FILE, config, repair)[0]


def _read_cells(path: Path, config: StressConfig | None, repair: bool) -> tuple[dict[str, dict], "chain.Chain | None"]:
    """:func:`load_cells` and the chain to append to (None when the file holds no header yet)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise FedAuditError(f"cannot read {path}: {exc.strerror or exc}") from None
    cut = raw.rfind(b"\n") + 1  # after it: a torn write, or nothing
    lines = raw[:cut].split(b"\n")[:-1]
    what = f"stress cells {path}"
    cells: dict[str, dict] = {}
    link = None
    if lines:
        try:
            header = fjson.loads(lines[0], what=what)
        except FedAuditError:
            header = None
        if not isinstance(header, dict) or header.get("format") != CELLS_FORMAT:
            raise CheckpointError(f"{what} has no valid header line (altered, or written by a fedaudit without "
                                  f"authenticated cells); {_AGAIN}")
        if header.get("version") != _CELLS_VERSION:
            raise CheckpointError(f"{what} has format version {header.get('version')!r}, this fedaudit reads "
                                  f"version {_CELLS_VERSION}; {_AGAIN}")
        if config is not None and header.get("config_id") != config.config_id:
            raise CheckpointError(f"{path} holds cells from a different run configuration (config_id "
                                  f"{header.get('config_id')} != {config.config_id}); use a new --out directory")
        link = chain.open_user_chain(header, chain.CELLS_PURPOSE, what, _AGAIN)
        run = config.run_config() if config is not None else header.get("run_config")
        if not isinstance(run, dict) or not _RUN_KEYS <= set(run):
            raise CheckpointError(f"{what}: its header has no valid run_config; {_AGAIN}")
        for number, line in enumerate(lines[1:], 2):
            where = f"{what}: line {number}"
            try:
                rec = fjson.loads(line, what=where)
            except FedAuditError:
                raise CheckpointError(f"{where} is not a cell record (not JSON); {_AGAIN}") from None
            if not link.follows(rec):
                raise CheckpointError(f"{where} fails its authentication: the cell was altered, or one written "
                                      f"before it is missing or out of place; {_AGAIN}")
            cell = {k: v for k, v in rec.items() if k not in _CHAIN_FIELDS}
            problem = _cell_problem(cell, run, header.get("config_id"))
            if problem is not None:
                raise CheckpointError(f"{where} is not a valid cell: {problem}; {_AGAIN}")
            if cell["key"] in cells:
                raise CheckpointError(f"{where} records cell {cell['key']} a second time; {_AGAIN}")
            cells[cell["key"]] = cell
    if cut < len(raw) and repair:  # drop a torn tail (a whole torn header included)
        with open(path, "r+b") as fh:
            fh.truncate(cut)
    return cells, link


def _new_cells_chain(config: StressConfig) -> tuple[dict[str, Any], "chain.Chain"]:
    """The header and chain of a new ``cells.jsonl`` of ``config`` (a fresh nonce, this user's secret)."""
    return chain.new_user_chain(chain.CELLS_PURPOSE, {
        "format": CELLS_FORMAT, "version": _CELLS_VERSION, "config_id": config.config_id,
        "run_config": jsonable(config.run_config())})


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _real_in(value: Any, low: float, high: float = math.inf, *, nullable: bool = True) -> bool:
    """``value`` is a finite JSON number in [low, high] (or null when ``nullable``)."""
    if value is None:
        return nullable
    return _is_real(value) and math.isfinite(value) and low <= value <= high


def _trace_number(value: Any) -> float | None:
    """A trace entry as a float (the strings "inf", "-inf", "nan" of :mod:`fedaudit.json`
    included); None when it is neither."""
    if _is_real(value):
        return float(value)
    if value in ("inf", "-inf", "nan"):
        return float(value)
    return None


def _cell_problem(rec: dict[str, Any], run: dict[str, Any], config_id: Any) -> str | None:
    """What makes ``rec`` not a cell :func:`run_cell` of the run configuration ``run`` (a
    :meth:`StressConfig.run_config`) can have written, or None: the types and ranges of every
    field the summary and the stress claim read, its key naming its aggregator, attack, f and β,
    its seeds derived from the root seed and the key, the run's own settings, final values equal
    to the last entries of its trace, and ``breakdown`` and its reasons as the breakdown rule
    gives them from the final values (for a cell whose run was not stopped)."""
    key, agg, attack, f, beta = (rec.get(k) for k in ("key", "aggregator", "attack", "f", "beta"))
    if not isinstance(key, str) or not isinstance(agg, str) or not isinstance(attack, str):
        return "key, aggregator and attack must be strings"
    if type(f) is not int or not 0 <= f < run["n_honest"]:
        return f"f must be an integer in [0, n_honest), got {f!r}"
    if not _real_in(beta, 0.0, nullable=False) or beta == 0:
        return f"beta must be a number > 0, got {beta!r}"
    if key != Cell(agg, attack, f, float(beta)).key:
        return f"key {key!r} does not name its aggregator, attack, f and beta"
    root = run["seed"]
    if type(rec.get("seed")) is not int or rec["seed"] != cell_seed(root, key):
        return f"seed {rec.get('seed')!r} is not derive_seed(root seed, key)"
    if type(rec.get("partition_seed")) is not int or rec["partition_seed"] != partition_seed(root, float(beta)):
        return f"partition_seed {rec.get('partition_seed')!r} is not the data split's seed at beta={beta}"
    declared = f if run.get("declared_f") is None else run["declared_f"]
    for name, want in (("root_seed", root), ("config_id", config_id), ("n_honest", run["n_honest"]),
                       ("dataset", run["dataset"]), ("optimizer", run["optimizer"]), ("rounds", run["rounds"]),
                       ("lr", run["lr"]), ("mu", run["mu"]), ("declared_f", declared)):
        if rec.get(name) != want or type(rec.get(name)) is bool:
            return f"{name} {rec.get(name)!r} is not the run's {want!r}"
    for name, high in (("final_accuracy", 1.0), ("initial_accuracy", 1.0), ("best_accuracy", 1.0),
                       ("final_loss", math.inf), ("initial_loss", math.inf), ("final_grad_norm", math.inf)):
        if not _real_in(rec.get(name), 0.0, high):
            return f"{name} must be null or a finite number in [0, {high:g}], got {rec.get(name)!r}"
    if not _real_in(rec.get("runtime_s"), 0.0, nullable=False):
        return f"runtime_s must be a finite number >= 0, got {rec.get('runtime_s')!r}"
    if type(rec.get("n_classes")) is not int or rec["n_classes"] < 2:
        return f"n_classes must be an integer >= 2, got {rec.get('n_classes')!r}"
    for name in ("breakdown", "diverged"):
        if type(rec.get(name)) is not bool:
            return f"{name} must be true or false, got {rec.get(name)!r}"
    reasons = rec.get("breakdown_reasons")
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        return "breakdown_reasons must be a list of strings"
    if rec["breakdown"] != bool(reasons):
        return f"breakdown is {rec['breakdown']} with {len(reasons)} breakdown reason(s)"
    broke = rec.get("aggregator_breakdown")
    if broke is not None and not isinstance(broke, dict):
        return "aggregator_breakdown must be null or an object"
    rtt = rec.get("rounds_to_target")
    if rtt is not None and (type(rtt) is not int or rtt < 0):
        return f"rounds_to_target must be null or an integer >= 0, got {rtt!r}"
    trace = rec.get("trace")
    if not isinstance(trace, dict) or not all(isinstance(trace.get(k), list) for k in ("round", "loss", "accuracy")):
        return "trace must be an object with the lists round, loss and accuracy"
    rounds, losses, accs = trace["round"], trace["loss"], trace["accuracy"]
    if not len(rounds) == len(losses) == len(accs) or rounds != list(range(len(rounds))) \
            or len(rounds) > run["rounds"] + 1:
        return "trace must hold rounds 0, 1, … (at most the run's rounds) with one loss and one accuracy each"
    loss_values = [_trace_number(v) for v in losses]
    acc_values = [None if a is None else _trace_number(a) for a in accs]
    if any(v is None for v in loss_values) or any(a is None and b is not None for a, b in zip(acc_values, accs)):
        return "trace losses and accuracies must be numbers (or \"inf\", \"-inf\", \"nan\"; accuracies also null)"
    best = max([a for a in accs if isinstance(a, float)], default=None)
    if rec.get("best_accuracy") != best:
        return f"best_accuracy {rec.get('best_accuracy')!r} is not the best accuracy of its trace ({best!r})"
    if rec["diverged"] or broke is not None:  # stopped early: no final values, a breakdown
        if any(rec.get(k) is not None for k in ("final_loss", "final_accuracy", "final_grad_norm", "rounds_to_target")):
            return "a diverged or broken-down cell must have null final_loss, final_accuracy and final_grad_norm"
        if not rec["breakdown"]:
            return "breakdown must be true for a diverged or broken-down cell"
        return None
    if len(rounds) != run["rounds"] + 1:
        return f"trace must reach round {run['rounds']} (the cell neither diverged nor broke down)"
    final_loss = loss_values[-1]
    if rec.get("final_loss") != finite_or_none(final_loss):
        return f"final_loss {rec.get('final_loss')!r} is not the last loss of its trace"
    if rec.get("final_accuracy") != finite_or_none(acc_values[-1]):
        return f"final_accuracy {rec.get('final_accuracy')!r} is not the last accuracy of its trace"
    initial = rec.get("initial_loss")
    if reasons != _breakdown(final_loss, math.nan if initial is None else float(initial),
                             rec.get("final_accuracy"), rec["n_classes"]):
        return f"breakdown and breakdown_reasons {reasons!r} are not what the breakdown rule gives"
    return None


def _check_config_file(out_dir: Path, config: StressConfig) -> None:
    path = out_dir / CONFIG_FILE
    mine = {"config_id": config.config_id, **config.run_config()}
    if path.exists():
        try:
            theirs = fjson.loads(path.read_bytes(), what=str(path))
        except FedAuditError:
            theirs = {}
        if theirs.get("config_id") not in (None, config.config_id):
            diff = sorted(k for k in mine if theirs.get(k) != mine[k])
            raise FedAuditError(f"{out_dir} holds a stress run with a different configuration "
                                f"({', '.join(diff) or 'config_id'} differ); use a new --out directory")

    with writing(str(path)):
        path.write_text(fjson.dumps(mine, indent=2) + "\n")


# ----------------------------------------------------------------------------- summary


def _worst(values: list[tuple[float | None, str]], *, lower_is_worse: bool) -> tuple[float | None, str | None]:
    """Worst (value, attack); ``None`` values (non-finite) are the worst of all."""
    if not values:
        return None, None
    for v, a in values:
        if v is None:
            return None, a
    pick = min if lower_is_worse else max
    return pick(values, key=lambda t: t[0])


def summarize(config: StressConfig, cells: dict[str, dict]) -> dict[str, Any]:
    """Grid summary: per-cell results and, per aggregator, the worst case over attacks on f × β.

    ``worst_accuracy[i][j]`` is the minimum over attacks of the final test accuracy at
    ``f = fs[i]``, ``β = betas[j]`` and ``worst_loss[i][j]`` the maximum of the final honest loss
    (``null`` when a run diverged; ``loss_diverged[i][j]`` is then true). ``rounds_to_target`` is
    recomputed from each cell's accuracy trace for ``config.target_accuracy``.
    """
    grid = config.cells()
    rows, missing = [], []
    for cell in grid:
        rec = cells.get(cell.key)
        if rec is None:
            missing.append(cell.key)
            continue
        row = {k: v for k, v in rec.items() if k != "trace"}
        tr = rec.get("trace") or {}
        row["target_accuracy"] = config.target_accuracy
        row["rounds_to_target"] = (None if rec.get("diverged") or rec.get("aggregator_breakdown") else
                                   rounds_to_target(tr.get("round", []), tr.get("accuracy", []), config.target_accuracy))
        rows.append(row)
    by_key = {r["key"]: r for r in rows}
    per_agg = {}
    for agg in config.aggregators:
        acc = [[None] * len(config.betas) for _ in config.fs]
        acc_att = [[None] * len(config.betas) for _ in config.fs]
        loss = [[None] * len(config.betas) for _ in config.fs]
        loss_att = [[None] * len(config.betas) for _ in config.fs]
        diverged = [[False] * len(config.betas) for _ in config.fs]
        broken = [[0] * len(config.betas) for _ in config.fs]
        rule_broke = [[0] * len(config.betas) for _ in config.fs]
        for i, f in enumerate(config.fs):
            for j, b in enumerate(config.betas):
                recs = [(t, by_key[Cell(agg, t, f, b).key]) for t in config.attacks if Cell(agg, t, f, b).key in by_key]
                if not recs:
                    continue
                acc[i][j], acc_att[i][j] = _worst([(r["final_accuracy"], t) for t, r in recs], lower_is_worse=True)
                loss[i][j], loss_att[i][j] = _worst([(r["final_loss"], t) for t, r in recs], lower_is_worse=False)
                diverged[i][j] = any(r["final_loss"] is None for _, r in recs)
                broken[i][j] = sum(bool(r["breakdown"]) for _, r in recs)
                rule_broke[i][j] = sum(r.get("aggregator_breakdown") is not None for _, r in recs)
        per_agg[agg] = {"worst_accuracy": acc, "worst_accuracy_attack": acc_att, "worst_loss": loss,
                        "worst_loss_attack": loss_att, "loss_diverged": diverged, "breakdowns": broken,
                        "aggregator_breakdowns": rule_broke,
                        "attacks": len(config.attacks)}
    missed = ([r["key"] for r in rows if r["rounds_to_target"] is None]
              if config.target_accuracy is not None else [])
    return {
        "schema": "fedaudit.stress/1",
        "config": config.to_dict(),
        "breakdown_rule": (f"the aggregator broke down (more non-finite inputs than it tolerates), or "
                           f"final honest loss not finite, or > {BREAKDOWN_LOSS_FACTOR:g} × loss at x0, "
                           f"or final test accuracy < 1/n_classes + {BREAKDOWN_ACCURACY_MARGIN:g}"),
        "seed_rule": ("seed = derive_seed(root seed, cell key) (SHA-256 words of the key as the spawn_key of "
                      "SeedSequence(root)); optimizer stream = derive_seed(seed, 'optimizer'); honest data split = "
                      "derive_seed(root seed, 'partition;beta=<β>'), shared by every cell with that β"),
        "fs": list(config.fs), "betas": list(config.betas),
        "n_cells": len(grid), "n_done": len(rows), "complete": not missing, "missing": missing,
        "n_breakdown": sum(bool(r["breakdown"]) for r in rows),
        "n_aggregator_breakdown": sum(r.get("aggregator_breakdown") is not None for r in rows),
        "initial_loss": max((r["initial_loss"] for r in rows if r.get("initial_loss") is not None), default=None),
        "missed_target": missed,
        "aggregators": per_agg,
        "cells": rows,
    }


# ----------------------------------------------------------------------------- the grid


@dataclass(frozen=True)
class StressResult:
    """Outcome of :func:`run_stress`: the summary (also in ``summary.json``) and what this call did."""

    config: StressConfig
    out_dir: str
    summary: dict[str, Any]
    computed: tuple[str, ...]
    skipped: tuple[str, ...]
    heatmaps: tuple[str, ...]
    runtime_s: float
    records: dict[str, dict] = field(repr=False, default_factory=dict)

    @property
    def complete(self) -> bool:
        return bool(self.summary["complete"])

    @property
    def missed_target(self) -> list[str]:
        return list(self.summary["missed_target"])

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**self.summary, "computed": list(self.computed), "skipped": list(self.skipped),
                         "heatmaps": list(self.heatmaps), "runtime_s": self.runtime_s})


def run_stress(config: StressConfig, out_dir: str | os.PathLike, *, workers: int | None = None,
               backend: str | None = None, address: str | None = None,
               progress: Callable[[int], None] | None = None,
               on_start: Callable[[int, int], None] | None = None,
               draw: Callable[[dict[str, Any], Path], Sequence[str]] | None = None) -> StressResult:
    """Run (or resume) the grid in ``out_dir``; return the summary and write the files.

    Cells already in ``out_dir/cells.jsonl`` (authenticated and validated by :func:`load_cells`;
    a file that is not what fedaudit wrote is refused before any work) are skipped; the others run through
    :func:`fedaudit.engine.run_tasks` (``workers`` default ``os.cpu_count()``, ``backend``
    ``"process"``, ``"serial"`` or ``"ray"``, None for the engine's default; ``address``: the Ray
    cluster to join) and are appended and flushed one line each as they
    finish. ``on_start(to_run, skipped)`` is called once before training; ``progress(1)`` after
    each finished cell. ``draw(summary, out_dir) -> written paths`` draws the figures (e.g.
    :func:`fedaudit.reports.heatmap.plot_heatmaps`); their file names go into ``summary.json``.
    This module draws nothing itself.
    """
    if not isinstance(config, StressConfig):
        raise FedAuditError(f"config must be a StressConfig, got {type(config).__name__}")
    backend, workers, address = check_run_options(backend, workers, address)
    t0 = time.perf_counter()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FedAuditError(f"--out {out} exists and is not a directory")
    _dataset(config.dataset, config.data_path, config.seed)  # bad name or path: fail before any work
    out.mkdir(parents=True, exist_ok=True)
    path = out / CELLS_FILE
    done, link = _read_cells(path, config, repair=True)
    _check_config_file(out, config)
    grid = config.cells()
    todo = [c for c in grid if c.key not in done]
    skipped = tuple(c.key for c in grid if c.key in done)
    if on_start is not None:
        on_start(len(todo), len(skipped))
    computed = []
    if todo:
        tasks = [(config, c, cell_seed(config.seed, c)) for c in todo]
        with writing(str(path)):
            fh = open(path, "a", encoding="utf-8")
        with fh:
            if link is None:  # a new file: its header first (a kill while writing it leaves a torn tail)
                header, link = _new_cells_chain(config)
                with writing(str(path)):
                    fh.write(fjson.dumps(header, sort_keys=True) + "\n")
            for (_, cell, _), rec in run_tasks(run_cell, tasks, workers=workers, backend=backend, address=address,
                                                    progress=progress):
                line = fjson.dumps(link.seal(rec)) + "\n"
                with writing(str(path)):  # only the write: a cell's own OSError is the cell's
                    fh.write(line)
                    fh.flush()
                    os.fsync(fh.fileno())
                done[cell.key] = rec
                computed.append(cell.key)
    summary = summarize(config, done)
    heatmaps = list(draw(summary, out)) if draw is not None else []
    summary["heatmaps"] = [Path(p).name for p in heatmaps]
    with writing(str(out / SUMMARY_FILE)):
        (out / SUMMARY_FILE).write_text(fjson.dumps(summary, indent=2) + "\n")
    return StressResult(config=config, out_dir=str(out), summary=summary, computed=tuple(computed),
                        skipped=skipped, heatmaps=tuple(heatmaps), runtime_s=round(time.perf_counter() - t0, 3),
                        records={k: done[k] for k in (c.key for c in grid) if k in done})
