"""Check target ``nvflare-svt``: the ε of NVIDIA FLARE's ``SVTPrivacy`` filter as nvflare 2.9.0 implements it.

What the filter does (``nvflare/app_common/filters/svt_privacy.py`` of nvflare 2.9.0, line numbers
of that file), per call on one client's model diff of d coordinates (each divided by the round's
step count, a public constant, line 288):

* c = ``n_upload`` = min(⌈d·fraction⌉, d) (line 300);
* the budget split (``_compute_epsilon_split``, lines 88-97): by default ε1 = ε/(1 + (2c)^(2/3))
  (threshold) and ε2 = ε − ε1 (queries); ``epsilon_threshold``/``epsilon_query`` override it;
* the release budget (``_compute_release_epsilon``, lines 112-125): ε3 = ``epsilon_release``, else
  c·``noise_var``;
* threshold T = τ + Lap(γ/ε1) (lines 321-322), drawn once per call;
* acceptance (lines 346-374): in passes, *every* coordinate not yet accepted is tested —
  |clip(w_i, ±γ)| + Lap(2cγ/ε2) ≥ T (lines 324, 364-366) — and the passes go on until at least c
  are accepted; a pass does not stop at the c-th acceptance, so between c and d coordinates are
  accepted;
* c of the accepted coordinates are drawn uniformly (with or without replacement, ``replace``;
  lines 393, 443) and released as clip(w_i, ±γ) + Lap(2cγ/ε3) (lines 325, 444-451), all others as 0;
* 0-dimensional parameters are passed through unchanged (lines 405-406; the filter's own ledger
  notes that they are not protected, line 229);
* its ledger records ε1 + ε2 + ε3 per call, δ = 0, summed over calls (lines 213-233).

**The true ε** (per call, δ = 0, local DP: any two diffs of the same shape are neighbours, so each
query |clip(w_i, ±γ)| ∈ [0, γ] has sensitivity γ and each released value, in [−γ, γ], 2γ). The
sparse vector technique's proof (Lyu, Su, Li 2017, "Understanding the Sparse Vector Technique for
Differential Privacy", Alg. 1 and the proof of Thm. 2) bounds the privacy loss of a transcript with
K answers above the threshold by ε1 + K·ε2/c — each ⊤ costs ε2/c with query noise Lap(2cγ/ε2),
answers below the threshold cost nothing, re-testing a coordinate in a later pass is one more
query. SVT stops at the c-th ⊤ (K ≤ c: ε1 + ε2); this loop does not, and K reaches d, so the
certified bound of the acceptance is ε1 + (d/c)·ε2. The draw of c accepted coordinates is
post-processing, and the release adds at most c Laplace values of scale 2cγ/ε3 at sensitivity 2γ
(ε3/c each, composed: ε3). Hence, per call,

    ε ≤ ε1 + (d/c)·ε2 + ε3                (∞ when the model has a 0-dimensional parameter),

a **certified upper bound**: the output reveals only c of the accepted coordinates, and fedaudit
does not claim that it attains the bound — no closed form of the exact ε is known. With
fraction = 1 (c = d) it is the filter's own ε1 + ε2 + ε3. The filter's ``epsilon`` parameter is,
as its docstring says (lines 149-150), the budget of the selection phase only; the release budget
c·``noise_var`` comes on top of it (lines 151-153), as its ledger records.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.integrations.check.targets import CheckResult, library_version, register_target
from fedaudit.json import jsonable

__all__ = ["SvtPrivacyEpsilon", "svt_privacy_epsilon", "check_nvflare_svt", "SVT_SOURCE"]

#: the file the analysis reads (nvflare 2.9.0)
SVT_SOURCE = "nvflare/app_common/filters/svt_privacy.py"


@dataclass(frozen=True)
class SvtPrivacyEpsilon:
    """The ε of one call of ``SVTPrivacy`` on a model of ``model_size`` coordinates (module docstring):
    ``n_upload`` (c), the split ``epsilon_threshold`` (ε1) / ``epsilon_query`` (ε2) / ``epsilon_release``
    (ε3), what the filter's ledger records (``epsilon_ledger`` = ε1 + ε2 + ε3), the certified bound of
    the acceptance (``epsilon_selection_bound`` = ε1 + (d/c)·ε2) and of the call (``epsilon_bound``)."""

    model_size: int
    n_upload: int
    epsilon: float
    epsilon_threshold: float
    epsilon_query: float
    epsilon_release: float
    epsilon_ledger: float
    epsilon_selection_bound: float
    epsilon_bound: float
    scalar_parameters: int
    threshold_scale: float
    query_scale: float
    release_scale: float

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))


def svt_privacy_epsilon(model_size: int, *, fraction: float = 0.1, epsilon: float = 0.1, noise_var: float = 0.1,
                        gamma: float = 1e-5, epsilon_threshold: float | None = None,
                        epsilon_query: float | None = None, epsilon_release: float | None = None,
                        scalar_parameters: int = 0) -> SvtPrivacyEpsilon:
    """The split and the certified ε of one ``SVTPrivacy`` call (module docstring), with nvflare's own
    checks of the split (a bad one is the FedAuditError nvflare's ValueError would be)."""
    d = int(model_size)
    c = int(min(math.ceil(d * fraction), d))
    if c <= 0:
        raise FedAuditError(f"SVTPrivacy uploads nothing (n_upload = {c}) for model_size = {d}, fraction = {fraction:g}")
    if epsilon_threshold is None and epsilon_query is None:
        e1 = epsilon / (1.0 + (2.0 * c) ** (2.0 / 3.0))
        e2 = epsilon - e1
    elif epsilon_threshold is None:
        e1, e2 = epsilon - epsilon_query, epsilon_query
    elif epsilon_query is None:
        e1, e2 = epsilon_threshold, epsilon - epsilon_threshold
    else:
        e1, e2 = epsilon_threshold, epsilon_query
    if e1 <= 0 or e2 <= 0:
        raise FedAuditError(f"SVTPrivacy's epsilon_threshold ({e1:g}) and epsilon_query ({e2:g}) must both be > 0 "
                            f"(nvflare refuses the split, {SVT_SOURCE} line 99)")
    if not math.isclose(e1 + e2, epsilon, rel_tol=1e-5, abs_tol=1e-8):
        raise FedAuditError(f"SVTPrivacy's epsilon_threshold + epsilon_query = {e1 + e2:g} must equal epsilon = "
                            f"{epsilon:g} (nvflare refuses the split, {SVT_SOURCE} line 102)")
    e3 = float(epsilon_release) if epsilon_release is not None else c * noise_var
    selection = e1 + (d / c) * e2
    bound = math.inf if scalar_parameters > 0 else selection + e3
    return SvtPrivacyEpsilon(model_size=d, n_upload=c, epsilon=epsilon, epsilon_threshold=e1, epsilon_query=e2,
                             epsilon_release=e3, epsilon_ledger=e1 + e2 + e3, epsilon_selection_bound=selection,
                             epsilon_bound=bound, scalar_parameters=scalar_parameters, threshold_scale=gamma / e1,
                             query_scale=gamma * 2.0 * c / e2, release_scale=gamma * 2.0 * c / e3)


def check_nvflare_svt(model_size: int, fraction: float, epsilon: float | None, noise_var: float, gamma: float,
                      tau: float, epsilon_threshold: float | None, epsilon_query: float | None,
                      epsilon_release: float | None, scalar_parameters: int,
                      claimed_epsilon: float | None) -> CheckResult:
    """The certified ε per release of ``SVTPrivacy(fraction, epsilon, noise_var, gamma, tau, …)`` on a model
    of ``model_size`` coordinates against the filter's own ledger ε (or ``claimed_epsilon``)."""
    epsilon = 0.1 if epsilon is None else epsilon  # SVTPrivacy's default
    r = svt_privacy_epsilon(model_size, fraction=fraction, epsilon=epsilon, noise_var=noise_var, gamma=gamma,
                            epsilon_threshold=epsilon_threshold, epsilon_query=epsilon_query,
                            epsilon_release=epsilon_release, scalar_parameters=scalar_parameters)
    claim = r.epsilon_ledger if claimed_epsilon is None else claimed_epsilon
    d, c = r.model_size, r.n_upload
    fix = None
    if r.epsilon_bound > claim:
        if scalar_parameters > 0:
            fix = (f"noise or drop the {scalar_parameters} 0-dimensional parameter(s): SVTPrivacy passes them through "
                   f"un-noised ({SVT_SOURCE} lines 405-406)")
        elif claim <= r.epsilon_release:
            fix = (f"set epsilon_release < {claim:g} (the release alone spends {r.epsilon_release:g} = "
                   f"{'n_upload·noise_var' if epsilon_release is None else 'epsilon_release'})")
        else:  # scale the selection budget, the split's proportions kept
            per_epsilon = r.epsilon_selection_bound / r.epsilon
            fix = (f"set epsilon = {(claim - r.epsilon_release) / per_epsilon:.4g} (same split, same release: the "
                   f"certified bound is then {claim:g}), or fraction = 1")
    notes = (f"local DP per call: any two model diffs are neighbours; n_upload c = {c} of d = {d} coordinates; "
             f"ε1 = {r.epsilon_threshold:.4g}, ε2 = {r.epsilon_query:.4g}, ε3 = {r.epsilon_release:.4g} "
             f"({SVT_SOURCE} lines 88-125, 300)",
             f"the acceptance loop ({SVT_SOURCE} lines 346-374) tests every remaining coordinate in every pass and "
             f"accepts between c and d of them; the SVT bound for K accepted is ε1 + K·ε2/c, so the certified bound "
             f"takes K = d: ε1 + (d/c)·ε2 = {r.epsilon_selection_bound:.4g} against the documented selection "
             f"budget epsilon = {r.epsilon:g} (an upper bound: fedaudit does not claim the output attains it)",
             f"the filter's `epsilon` covers the selection only (its docstring, lines 149-153); the release "
             f"adds ε3 = {r.epsilon_release:.4g}, as its own ledger records (lines 213-233)")
    if scalar_parameters > 0:
        notes += (f"{scalar_parameters} 0-dimensional parameter(s) are released un-noised (lines 405-406): ε = ∞",)
    return CheckResult(
        target="nvflare-svt", library=library_version("nvflare"),
        configuration=f"SVTPrivacy(fraction={fraction:g}, epsilon={epsilon:g}, noise_var={noise_var:g}, "
                      f"gamma={gamma:g}) on d = {d:,} coordinates",
        claimed_epsilon=claim,
        claim_source="SVTPrivacy's own ledger ε1+ε2+ε3" if claimed_epsilon is None else "the claim given",
        epsilon_true=r.epsilon_bound, delta=0.0, unit="per release", bound="upper", fix=fix,
        details={**r.to_dict(), "tau": tau}, notes=notes)


def _validate_svt(p: dict[str, Any], where: str) -> None:
    """The split nvflare would accept (its ValueError, as a FedAuditError naming ``where``)."""
    try:
        svt_privacy_epsilon(p["model_size"], fraction=p["fraction"], epsilon=0.1 if p["epsilon"] is None else p["epsilon"],
                            noise_var=p["noise_var"], gamma=p["gamma"], epsilon_threshold=p["epsilon_threshold"],
                            epsilon_query=p["epsilon_query"], epsilon_release=p["epsilon_release"])
    except FedAuditError as exc:
        raise FedAuditError(f"{where}: {exc}") from None


register_target("nvflare-svt", "NVIDIA FLARE's SVTPrivacy filter (nvflare 2.9.0) on a model of d coordinates: "
                "certified ε per release", ("model_size", "fraction", "epsilon", "noise_var", "gamma", "tau",
                                            "epsilon_threshold", "epsilon_query", "epsilon_release",
                                            "scalar_parameters", "claimed_epsilon"),
                ("model_size",), check_nvflare_svt, "nvflare-job", validate=_validate_svt)
