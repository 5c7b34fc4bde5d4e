"""Server-side robust aggregation: the interface every rule implements.

An :class:`Aggregator` maps n input vectors (n, d) to one vector (d,); a
:class:`PreAggregator` maps (n, d) to (n', d) (NNM, bucketing, clipping, …). Both accept numpy
arrays and torch tensors and return the same type, dtype and device; they never mutate their
input. ``f`` is the number of Byzantine inputs the rule is configured to tolerate.

Non-finite inputs. A row containing NaN or ±inf is Byzantine by definition (honest clients send
finite vectors). :meth:`Aggregator.__call__` drops such rows *before* the rule runs, and
runs the rule with ``f − r`` where r rows were dropped: the remaining n − r rows contain at
most f − r Byzantine ones, and n − r > 2(f − r) whenever n > 2f. More than f non-finite rows
raise :class:`~fedaudit.errors.FedAuditError`. So no rule returns NaN while an honest majority
is finite.

(f, κ)-robustness (Allouah et al., AISTATS 2023): F is (f, κ)-robust if for every input and
every S ⊆ [n] with |S| = n − f,  ‖F(x) − x̄_S‖² ≤ (κ/|S|) Σ_{i∈S} ‖x_i − x̄_S‖².
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError, check_int

__all__ = ["Aggregator", "PreAggregator", "Composed", "compose", "as_array", "to_like"]


def as_array(X: Any, name: str = "vectors") -> tuple[np.ndarray, Any]:
    """(n, d) float numpy view of X (numpy or torch) and a token to convert results back."""
    token = None
    if hasattr(X, "detach") and hasattr(X, "cpu"):  # torch tensor
        token = (X.dtype, X.device)
        X = X.detach().cpu().numpy()
    arr = np.asarray(X)
    if arr.dtype.kind not in "fc":
        arr = arr.astype(np.float64)
    if arr.ndim != 2:
        raise FedAuditError(f"{name} must be a 2-D array (n, d), got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise FedAuditError(f"{name} must have at least one row and one column, got shape {arr.shape}")
    return arr, token


def to_like(result: np.ndarray, token: Any, dtype: np.dtype) -> Any:
    """Convert a numpy result back to the caller's type (torch: same dtype and device)."""
    result = np.asarray(result, dtype=dtype)
    if token is None:
        return result
    import torch

    torch_dtype, device = token
    return torch.from_numpy(np.ascontiguousarray(result)).to(device=device, dtype=torch_dtype)


class _Rule(ABC):
    """Shared plumbing: name, f, validation of n against the rule's requirement."""

    name: str = "rule"

    def __init__(self, f: int = 0):
        self.f = check_int("f", f, low=0)

    def min_n(self, f: int) -> int:
        """Smallest n the rule accepts for a given f (default n > 2f)."""
        return 2 * f + 1

    def _check_n(self, n: int) -> None:
        self._check_effective_n(n, self.f)

    def _check_effective_n(self, n: int, f: int) -> None:
        need = self.min_n(f)
        if n < need:
            raise FedAuditError(f"{self.name} needs n >= {need} inputs for f={f}, got n={n}")

    def _apply(self, X: Any, rule) -> Any:
        """Validate, drop non-finite rows (f reduced accordingly), run ``rule(finite, f)`` and
        return the result in the caller's array type."""
        arr, token = as_array(X)
        self._check_n(arr.shape[0])
        finite, f = _split_finite(arr, self.f, self.name)
        return to_like(rule(finite, f), token, arr.dtype)

    def params(self) -> dict[str, Any]:
        return {"f": self.f}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def _split_finite(arr: np.ndarray, f: int, name: str) -> tuple[np.ndarray, int]:
    finite = np.isfinite(arr).all(axis=1)
    r = int(arr.shape[0] - np.count_nonzero(finite))
    if r == 0:
        return arr, f
    if r > f:
        raise FedAuditError(f"{name}: {r} input rows contain NaN or ±inf, more than f={f} Byzantine rows "
                            "the rule is configured for")
    return arr[finite], f - r


class Aggregator(_Rule):
    """(n, d) → (d,). Subclasses implement ``_aggregate(X, f)`` on a finite float array."""

    def __call__(self, X: Any) -> Any:
        return self._apply(X, self._aggregate)

    @abstractmethod
    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray: ...


class PreAggregator(_Rule):
    """(n, d) → (n', d). Subclasses implement ``_transform(X, f)`` on a finite float array.

    Non-finite rows are dropped first (as for aggregators); the output is finite.
    """

    def __call__(self, X: Any) -> Any:
        return self._apply(X, self._transform)

    @abstractmethod
    def _transform(self, X: np.ndarray, f: int) -> np.ndarray: ...

    def output_f(self, n: int, f: int) -> int:
        """Byzantine rows that can remain among the outputs (f for row-wise maps)."""
        return f


class Composed(Aggregator):
    """pre_1 ∘ … ∘ pre_m then an aggregator: ``compose(NNM(f), CWTM(f))``."""

    def __init__(self, *stages: _Rule):
        if not stages or not isinstance(stages[-1], Aggregator):
            raise FedAuditError("compose needs zero or more pre-aggregators followed by one aggregator")
        if not all(isinstance(s, PreAggregator) for s in stages[:-1]):
            raise FedAuditError("every stage but the last passed to compose must be a PreAggregator")
        super().__init__(max(s.f for s in stages))
        self.stages = stages
        self.name = "+".join(s.name for s in stages)

    def min_n(self, f: int) -> int:
        return max(s.min_n(s.f) for s in self.stages)

    def _aggregate(self, X: np.ndarray, f: int) -> np.ndarray:
        # f is the Byzantine count still possible after non-finite rows were dropped: each
        # stage is checked against that effective f, not the one it was configured with.
        for stage in self.stages[:-1]:
            f_stage = min(stage.f, f)
            stage._check_effective_n(X.shape[0], f_stage)
            # the stage trims with its own f, but the rows it outputs can carry all f Byzantine ones
            X, f = stage._transform(X, f_stage), stage.output_f(X.shape[0], f)
        last = self.stages[-1]
        f_last = min(last.f, f)
        last._check_effective_n(X.shape[0], f_last)
        return last._aggregate(X, f_last)

    def params(self) -> dict[str, Any]:
        return {"stages": [repr(s) for s in self.stages]}


def compose(*stages: _Rule) -> Composed:
    """Chain pre-aggregators and a final aggregator into one aggregator."""
    return Composed(*stages)
