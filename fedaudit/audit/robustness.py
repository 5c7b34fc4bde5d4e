"""Empirical (f, ν)-robustness of an aggregation rule, estimated from below.

For inputs x_1..x_n and a rule F, the robustness ratio of the input is

    ν(x) = max_{S ⊆ [n], |S| = n−f}  ‖F(x) − x̄_S‖² / ((1/|S|) Σ_{i∈S} ‖x_i − x̄_S‖²),

and F is (f, κ)-robust iff ν(x) ≤ κ for every x (Allouah et al., AISTATS 2023). Any x
therefore certifies κ ≥ ν(x): ν̂ = max over the configurations we try is a lower bound on the
rule's true constant. The max over S is exhaustive when C(n, f) ≤ 2·10^4 (vectorised over the
subset indicators, :mod:`fedaudit.audit.robustness_search`), and a swap local search otherwise.

Configurations, in four stages (``RobustnessAudit.worst["stage"]`` names the one that won):
(i) ``construction`` — n − f (nearly) equal inputs and f others, which forces ν ≥ f/(n − 2f)
on every rule with finite κ and ν → ∞ on the mean; (ii) ``attack`` — honest draws of several
shapes (Gaussian, heavy-tailed, clustered, anisotropic) with every attack and its line-searched
``Optimal`` variant for the Byzantine rows; (iii) ``hill climb`` — a black-box random search
over the Byzantine rows of the best attacked configuration; (iv) ``optimiser`` — multistart
Nelder–Mead/Powell over *all* n rows in 1- and 2-dimensional subspaces of ℝ^d, seeded from
the best configurations of (i)–(iii), with S maximised exactly for each candidate when
C(n, f) ≤ 2000 (else over a working set of subsets refreshed from full evaluations; the
reported ν is always a full evaluation in ℝ^d)
(:func:`fedaudit.audit.robustness_search.optimise_configuration`; budget: ``search``, scaled up
for cheap closed-form rules at small n by :func:`~fedaudit.audit.robustness_search.effective_budget`,
plus a forced-selection phase for Krum). The
configuration that achieved ν̂ is returned in full so it can be replayed (:func:`replay`).

Engine. The attack stage's trials are independent (trial t draws from child t of one
``SeedSequence.spawn(trials)``), so they run as chunks of ``TRIAL_CHUNK`` trials through
:func:`fedaudit.engine.run_chunks` (``backend``, ``workers``, ``address``, ``checkpoint``,
``resume``); each chunk returns one record per trial and the records are folded into ν̂ in trial
order with the same strict-``>`` updates as a serial loop. The optimiser's local runs follow on the
same engine in stages (phase F + 0, phase 1, then the rounds of phase 2: each depends on the one
before), every
run with its own child stream and a budget fixed in the plan
(:func:`~fedaudit.audit.robustness_search.optimise_configuration`), folded in plan order. So the
result is bit-identical on every backend and worker count — unless the search has a wall-clock
limit (``search={"time_s": ...}``), where it depends on speed. The construction and the hill climb
are cheap and sequential and run in this process. ``checkpoint=FILE`` records the trials in FILE
and the optimiser's stages in FILE.opt1, FILE.opt2, FILE.opt3, …
(:func:`~fedaudit.audit.robustness_search.optimiser_checkpoint`), each keyed by the audit's
configuration and a digest of the stage's plan; ``resume=True`` reloads every finished chunk of
each, so a killed audit resumed ends with the uninterrupted result.

Breakdown. A rule that receives more non-finite rows than it tolerates raises
:class:`~fedaudit.errors.AggregatorBreakdown`; the auditor records such configurations in
``RobustnessAudit.breakdown`` and leaves them out of ν̂ (the rule produced no output to measure).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.defenses.base import Aggregator
from fedaudit.defenses.kappa import kappa_lower_bound, kappa_upper_bound
from fedaudit.engine import check_run_options, run_chunks
from fedaudit.audit.robustness_search import (EXHAUSTIVE_LIMIT, UNBOUNDED, SearchBudget, call_rule,
                                              effective_budget, forced_selection_runs,
                                              optimise_configuration, optimiser_checkpoint_files, robustness_ratio,
                                              tick)
from fedaudit.deprecation import renamed_keyword
from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.json import is_numbers, jsonable
from fedaudit.validation import check_int
from fedaudit.rng import as_seed_sequence

__all__ = ["RobustnessAudit", "SearchBudget", "robustness_ratio", "replay", "audit_robustness", "progress_units",
           "exceeds_bound", "HONEST_SHAPES", "TRIAL_CHUNK"]

HONEST_SHAPES = ("gaussian", "heavy-tailed", "clustered", "anisotropic")
_UNBOUNDED = UNBOUNDED
#: trials per engine chunk of the attack stage (results do not depend on it: each trial has its own
#: seed). A trial at n = 21, d = 100 takes 4–15 ms, so 32 trials keep Ray's ~7 ms per task under 5 %
#: of a chunk's work (at 8 it was 6–20 %) while 200 trials still make 7 chunks for the workers.
TRIAL_CHUNK = 32


@dataclass(frozen=True)
class RobustnessAudit:
    """ν̂ (a lower bound on the rule's robustness constant) next to the published bound.

    ``nu_empirical`` is the audited ν̂: the largest ν found, certified by the saved
    configuration (∞ when the rule's output is unbounded). ``nu_bound`` is the rule's
    published κ (None when it has none). ``nu_lower`` is *not* about this rule: it is the
    universal lower bound f/(n − 2f) that no (f, ν)-robust rule can beat, shown for scale.
    ``violation`` means only "ν̂ is certified above the published κ"
    (:func:`exceeds_bound`); ``unbounded`` means ν̂ = ∞: the rule is not (f, ν)-robust for
    any ν. ``unbounded=True`` is a failure of robustness even when ``violation`` is False
    (the mean's published κ is ∞ too, and ∞ ≤ ∞ guarantees nothing): the ``robustness``
    claim kind and ``fedaudit audit robustness`` fail it. Test ``violation or unbounded``
    for "the rule failed".

    ``worst`` describes the configuration that attains ν̂: ``stage`` ("construction", "attack",
    "hill climb" or "optimiser"), ``label`` (a one-line description for titles), ``attack``,
    ``optimal``, ``shape``, ``d`` (dimension of the certified inputs), ``subspace`` and ``k``
    (optimiser only: where it searched) and ``nu``. ``breakdown`` is None, or a summary of the
    configurations on which the rule raised :class:`~fedaudit.errors.AggregatorBreakdown`
    (``count``, ``labels``, ``first``): those are recorded, never raised, and excluded from ν̂.
    ``search`` reports the optimiser stage's budget, evaluations used, local runs, runtime,
    best ν per subspace and ``nu_before`` (ν̂ of the stages before it); ``stage_runtime_s`` the
    wall-clock time per stage.
    """

    aggregator: str
    n: int
    f: int
    d: int
    nu_empirical: float
    nu_bound: float | None
    nu_lower: float
    violation: bool
    unbounded: bool
    reaches_lower_bound: bool
    worst_attack: str
    per_configuration: dict[str, float]
    config: dict[str, Any] = field(repr=False)
    bound: dict[str, Any] | None = field(default=None, repr=False)
    trials: int = 0
    seed: int | None = 0
    subsets: str = "exhaustive"
    runtime_s: float = 0.0
    worst: dict[str, Any] = field(default_factory=dict)
    breakdown: dict[str, Any] | None = None
    search: dict[str, Any] = field(default_factory=dict, repr=False)
    stage_runtime_s: dict[str, float] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))  # strict JSON (fedaudit.json): non-finite floats as "inf"/"-inf"/"nan"


def exceeds_bound(nu: float, bound: float | None) -> bool:
    """Whether ν̂ violates the published bound κ: ν̂ > κ·(1 + 1e-9) + 1e-12 (the slack absorbs the
    rounding of ν̂ on a configuration that attains κ exactly); never when there is no bound."""
    return bool(bound is not None and nu > bound * (1 + 1e-9) + 1e-12)


def replay(config: dict[str, Any], aggregator: Aggregator) -> float:
    """Recompute ν for a saved configuration (``RobustnessAudit.config``)."""
    X = np.asarray(config["inputs"], dtype=np.float64)
    X = np.where(np.asarray(config["nonfinite_mask"], bool), np.nan, X) if "nonfinite_mask" in config else X
    z = call_rule(aggregator, X, int(config.get("rule_seed", 0)))
    return robustness_ratio(X, z, config["f"])[0]


# ------------------------------------------------------------------------- configurations
def _honest(shape: str, m: int, d: int, rng: np.random.Generator) -> np.ndarray:
    centre = rng.normal(size=d)
    if shape == "gaussian":
        return centre + rng.normal(size=(m, d))
    if shape == "heavy-tailed":
        return centre + rng.standard_t(2.0, size=(m, d))
    if shape == "clustered":
        e = np.zeros(d)
        e[0] = 3.0
        signs = np.where(rng.random(m) < 0.5, 1.0, -1.0)
        return centre + signs[:, None] * e + 0.5 * rng.normal(size=(m, d))
    if shape == "anisotropic":
        return centre + rng.normal(size=(m, d)) * np.logspace(-2, 2, d)
    raise FedAuditError(f"unknown honest shape {shape!r}; choose from {', '.join(HONEST_SHAPES)}")


def _outlier_construction(n: int, f: int, d: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    """n − f inputs at 0 (± spread) and f at e_1: forces ν ≥ f/(n−2f), and ν → ∞ for the mean."""
    X = spread * rng.normal(size=(n, d))
    X[n - f:, 0] += 1.0
    return X


def _resolve_attacks(attacks: str | Sequence[str]) -> list[str]:
    from fedaudit.attacks.registry import ATTACKS

    if attacks == "all":
        return list(ATTACKS.names())
    names = [a.strip() if ":" in a else a.strip().lower()
             for a in (attacks.split(",") if isinstance(attacks, str) else attacks) if a.strip()]
    bad = [a for a in names if a not in ATTACKS]
    if bad or not names:
        raise FedAuditError(f"unknown attack(s) {bad or attacks!r}; choose from {', '.join(ATTACKS.names())} or 'all'")
    return names


def progress_units(f: int, trials: int, search_evals: int = 60, search: SearchBudget | dict | int | None = None,
                   dim: int = 100, *, aggregator: Any = None, n: int | None = None, d: int | None = None) -> int:
    """How many times :func:`audit_robustness` calls ``progress(1)`` (for progress bars).

    ``dim`` is the dimension of the vectors (``d``: its deprecated name, one release).

    ``aggregator`` (the rule or its registry spec) and ``n`` decide the optimiser's cost class
    (:func:`~fedaudit.audit.robustness_search.effective_budget`: cheap rules run more restarts)
    and whether Krum's forced-selection phase runs (one unit per low-dimensional family);
    without them the count for the base budget and no forced-selection phase is returned."""
    d = renamed_keyword("progress_units", "d", "dim", d, dim, 100)
    budget = SearchBudget.coerce(search)
    forced = 0
    if aggregator is not None and n is not None:
        budget = effective_budget(budget, aggregator, n, f)
        forced = forced_selection_runs(aggregator, n, f, budget, d)
    families = 0
    if budget.evals > 0:
        families = sum(k <= d for k in budget.dims) + int(budget.embedded and d > max(budget.dims))
    climb = search_evals + 1 if f > 0 and search_evals > 0 else 0  # the hill climb's start and its steps
    return trials + (3 if f > 0 else 0) + climb + (families + 2) * budget.restarts * (families > 0) + forced


def audit_robustness(aggregator: Aggregator | str, *, n: int, f: int, dim: int = 100, trials: int = 200,
                     attacks: str | Sequence[str] = "all", seed: int | None = 0, search_evals: int = 60,
                     search: SearchBudget | dict | int | None = None,
                     progress: Callable[[int], None] | None = None, backend: str | None = None,
                     workers: int | None = None, address: str | None = None, checkpoint: Any = None,
                     resume: bool = False, d: int | None = None) -> RobustnessAudit:
    """Estimate the rule's robustness constant from below (see the module docstring).

    ``aggregator`` is an Aggregator or a registry spec such as "nnm+cwtm" (built with f).
    ``dim`` is the dimension of the vectors, as the plan key and the ``--dim`` flag name it (``d``:
    its deprecated name, kept for one release with a DeprecationWarning; the result's field is
    still ``RobustnessAudit.d``).
    ``trials`` honest draws are spread round-robin over shapes × attacks (plain and Optimal).
    ``search_evals`` bounds the hill climb over the Byzantine rows; ``search`` is the budget of
    the optimiser over whole configurations (:class:`~fedaudit.audit.robustness_search.SearchBudget`,
    a dict of its fields, an int number of evaluations, or None for the defaults; 0 disables).
    A configuration on which the rule raises :class:`~fedaudit.errors.AggregatorBreakdown` is
    recorded in ``breakdown``, not raised.

    ``backend`` (``"process"``, ``"serial"`` or ``"ray"``; None: the engine's default,
    :func:`fedaudit.engine.default_backend`), ``workers``, ``address``, ``checkpoint`` (FILE, plus
    FILE.opt1, FILE.opt2, … for the optimiser) and ``resume`` run the trials and the optimiser's local runs on
    :func:`fedaudit.engine.run_chunks` (module docstring); the answer does not depend on them
    (without a ``time_s`` limit).
    """
    from fedaudit.defenses.registry import make_aggregator

    t0 = time.perf_counter()
    n = check_int("n", n, low=1)
    f = check_int("f", f, low=0)
    if n <= 2 * f:
        raise FedAuditError(f"robustness needs n > 2f, got n={n}, f={f}")
    d = check_int("dim", renamed_keyword("audit_robustness", "d", "dim", d, dim, 100), low=1)
    trials = check_int("trials", trials, low=1)
    search_evals = check_int("search_evals", search_evals, low=0)
    budget = SearchBudget.coerce(search)
    backend, workers, address = check_run_options(backend, workers, address, checkpoint, resume)
    if checkpoint is not None and not resume:
        for path in optimiser_checkpoint_files(checkpoint):
            raise FedAuditError(f"checkpoint {path} (the optimiser's part of checkpoint {checkpoint}) already "
                                f"exists: pass resume=True (--resume) to continue it, or remove it to start again")
    spec = aggregator if isinstance(aggregator, str) else getattr(aggregator, "name", type(aggregator).__name__)
    agg = make_aggregator(aggregator, f) if isinstance(aggregator, str) else aggregator
    if not callable(agg):
        raise FedAuditError("aggregator must be an Aggregator, a callable (n, d) -> (d,), or a registry name")
    need = agg.min_n(agg.f) if hasattr(agg, "min_n") else 2 * f + 1
    if n < need:
        raise FedAuditError(f"{spec} needs n >= {need} for f={f}, got n={n}")
    names = _resolve_attacks(attacks) if f > 0 else []
    spent = effective_budget(budget, agg, n, f)  # more evaluations and restarts for cheap rules
    root = as_seed_sequence(seed)
    construct_seq, trial_seq, search_seq, optimise_seq, rule_seq = root.spawn(5)
    rule_seed = int(rule_seq.generate_state(1)[0])

    best: dict[str, Any] = {"nu": -1.0}
    attacked: dict[str, Any] = {"nu": -1.0}  # best configuration with honest rows and Byzantine rows
    per: dict[str, float] = {}
    seeds: dict[str, tuple[float, np.ndarray]] = {}  # best input per label: starts for the optimiser
    methods = set()
    broke: dict[str, Any] = {"count": 0, "labels": [], "first": None}
    stage_time: dict[str, float] = {}

    def record_breakdown(label: str, error: dict[str, Any]) -> None:
        broke["count"] += 1
        if label not in broke["labels"]:
            broke["labels"].append(label)
        if broke["first"] is None:
            broke["first"] = {"label": label, **error}

    def absorb(label: str, nu: float, S, method: str, X: np.ndarray | None, honest_idx: np.ndarray | None,
               extra: dict[str, Any]) -> None:
        """Fold one evaluated configuration into ν̂ (X may be None only if it is not a new maximum)."""
        methods.add(method)
        per[label] = max(per.get(label, -1.0), nu)
        if nu > seeds.get(label, (-2.0,))[0]:
            seeds[label] = (nu, X.copy())
        if nu > best["nu"]:
            best.clear()
            best.update(nu=nu, label=label, X=X.copy(), S=S, honest=honest_idx, **extra)
        if honest_idx is not None and nu > attacked["nu"]:
            attacked.update(nu=nu, label=label, X=X.copy(), **extra)

    def evaluate(label: str, X: np.ndarray, honest_idx: np.ndarray | None, extra: dict[str, Any]) -> float:
        try:
            z = call_rule(agg, X, rule_seed)
        except AggregatorBreakdown as err:
            record_breakdown(label, err.to_dict())
            if progress is not None:
                progress(1)
            return -1.0
        nu, S, method = robustness_ratio(X, z, f, honest=honest_idx)
        absorb(label, nu, S, method, X, honest_idx, extra)
        if progress is not None:
            progress(1)
        return nu

    # (i) the lower-bound construction at shrinking spreads
    t_stage = time.perf_counter()
    c_rng = np.random.default_rng(construct_seq)
    if f > 0:
        for spread in (1e-2, 1e-4, 1e-6):
            evaluate(f"f-outliers (spread {spread:g})", _outlier_construction(n, f, d, spread, c_rng), None,
                     {"stage": "construction"})
    stage_time["construction"] = time.perf_counter() - t_stage

    # (ii) honest shapes × attacks (plain and Optimal)
    t_stage = time.perf_counter()
    combos = [(s, a, opt) for s in HONEST_SHAPES for a in names for opt in (False, True)] or \
             [(s, None, False) for s in HONEST_SHAPES]
    children = trial_seq.spawn(trials)
    tasks = [(agg, n, f, d, rule_seed, [(t, *combos[t % len(combos)], children[t])
                                        for t in range(start, min(start + TRIAL_CHUNK, trials))])
             for start in range(0, trials, TRIAL_CHUNK)]
    key = None if checkpoint is None else _checkpoint_key(aggregator, spec, agg, n, f, d, trials, names, root, rule_seed)
    chunk_records = run_chunks(_trial_chunk, tasks, backend=backend, workers=workers, address=address,
                               checkpoint=checkpoint, resume=resume, key=key, validate=_check_trials,
                               progress=None if progress is None else functools.partial(tick, progress),
                               units=[len(task[5]) for task in tasks])
    honest_idx = np.arange(n - f)
    for records in chunk_records:  # chunk order, then trial order: the serial loop's sequence of updates
        for rec in records:
            if rec["kind"] == "breakdown":
                record_breakdown(rec["label"], rec["error"])
            elif rec["kind"] == "evaluated":
                X = None if rec["X"] is None else np.asarray(rec["X"], dtype=object).astype(np.float64)
                absorb(rec["label"], float(rec["nu"]), [int(i) for i in rec["S"]], rec["method"], X, honest_idx,
                       {"stage": "attack", "shape": rec["shape"], "attack": rec["attack"],
                        "optimal": rec["optimal"]})
    stage_time["attack"] = time.perf_counter() - t_stage

    # (iii) black-box hill climb over the Byzantine rows of the best finite configuration
    t_stage = time.perf_counter()
    if f > 0 and search_evals > 0 and "X" in attacked:
        s_rng = np.random.default_rng(search_seq)
        X = attacked["X"].copy()
        X[n - f:] = np.where(np.isfinite(X[n - f:]), X[n - f:], 0.0)
        honest_part = X[: n - f]
        spread = float(np.sqrt(np.mean(np.var(honest_part, axis=0)))) or 1.0
        label = f"search from {attacked['label']}"
        extra = {"stage": "hill climb", "shape": attacked.get("shape"), "attack": attacked.get("attack"),
                 "optimal": attacked.get("optimal", False)}
        current = evaluate(label, X, np.arange(n - f), extra)
        step = spread
        for _ in range(search_evals):
            trial = X.copy()
            trial[n - f:] += step * s_rng.normal(size=(f, d))
            nu = evaluate(label, trial, np.arange(n - f), extra)
            if nu > current:
                current, X, step = nu, trial, step * 1.5
            else:
                step *= 0.8
    stage_time["hill climb"] = time.perf_counter() - t_stage

    # (iv) multistart derivative-free optimisation over whole configurations
    nu_before = float(best["nu"])
    ranked = sorted(seeds.items(), key=lambda kv: -kv[1][0])
    construction = [(k, v[1]) for k, v in ranked if k.startswith("f-outliers")][:1]
    others = [(k, v[1]) for k, v in ranked if not k.startswith("f-outliers") and math.isfinite(v[0])][:2]
    outcome = optimise_configuration(agg, n, f, d, seeds=construction + others, budget=spent, seq=optimise_seq,
                                     rule_seed=rule_seed, progress=progress, backend=backend, workers=workers,
                                     address=address, checkpoint=checkpoint, resume=resume,
                                     key=None if key is None else {**key, "search_evals": search_evals})
    if outcome.X is not None:
        label = f"optimiser ({outcome.subspace}, from {outcome.start})"
        per[label] = max(per.get(label, -1.0), outcome.nu)
        methods.add("exhaustive" if math.comb(n, f) <= EXHAUSTIVE_LIMIT else "greedy swap search")
        if outcome.nu > best["nu"]:
            best.clear()
            best.update(nu=outcome.nu, label=label, X=outcome.X, S=outcome.S, stage="optimiser",
                        subspace=outcome.subspace, k=outcome.k, start=outcome.start)
    stage_time["optimiser"] = outcome.runtime_s

    breakdown = None
    if broke["count"]:
        breakdown = {"count": broke["count"], "labels": broke["labels"][:50], "first": broke["first"]}
    if "X" not in best:  # the rule broke down on every configuration tried
        return _all_broken(spec, agg, n, f, d, trials, seed, breakdown, budget, outcome, stage_time, t0, spent)

    nu_hat = float(best["nu"])
    unbounded = nu_hat >= _UNBOUNDED
    bound = kappa_upper_bound(agg, n, f) if isinstance(agg, Aggregator) else None  # by the rule's class
    nu_bound = bound.kappa if bound is not None else None
    lower = kappa_lower_bound(n, f)
    Xbest = best["X"]
    config = {
        "inputs": np.where(np.isfinite(Xbest), Xbest, 0.0).tolist(),
        "nonfinite_mask": (~np.isfinite(Xbest)).tolist(),
        "f": f,
        "subset": [int(i) for i in best["S"]],
        "label": best["label"],
        "seed": seed if isinstance(seed, int) else None,
        "rule_seed": rule_seed,
    }
    worst = {"stage": best.get("stage"), "label": str(best["label"]), "attack": best.get("attack"),
             "optimal": bool(best.get("optimal", False)), "shape": best.get("shape"), "d": d,
             "subspace": best.get("subspace"), "k": best.get("k"), "start": best.get("start"),
             "nu": math.inf if unbounded else nu_hat}
    return RobustnessAudit(
        aggregator=str(spec), n=n, f=f, d=d,
        nu_empirical=math.inf if unbounded else nu_hat,
        nu_bound=nu_bound,
        nu_lower=lower,
        violation=exceeds_bound(nu_hat, nu_bound),
        unbounded=unbounded,
        reaches_lower_bound=bool(nu_hat >= lower * (1 - 1e-3)),
        worst_attack=str(best["label"]),
        per_configuration={k: (math.inf if v >= _UNBOUNDED else v) for k, v in sorted(per.items(), key=lambda kv: -kv[1])},
        config=config,
        bound=bound.to_dict() if bound is not None else None,
        trials=trials, seed=seed if isinstance(seed, int) else None,
        subsets=" + ".join(sorted(methods)),
        runtime_s=time.perf_counter() - t0,
        worst=worst,
        breakdown=breakdown,
        search=_search_report(budget, outcome, nu_before, spent),
        stage_runtime_s=stage_time,
    )


def _trial_chunk(task) -> list[dict[str, Any]]:
    """One engine chunk of the attack stage: for each trial ``(t, shape, attack, optimal, seq)``
    draw the honest rows from ``seq``, the Byzantine rows by the attack (``Optimal`` line search
    when ``optimal``), and score the configuration. One record per trial, in trial order:
    ``{"kind": "skipped"}`` (no scale to line-search), ``{"kind": "breakdown", "label", "error"}``
    or ``{"kind": "evaluated", "label", "nu", "S", "method", "shape", "attack", "optimal", "X"}``,
    where the inputs ``X`` are kept only when ν beats every earlier trial of its label in the
    chunk (only such a configuration can become a maximum of the whole audit), else None."""
    from fedaudit.attacks.byzantine import Optimal
    from fedaudit.attacks.registry import make_attack

    agg, n, f, d, rule_seed, items = task
    records: list[dict[str, Any]] = []
    label_best: dict[str, float] = {}
    for _, shape, attack_name, optimal, seq in items:
        rng = np.random.default_rng(seq)
        honest = _honest(shape, n - f, d, rng)
        if attack_name is None:
            X, label = honest, f"{shape} (no attack)"
        else:
            attack = make_attack(attack_name)
            if optimal:
                if getattr(attack, "scale", None) is None:  # nothing to line-search
                    records.append({"kind": "skipped"})
                    continue
                attack = Optimal(attack, agg)
            label = f"{'optimal ' if optimal else ''}{attack_name} / {shape}"
            try:
                with np.errstate(all="ignore"):
                    byz = np.asarray(attack(honest, f, rng=rng), dtype=np.float64)
            except AggregatorBreakdown as err:  # the line search of Optimal calls the rule
                records.append({"kind": "breakdown", "label": label, "error": err.to_dict()})
                continue
            X = np.vstack([honest, byz])
        try:
            z = call_rule(agg, X, rule_seed)
        except AggregatorBreakdown as err:
            records.append({"kind": "breakdown", "label": label, "error": err.to_dict()})
            continue
        nu, S, method = robustness_ratio(X, z, f, honest=np.arange(n - f))
        nu = float(nu)
        keep = nu > label_best.get(label, -2.0)
        if keep:
            label_best[label] = nu
        records.append({"kind": "evaluated", "label": label, "nu": nu, "S": [int(i) for i in S], "method": method,
                        "shape": shape, "attack": attack_name, "optimal": optimal, "X": X if keep else None})
    return records


def _check_trials(records: Any, task) -> None:
    """A chunk's trial records as a checkpoint stores them (:func:`fedaudit.engine.iter_chunks`'s
    ``validate``): one per trial of the chunk, each of the shape :func:`_trial_chunk` describes,
    ``S`` indices of the n rows and ``X`` (when kept) n × d numbers."""
    _, n, _, d, _, items = task
    if not (isinstance(records, list) and len(records) == len(items)):
        raise ValueError(f"expected a list of {len(items)} trial records")
    for t, rec in enumerate(records):
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind == "skipped":
            continue
        if kind == "breakdown":
            ok = isinstance(rec.get("label"), str) and isinstance(rec.get("error"), dict)
        elif kind == "evaluated":
            S = rec.get("S")
            ok = (isinstance(rec.get("label"), str) and is_numbers(rec.get("nu")) and isinstance(rec.get("method"), str)
                  and isinstance(S, list) and all(type(i) is int and 0 <= i < n for i in S)
                  and isinstance(rec.get("optimal"), bool)
                  and (rec.get("X") is None or is_numbers(rec.get("X"), (n, d))))
        else:
            ok = False
        if not ok:
            raise ValueError(f"trial record {t + 1} of the chunk is malformed")


def _checkpoint_key(aggregator, spec, agg, n, f, d, trials, names, root, rule_seed) -> dict[str, Any]:
    """The configuration a trials checkpoint belongs to: the rule (its spec, or its class's
    qualified name and f), every parameter of the attack stage and the root seed stream."""
    rule = aggregator if isinstance(aggregator, str) else {
        "class": f"{type(agg).__module__}:{type(agg).__qualname__}", "name": str(spec), "f": getattr(agg, "f", None)}
    return {"run": "fedaudit.audit.robustness:trials", "aggregator": rule, "n": n, "f": f, "d": d,
            "trials": trials, "attacks": list(names), "chunk": TRIAL_CHUNK, "rule_seed": rule_seed,
            "seed": {"entropy": root.entropy, "spawn_key": list(root.spawn_key)}}


def _search_report(budget: SearchBudget, outcome, nu_before: float, spent: SearchBudget | None = None
                   ) -> dict[str, Any]:
    spent = spent or budget
    found = outcome.to_dict()
    return {"budget": budget.to_dict(), "effective_budget": spent.to_dict(), "evals": found["evals"],
            "local_runs": found["restarts_run"], "runtime_s": found["runtime_s"], "stopped": found["stopped"],
            "nu": max(outcome.nu, 0.0) if outcome.X is not None else None,
            "nu_before": nu_before if nu_before >= 0 else None,
            "per_subspace": found["per_subspace"]}


def _all_broken(spec, agg, n, f, d, trials, seed, breakdown, budget, outcome, stage_time, t0, spent) -> RobustnessAudit:
    """Every configuration broke the rule down: no ν to report (nu_empirical = 0, no config)."""
    lower = kappa_lower_bound(n, f)
    bound = kappa_upper_bound(agg, n, f) if isinstance(agg, Aggregator) else None
    return RobustnessAudit(
        aggregator=str(spec), n=n, f=f, d=d, nu_empirical=0.0,
        nu_bound=bound.kappa if bound is not None else None, nu_lower=lower, violation=False, unbounded=False,
        reaches_lower_bound=False, worst_attack="breakdown on every configuration", per_configuration={},
        config={"f": f, "seed": seed if isinstance(seed, int) else None},
        bound=bound.to_dict() if bound is not None else None, trials=trials,
        seed=seed if isinstance(seed, int) else None, subsets="none", runtime_s=time.perf_counter() - t0,
        worst={"stage": "breakdown", "label": "breakdown on every configuration", "d": d, "nu": 0.0},
        breakdown=breakdown, search=_search_report(budget, outcome, -1.0, spent), stage_runtime_s=stage_time)
