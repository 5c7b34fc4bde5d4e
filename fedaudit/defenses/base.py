"""Server-side robust aggregation: the interface every rule implements.

An :class:`Aggregator` maps n input vectors (n, d) to one vector (d,); a
:class:`PreAggregator` maps (n, d) to (n', d) (NNM, bucketing, clipping, …). Both accept numpy
arrays and torch tensors and return the same type and device; they never mutate their input.
``f`` is the number of Byzantine inputs the rule is configured to tolerate.

Torch tensors. A rule with ``torch_native = True`` (every registered rule and pre-aggregator,
and compositions made only of them) aggregates a torch tensor on its own device: with torch
operations there, except that a CPU tensor's memory is read in place by the compiled kernels
(selection, Gram, subset means) and by numpy's finiteness screen and clamp check
(:func:`fedaudit.kernels.cpu_array`: a view, no copy). The (n, d) data of an accelerator is never
copied to the host (only (n, n) Gram and (n,) norm quantities are, for the decisions);
float32/float64 tensors compute in their dtype
(sums accumulated in float64, in numpy's order), float16/bfloat16 in float32, and the result is
a tensor of the input's dtype and device. Validation, non-finite rows, tolerance, breakdowns and
the clamping of the result are the same as for numpy. Any other rule (``torch_native = False``,
the default, e.g. a user's rule) receives numpy arrays: the tensor is copied to the host and the
result back (see :mod:`fedaudit.kernels` for the torch kernels, the overflow-free geometry
included).

Autograd. A rule aggregates the values it receives, as a server does: a tensor that requires
grad is read detached, and the result is a new tensor without autograd history
(``requires_grad=False``, no ``grad_fn``), whatever the rule — gradients do not flow back
through an aggregation. The input's own graph is left untouched. (Most rules are order
statistics or selections computed by compiled kernels, which have no torch graph to keep.)

Input types. Floating inputs keep their dtype (float16/32/64; torch bfloat16 is computed in
float32 and returned as bfloat16). Integer, unsigned and bool inputs (numpy or torch, e.g.
int32, uint8) are aggregated as real numbers and returned as float64 (numpy) or torch.float64 —
never truncated back to an integer type. Complex, string/object/datetime arrays, sparse torch
tensors and meta tensors raise :class:`~fedaudit.errors.FedAuditError` naming the type; any
input that is not 2-D (n, d) with n, d ≥ 1 raises as well.

Non-finite inputs and the tolerance of a rule. A row containing NaN or ±inf is Byzantine by
definition (honest clients send finite vectors). :meth:`Aggregator.__call__` drops such rows
*before* the rule runs. With n rows received and r of them non-finite, the rule tolerates
``rule.tolerance(n)`` non-finite rows:

* a rule whose output depends on f (CWTM, Krum, Multi-Krum, MDA, Meamed, Bulyan, NNM, ARC, and
  any composition containing one) built with f ≥ 1 tolerates **r ≤ f** and runs with f − r on
  the n − r finite rows: they contain at most f − r Byzantine ones, and n − r > 2(f − r)
  whenever n > 2f (likewise every stage's n ≥ min_n(f) carries over);
* a rule that needs no f (Mean, CWMed, GM, CC, Bucketing, Clipping, and compositions made only
  of those) and any rule built with f = 0 tolerates **r ≤ ⌈n/2⌉ − 1** (a strict majority of
  finite rows), capped at n − min_n(0) so the rule can still run (Krum(0) needs 3 finite rows),
  and runs with f = max(f − r, 0) on the finite rows.

More non-finite rows than that raise :class:`~fedaudit.errors.AggregatorBreakdown` (a typed
``FedAuditError`` with ``rule``, ``n``, ``nonfinite``, ``tolerated``): the configuration has
broken down. Finite rows of any magnitude (1e308, float32 max, subnormals) are valid inputs: the
distance kernels never overflow (see :mod:`fedaudit.defenses.aggregators`) and every result is
finite — a result that rounds past the largest finite value of its dtype (a convex
combination of values at ±max) is clamped to ±max.

Randomness. Every ``__call__`` takes a keyword ``rng`` (a numpy Generator, an int seed or
None). Deterministic rules ignore it; random ones (:class:`~fedaudit.defenses.preaggregators.Bucketing`)
draw from it — it is their only source of randomness (``rng=None``: OS entropy, not
reproducible) — so a rule holds no random state: the same input and rng give the same output.
:class:`Composed` hands the same Generator to each of its stages in order.

(f, κ)-robustness (Allouah et al., AISTATS 2023): F is (f, κ)-robust if for every input and
every S ⊆ [n] with |S| = n − f,  ‖F(x) − x̄_S‖² ≤ (κ/|S|) Σ_{i∈S} ‖x_i − x̄_S‖².
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedaudit.arrays import as_array, is_torch, to_like, torch_input
from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.kernels import NonFiniteInput, cpu_array
from fedaudit.validation import check_int
from fedaudit.rng import as_generator

__all__ = ["RobustnessClass", "Averaging", "TrimmedMean", "KrumSelection", "MedianBased", "NearestNeighbourMixing",
           "Aggregator", "PreAggregator", "Composed", "compose", "composed_class", "declares"]


# ------------------------------------------------------------------------------ robustness classes
@dataclass(frozen=True)
class RobustnessClass:
    """The family of published (f, κ)-robustness bounds a rule belongs to.

    Every rule exposes one as ``rule.robustness``; :func:`fedaudit.defenses.kappa.kappa_upper_bound`
    looks the bound up by this *type*, never by the rule's name, so a user's rule called "cwtm"
    does not inherit CWTM's bound. This base class itself means "no published bound" (the
    default of every rule, e.g. Multi-Krum, MDA, CC, Meamed, Bulyan and users' rules).
    """


@dataclass(frozen=True)
class Averaging(RobustnessClass):
    """The arithmetic mean: κ = 0 without Byzantine inputs, unbounded for f > 0."""


@dataclass(frozen=True)
class TrimmedMean(RobustnessClass):
    """Coordinate-wise trimmed mean: κ = (6f/(n−2f))(1 + f/(n−2f)) (Allouah et al. 2023)."""


@dataclass(frozen=True)
class KrumSelection(RobustnessClass):
    """Krum's selection: κ = 6(1 + f/(n−2f)) for n > 2f + 2 (Allouah et al. 2023)."""


@dataclass(frozen=True)
class MedianBased(RobustnessClass):
    """Geometric or coordinate-wise median: κ = 4(1 + f/(n−2f))² (Allouah et al. 2023)."""


@dataclass(frozen=True)
class NearestNeighbourMixing(RobustnessClass):
    """NNM followed by a rule of class ``inner``: κ = (8f/(n−f))(κ_inner + 1) (Allouah et al. 2023)."""

    inner: RobustnessClass


def _clamp_finite(out: Any, name: str) -> Any:
    """Clamp ±inf produced by rounding (a convex combination of values at ±max of the dtype)
    to ±max; a NaN from finite inputs would be a bug in the rule and raises. A float32/float64
    CPU tensor is checked by numpy on its memory: torch's parallel reductions wait for every
    intra-op thread, which costs milliseconds on a busy machine."""
    if is_torch(out):
        import torch

        if out.device.type == "cpu" and out.dtype in (torch.float32, torch.float64) and out.is_contiguous():
            view = cpu_array(out)
            checked = _clamp_finite(view, name)
            return out if checked is view else torch.from_numpy(checked)
        if bool(torch.isfinite(out.sum())) or bool(torch.isfinite(out).all()):  # finite sum ⇒ all finite
            return out
        if bool(torch.isnan(out).any()):
            raise FedAuditError(f"{name}: internal error, the rule produced NaN from finite inputs")
        big = torch.finfo(out.dtype).max
        return out.clamp(-big, big)
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.add.reduce(out, axis=None)  # one allocation-free pass: finite ⇒ all finite
    if np.isfinite(total) or np.isfinite(out).all():
        return out
    if np.isnan(out).any():
        raise FedAuditError(f"{name}: internal error, the rule produced NaN from finite inputs")
    big = np.finfo(out.dtype).max
    return np.clip(out, -big, big)


def _finite_rows(T: Any) -> Any:
    """Boolean (n,) array or tensor: which rows of T (numpy or torch) hold only finite values. A
    row whose sum is finite holds no NaN/±inf (they propagate), so only rows with a non-finite
    sum (non-finite entries, or finite ones whose sum overflowed) are checked entry by entry:
    one read of T, no (n, d) temporary."""
    if not is_torch(T):
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.isfinite(np.add.reduce(T, axis=1))
        suspect = np.flatnonzero(~finite)
        if suspect.size:
            finite[suspect] = np.isfinite(T[suspect]).all(axis=1)
        return finite
    import torch

    if T.device.type == "cpu":  # numpy's single-threaded pass on the tensor's memory (see _clamp_finite)
        return torch.from_numpy(_finite_rows(cpu_array(T)))
    finite = torch.isfinite(T.sum(dim=1))
    suspect = torch.nonzero(~finite).flatten()
    if suspect.numel():
        finite[suspect] = torch.isfinite(T[suspect]).all(dim=1)
    return finite


def _cast(out: Any, dtype: Any) -> Any:
    """The tensor ``out`` in ``dtype``. A CPU result cast to float32/float64 is converted by numpy
    on its memory into a numpy-allocated buffer (numpy asks for huge pages on large buffers;
    torch's CPU allocator faults in every 4 KiB page of a fresh result)."""
    import torch

    if out.dtype == dtype:
        return out
    if out.device.type == "cpu" and dtype in (torch.float32, torch.float64):
        return torch.from_numpy(cpu_array(out).astype(np.float32 if dtype == torch.float32 else np.float64))
    return out.to(dtype)


class _Rule(ABC):
    """Shared plumbing: name, f, validation of n, the non-finite tolerance and ``rng`` routing."""

    name: str = "rule"
    #: whether the rule's output depends on f (False: f only sets the tolerance / what a
    #: composition passes on)
    needs_f: bool = True
    #: whether the trusted core takes a keyword ``rng`` (random rules)
    uses_rng: bool = False
    #: whether permuting the input rows leaves the result unchanged (an aggregator) or permutes
    #: the output rows alike (a pre-aggregator), for the same ``rng``, up to float rounding of
    #: sums taken in another order; False for a rule whose output depends on the row order
    #: (:class:`~fedaudit.defenses.preaggregators.Bucketing` buckets rows by position).
    #: :func:`fedaudit.testing.check_aggregator` tests it.
    permutation_invariant: bool = True
    #: the published (f, κ) family of the rule (an aggregator's, see :class:`RobustnessClass`)
    robustness: ClassVar[RobustnessClass] = RobustnessClass()
    #: whether the trusted core also computes on torch tensors (on their device, with torch
    #: operations); False: a tensor is copied to the host and the core sees numpy
    torch_native: bool = False
    #: whether the core raises :class:`fedaudit.kernels.NonFiniteInput` on any NaN/±inf value of
    #: a numpy input (True: the input is not screened first, saving one pass over it; a core
    #: that raises is called again on the finite rows, exactly as an unscreened rule)
    screens_nonfinite: bool = False
    #: whether one call is a closed-form pass over the rows (no iteration, a few hundred
    #: microseconds at n ≤ 16): the robustness search gives such rules its cheap budget class
    #: (:func:`fedaudit.audit.robustness_search.cheap_rule`). Read with :func:`declares`: only the
    #: class that sets it counts, so a subclass that overrides the core is not assumed closed-form
    #: unless it sets the attribute itself.
    closed_form: ClassVar[bool] = False
    #: whether the rule outputs the input row of smallest Krum score
    #: (:func:`fedaudit.kernels.krum_scores`), so the robustness search's forced-selection phase
    #: (a surrogate that makes row 0 win that score) applies to it; read like ``closed_form``.
    selects_min_krum_score: ClassVar[bool] = False

    def __init__(self, f: int = 0):
        self.f = check_int("f", f, low=0)

    def min_n(self, f: int) -> int:
        """Smallest n the rule accepts for a given f (default n > 2f)."""
        return 2 * f + 1

    def _min_n_at(self, f: int) -> int:
        """Smallest n the rule can run on with effective Byzantine count f."""
        return self.min_n(f)

    def _check_n(self, n: int) -> None:
        self._check_effective_n(n, self.f)

    def _check_effective_n(self, n: int, f: int) -> None:
        need = self.min_n(f)
        if n < need:
            raise FedAuditError(f"{self.name} needs n >= {need} inputs for f={f}, got n={n}")

    def tolerance(self, n: int) -> int:
        """Most rows holding NaN/±inf the rule accepts among n rows (see the module docstring):
        f for a rule that needs f and is built with f ≥ 1, else min(⌈n/2⌉ − 1, n − min_n(0))."""
        n = check_int("n", n, low=1)
        if self.needs_f and self.f >= 1:
            return min(self.f, n)
        return max(0, min((n - 1) // 2, n - self._min_n_at(0)))

    #: name of the trusted core method: ``_aggregate`` (aggregators) or ``_transform``
    _core = "_aggregate"

    def __call__(self, X: Any, *, rng: Any = None) -> Any:
        """Apply the rule to X (n, d); ``rng`` (Generator, int or None) feeds random rules."""
        return self._apply(X, self._run, rng)

    def _run(self, X: np.ndarray, f: int, rng: Any) -> np.ndarray:
        core = getattr(self, self._core)
        return core(X, f, rng=rng) if self.uses_rng else core(X, f)

    def _apply(self, X: Any, core, rng: Any) -> Any:
        """Validate, drop non-finite rows (f reduced accordingly, AggregatorBreakdown past the
        tolerance), run ``core(finite, f, rng)`` and return the result in the caller's type."""
        if is_torch(X) and self.torch_native:
            return self._apply_torch(X, core, rng)
        arr, token = as_array(X)
        n = arr.shape[0]
        self._check_n(n)
        gen = None if rng is None else as_generator(rng)
        out = None
        if self._screens():  # the core checks every value as it reads it
            try:
                out = core(arr, self.f, gen)
            except NonFiniteInput:
                pass
        if out is None:
            arr, f = self._drop_nonfinite(arr, _finite_rows(arr))
            out = core(arr, f, gen)
        out = _clamp_finite(to_like(out, None, arr.dtype), self.name)
        return to_like(out, token, arr.dtype)

    def _screens(self) -> bool:
        """``screens_nonfinite``, honoured only when the class that sets it also defines the core:
        a subclass that overrides the core (a user's variant of CWTM) is screened as usual."""
        mro = type(self).__mro__
        core_owner = next(c for c in mro if self._core in vars(c))
        flag_owner = next(c for c in mro if "screens_nonfinite" in vars(c))
        return self.screens_nonfinite and core_owner is flag_owner

    def _drop_nonfinite(self, rows: Any, finite: Any) -> tuple[Any, int]:
        """(the finite rows, f reduced by the r rows dropped) for a numpy array or a torch tensor and
        its boolean row mask; an :class:`AggregatorBreakdown` when r exceeds the tolerance."""
        n = rows.shape[0]
        r = n - int(finite.sum())
        if not r:
            return rows, self.f
        tol = self.tolerance(n)
        if r > tol:
            raise AggregatorBreakdown(self.name, n, r, tol)
        return rows[finite], max(self.f - r, 0)

    def _apply_torch(self, X: Any, core, rng: Any) -> Any:
        """:meth:`_apply` for a torch tensor, on its device: the same checks, non-finite rows
        and tolerance; the result is rounded into the input's dtype and clamped there."""
        import torch

        T, out_dtype = torch_input(X)
        n = T.shape[0]
        self._check_n(n)
        T, f = self._drop_nonfinite(T, _finite_rows(T))
        gen = None if rng is None else as_generator(rng)
        out = _clamp_finite(_cast(core(T, f, gen), T.dtype), self.name)
        return _clamp_finite(_cast(out, out_dtype), self.name)

    def params(self) -> dict[str, Any]:
        return {"f": self.f}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def declares(rule: Any, flag: str) -> bool:
    """Whether the class of ``rule`` (a rule, or a rule class) itself sets the boolean class
    attribute ``flag`` (``closed_form``, ``selects_min_krum_score``) to True. Inherited values do
    not count: a subclass may replace the core with anything, so it states its own cost and
    selection behaviour."""
    cls = rule if isinstance(rule, type) else type(rule)
    return vars(cls).get(flag, False) is True


class Aggregator(_Rule):
    """(n, d) → (d,). Subclasses implement ``_aggregate(X, f)`` on a finite float array (random
    rules set ``uses_rng = True`` and implement ``_aggregate(X, f, rng=None)``)."""

    @abstractmethod
    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray: ...


class PreAggregator(_Rule):
    """(n, d) → (n', d). Subclasses implement ``_transform(X, f)`` on a finite float array
    (random ones: ``uses_rng = True`` and ``_transform(X, f, rng=None)``).

    Non-finite rows are dropped first (as for aggregators); the output is finite.
    """

    _core = "_transform"

    @abstractmethod
    def _transform(self, X: np.ndarray, f: int) -> np.ndarray: ...

    def output_f(self, n: int, f: int) -> int:
        """Byzantine rows that can remain among the outputs (f for row-wise maps)."""
        return f

    def input_rows(self, m: int) -> int:
        """Fewest input rows that give at least m output rows (m for row-wise maps)."""
        return m

    @classmethod
    def robustness_after(cls, inner: RobustnessClass) -> RobustnessClass:
        """The class of this pre-aggregator followed by a rule of class ``inner`` (default: no
        published bound)."""
        return RobustnessClass()


class Composed(Aggregator):
    """pre_1 ∘ … ∘ pre_m then an aggregator: ``compose(NNM(f), CWTM(f))``.

    ``f`` is the largest stage f; the composition needs f iff one of its stages does (its
    tolerance follows, see the module docstring). ``rng`` is handed to every stage in order.
    """

    uses_rng = True

    def __init__(self, *stages: _Rule):
        if not stages or not isinstance(stages[-1], Aggregator):
            raise FedAuditError("compose needs zero or more pre-aggregators followed by one aggregator")
        if not all(isinstance(s, PreAggregator) for s in stages[:-1]):
            raise FedAuditError("every stage but the last passed to compose must be a PreAggregator")
        super().__init__(max(s.f for s in stages))
        self.stages = stages
        self.name = "+".join(s.name for s in stages)
        self.needs_f = any(s.needs_f for s in stages)
        self.torch_native = all(s.torch_native for s in stages)
        self.permutation_invariant = all(s.permutation_invariant for s in stages)

    def _screens(self) -> bool:
        """Whether the first stage screens its input: it sees the rows as received, so a NaN/±inf
        raises there before any other stage runs (later stages get its finite output)."""
        return self.stages[0]._screens()

    @property
    def robustness(self) -> RobustnessClass:  # type: ignore[override]
        """The last stage's class, mapped through the pre-aggregators from last to first."""
        return composed_class([type(s) for s in self.stages[:-1]], self.stages[-1].robustness)

    def min_n(self, f: int) -> int:
        """Smallest n for which every stage gets enough rows with Byzantine count min(stage.f, f),
        computed backwards through the stages (bucketing needs (m − 1)·s + 1 rows for m buckets)."""
        need = 1
        for stage in reversed(self.stages):
            need = max(stage.min_n(min(stage.f, f)), stage.input_rows(need) if isinstance(stage, PreAggregator)
                       else need)
        return need

    def _aggregate(self, X: np.ndarray, f: int, rng: Any = None) -> np.ndarray:
        # f is the Byzantine count still possible after non-finite rows were dropped: each
        # stage is checked against that effective f, not the one it was configured with.
        for stage in self.stages[:-1]:
            f_stage = min(stage.f, f)
            stage._check_effective_n(X.shape[0], f_stage)
            # the stage trims with its own f, but the rows it outputs can carry all f Byzantine ones
            out = stage._run(X, f_stage, rng)
            out = _clamp_finite(out if is_torch(out) else np.asarray(out), stage.name)
            X, f = out, stage.output_f(X.shape[0], f)
        last = self.stages[-1]
        f_last = min(last.f, f)
        last._check_effective_n(X.shape[0], f_last)
        return last._run(X, f_last, rng)

    def params(self) -> dict[str, Any]:
        return {"stages": [repr(s) for s in self.stages]}


def composed_class(pre: list[type], last: RobustnessClass) -> RobustnessClass:
    """The robustness class of pre_1 ∘ … ∘ pre_m ∘ F with F of class ``last`` (classes of the
    pre-aggregators, applied from the innermost out)."""
    out = last
    for stage in reversed(pre):
        out = stage.robustness_after(out)
    return out


def compose(*stages: _Rule) -> Composed:
    """Chain pre-aggregators and a final aggregator into one aggregator."""
    return Composed(*stages)
