"""Engine staging of the optimiser: :func:`optimise_configuration` plans its phases as stages of
:func:`fedaudit.engine.run_chunks` (one checkpoint file per stage), folds the chunks' results in
plan order and certifies the best configuration in the audit's ℝ^d."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.audit.robustness_search.budget import UNBOUNDED, SearchBudget
from fedaudit.audit.robustness_search.local import LocalSearch, call_rule, forced_selection_applies, start_configurations
from fedaudit.audit.robustness_search.subsets import best_subset_ratio
from fedaudit.engine import run_chunks
from fedaudit.errors import AggregatorBreakdown
from fedaudit.json import dumps, is_numbers, jsonable

__all__ = [
    "SearchOutcome", "optimise_configuration", "optimiser_checkpoint", "optimiser_checkpoint_files", "tick",
    "PHASE2_WIDTH",
]


# --------------------------------------------------------------------------- the optimiser
@dataclass(frozen=True)
class SearchOutcome:
    """Best configuration found by the optimiser stage, certified in the audit's ℝ^d: ν, the
    inputs X and subset S attaining it, where it was found (subspace, k, start), the work done
    (evaluations, local runs, runtime), why the search stopped and the best ν per subspace."""

    nu: float = -1.0
    X: np.ndarray | None = None
    S: np.ndarray | None = None
    subspace: str = ""
    k: int = 0
    start: str = ""
    evals: int = 0
    restarts_run: int = 0
    runtime_s: float = 0.0
    stopped: str = "budget"
    per_subspace: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field as strict JSON (fedaudit.json; X and S as nested lists); a ν at the
        :data:`UNBOUNDED` sentinel is reported as ``"inf"``."""
        per = {k: (math.inf if isinstance(v, (int, float)) and v >= UNBOUNDED else v)
               for k, v in self.per_subspace.items()}
        return jsonable({**asdict(self), "per_subspace": per})


#: local runs per round of phase 2 (a fixed plan, never the worker count: see optimise_configuration)
PHASE2_WIDTH = 4


def optimiser_checkpoint(checkpoint: str | os.PathLike, stage: int) -> Path:
    """The optimiser's checkpoint file of engine stage ``stage`` next to the audit's ``checkpoint``
    FILE: ``FILE.opt1`` (phase F and phase 0), ``FILE.opt2`` (phase 1), ``FILE.opt3``, … (the
    rounds of phase 2)."""
    path = Path(checkpoint)
    return path.with_name(f"{path.name}.opt{stage}")


def optimiser_checkpoint_files(checkpoint: str | os.PathLike) -> list[Path]:
    """The existing ``FILE.opt<j>`` files of the audit's ``checkpoint`` FILE, by stage."""
    path = Path(checkpoint)
    prefix = f"{path.name}.opt"
    parent = path.parent if str(path.parent) else Path(".")
    found = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()] \
        if parent.is_dir() else []
    return sorted(found, key=lambda p: int(p.name[len(prefix):]))


def tick(progress: Callable[[int], None], units: int) -> None:
    """``progress(1)`` once per unit of a finished engine chunk (as a serial loop reports them)."""
    for _ in range(units):
        progress(1)


def optimise_configuration(agg: Callable, n: int, f: int, d: int, *, seeds: Sequence[tuple[str, np.ndarray]],
                           budget: SearchBudget, seq: np.random.SeedSequence, rule_seed: int,
                           progress: Callable[[int], None] | None = None, backend: str | None = None,
                           workers: int | None = None, address: str | None = None, checkpoint: Any = None,
                           resume: bool = False, key: Any = None) -> SearchOutcome:
    """Maximise ν over configurations X = Y Bᵀ (module docstring); the returned ν is certified
    by re-evaluating the rule on the best X ∈ ℝ^{n×d}.

    Families: ``d=k`` for k in ``dims`` and, if ``embedded`` and d > max(dims), one random
    max(dims)-frame of ℝ^d. Phase 0 (20% of the evaluations): per family, configurations of
    coincident clusters (a, m − a honest rows; the f Byzantine rows together, or one row and the
    other f − 1) with their positions optimised, for up to six splits a. Phase 1 (30%): ``restarts``
    local runs per family from the best cluster configurations (half of them, jittered), the
    seeds, then random starts. Phase 2 (50%): 2·``restarts`` runs of iterated local search in
    rounds of ``PHASE2_WIDTH``, run c of a round starting from the (c mod 2)-th best family
    incumbent after the rounds before, with a random half of its rows moved by 0.3× their RMS
    spread. A local run is Nelder–Mead (70% of its evaluations) then Powell from NM's best point.
    For Krum, phase F
    (module docstring, ``budget.evals // 4`` extra evaluations per low-dimensional family) runs
    next to phase 0 and its certified best becomes that family's first incumbent.

    Engine: one :func:`fedaudit.engine.run_chunks` call per stage (phase F + 0, phase 1, each
    round of phase 2), one chunk per family (F, 0) or per local run (1, 2); each chunk draws from
    its own child of a ``SeedSequence`` spawned from ``seq`` for that stage, indexed by its place
    in the plan, and has its evaluation budget fixed in the plan, so the results — folded in plan
    order with strict ``>`` — are bit-identical on every backend and worker count. ``checkpoint``
    (a path) records stage j in :func:`optimiser_checkpoint` ``(checkpoint, j)``, keyed by ``key``
    (JSON data: the caller's description of the run) and a digest of the stage's plan. With
    ``budget.time_s`` a chunk stops at a wall-clock deadline (``time.time()``, shared by the
    workers of one machine), so the result then depends on speed.
    """
    t0 = time.perf_counter()
    out: dict[str, Any] = {"per_subspace": {}, "evals": 0, "restarts_run": 0, "stopped": "budget", "nu": -1.0}
    frame_seq, forced_seq, cluster_seq, start_seq, run_seq, round_seq = seq.spawn(6)
    families: list[tuple[str, int, np.ndarray | None]] = [(f"d={k}", k, None) for k in budget.dims if k <= d]
    if budget.embedded and d > max(budget.dims):
        k = max(budget.dims)
        Q, _ = np.linalg.qr(np.random.default_rng(frame_seq).normal(size=(d, k)))
        families.append((f"{k}-dim random subspace of d={d}", k, Q[:, :k]))
    if not families or budget.evals == 0:
        return SearchOutcome(stopped="disabled", runtime_s=time.perf_counter() - t0)
    runs = budget.restarts
    per_run0 = max(int(0.2 * budget.evals) // len(families), 2)
    per_run1 = max(int(0.3 * budget.evals) // (len(families) * runs), 2)
    per_run2 = max((budget.evals - (per_run0 + per_run1 * runs) * len(families)) // (2 * runs), 2)
    ctx = (agg, n, f, d, rule_seed, None if budget.time_s is None else time.time() + budget.time_s)

    def stage(j: int, plan: list[tuple[str, dict[str, Any]]], parent: Sequence[np.random.SeedSequence],
              units: list[int]) -> list[dict[str, Any]]:
        """Run one stage's plan as engine chunks; chunk i draws from ``parent[i]``."""
        stage_key = None
        if checkpoint is not None:
            digest = hashlib.sha256(dumps(jsonable(plan), sort_keys=True).encode("utf-8")).hexdigest()
            stage_key = {"run": f"fedaudit.audit.robustness_search:optimiser stage {j}", "caller": key,
                         "budget": budget.to_dict(), "plan": digest}
        file = None if checkpoint is None else optimiser_checkpoint(checkpoint, j)
        results = run_chunks(_optimiser_chunk, [(ctx, kind, item, s) for (kind, item), s in zip(plan, parent)],
                             backend=backend, workers=workers, address=address, checkpoint=file, resume=resume,
                             key=stage_key, units=units, validate=_check_optimiser_result,
                             progress=None if progress is None else functools.partial(tick, progress))
        for res in results:
            out["evals"] += int(res["evals"])
            if res["stopped"] != "budget" and out["stopped"] == "budget":
                out["stopped"] = res["stopped"]
        return results

    incumbents: dict[str, list] = {}  # family label -> [ν, Y, start label, k, B]
    families_by_label = {label: (k, B) for label, k, B in families}

    def fold(label: str, nu: float, Y: np.ndarray, start_label: str | None) -> None:
        """A run's best into its family's incumbent by strict ``>`` (start label kept when None)."""
        inc = incumbents.setdefault(label, [-1.0, None, start_label, *families_by_label[label]])
        if nu > inc[0]:
            inc[0], inc[1] = nu, Y
            if start_label is not None:
                inc[2] = start_label

    # stage 1: phase F (Krum) and phase 0, independent of each other
    forced = [i for i, (_, _, B) in enumerate(families) if B is None] if forced_selection_applies(agg, n, f) else []
    plan1 = [("forced", {"k": families[i][1], "evals": budget.evals // 4}) for i in forced]
    plan1 += [("clusters", {"k": k, "B": B, "evals": per_run0}) for _, k, B in families]
    res1 = stage(1, plan1, forced_seq.spawn(len(forced)) + cluster_seq.spawn(len(families)),
                 [1] * len(forced) + [0] * len(families))
    for i, res in zip(forced, res1):
        if res["Y"] is not None:
            fold(families[i][0], float(res["nu"]), _rows(res["Y"]), res["label"])
    start_rng = np.random.default_rng(start_seq)
    plan2, owners = [], []
    for (label, k, B), res in zip(families, res1[len(forced):]):
        clusters = [(float(c["nu"]), c["label"], _rows(c["Y"])) for c in res["found"]]
        starts = []
        for nu_c, c_label, Y_c in clusters[: max(runs // 2, 1)]:
            jitter = 1e-3 * float(np.sqrt(np.mean(Y_c ** 2)) or 1.0) * start_rng.normal(size=Y_c.shape)
            starts.append((c_label, Y_c + jitter))
            fold(label, nu_c, Y_c, c_label)
        starts += start_configurations(n, f, k, seeds, runs - len(starts), start_rng) if runs > len(starts) else []
        plan2 += [("run", {"k": k, "B": B, "Y0": Y0, "evals": per_run1}) for _, Y0 in starts]
        owners += [(label, start_label) for start_label, _ in starts]
    # stage 2: phase 1, every family's local runs from its starts
    if out["stopped"] == "budget":
        for (label, start_label), res in zip(owners, stage(2, plan2, run_seq.spawn(len(plan2)), [1] * len(plan2))):
            if res["Y"] is not None:
                out["restarts_run"] += 1
                fold(label, float(res["nu"]), _rows(res["Y"]), start_label)
    # stages 3, 4, …: phase 2, rounds of PHASE2_WIDTH perturbed runs from the two best incumbents
    widths = [min(PHASE2_WIDTH, 2 * runs - start) for start in range(0, 2 * runs, PHASE2_WIDTH)]
    for r, (width, parent) in enumerate(zip(widths, round_seq.spawn(len(widths)))):
        ranked = sorted(((lbl, v) for lbl, v in incumbents.items() if v[1] is not None),
                        key=lambda kv: -kv[1][0])[:2]
        if out["stopped"] != "budget" or not ranked:
            break
        picks = [ranked[c % len(ranked)] for c in range(width)]
        plan = [("perturbed", {"k": k, "B": B, "Y": Y_i, "evals": per_run2}) for _, (_, Y_i, _, k, B) in picks]
        for (label, _), res in zip(picks, stage(3 + r, plan, parent.spawn(width), [1] * width)):
            if res["Y"] is not None:
                out["restarts_run"] += 1
                fold(label, float(res["nu"]), _rows(res["Y"]), None)
    for label, (_, Y_inc, start_label, k, B) in incumbents.items():
        if Y_inc is None:
            continue
        nu, X, S = _certify(agg, n, f, d, rule_seed, Y_inc, B)
        out["per_subspace"][label] = nu
        if nu > out["nu"]:
            out.update(nu=nu, X=X, S=S, subspace=label, k=k, start=start_label)
    return SearchOutcome(**out, runtime_s=time.perf_counter() - t0)


def _rows(value: Any) -> np.ndarray:
    """A chunk's configuration (nested lists; non-finite entries as "inf"/"-inf"/"nan" after a
    checkpoint) as float64 rows."""
    return np.asarray(value, dtype=object).astype(np.float64)


def _embed(Y: np.ndarray, B: np.ndarray | None, n: int, d: int) -> np.ndarray:
    """X = Y Bᵀ, or Y zero-padded to d columns when B is None."""
    if B is None:
        X = np.zeros((n, d))
        X[:, : Y.shape[1]] = Y
        return X
    return Y @ B.T


def _certify(agg: Callable, n: int, f: int, d: int, rule_seed: int, Y: np.ndarray, B: np.ndarray | None
             ) -> tuple[float, np.ndarray, np.ndarray]:
    """(ν, X, S) of X = Y Bᵀ ∈ ℝ^{n×d} with the rule re-run there (ν = −1 on a breakdown)."""
    X = _embed(Y, B, n, d)
    try:
        z = call_rule(agg, X, rule_seed)
    except AggregatorBreakdown:
        return -1.0, X, np.arange(n - f)
    nu, S = best_subset_ratio(X, z, f)
    return nu, X, S


def _check_optimiser_result(result: Any, task) -> None:
    """An optimiser chunk's result as a checkpoint stores it (:func:`fedaudit.engine.iter_chunks`'s
    ``validate``): the fields :func:`_optimiser_chunk` returns for the chunk's kind, ``evals`` an
    integer ≥ 0, each ``nu`` a number, each ``Y`` None or rows of numbers."""
    kind = task[1]

    def found(item: Any) -> bool:
        return (isinstance(item, dict) and is_numbers(item.get("nu")) and isinstance(item.get("label"), str)
                and (item.get("Y") is None or is_numbers(item.get("Y"), (None, None))))

    ok = (isinstance(result, dict) and type(result.get("evals")) is int and result["evals"] >= 0
          and result.get("stopped") in ("budget", "time limit", "unbounded"))
    if ok and "found" in result:
        ok = isinstance(result["found"], list) and all(found(item) for item in result["found"])
    if ok and (kind != "clusters" or result.get("stopped") == "time limit"):
        ok = found({"label": "", **result})
    if not ok:
        raise ValueError(f"not the result of an optimiser chunk of kind {kind!r}")


def _optimiser_chunk(task) -> dict[str, Any]:
    """One engine chunk of :func:`optimise_configuration`: ``(ctx, kind, item, seq)`` with
    ``ctx = (agg, n, f, d, rule_seed, deadline)``, ``kind`` one of ``"forced"`` (phase F of one
    family), ``"clusters"`` (phase 0 of one family), ``"run"`` (one local run of phase 1) or
    ``"perturbed"`` (one run of phase 2 from ``item["Y"]`` with a random half of its rows moved
    by 0.3× their RMS spread), all randomness from
    ``seq``. Returns JSON data: ``evals``, ``stopped`` ("budget", "time limit" or "unbounded")
    and the best configuration found (``nu``, ``Y`` as nested lists; ``found`` per cluster layout)."""
    ctx, kind, item, seq = task
    local = LocalSearch(*ctx)
    rng = np.random.default_rng(seq)
    B = None if item.get("B") is None else np.asarray(item["B"], dtype=np.float64)
    if local.expired():
        return {"evals": 0, "stopped": "time limit", "nu": -1.0, "Y": None, "found": [], "label": ""}
    result: dict[str, Any] = {"stopped": "budget"}
    if kind == "forced":
        nu, Y, label = local.forced(item["k"], item["evals"], rng)
        result.update(nu=nu, Y=None if Y is None else Y.tolist(), label=label)
    elif kind == "clusters":
        result["found"] = [{"nu": nu, "label": label, "Y": Y.tolist()}
                           for nu, label, Y in local.clusters(item["k"], B, item["evals"], rng)]
    elif kind == "run":
        nu, Y = local.local_run(np.array(item["Y0"], dtype=np.float64), item["k"], B, item["evals"], rng)
        result.update(nu=nu, Y=Y.tolist(), stopped="unbounded" if nu >= UNBOUNDED else "budget")
    else:
        Y0 = np.array(item["Y"], dtype=np.float64)  # a copy: in this process item["Y"] is the incumbent
        rows = rng.random(Y0.shape[0]) < 0.5
        Y0[rows] += 0.3 * float(np.sqrt(np.mean(Y0 ** 2)) or 1.0) * rng.normal(size=(int(rows.sum()), item["k"]))
        nu, Y = local.local_run(Y0, item["k"], B, item["evals"], rng)
        result.update(nu=nu, Y=Y.tolist(), stopped="unbounded" if nu >= UNBOUNDED else "budget")
    result["evals"] = local.evals
    return result
