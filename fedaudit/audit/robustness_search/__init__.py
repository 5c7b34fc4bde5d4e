"""Worst-case search for the robustness ratio: exact subset maximisation and a multistart optimiser.

The robustness ratio of an input configuration x = (x_1..x_n) ∈ ℝ^{n×d} under a rule F is

    ν(x) = max_{S ⊆ [n], |S| = n − f}  ‖F(x) − x̄_S‖² / ((1/|S|) Σ_{i∈S} ‖x_i − x̄_S‖²)

(Allouah et al., "Fixing by Mixing", AISTATS 2023, Def. 1: F is (f, κ)-robust iff ν(x) ≤ κ for
every x). Every evaluated x certifies κ ≥ ν(x), so maximising ν over x tightens the lower bound.

**Exact S.** For a fixed x, write m = n − f and let 1_S ∈ {0,1}^n be the indicator of S. With
the rows centred (c = mean of the rows, y_i = x_i − c, w = F(x) − c):

    x̄_S − c = Yᵀ1_S / m,   var_S = (1_Sᵀ diag(YYᵀ)) / m − ‖Yᵀ1_S‖² / m²,
    err_S   = ‖w‖² − 2 wᵀYᵀ1_S / m + ‖Yᵀ1_S‖² / m²,

so stacking the C(n, f) indicators as a matrix M (cached per (n, f)) gives every subset's ratio
with matrix products. The implementation (:func:`subset_ratios`) uses the equivalent
difference forms var_S = 1_Sᵀ D 1_S / (2m²), D_ij = ‖x_i − x_j‖², and err_S = ‖Σ_{i∈S}(x_i − F(x))‖²/m²,
which keep full relative precision when a tight S lies far from the other rows. The
max over S is then exact (exhaustive) whenever C(n, f) ≤ ``exhaustive_limit``; past it the
evaluator falls back to the swap local search of :func:`robustness_ratio`
(a lower bound on the max, hence still a valid certificate). Inside the optimiser's loop, when
C(n, f) > 2000 each candidate is scored on a working set of subsets (the top 256 of a full
evaluation at the start and end of every local run, :class:`~fedaudit.audit.robustness_search.subsets.SubsetScorer`): again a lower bound, and
the value finally reported is a full evaluation.

**Search.** ν is maximised over the whole configuration (all n rows, honest and Byzantine alike:
S is chosen afterwards, exactly) by multistart Nelder–Mead (Nelder & Mead 1965; adaptive
coefficients of Gao & Han 2012 for more than 10 variables) followed by a Powell polish
(Powell 1964), both derivative-free (``scipy.optimize.minimize``). The variables are
Y ∈ ℝ^{n×k}, k ∈ ``dims`` (default 1 and 2), embedded in the audit's ℝ^d as X = Y Bᵀ with an
orthonormal k-frame B. Two families:

* *low-dimensional* — B = the first k standard basis vectors (zero padding). The rule is
  evaluated on Y itself (fast); the best point is then re-evaluated in ℝ^d and only that value
  is reported, so a rule that is not equivariant under zero padding cannot inflate ν̂. For
  coordinate-wise rules (CWTM, CWMed, Meamed) this family is exhaustive in d: for any S,
  Σ_j err_j(S) / Σ_j var_j(S) ≤ max_j err_j(S)/var_j(S), each term being a 1-D ratio;
* *embedded* — B a uniformly random orthonormal k-frame of ℝ^d, the rule evaluated on X ∈ ℝ^{n×d}
  directly (for rules that mix coordinates and are not rotation-equivariant, e.g. NNM∘CWTM).

Starts: the seed configurations handed in by the auditor (the lower-bound construction and the
best attacked inputs), projected on their top-k principal directions, then two-cluster honest
draws with f Byzantine rows at a common point, then Gaussian draws. The budget (total objective
evaluations, restarts, optional wall-clock limit) is split evenly over restarts, each local run's
share fixed in the plan before any run starts.

**Engine.** The local runs are independent given their starts, so they run as chunks of
:func:`fedaudit.engine.run_chunks` in stages, each depending on the one before: (1) phase F and
phase 0 (one chunk per family), (2) phase 1 (one chunk per local run), (3, 4, …) the rounds of
phase 2's iterated local search (``PHASE2_WIDTH`` local runs a round). Chunk i of a stage draws
from child i of a
``SeedSequence`` spawned for that stage (never from the worker or the completion order), returns
JSON data (ν, the configuration as nested lists of float64, which strict JSON round-trips
exactly, its label and the evaluations used), and the driver folds the results in plan order with
strict ``>``: the same seed gives bit-identical results on ``serial``, ``process`` with any
number of workers and ``ray``, from a fresh run or from checkpointed records. The one exception
is a wall-clock limit (``time_s``): chunks then stop at a deadline, and the result depends on
the machine's speed.

**Budget by cost class** (:func:`effective_budget`). ``evals`` and ``restarts`` are the budget of
an *expensive* evaluation; a rule in the cheap class — closed-form rules, whose class declares
``closed_form = True`` (mean, CWTM, CWMed, Meamed, Krum, Multi-Krum, and compositions of these
with NNM, bucketing, ARC or clipping; a user's rule sets the attribute to join) at
n ≤ 16 with C(n, f) ≤ 2000 (every S scored exactly, a few hundred microseconds per evaluation)
— gets ``CHEAP_EVALS``× the evaluations and ``CHEAP_RESTARTS``× the restarts. The class is
decided from the rule's type and (n, f) only, never from timing, so the run stays deterministic
under the seed. Why: on the held-out tightness benchmark (``benchmarks/robustness.py
tightness``) the shortfalls were selection rules (Krum at (11, 3), (12, 2)) and NNM∘CWTM, whose
worst cases sit on the boundary where the selected row flips — a discontinuous landscape where
extra *restarts* (independent local optima) help more than longer runs (Krum (11, 3): 4.64 with
9000 evaluations over 4 restarts, 5.11 over 10; the independent optimiser's 4.99); iterative
rules (GM, CC, MDA) already cost 1–40 s per audit at the base budget and keep it. Disable with
``scale_cheap=False``.

**Forced selection (Krum).** Extra restarts alone did not close the gap at Krum (12, 2) (1.78 with
20000 evaluations against the independent 1.905): Krum outputs one row, and its worst case puts
the selected row exactly where it is about to lose the selection to another, while ν itself is
blind to how close that is. Phase F therefore maximises a surrogate in which row 0 is made the
output, ν(X; z = x_0), penalised by how far row 0's Krum score is above the best other score,
from explicit constructions (the selected row, its f supporters next to it, the honest rest in
2–4 clusters; the groups' positions first, then row-wise); candidates are then scored with the
rule itself, so the surrogate never reaches the certificate. It costs evals/4 extra evaluations
per low-dimensional family and runs only for rules whose class declares
``selects_min_krum_score = True`` (Krum; a user's rule that selects that row sets it) with C(n, f) ≤ 2000 (Multi-Krum's average of
n − f rows already met the target). Its results seed the iterated local search of phase 2.

Modules: :mod:`~fedaudit.audit.robustness_search.budget` (the budget and cost classes),
:mod:`~fedaudit.audit.robustness_search.subsets` (the exact subset ratio),
:mod:`~fedaudit.audit.robustness_search.local` (the local optimiser inside one chunk) and
:mod:`~fedaudit.audit.robustness_search.staging` (engine staging); every public name is importable
from ``fedaudit.audit.robustness_search``.
"""

from __future__ import annotations

from fedaudit.audit.robustness_search.budget import (
    CHEAP_EVALS, CHEAP_RESTARTS, EXHAUSTIVE_LIMIT, UNBOUNDED, WORKING_LIMIT, SearchBudget, cheap_rule, effective_budget,
)
from fedaudit.audit.robustness_search.local import call_rule, forced_selection_runs
from fedaudit.audit.robustness_search.staging import (
    PHASE2_WIDTH, SearchOutcome, optimise_configuration, optimiser_checkpoint, optimiser_checkpoint_files, tick,
)
from fedaudit.audit.robustness_search.subsets import exact_ratio, robustness_ratio, subset_ratios

__all__ = ["SearchBudget", "SearchOutcome", "effective_budget", "cheap_rule", "subset_ratios", "exact_ratio",
           "robustness_ratio", "optimise_configuration", "optimiser_checkpoint", "optimiser_checkpoint_files", "tick",
           "call_rule", "forced_selection_runs", "UNBOUNDED", "EXHAUSTIVE_LIMIT", "WORKING_LIMIT", "PHASE2_WIDTH",
           "CHEAP_EVALS", "CHEAP_RESTARTS"]
