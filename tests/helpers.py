"""What the test modules share, imported as ``from tests.helpers import ...``: the repository root
(``REPO``; every path a test reads, docs/, benchmarks/, examples/, tools/, is ``REPO / ...``, never
counted from the test file's own place in tests/), the statistical tolerances of the suite, and
small helpers several test modules use. Fixtures and pytest hooks stay in tests/conftest.py."""

import functools
import importlib.util
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from fedaudit.experiments.runner import PlanProgress

#: The repository root (the folder holding fedaudit/, tests/, docs/).
REPO = Path(__file__).resolve().parents[1]

#: Family-wise error rate the whole statistical suite is allowed (per assertion it is split).
SUITE_ALPHA = 1e-6


def z_tolerance(n_assertions: int = 1, alpha: float = SUITE_ALPHA) -> float:
    """Two-sided normal quantile for a Bonferroni share of ``alpha`` over ``n_assertions``."""
    return float(stats.norm.isf(alpha / (2 * n_assertions)))


def assert_unbiased(estimates: np.ndarray, truth: np.ndarray, n_assertions: int = 1) -> None:
    """Every coordinate's sample mean lies within z·SE of the truth (SE from the sample itself)."""
    estimates = np.asarray(estimates, dtype=np.float64)
    n = estimates.shape[0]
    mean = estimates.mean(axis=0)
    se = estimates.std(axis=0, ddof=1) / np.sqrt(n)
    z = z_tolerance(n_assertions * estimates.shape[1])
    err = np.abs(mean - truth)
    ok = err <= z * se + 1e-12
    assert ok.all(), (f"bias beyond {z:.2f} SE at coords {np.flatnonzero(~ok)[:5]}: "
                      f"mean={mean[~ok][:5]}, truth={np.asarray(truth)[~ok][:5]}, se={se[~ok][:5]}")


def load_benchmark(filename: str):
    """Import ``benchmarks/FILENAME`` (not a package) as a module, for tests of a benchmark script."""
    path = REPO / "benchmarks" / filename
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def brute_ratio(X: np.ndarray, z: np.ndarray, f: int) -> float:
    """Robustness ratio by brute force: max over |S| = n − f of ‖z − x̄_S‖² / ((1/|S|) Σ_S ‖x_i − x̄_S‖²)."""
    n = X.shape[0]
    best = 0.0
    for S in itertools.combinations(range(n), n - f):
        xs = X[list(S)]
        m = xs.mean(0)
        best = max(best, float(np.sum((z - m) ** 2) / np.mean(np.sum((xs - m) ** 2, axis=1))))
    return best


class UnitCounter(PlanProgress):
    """Plan progress that records each claim's announced (total, unit) and the units it then advanced."""

    def __init__(self):
        self.total, self.done = {}, {}

    def claim_started(self, spec, total, unit):
        self.total[spec.id], self.done[spec.id] = (total, unit), 0

    def advance(self, n):
        (last,) = list(self.done)[-1:]
        self.done[last] += n


def recorded(claim) -> dict:
    """A claim's evidence as report.json stores it (strict JSON round trip)."""
    from fedaudit import json as fjson

    return fjson.loads(fjson.dumps(claim.evidence), what="evidence")


def check_rederived(claim, flips=(), missing=()) -> None:
    """Its kind's ``decide`` re-derives the claim's verdict from its recorded evidence; each
    ``(edit, verdict)`` of ``flips`` (an edit of one decisive number of the recorded evidence) moves
    the re-derived verdict to ``verdict``; each edit of ``missing`` (a needed number removed or
    malformed) leaves evidence that cannot decide (EvidenceError)."""
    from fedaudit.experiments.kind import EvidenceError, derived_verdict
    from fedaudit.experiments.kinds import claim_kind

    kind = claim_kind(claim.kind)
    assert claim.error is None, claim.error
    assert derived_verdict(kind, claim.expect, recorded(claim)) == claim.verdict
    for edit, verdict in flips:
        evidence = recorded(claim)
        edit(evidence)
        assert verdict != claim.verdict and derived_verdict(kind, claim.expect, evidence) == verdict
    for edit in missing:
        evidence = recorded(claim)
        edit(evidence)
        with pytest.raises(EvidenceError):
            derived_verdict(kind, claim.expect, evidence)


def reseal_checkpoint(path, purpose=None) -> None:
    """Recompute every MAC of the chained JSON-lines file ``path`` (its lines kept in order) under
    this user's secret (:mod:`fedaudit.chain`): what only the holder of the secret can do. Tests that
    edit a record to show that a resumed run reads it (and still checks its shape) reseal it.
    ``purpose``: the file's key purpose, default an engine checkpoint's (``chain.ENGINE_PURPOSE``;
    a stress grid's ``cells.jsonl``: ``chain.CELLS_PURPOSE``)."""
    from fedaudit import chain

    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    key = chain.derive_key(chain.user_secret(create=False), purpose or chain.ENGINE_PURPOSE, header["nonce"])
    header = chain.Chain.seal_header(key, header)
    link = chain.Chain(key, header)
    records = [link.seal(json.loads(line)) for line in lines[1:]]
    path.write_text("\n".join(json.dumps(r) for r in [header, *records]) + "\n", encoding="utf-8")


def gaussian_delta(mu: float, eps: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism at sensitivity/σ = μ (Balle and Wang 2018), the reference
    the accountant tests check against."""
    return float(stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact ε(δ) of the Gaussian mechanism at sensitivity/σ = μ (:func:`gaussian_delta` inverted)."""
    from scipy.optimize import brentq

    return float(brentq(lambda e: gaussian_delta(mu, e) - delta, 0.0, 100.0, xtol=1e-12))


def analytic_gaussian(neighboring_relation, *, slack: float = 0.0):
    """The toy accountant of the tests, a user's accountant as the docs show one: the exact ε of
    composed unsampled Gaussian steps under add/remove neighbours (ten steps of σ are one Gaussian
    of σ/√10), plus ``slack``. A factory ``factory(neighboring_relation, **settings)``: registered
    under a name (``ACCOUNTANTS.register(name, analytic_gaussian)``) or named by a ``module:attr``
    reference, it is accepted wherever fedaudit takes an accountant. Its class subclasses
    dp-accounting's ``PrivacyAccountant`` and is made on first use, so that the suite does not import
    dp-accounting (seconds) for every test."""
    return _analytic_gaussian_class()(neighboring_relation, slack=slack)


@functools.lru_cache(maxsize=1)
def _analytic_gaussian_class() -> type:
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant

    from fedaudit.guarantees import Bound

    class _AnalyticGaussian(PrivacyAccountant):
        __doc__ = analytic_gaussian.__doc__

        def __init__(self, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE, *, slack: float = 0.0):
            super().__init__(neighboring_relation)
            self.slack, self.mu2 = slack, 0.0
            self.epsilon_bound = Bound.UPPER

        def _maybe_compose(self, event, count, do_compose):
            if isinstance(event, dp_event.SelfComposedDpEvent):
                return self._maybe_compose(event.event, count * event.count, do_compose)
            if isinstance(event, dp_event.PoissonSampledDpEvent) and event.sampling_probability == 1.0:
                return self._maybe_compose(event.event, count, do_compose)
            if not isinstance(event, dp_event.GaussianDpEvent):
                return PrivacyAccountant.CompositionErrorDetails(event, "unsampled Gaussian steps only")
            if do_compose:
                self.mu2 += count / event.noise_multiplier ** 2
            return None

        def get_delta(self, target_epsilon):
            return gaussian_delta(math.sqrt(self.mu2), target_epsilon)

        def get_epsilon(self, target_delta):
            return gaussian_epsilon(math.sqrt(self.mu2), target_delta) + self.slack

    return _AnalyticGaussian


def run_report_plans(root: Path, plans: dict[str, str]) -> dict[str, Path]:
    """{name: report folder} of ``plans`` ({name: TOML text}), each run for real into ``root/name``
    (report.json and report.md), unsigned whatever FEDAUDIT_REPORT_KEY the environment holds."""
    from fedaudit.experiments.runner import run_plan_to_dir
    from fedaudit.reports import KEY_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(KEY_ENV, raising=False)
        for name, text in plans.items():
            (root / f"{name}.toml").write_text(text, encoding="utf-8")
            run_plan_to_dir(root / f"{name}.toml", root / name, formats=("json", "md"))
    return {name: root / name for name in plans}


def run_diff(capsys, *argv) -> tuple[int, str, str]:
    """``fedaudit diff ARGV`` in this process: (exit code, stdout, stderr)."""
    from fedaudit.cli import main

    code = main(["diff", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err
