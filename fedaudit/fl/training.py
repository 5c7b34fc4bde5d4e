"""The training loop: run an optimizer on a problem for a number of rounds and record a :class:`Trace`.

Beyond tolerance. When a round's oracle raises :class:`~fedaudit.errors.AggregatorBreakdown`
(more non-finite inputs than the rule tolerates), :func:`run` stops and records
``Trace.breakdown = {"round": k, "rule", "n", "nonfinite", "tolerated", "message"}``: a result
of the configuration, not an exception.

Randomness. Every random component draws from the call: round k's oracle (attack and rule,
e.g. bucketing's permutation) gets ``rng`` = child k of the run seed's oracle stream and the
optimizer's own randomness (PIGS's power iterations) a separate child, so the same seed gives
the same bits and nothing depends on a rule's internal state or on which worker runs the job.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.fl.optimizers import Optimizer
from fedaudit.fl.problems import as_problem
from fedaudit.json import jsonable
from fedaudit.rng import RngLike, as_seed_sequence
from fedaudit.validation import check_int, check_positive, check_vector

__all__ = ["Trace", "run"]


@dataclass(frozen=True)
class Trace:
    """What happened during a run, one entry per recorded round.

    ``rounds[j]`` is the number of completed communication rounds; ``loss[j]``, ``grad_norm[j]``,
    ``test_acc[j]`` are at the optimizer's reported iterate after that many rounds
    (``rounds[0] = 0`` is x_0). ``wall_time[j]`` is cumulative optimizer time (oracle + update,
    excluding logging). The oracle arrays are indexed by ``oracle_rounds`` (round k's query
    point q_k): ``oracle_err_sq = ‖g_k − ∇L_H(q_k)‖²``, ``grad_sq = ‖∇L_H(q_k)‖²`` and, when the
    problem exposes ``heterogeneity``, ``het_dev_sq`` = (1/|H|)Σ‖∇L_i(q_k) − ∇L_H(q_k)‖² and
    ``het_grad_sq`` = ‖∇L_H(q_k)‖² from the federation.

    Early stops: ``diverged`` (non-finite or exploding iterate/loss) and ``breakdown`` — None,
    or ``{"round": k, "rule", "n", "nonfinite", "tolerated", "message"}`` when round k's oracle
    raised :class:`~fedaudit.errors.AggregatorBreakdown` (the arrays then end at round k).
    :meth:`to_dict` writes non-finite floats as the strings ``"inf"``, ``"-inf"``, ``"nan"``
    (strict JSON, and distinguishable from a missing value). ``params`` are the optimizer's
    :meth:`~fedaudit.fl.optimizers.Optimizer.params`.
    """

    optimizer: str
    params: dict[str, Any]
    rounds: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    test_acc: list[float | None] = field(default_factory=list)
    wall_time: list[float] = field(default_factory=list)
    oracle_rounds: list[int] = field(default_factory=list)
    oracle_err_sq: list[float] = field(default_factory=list)
    grad_sq: list[float] = field(default_factory=list)
    het_dev_sq: list[float] = field(default_factory=list)
    het_grad_sq: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, list] = field(default_factory=dict)
    diverged: bool = False
    breakdown: dict[str, Any] | None = None
    seed_entropy: int | None = None
    x_final: np.ndarray | None = field(default=None, repr=False)

    def to_dict(self, include_x: bool = False) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "x_final"}
        out["seed_entropy"] = None if self.seed_entropy is None else str(self.seed_entropy)
        if include_x and self.x_final is not None:
            out["x_final"] = self.x_final.tolist()
        return jsonable(out)


#: The per-round lists of a :class:`Trace`, filled by :func:`run`.
_LOGGED = ("rounds", "loss", "grad_norm", "test_acc", "wall_time", "oracle_rounds", "oracle_err_sq", "grad_sq",
           "het_dev_sq", "het_grad_sq")


def run(optimizer: Optimizer, problem: Any, x0: Any = None, rounds: int = 100, *,
        rng: RngLike = 0, record_every: int = 1,
        callback: Callable[[int, dict[str, Any]], None] | None = None,
        record_heterogeneity: bool = True, divergence_factor: float = 1e6) -> Trace:
    """Run ``optimizer`` for ``rounds`` communication rounds on ``problem`` from ``x0``.

    ``problem`` is a :class:`~fedaudit.fl.problems.Problem` or a Federation (wrapped by
    :class:`~fedaudit.fl.problems.FederationProblem`); ``x0`` defaults to zeros. Randomness:
    ``rng`` (an int, a SeedSequence — not advanced — or a Generator; default 0) is the root;
    round k's oracle gets its own child stream (``SeedSequence.spawn``), so two optimizers
    run with the same rng face the same attack randomness round by round, and the optimizer's
    own randomness (Δ̂ power iteration) comes from a separate child. Recording happens every
    ``record_every`` rounds and at the last round; ``callback(round, record)`` is called after
    each recording. The run stops early (``diverged=True``) when the iterate or the loss becomes
    non-finite or the loss exceeds |L(x_0)|·``divergence_factor`` + 1, and (``breakdown`` set,
    see :class:`Trace`) when the oracle raises :class:`~fedaudit.errors.AggregatorBreakdown`.
    """
    if not isinstance(optimizer, Optimizer):
        raise FedAuditError(f"optimizer must be a fedaudit Optimizer (DGD, DNAG, RobustAccelerated, PIGS), "
                            f"got {type(optimizer).__name__}")
    problem = as_problem(problem)
    rounds = check_int("rounds", rounds, low=1)
    record_every = check_int("record_every", record_every, low=1)
    divergence_factor = check_positive("divergence_factor", divergence_factor)
    root = as_seed_sequence(rng, copy=True)
    oracle_ss, opt_ss = root.spawn(2)
    round_seeds = oracle_ss.spawn(rounds)
    x0 = np.zeros(problem.dim) if x0 is None else check_vector("x0", x0, dim=problem.dim)

    has_acc = hasattr(problem, "test_accuracy")
    has_het = record_heterogeneity and hasattr(problem, "heterogeneity")
    has_details = hasattr(problem, "oracle_details")
    log: dict[str, list] = {name: [] for name in _LOGGED}
    diverged, breakdown = False, None

    def record(k: int, x: np.ndarray, elapsed: float) -> dict[str, Any]:
        loss = float(problem.honest_loss(x))
        gn = float(np.linalg.norm(problem.honest_grad(x)))
        acc = float(problem.test_accuracy(x)) if has_acc else None
        log["rounds"].append(k)
        log["loss"].append(loss)
        log["grad_norm"].append(gn)
        log["test_acc"].append(acc)
        log["wall_time"].append(elapsed)
        return {"round": k, "loss": loss, "grad_norm": gn, "test_acc": acc, "wall_time": elapsed}

    state = optimizer.start(problem, x0, np.random.default_rng(opt_ss))
    rec = record(0, state.output(), 0.0)
    loss0 = rec["loss"]
    if callback is not None:
        callback(0, rec)
    elapsed = 0.0
    for k in range(rounds):
        logging = (k % record_every == 0) or k == rounds - 1
        round_rng = np.random.default_rng(round_seeds[k])
        t0 = time.perf_counter()
        q = np.array(state.query(), dtype=np.float64, copy=True)
        het = None
        try:
            if logging and has_details:
                g, true_g, het = problem.oracle_details(q, round_rng, heterogeneity=has_het)
            else:
                g = problem.oracle(q, round_rng)
        except AggregatorBreakdown as exc:  # past the rule's tolerance: a result, not a crash
            breakdown = {"round": k, **exc.to_dict()}
            break
        g = np.asarray(g, dtype=np.float64)
        elapsed += time.perf_counter() - t0
        if logging:
            if not has_details:
                true_g = np.asarray(problem.honest_grad(q), dtype=np.float64)
                if has_het:
                    het = problem.heterogeneity(q)
            true_g = np.asarray(true_g, dtype=np.float64)
            log["oracle_rounds"].append(k)
            log["oracle_err_sq"].append(float(np.sum((g - true_g) ** 2)))
            log["grad_sq"].append(float(true_g @ true_g))
            if has_het:
                log["het_dev_sq"].append(float(het[0]))
                log["het_grad_sq"].append(float(het[1]))
        t0 = time.perf_counter()
        if not np.isfinite(g).all():
            diverged = True
            break
        state.update(g)
        elapsed += time.perf_counter() - t0
        x = state.output()
        if not np.isfinite(x).all():
            diverged = True
            break
        if ((k + 1) % record_every == 0) or k == rounds - 1:
            rec = record(k + 1, x, elapsed)
            if not math.isfinite(rec["loss"]) or rec["loss"] > abs(loss0) * divergence_factor + 1.0:
                diverged = True
                if callback is not None:
                    callback(k + 1, rec)
                break
            if callback is not None:
                callback(k + 1, rec)
    return Trace(optimizer=optimizer.name, params=optimizer.params(), **log, info=state.info,
                 extras={k: list(v) for k, v in state.extras.items()}, diverged=diverged, breakdown=breakdown,
                 seed_entropy=root.entropy, x_final=np.array(state.output(), dtype=np.float64, copy=True))
