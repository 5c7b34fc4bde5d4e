"""Canary audit of DP-SGD: one Opacus training run with m canaries, its certified ε lower bounds
put next to the accountant's ε.

:func:`audit_dpsgd`

1. the accountant's ε of the *claimed* configuration,
   ``epsilon_dpsgd(claimed σ, q, steps, δ, method="pld")`` — what a ledger is told;
2. one training run (:func:`fedaudit.audit.canaries.train_with_canaries`) with the *real* σ and
   m canaries, each included with probability ½; the white-box likelihood-ratio score uses the
   claimed σ (an auditor who trusts the configuration);
3. the canaries' scores go to :class:`~fedaudit.audit.scores.ScoreAuditor` (``scores_in`` = the
   included canaries): the one-run bound of Steinke, Nasr, Jagielski (2023), certified for every
   (ε, δ)-DP training algorithm; its f-DP refinement (Mahloujifar, Melis, Chaudhuri 2024) with
   the trade-off curve of (ε, δ)-DP itself, also certified for every algorithm (``fdp_curve=
   "gaussian"`` hypothesises the Gaussian curve through (ε, δ) instead: tighter, but only an
   estimate for DP-SGD, whose subsampled-Gaussian curve is not Gaussian); and the Gaussian-DP
   estimate (Nasr et al. 2023), never a bound;
4. ``violation``: a certified one-run bound (Steinke, or f-DP with the (ε, δ) curve) exceeds
   the accountant's ε, i.e. with probability
   ≥ ``confidence`` the run is not as private as the accountant says.

With m canaries the one-run bound is capped whatever the training does (1000 canaries, all
guessed right: ≈ 5.78 at δ = 1e-5), so a correct run can only fail to be flagged, and a claim
above the cap can never be refuted.

Not on the engine: the training run is one Markov chain (step t starts from θ_{t−1}), so it
runs in this process and cannot be split into chunks; the one-run bounds over the guess grid
take 0.2–0.4 s for 1000–5000 canaries (measured). What an audit claim computes besides it, the accountant's
ε curve, runs as engine chunks (:func:`fedaudit.accounting.curves.epsilon_dpsgd_curve`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fedaudit.accounting.dpsgd import check_method, epsilon_dpsgd
from fedaudit.audit.canaries import train_with_canaries
from fedaudit.audit.canary_verdict import CanaryAudit, canary_bounds
from fedaudit.audit.one_run import FDP_CURVES
from fedaudit.audit.sampling import ProgressFn
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_positive, check_probability

__all__ = ["DPSGDAudit", "audit_dpsgd"]


@dataclass(frozen=True)
class DPSGDAudit(CanaryAudit):
    """Result of :func:`audit_dpsgd`. ``accountant`` is the claimed configuration's
    (ε, δ); ``one_run`` (Steinke et al.) and ``one_run_fdp`` (f-DP) are lower bounds at
    ``confidence`` (the f-DP one certified for every algorithm unless ``fdp_curve="gaussian"``);
    ``gdp`` an estimate. ``violated_by`` names the one-run bounds above the accountant's ε
    (``violation`` = any; the Gaussian-curve f-DP bound, an estimate for DP-SGD, never counts). ``accuracy`` is the final model's test accuracy;
    ``training_seconds`` the Opacus run, ``seconds`` the whole audit."""

    noise_multiplier: float
    claimed_noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    dataset: str
    threat: str
    learning_rate: float
    seed: int
    accuracy: float
    train_examples: int
    training_seconds: float
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "accountant": self.accountant, "one_run": self.one_run, "one_run_fdp": self.one_run_fdp, "gdp": self.gdp,
            "violation": self.violation, "violated_by": list(self.violated_by), "epsilon_lower": self.epsilon_lower,
            "noise_multiplier": self.noise_multiplier, "claimed_noise_multiplier": self.claimed_noise_multiplier,
            "max_grad_norm": self.max_grad_norm, "sample_rate": self.sample_rate, "steps": self.steps,
            "delta": self.delta, "confidence": self.confidence, "canaries": self.canaries,
            "canaries_in": self.canaries_in, "dataset": self.dataset, "threat": self.threat,
            "learning_rate": self.learning_rate, "seed": self.seed, "accuracy": self.accuracy,
            "train_examples": self.train_examples, "training_seconds": self.training_seconds,
            "seconds": self.seconds})

    def summary(self) -> str:
        """One line: configuration, accountant, the three audit numbers and the verdict."""
        sigma = (f"σ = {self.noise_multiplier:g}" if self.noise_multiplier == self.claimed_noise_multiplier
                 else f"σ = {self.noise_multiplier:g} trained, {self.claimed_noise_multiplier:g} claimed")
        return (f"DP-SGD {self.threat} audit ({self.dataset}, {sigma}, q = {self.sample_rate:g}, {self.steps} steps, "
                f"{self.canaries} canaries): {self.describe_bounds()}; "
                f"accuracy {self.accuracy:.3f}; {self.seconds:.1f} s")


def audit_dpsgd(*, noise_multiplier: float, max_grad_norm: float = 1.0, sample_rate: float, steps: int,
                delta: float = 1e-5, canaries: int = 1000, dataset: str = "digits", threat: str = "white-box",
                claimed_noise_multiplier: float | None = None, seed: int = 0, progress: ProgressFn | None = None,
                confidence: float = 0.95, accountant: str = "pld", fdp_curve: str = "dp",
                learning_rate: float = 0.5, threads: int = 1) -> DPSGDAudit:
    """Audit one DP-SGD run (module docstring). ``noise_multiplier`` is the σ Opacus trains with;
    ``claimed_noise_multiplier`` (default: the same) is what the accountant (``accountant``:
    "pld", "rdp" or "prv") is told — σ/10 trained with σ claimed is the broken configuration.
    ``fdp_curve`` is the trade-off curve the f-DP bound hypothesises: "dp" (the (ε, δ)-DP curve:
    certified for every algorithm) or "gaussian" (the Gaussian curve through (ε, δ), as
    Mahloujifar et al. audit DP-SGD: tighter, certified only for Gaussian trade-off curves).
    ``progress`` is called with the number of training steps done after each step."""
    start = time.perf_counter()
    delta = check_probability("delta", delta)
    confidence = check_probability("confidence", confidence)
    method = check_method(accountant, "accountant")
    curve = check_choice("fdp_curve", fdp_curve, FDP_CURVES)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    claimed = sigma if claimed_noise_multiplier is None else check_positive("claimed_noise_multiplier",
                                                                            claimed_noise_multiplier)
    run = train_with_canaries(noise_multiplier=sigma, max_grad_norm=max_grad_norm, sample_rate=sample_rate,
                              steps=steps, canaries=canaries, dataset=dataset, threat=threat,
                              score_noise_multiplier=claimed, learning_rate=learning_rate, seed=seed,
                              threads=threads, progress=progress)
    account = epsilon_dpsgd(claimed, run.sample_rate, run.steps, delta, method=method)
    b = canary_bounds(run.scores_in, run.scores_out, account.epsilon, delta=delta, confidence=confidence, curve=curve)
    return DPSGDAudit(
        accountant=account, one_run=b.one_run, one_run_fdp=b.one_run_fdp, gdp=b.gdp, violation=bool(b.violated_by),
        violated_by=b.violated_by,
        noise_multiplier=sigma, claimed_noise_multiplier=claimed, max_grad_norm=run.max_grad_norm,
        sample_rate=run.sample_rate, steps=run.steps, delta=delta, confidence=confidence, canaries=run.scores.size,
        canaries_in=int(run.included.sum()),
        dataset=run.dataset, threat=run.threat, learning_rate=run.learning_rate, seed=run.seed,
        accuracy=run.accuracy, train_examples=run.train_examples, training_seconds=run.seconds,
        seconds=time.perf_counter() - start)
