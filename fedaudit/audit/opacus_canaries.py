"""Canary audits of a user's own Opacus DP-SGD training: the user's model, optimizer, data and loop.

:func:`~fedaudit.audit.dpsgd_audit.audit_dpsgd` trains fedaudit's own model. Here fedaudit owns
nothing but the canaries: the user builds their ``PrivacyEngine`` run (``make_private`` or
``make_private_with_epsilon``), adds one line, trains with their own loop, and asks for the
verdict::

    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                                   noise_multiplier=1.0, max_grad_norm=1.0)
    audit = OpacusCanaryAudit(engine, model, optimizer, loader, canaries=1000, seed=0)   # the added line
    ...  # the user's loop, unchanged
    result = audit.result(delta=1e-5)   # OpacusAudit: one-run bounds vs engine.accountant.get_epsilon(1e-5)

m canaries, each included by an independent fair coin (seeded), as the one-run audit of
Steinke, Nasr, Jagielski (2023) requires. Threat models:

* ``"white-box"`` (default) — *gradient canaries* and an adversary who knows every other record
  and sees every released noisy gradient, the adversary DP-SGD's guarantee is stated against.
  Canary j is the per-sample gradient ±a·C·e_{k_j} (a = :data:`~fedaudit.audit.canaries.CANARY_SCALE`
  = 10, C the optimizer's ``max_grad_norm``; k_j a distinct coordinate of the flattened trainable
  parameters, drawn once, with a random sign). At every optimizer step each *included* canary
  joins the batch with the Poisson rate q of the data loader, and its row is appended to the
  per-sample gradients (``p.grad_sample``) that the optimizer then clips to C and noises:
  the canary goes through the user's own clipping and noise. The observation of step t is the
  released noisy sum on the canary's coordinate, read right after the optimizer's ``add_noise``
  (before ``scale_grad``), minus the other records' clipped contribution there (recomputed from
  their per-sample gradients with Opacus's clip factor C/(‖g‖ + 1e-6) ∧ 1, a function of the
  previous iterate and of the real batch, neither of which depends on the canaries' coins), over
  C: o_{t,j} = b_{t,j} + N(0, σ_t²), b = 1 when canary j is included and sampled. The score is
  the log-likelihood ratio Σ_t log(1 − q_t + q_t·exp((o_{t,j} − ½)/σ̃_t²)) with (σ̃_t, q_t) what
  the engine's accountant recorded for step t (an auditor who trusts the accounting).
  For plain SGD the noisy gradient is the change of the parameters over −lr·(expected batch
  size), so this is the score "from the iterates"; for momentum or Adam the iterates are a
  post-processing of it, so reading it directly is the stronger (still valid) adversary.
* ``"white-box-final"`` — the same canaries, but the adversary sees only the parameters at
  :class:`OpacusCanaryAudit` construction and at :meth:`OpacusCanaryAudit.result`: the score is
  −sign_j·(θ_T − θ_0)[k_j], the parameter change projected on the canary's direction (the
  real data's gradients on that coordinate are not removed: a weaker adversary).
* ``"black-box"`` — *input canaries* (:class:`InputCanaries`): examples mixed into the user's
  dataset *before* ``make_private``, trained with the user's loss, scored by −loss of the
  trained model on each canary (the membership-inference adversary).

**Hooks.** White-box canaries need a point between the per-sample gradients and their clipping,
and one between the noise and its scaling; Opacus's ``DPOptimizer`` has a public hook only after
both (``attach_step_hook``, which the accountant already occupies). The audit therefore wraps two
public methods *of that optimizer instance* (never of the class): ``clip_and_accumulate``
(append the sampled canaries' rows to ``p.grad_sample``, then call the original) and
``add_noise`` (call the original, then read the canaries' coordinates of ``p.grad``).
:meth:`OpacusCanaryAudit.detach` restores both. Under ``BatchMemoryManager`` the canaries join the
last physical batch of each logical step only (the optimizer's skip queue is read without popping
it). Optimizers that override ``clip_and_accumulate`` (per-layer, adaptive, ghost or distributed
clipping) are refused: the recomputed clip factor would not be theirs. Memory: each step adds
(sampled canaries) × (parameters) numbers to the per-sample gradients, a fraction ≈ q·m/2 / B of
what Opacus already holds for a batch of B.

**Verdict.** :meth:`OpacusCanaryAudit.result` compares the certified one-run bounds
(:func:`~fedaudit.audit.canary_verdict.canary_bounds`: Steinke et al., and the f-DP bound of
Mahloujifar, Melis, Chaudhuri 2024 on the (ε, δ) curve) with the engine's own
``accountant.get_epsilon(δ)``, and puts fedaudit's accountants (:data:`DEFAULT_ACCOUNTANTS`) on
the same events (the accountant's ``history`` of (σ, q, steps)) next to it. A bound above the
engine's ε is a violation at the stated confidence: a correctly configured run is flagged with
probability at most 1 − confidence.

**Caveats.** The black-box canaries enter the dataset, so Opacus's q = 1/len(loader) =
1/⌈N/B⌉ depends on the number N of examples and thus on the coins (one canary changes it only
when N crosses a multiple of B); the engine accounts at that q, and the white-box canaries are
sampled at exactly the q the accountant records (checked step by step in :meth:`~OpacusCanaryAudit.result`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.accounting.accountants import account, schedule_event
from fedaudit.accounting.dpsgd import check_method
from fedaudit.accounting.result import Account
from fedaudit.audit.canaries import CANARY_SCALE, THREATS, subsampled_gaussian_llr
from fedaudit.audit.canary_verdict import CanaryAudit, canary_bounds
from fedaudit.audit.one_run import FDP_CURVES
from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.json import jsonable
from fedaudit.rng import derive_generator
from fedaudit.validation import check_choice, check_int, check_positive, check_probability

__all__ = ["OpacusCanaryAudit", "InputCanaries", "OpacusAudit", "engine_history", "noise_ratio",
           "DEFAULT_ACCOUNTANTS", "ENGINE_TOLERANCE"]

#: fedaudit's accountants put next to the engine's by default (PLD: tight; RDP: Opacus's own analysis)
DEFAULT_ACCOUNTANTS = ("pld", "rdp")
#: relative margin by which a fedaudit upper-bound accountant must exceed the engine's ε to be reported
ENGINE_TOLERANCE = 0.01
#: fewest canaries an audit accepts (each side of the coins needs MIN_SCORES for the bounds)
MIN_CANARIES = 20
_FEATURE = "the Opacus canary audit"


def engine_history(privacy_engine: Any) -> tuple[tuple[float, float, int], ...]:
    """The events the engine's accountant has recorded: ``privacy_engine.accountant.history``,
    Opacus's list of (noise multiplier, sample rate, steps) segments, validated. Empty before the
    first optimizer step."""
    acc = getattr(privacy_engine, "accountant", None)
    history = getattr(acc, "history", None)
    if acc is None or history is None or not callable(getattr(acc, "get_epsilon", None)):
        raise FedAuditError(f"privacy_engine must be an opacus PrivacyEngine (an object with .accountant.history "
                            f"and .accountant.get_epsilon), got {type(privacy_engine).__name__}")
    out = []
    for i, seg in enumerate(history):
        try:
            sigma, q, n = (float(seg[0]), float(seg[1]), int(seg[2]))
        except (TypeError, ValueError, IndexError):
            raise FedAuditError(f"accountant.history[{i}] is {seg!r}, not (noise_multiplier, sample_rate, steps)"
                                ) from None
        out.append((sigma, q, n))
    return tuple(out)


@dataclass(frozen=True)
class OpacusAudit(CanaryAudit):
    """Result of :meth:`OpacusCanaryAudit.result`. ``accountant`` is the engine's claim (``epsilon``
    = ``privacy_engine.accountant.get_epsilon(delta)``, ``method`` = "opacus-" + its mechanism);
    ``one_run``/``one_run_fdp`` the certified lower bounds, ``gdp`` an estimate (module
    docstring of :mod:`fedaudit.audit.canary_verdict`); ``violation`` when a certified bound
    exceeds the engine's ε. ``accountants`` are fedaudit's on the same ``history``;
    ``below_bound`` names every accountant (engine first) whose ε is below the largest certified
    bound; ``engine_under_reports`` when the engine's ε is below the smallest of fedaudit's
    (upper-bound) accountants' by more than :data:`ENGINE_TOLERANCE`, relatively: the engine
    reports less than a rigorous accountant computes for the same events (Opacus's own "gdp"
    accountant warns that it "can underestimate privacy expenditure"). ``noise_ratio`` (white
    box) is :func:`noise_ratio`: the released noise on the canaries' coordinates over the claimed
    σ (≈ 1 when the optimizer adds the noise its accountant is told; None for other threats).
    ``steps`` the optimizer steps the accountant recorded, ``canary_steps`` those the canaries
    saw; ``hook_seconds`` the time spent in the audit's hooks during training, ``seconds`` the
    time of :meth:`~OpacusCanaryAudit.result`."""

    threat: str
    engine_mechanism: str
    accountants: tuple[Account, ...]
    below_bound: tuple[str, ...]
    engine_under_reports: bool
    history: tuple[tuple[float, float, int], ...]
    steps: int
    canary_steps: int
    seed: int
    noise_ratio: float | None
    hook_seconds: float
    seconds: float

    @property
    def engine_epsilon(self) -> float:
        """``privacy_engine.accountant.get_epsilon(delta)``."""
        return self.accountant.epsilon

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "threat": self.threat, "engine_mechanism": self.engine_mechanism, "engine_epsilon": self.engine_epsilon,
            "accountant": self.accountant, "accountants": list(self.accountants), "one_run": self.one_run,
            "one_run_fdp": self.one_run_fdp, "gdp": self.gdp, "violation": self.violation,
            "violated_by": list(self.violated_by), "epsilon_lower": self.epsilon_lower,
            "below_bound": list(self.below_bound), "engine_under_reports": self.engine_under_reports,
            "noise_ratio": self.noise_ratio,
            "delta": self.delta, "confidence": self.confidence, "canaries": self.canaries,
            "canaries_in": self.canaries_in, "history": [list(h) for h in self.history], "steps": self.steps,
            "canary_steps": self.canary_steps, "seed": self.seed, "hook_seconds": self.hook_seconds,
            "seconds": self.seconds})

    def summary(self) -> str:
        """One line: threat, engine's claim, fedaudit's accountants, the bounds and the verdict."""
        others = ", ".join(f"{a.method} {a.epsilon:.4g}" for a in self.accountants)
        below = "; the engine reports LESS than fedaudit's accountants" if self.engine_under_reports else ""
        ratio = "" if self.noise_ratio is None else f"; released noise {self.noise_ratio:.3f} × the claimed σ"
        return (f"Opacus {self.threat} audit ({self.canaries} canaries, {self.canary_steps} of {self.steps} steps): "
                f"{self.describe_bounds()}; fedaudit accountants on the same events: {others or 'none asked'}{below}"
                f"{ratio}")


def noise_ratio(observations: np.ndarray, claimed: np.ndarray) -> float:
    """r̂ = 1.4826·median |o_{t,j}/σ̃_t| over every step t and canary j: the released noise on the
    canaries' coordinates in units of the claimed σ̃_t (≈ 1 for a correct run; the median ignores
    the few o = b + noise with b = 1). It reads the observations of all canaries and never the
    coins, so a score built on it is still a function of the run's output alone."""
    r = 1.482602218505602 * float(np.median(np.abs(observations / claimed[:, None])))
    return max(r, 1e-12)


def _expand(history: Sequence[tuple[float, float, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-step (σ, q) arrays of the accountant's segments."""
    sig = np.concatenate([np.full(n, s) for s, _, n in history]) if history else np.zeros(0)
    q = np.concatenate([np.full(n, r) for _, r, n in history]) if history else np.zeros(0)
    return sig, q


class InputCanaries:
    """Black-box canaries mixed into the user's dataset before ``make_private``.

    ``canaries`` examples (``inputs`` and ``labels`` of your own, or, by default, inputs drawn
    from N(0, 1) in the shape and dtype of ``dataset[0][0]`` with labels uniform over
    ``num_classes``: out-of-distribution, mislabelled points, the canaries a model memorises
    most); each is included by a fair coin from ``seed``. :attr:`dataset` is the user's dataset
    followed by the included canaries (labels of the same Python type as ``dataset[0][1]``):
    build the DataLoader on it, then pass this object to :class:`OpacusCanaryAudit` with
    ``threat="black-box"``."""

    def __init__(self, dataset: Any, *, canaries: int = 1000, num_classes: int | None = None, inputs: Any = None,
                 labels: Any = None, seed: int = 0):
        torch = require("torch", _FEATURE)
        data = require("torch.utils.data", _FEATURE)
        self.seed = check_int("seed", seed, low=0)
        try:
            x0, y0 = dataset[0][0], dataset[0][1]
        except Exception as err:  # noqa: BLE001 - any indexing failure of a user's dataset is the same user error
            raise FedAuditError(f"dataset must be indexable and give (input, label) pairs: dataset[0] failed "
                                f"({type(err).__name__}: {err})") from None
        if inputs is None:
            m = check_int("canaries", canaries, low=MIN_CANARIES)
            if num_classes is None:
                raise FedAuditError("give num_classes (for random canary labels) or inputs and labels")
            k = check_int("num_classes", num_classes, low=2)
            x0 = torch.as_tensor(x0)
            gen = torch.Generator().manual_seed(int(derive_generator(self.seed, "input-canaries").integers(2**62)))
            inputs = torch.randn((m, *x0.shape), generator=gen, dtype=torch.float64).to(x0.dtype)
            labels = torch.randint(0, k, (m,), generator=gen)
        else:
            inputs = torch.as_tensor(inputs)
            if labels is None:
                raise FedAuditError("inputs need labels (one per canary)")
            labels = torch.as_tensor(labels)
            m = check_int("len(inputs)", len(inputs), low=MIN_CANARIES)
            if len(labels) != m:
                raise FedAuditError(f"inputs has {m} canaries but labels has {len(labels)}")
        self.inputs, self.labels = inputs, labels
        self.included = derive_generator(self.seed, "input-canary-coins").random(m) < 0.5
        as_label = int if isinstance(y0, (int, np.integer)) else (lambda y: y)
        chosen = np.flatnonzero(self.included)

        class _Included(data.Dataset):
            def __len__(self):
                return chosen.size

            def __getitem__(self, i):
                j = int(chosen[i])
                return inputs[j], as_label(labels[j])

        self.dataset = data.ConcatDataset([dataset, _Included()])

    @property
    def canaries(self) -> int:
        """Number of canaries (included or not)."""
        return int(self.included.size)


class OpacusCanaryAudit:
    """Canaries in a user's own Opacus run (module docstring). Build it right after
    ``make_private``/``make_private_with_epsilon`` with the objects it returned; train as usual;
    call :meth:`result`.

    ``data_loader`` (the ``DPDataLoader`` make_private returned) gives the white-box canaries'
    Poisson rate q (its ``sample_rate``; or pass ``sample_rate``). ``canaries`` white-box canaries
    need as many trainable parameters (one coordinate each). ``threat="black-box"`` needs
    ``inputs`` (an :class:`InputCanaries` whose ``dataset`` the loader was built on) and scores
    with ``loss_fn(outputs, targets)`` → per-example losses (default: cross-entropy).
    ``seed`` draws the coins, coordinates, signs and per-step sampling of the gradient canaries."""

    def __init__(self, privacy_engine: Any, model: Any, optimizer: Any, data_loader: Any = None, *,
                 canaries: int = 1000, threat: str = "white-box", seed: int = 0, sample_rate: float | None = None,
                 inputs: InputCanaries | None = None, loss_fn: Callable | None = None):
        self._torch = torch = require("torch", _FEATURE)
        engine_history(privacy_engine)
        self.engine, self.model, self.optimizer = privacy_engine, model, optimizer
        self.threat = check_choice("threat", threat, THREATS)
        self.seed = check_int("seed", seed, low=0)
        self.hook_seconds = 0.0
        self._attached = False
        self._start_steps = sum(n for _, _, n in engine_history(privacy_engine))
        if self.threat == "black-box":
            if not isinstance(inputs, InputCanaries):
                raise FedAuditError("threat='black-box' needs inputs=InputCanaries(dataset, ...), whose .dataset the "
                                    "data loader was built on before make_private")
            self.inputs, self.loss_fn = inputs, loss_fn
            self.included = inputs.included
            self.canaries = inputs.canaries
            return
        if inputs is not None:
            raise FedAuditError(f"inputs are black-box canaries; threat={self.threat!r} plants gradient canaries")
        self._check_optimizer(optimizer)
        if sample_rate is None:
            sample_rate = getattr(data_loader, "sample_rate", None)
            if sample_rate is None:
                raise FedAuditError("gradient canaries are Poisson-sampled at the data loader's rate: pass the "
                                    "DPDataLoader make_private returned, or sample_rate")
        self.sample_rate = check_probability("sample_rate", sample_rate, open_high=False)
        self.canaries = m = check_int("canaries", canaries, low=MIN_CANARIES)
        params = list(optimizer.params)
        sizes = [p.numel() for p in params]
        total = int(sum(sizes))
        if m > total:
            raise FedAuditError(f"canaries={m} white-box canaries need one coordinate each, but the optimizer has "
                                f"{total} trainable parameters: use at most {total} canaries")
        rng = derive_generator(self.seed, "opacus-gradient-canaries")
        self.included = rng.random(m) < 0.5
        self.coordinates = np.sort(rng.choice(total, size=m, replace=False))
        self.signs = np.where(rng.random(m) < 0.5, -1.0, 1.0)
        self._step_rng = derive_generator(self.seed, "opacus-canary-steps")
        # per parameter: which canaries live in it and where (flat index inside the parameter)
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        self._params = params
        self._slots = []
        for i, p in enumerate(params):
            sel = np.flatnonzero((self.coordinates >= offsets[i]) & (self.coordinates < offsets[i + 1]))
            local = self.coordinates[sel] - offsets[i]
            self._slots.append((sel, local, torch.as_tensor(local, dtype=torch.long, device=p.device)))
        self._theta0 = self._canary_values()
        self._real = np.zeros(m)
        self._observations: list[np.ndarray] = []
        self._rates: list[float] = []
        self._step_ids: list[int] = []
        self.noise_ratio: float | None = None
        self._attach()

    # -- hooks ---------------------------------------------------------------------------------

    @staticmethod
    def _check_optimizer(optimizer: Any) -> None:
        DPOptimizer = require("opacus.optimizers", _FEATURE).DPOptimizer
        if not isinstance(optimizer, DPOptimizer):
            raise FedAuditError(f"optimizer must be the DPOptimizer make_private returned, got "
                                f"{type(optimizer).__name__}")
        if type(optimizer).clip_and_accumulate is not DPOptimizer.clip_and_accumulate:
            raise FedAuditError(f"gradient canaries need Opacus's flat clipping; {type(optimizer).__name__} "
                                f"overrides clip_and_accumulate (per-layer, adaptive, ghost or distributed "
                                f"clipping): use threat='black-box'")
        if not isinstance(optimizer.max_grad_norm, (int, float)):
            raise FedAuditError(f"gradient canaries need one max_grad_norm, got {optimizer.max_grad_norm!r}")
        if getattr(optimizer, "_fedaudit_canaries", None) is not None:
            raise FedAuditError("this optimizer already carries an OpacusCanaryAudit: detach() it first")

    def _attach(self) -> None:
        opt = self.optimizer
        self._orig = {name: opt.__dict__.get(name) for name in ("clip_and_accumulate", "add_noise")}
        self._clip, self._noise = opt.clip_and_accumulate, opt.add_noise
        opt.clip_and_accumulate = self._clip_and_accumulate
        if self.threat == "white-box":
            opt.add_noise = self._add_noise
        opt._fedaudit_canaries = self
        self._attached = True

    def detach(self) -> None:
        """Restore the optimizer's own ``clip_and_accumulate`` and ``add_noise`` (the canaries stop
        joining steps; the scores so far are kept)."""
        if not self._attached:
            return
        opt = self.optimizer
        for name, orig in self._orig.items():
            if orig is None:
                opt.__dict__.pop(name, None)
            else:
                setattr(opt, name, orig)
        opt._fedaudit_canaries = None
        self._attached = False

    def _flat_grad_sample(self, p: Any) -> Any:
        gs = p.grad_sample
        return self._torch.cat(gs, dim=0) if isinstance(gs, list) else gs

    def _canary_values(self) -> np.ndarray:
        """The canaries' coordinates of the current parameters."""
        out = np.zeros(self.canaries)
        with self._torch.no_grad():
            for p, (sel, _, local) in zip(self._params, self._slots):
                if sel.size:
                    out[sel] = p.detach().reshape(-1)[local].double().cpu().numpy()
        return out

    def _clip_and_accumulate(self) -> None:
        """Recompute the real records' clipped sum on the canaries' coordinates, append the rows of
        this step's sampled canaries to ``p.grad_sample``, then run the optimizer's clipping."""
        start = time.perf_counter()
        torch, opt = self._torch, self.optimizer
        grads = [getattr(p, "grad_sample", None) for p in self._params]
        # a step whose gradients were already used is left to Opacus to refuse; a skipped
        # (BatchMemoryManager) micro-batch gets no canaries, only the logical step's last one does
        skip = getattr(opt, "_check_skip_next_step", None)
        if any(g is None or any(hasattr(t, "_processed") for t in (g if isinstance(g, list) else [g]))
               for g in grads):
            self.hook_seconds += time.perf_counter() - start
            return self._clip()
        C = float(opt.max_grad_norm)
        with torch.no_grad():
            flats = [self._flat_grad_sample(p) for p in self._params]
            if len(flats[0]):
                norms = torch.stack([g.reshape(len(g), -1).norm(2, dim=-1) for g in flats], dim=1).norm(2, dim=1)
                factor = (C / (norms + 1e-6)).clamp(max=1.0)
                for p, g, (sel, _, local) in zip(self._params, flats, self._slots):
                    if sel.size:
                        cols = g.to(p.dtype).reshape(len(g), -1)[:, local]
                        self._real[sel] += (factor.to(p.dtype) @ cols).double().cpu().numpy()
            last = not (skip(pop_next=False) if callable(skip) else False)
            if last:
                iters = len(grads[0]) if isinstance(grads[0], list) else 1
                rate = min(1.0, self.sample_rate * iters)
                sampled = np.flatnonzero((self._step_rng.random(self.canaries) < rate) & self.included)
                self._rates.append(rate)
                self._append_rows(sampled, C)
        self.hook_seconds += time.perf_counter() - start
        return self._clip()

    def _append_rows(self, sampled: np.ndarray, C: float) -> None:
        """Append one per-sample gradient row per sampled canary (±a·C on its coordinate)."""
        torch = self._torch
        n = sampled.size
        if n == 0:
            return
        row_of = np.full(self.canaries, -1)
        row_of[sampled] = np.arange(n)
        for p, (sel, local, _) in zip(self._params, self._slots):
            gs = p.grad_sample
            ref = gs[-1] if isinstance(gs, list) else gs
            rows = torch.zeros((n, p.numel()), dtype=ref.dtype, device=ref.device)
            hit = row_of[sel] >= 0
            if hit.any():
                r, k = (torch.as_tensor(a, dtype=torch.long, device=ref.device) for a in (row_of[sel[hit]], local[hit]))
                rows[r, k] = torch.as_tensor(CANARY_SCALE * C * self.signs[sel[hit]], dtype=ref.dtype,
                                             device=ref.device)
            rows = rows.reshape(n, *p.shape)
            if isinstance(gs, list):
                gs[-1] = torch.cat([gs[-1], rows], dim=0)
            else:
                p.grad_sample = torch.cat([gs, rows], dim=0)

    def _add_noise(self) -> None:
        """Run the optimizer's noise, then record o = (released sum − real records' part)/C on every
        canary's coordinate (oriented by its sign)."""
        self._noise()
        start = time.perf_counter()
        C = float(self.optimizer.max_grad_norm)
        released = np.zeros(self.canaries)
        with self._torch.no_grad():
            for p, (sel, _, local) in zip(self._params, self._slots):
                if sel.size and p.grad is not None:
                    released[sel] = p.grad.detach().reshape(-1)[local].double().cpu().numpy()
        self._observations.append((self.signs * (released - self._real) / C).astype(np.float32))
        # the accountant's hook runs after this one: the steps it holds now index this step
        self._step_ids.append(sum(n for _, _, n in engine_history(self.engine)))
        self._real[:] = 0.0
        self.hook_seconds += time.perf_counter() - start

    # -- scores and verdict -----------------------------------------------------------------------

    @property
    def observations(self) -> np.ndarray:
        """White box: the (steps × canaries) normalised observations o_{t,j} = b_{t,j} + N(0, σ_t²)
        (module docstring); empty for the other threats."""
        if self.threat != "white-box" or not self._observations:
            return np.zeros((0, self.canaries))
        return np.stack(self._observations).astype(np.float64)

    @property
    def canary_steps(self) -> int:
        """Optimizer steps the canaries could join: since the audit was built (until
        :meth:`detach`, for gradient canaries)."""
        if self.threat == "black-box":
            return sum(n for _, _, n in engine_history(self.engine)) - self._start_steps
        return len(self._rates)

    def scores(self) -> np.ndarray:
        """One score per canary (higher = more likely included), by the threat model."""
        if self.threat == "black-box":
            return self._loss_scores()
        if self.threat == "white-box-final":
            return -self.signs * (self._canary_values() - self._theta0)
        history = engine_history(self.engine)
        sigma, q = _expand(history)
        T = len(self._observations)
        if T == 0:
            raise FedAuditError("no optimizer step has run since the audit was built: train, then call result()")
        ids = np.asarray(self._step_ids)
        if sigma.size <= ids[-1]:
            raise FedAuditError(f"the engine's accountant records {sigma.size} steps but the canaries saw step "
                                f"{ids[-1] + 1}: the accountant's step hook was removed or replaced")
        sigma, q = sigma[ids], q[ids]
        rates = np.asarray(self._rates[:T])
        bad = np.flatnonzero(np.abs(rates - q) > 1e-9 * np.maximum(q, 1e-300))
        if bad.size:
            t = int(bad[0])
            raise FedAuditError(f"the canaries were sampled at q={rates[t]:g} but the accountant records q={q[t]:g} "
                                f"at step {ids[t] + 1}: pass the DPDataLoader make_private returned (or its sample_rate)")
        if (sigma <= 0).any():
            raise FedAuditError("the accountant records noise_multiplier=0: its ε is infinite, there is no claim to "
                                "audit")
        obs = np.stack(self._observations)
        self.noise_ratio = noise_ratio(obs, sigma)
        return np.sum([subsampled_gaussian_llr(obs[t], q[t], self.noise_ratio * sigma[t]) for t in range(T)], axis=0)

    def _loss_scores(self) -> np.ndarray:
        torch = self._torch
        F = require("torch.nn.functional", _FEATURE)
        loss_fn = self.loss_fn or (lambda out, y: F.cross_entropy(out, y, reduction="none"))
        model = self.model
        was_training = model.training
        model.eval()
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        out = []
        try:
            with torch.no_grad():
                for s in range(0, self.canaries, 512):
                    x = self.inputs.inputs[s:s + 512].to(device)
                    y = self.inputs.labels[s:s + 512].to(device)
                    out.append(-loss_fn(model(x), y).double().reshape(-1).cpu().numpy())
        finally:
            model.train(was_training)
        scores = np.concatenate(out)
        if scores.size != self.canaries:
            raise FedAuditError(f"loss_fn returned {scores.size} losses for {self.canaries} canaries: it must return "
                                f"one loss per example (reduction='none')")
        return scores

    def result(self, delta: float, *, confidence: float = 0.95,
               accountants: Sequence[str] = DEFAULT_ACCOUNTANTS, fdp_curve: str = "dp") -> OpacusAudit:
        """The verdict at ``delta``: the certified one-run bounds of the canaries' scores against the
        engine's ``accountant.get_epsilon(delta)``, with fedaudit's ``accountants`` on the same
        events (module docstring). ``fdp_curve`` as in
        :func:`~fedaudit.audit.dpsgd_audit.audit_dpsgd`."""
        start = time.perf_counter()
        delta = check_probability("delta", delta)
        confidence = check_probability("confidence", confidence)
        curve = check_choice("fdp_curve", fdp_curve, FDP_CURVES)
        names = [check_method(a, "accountants") for a in accountants]
        history = engine_history(self.engine)
        if not history:
            raise FedAuditError("the engine's accountant has recorded no step: train, then call result()")
        for s, _, _ in history:
            check_positive("accountant noise_multiplier", s)
        scores = self.scores()
        if not np.isfinite(scores).all():
            raise FedAuditError("canary scores are not finite (training diverged?)")
        acc = self.engine.accountant
        mechanism = str(acc.mechanism()) if callable(getattr(acc, "mechanism", None)) else type(acc).__name__
        engine_eps = float(acc.get_epsilon(delta))
        claim = Account(engine_eps, delta, method=f"opacus-{mechanism}", parameters={"history": history})
        b = canary_bounds(scores[self.included], scores[~self.included], engine_eps, delta=delta,
                          confidence=confidence, curve=curve)
        event = schedule_event(history)
        params = {"history": history}
        ours = tuple(account(event, delta=delta, accountant=n, parameters=params) for n in names)
        fdp = b.one_run_fdp.epsilon if curve == "dp" else 0.0
        lower = max(b.one_run.epsilon, fdp)
        below = tuple(a.method for a in (claim, *ours) if a.epsilon < lower)
        under = bool(ours) and engine_eps < min(a.epsilon for a in ours) * (1 - ENGINE_TOLERANCE)
        return OpacusAudit(
            accountant=claim, one_run=b.one_run, one_run_fdp=b.one_run_fdp, gdp=b.gdp,
            violation=bool(b.violated_by), violated_by=b.violated_by, delta=delta, confidence=confidence,
            canaries=self.canaries, canaries_in=int(self.included.sum()), threat=self.threat,
            engine_mechanism=mechanism, accountants=ours, below_bound=below, engine_under_reports=under,
            history=history, steps=sum(n for _, _, n in history), canary_steps=self.canary_steps, seed=self.seed,
            noise_ratio=self.noise_ratio if self.threat == "white-box" else None, hook_seconds=self.hook_seconds,
            seconds=time.perf_counter() - start)
