"""The report model: claims with verdicts and evidence, a provenance manifest, a digest.

A :class:`Report` is plain data. Its JSON form (``to_dict``) is strict JSON — non-finite floats
become the strings ``"inf"``, ``"-inf"`` and ``"nan"`` at any depth (:mod:`fedaudit.json`) — and
is described by ``schema.json`` (``schema_version`` "1.5": 1.2 added the ``epsilon_vs_steps`` plot,
1.3 a claim's optional ``caveats`` and ``guarantee``, 1.4 the manifest's optional ``plan_text``,
``plugins``, ``dependencies`` and ``provenance``, 1.5 the report's optional ``deployment`` facts
(:mod:`fedaudit.reports.deployment`), a claim's optional ``explanation``, its plain-language
account and evidence layout (:mod:`fedaudit.reports.explain`), and a claim's optional
``self_tests``, the auditor self-tests of :mod:`fedaudit.reports.self_tests`).

Verdicts as a reviewer reads them. The verdict (PASS/FAIL/INCONCLUSIVE) says whether the outcome
met the plan's *expectation*; it is not whether the audited system is safe. A claim that expects
a violation and finds it is a PASS of the plan but bad news about the system, so every rendering
shows it as "VIOLATION DETECTED (as expected)" in the violation colour, never as a green PASS.
That reading is decided here, once — :attr:`Claim.label`, :attr:`Claim.tone` (the colour class:
``pass``, ``violation``, ``fail``, ``inconclusive``), :attr:`Claim.caveats`,
:attr:`Report.overall_label`, :attr:`Report.overall_tone` and :meth:`Report.guarantee_lines` —
and the HTML, Markdown and terminal renderers only map tones to their colours.

Integrity: ``canonical_json()`` is the UTF-8 encoding of the report dictionary *without* its
``digest`` and ``signature`` keys, with sorted keys and no whitespace (floats in Python's
shortest round-trip form). The digest is SHA-256 of those bytes, the optional signature
HMAC-SHA256 of the same bytes under a secret key (:mod:`fedaudit.reports.integrity`). Both cover
``manifest.artifacts``, the SHA-256 of every rendering written beside ``report.json``.

The renderings cannot show a digest that covers their own hashes, so they are rendered from
:meth:`Report.rendering_view`: the report with ``manifest.artifacts`` null and ``digest`` set to
the **content digest** — SHA-256 of the canonical JSON with ``manifest.artifacts`` null. The
artifact table records that value as ``rendered_from``; :mod:`fedaudit.reports.io` renders first,
hashes the rendered bytes, then seals the report with the table in it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import importlib.metadata
import math
import platform as _platform
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.reports import canonical
from fedaudit.reports.explain import Explanation, generic_explanation, nonfinite_text
from fedaudit.version import __version__

__all__ = [
    "Verdict", "Expect", "VERDICTS", "EXPECTS", "TONES", "PLOT_TYPES", "SCHEMA_VERSION",
    "Claim", "Manifest", "Report", "utc_now", "check_plot_spec", "flatten_evidence", "format_value", "nonfinite_text",
]

Verdict = Literal["PASS", "FAIL", "INCONCLUSIVE"]
Expect = Literal["pass", "violation"]

VERDICTS: tuple[str, ...] = ("PASS", "FAIL", "INCONCLUSIVE")
EXPECTS: tuple[str, ...] = ("pass", "violation")
SCHEMA_VERSION = "1.5"

#: the colour classes of a verdict as a reviewer reads it (:attr:`Claim.tone`): the guarantee
#: held as expected, a violation was detected (expected or not, bad news about the system), the
#: outcome contradicted the expectation, the evidence decides neither
TONES: tuple[str, ...] = ("pass", "violation", "fail", "inconclusive")

#: :attr:`Claim.label` of each (expect, verdict)
_LABELS = {("pass", "PASS"): "PASS", ("violation", "PASS"): "VIOLATION DETECTED (as expected)",
           ("pass", "FAIL"): "FAIL", ("violation", "FAIL"): "FAIL (expected violation NOT detected)"}

#: plot type -> the keys its specification must carry (see ``schema.json`` for their types)
PLOT_TYPES: dict[str, tuple[str, ...]] = {
    "epsilon_vs_samples": ("samples", "epsilon_lower", "epsilon_claimed", "epsilon_exact"),
    "privacy_region": ("tpr", "fpr", "epsilon", "delta", "tpr_lower", "fpr_upper"),
    "mse_vs_dk": ("d_over_k", "series"),
    "nu_vs_bound": ("configurations", "nu_bound", "nu_lower"),
    "heatmap": ("title", "x_label", "y_label", "x", "y", "values"),
    "curves": ("title", "x_label", "y_label", "log_y", "series"),
    "epsilon_vs_steps": ("steps", "epsilon", "epsilon_claimed", "delta"),
}

_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$")


# ------------------------------------------------------------------------------ JSON data
def utc_now() -> str:
    """The current time as ISO-8601 UTC with a ``Z`` suffix, to the millisecond."""
    return _iso(_dt.datetime.now(_dt.timezone.utc))


def _iso(value: Any) -> str:
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return value.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _iso(_dt.datetime.fromtimestamp(value, _dt.timezone.utc))
    if isinstance(value, str):
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise FedAuditError(f"time must be ISO-8601, got {value!r}") from None
        return _iso(parsed)
    raise FedAuditError(f"time must be a datetime, POSIX seconds or an ISO-8601 string, got {value!r}")


# ------------------------------------------------------------------------------ claims

def check_plot_spec(spec: Any, *, where: str) -> str:
    """Validate a plot specification's type and required keys; returns its type."""
    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind not in PLOT_TYPES:
        raise FedAuditError(f"{where} type must be one of {', '.join(PLOT_TYPES)}, got {kind!r}")
    missing = [k for k in PLOT_TYPES[kind] if k not in spec]
    if missing:
        raise FedAuditError(f"{where} ({kind}) is missing {', '.join(missing)}")
    return kind

@dataclass(frozen=True)
class Claim:
    """One audited claim and the evidence behind its verdict.

    ``expect`` is what the plan expected of the system under test: ``"pass"`` (the guarantee
    holds) or ``"violation"`` (the audit should break it, e.g. an algorithm kept as published that is not
    LDP). ``verdict`` is ``"PASS"`` when the outcome met that expectation, ``"FAIL"`` when it
    contradicted it and ``"INCONCLUSIVE"`` when the evidence decides neither way (or the audit
    errored; then ``error`` says why). ``evidence`` is JSON data (CIs as ``[low, high]``);
    ``plots`` are specifications with data (see ``PLOT_TYPES``), never images.

    ``caveats`` are the sentences that decide how much the verdict means (a weak input pair, a
    published bound that was not re-verified, an estimate that is not a bound); every rendering
    shows them next to the verdict. ``guarantee`` names what the claim audits (``"privacy"``,
    ``"robustness"``, ``"utility"``; None when unknown), so a report can say separately whether
    any privacy claim failed. ``explanation`` is the claim in plain language (what was claimed
    and tested, what the result means and does not show, the next step) with the evidence
    table's layout (:class:`~fedaudit.reports.explain.Explanation`, written by the claim's kind);
    :meth:`plain` gives it, or a generic one for claims without. All three are left out of
    ``to_dict`` when empty, so reports written before they existed keep their digests.
    """

    id: str
    kind: str
    title: str
    expect: str
    verdict: str
    evidence: dict
    summary: str = ""
    plots: list[dict] = field(default_factory=list)
    runtime_s: float = 0.0
    seed: int | None = None
    error: str | None = None
    caveats: list[str] = field(default_factory=list)
    guarantee: str | None = None
    explanation: Explanation | None = None
    self_tests: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise FedAuditError(f"claim id must be a non-empty string, got {self.id!r}")
        where = f"claim {self.id!r}"
        if not isinstance(self.kind, str) or not _KIND_RE.match(self.kind):
            raise FedAuditError(f"{where}: kind must be a claim kind's name (letters, digits, '_', '.', '-', ':'), "
                                f"got {self.kind!r}")
        if self.expect not in EXPECTS:
            raise FedAuditError(f"{where}: expect must be 'pass' or 'violation', got {self.expect!r}")
        if self.verdict not in VERDICTS:
            raise FedAuditError(f"{where}: verdict must be one of {', '.join(VERDICTS)}, got {self.verdict!r}")
        if not isinstance(self.evidence, Mapping):
            raise FedAuditError(f"{where}: evidence must be a dict, got {type(self.evidence).__name__}")
        if not isinstance(self.plots, (list, tuple)):
            raise FedAuditError(f"{where}: plots must be a list of plot specifications")
        for i, spec in enumerate(self.plots):
            check_plot_spec(spec, where=f"{where}: plots[{i}]")
        if self.seed is not None:
            if isinstance(self.seed, bool) or not hasattr(self.seed, "__index__"):
                raise FedAuditError(f"{where}: seed must be an integer or None, got {self.seed!r}")
            object.__setattr__(self, "seed", int(self.seed))  # frozen: normalise once, here
        try:
            object.__setattr__(self, "runtime_s", float(self.runtime_s))
        except (TypeError, ValueError):
            raise FedAuditError(f"{where}: runtime_s must be a number, got {self.runtime_s!r}") from None
        if isinstance(self.caveats, str) or not all(isinstance(c, str) and c for c in self.caveats):
            raise FedAuditError(f"{where}: caveats must be a list of non-empty strings, got {self.caveats!r}")
        object.__setattr__(self, "caveats", list(self.caveats))
        if self.guarantee is not None and (not isinstance(self.guarantee, str) or not _KIND_RE.match(self.guarantee)):
            raise FedAuditError(f"{where}: guarantee must be a word such as 'privacy' or None, got {self.guarantee!r}")
        if not isinstance(self.self_tests, (list, tuple)) or not all(isinstance(t, Mapping) for t in self.self_tests):
            raise FedAuditError(f"{where}: self_tests must be a list of self-test records")
        object.__setattr__(self, "self_tests", [dict(t) for t in self.self_tests])
        if self.explanation is not None and not isinstance(self.explanation, Explanation):
            object.__setattr__(self, "explanation", Explanation.from_dict(self.explanation))

    def plain(self) -> Explanation:
        """The claim in plain language: its recorded :attr:`explanation`, or for a claim without
        one (an older report, a kind that writes none) :func:`~fedaudit.reports.explain.generic_explanation`
        of its own fields."""
        if self.explanation is not None:
            return self.explanation
        params = self.evidence.get("parameters") if isinstance(self.evidence.get("parameters"), Mapping) else None
        return generic_explanation(title=self.title, kind=self.kind, expect=self.expect, verdict=self.verdict,
                                   summary=self.summary, error=self.error, parameters=params)

    @property
    def failed_self_tests(self) -> list[dict]:
        """The claim's self-tests whose outcome, re-derived from their evidence, is a failure
        (:func:`fedaudit.reports.self_tests.failed_self_tests`)."""
        from fedaudit.reports.self_tests import failed_self_tests

        return [dict(t) for t in failed_self_tests(self.self_tests)]

    def self_test_line(self) -> str | None:
        """The renderings' one line of self-tests ("self-tests: null ε ≥ 0.000 ✓, planted ε ≥
        8.5 > 1 ✓"), None for a claim without any."""
        from fedaudit.reports.self_tests import self_test_line

        return f"self-tests: {self_test_line(self.self_tests)}" if self.self_tests else None

    @property
    def met(self) -> bool:
        """True when the verdict is PASS (the outcome met the expectation)."""
        return self.verdict == "PASS"

    @property
    def violation_detected(self) -> bool:
        """True when the audit found the system breaking its guarantee: an expected violation
        that was detected (PASS) or a guarantee expected to hold that did not (FAIL)."""
        return (self.expect, self.verdict) in (("violation", "PASS"), ("pass", "FAIL"))

    @property
    def label(self) -> str:
        """The verdict as every rendering prints it: "PASS", "VIOLATION DETECTED (as expected)",
        "FAIL", "FAIL (expected violation NOT detected)" or "INCONCLUSIVE"."""
        return _LABELS.get((self.expect, self.verdict), self.verdict)

    @property
    def tone(self) -> str:
        """The colour class of :attr:`label` (one of :data:`TONES`): ``violation`` for a detected
        expected violation — never ``pass``, whose colour says the system is fine."""
        if self.verdict == "INCONCLUSIVE":
            return "inconclusive"
        if self.verdict == "FAIL":
            return "fail"
        return "violation" if self.expect == "violation" else "pass"

    def to_dict(self) -> dict[str, Any]:
        d = {
            "id": self.id, "kind": self.kind, "title": self.title, "expect": self.expect,
            "verdict": self.verdict, "summary": self.summary,
            "evidence": fjson.jsonable(dict(self.evidence), f"[{self.id}].evidence"),
            "plots": fjson.jsonable(list(self.plots), f"[{self.id}].plots"),
            "runtime_s": fjson.jsonable(self.runtime_s), "seed": self.seed, "error": self.error,
        }
        if self.caveats:
            d["caveats"] = list(self.caveats)
        if self.guarantee is not None:
            d["guarantee"] = self.guarantee
        if self.explanation is not None:
            d["explanation"] = self.explanation.to_dict()
        if self.self_tests:
            d["self_tests"] = fjson.jsonable([dict(t) for t in self.self_tests], f"[{self.id}].self_tests")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Claim":
        try:
            runtime = d.get("runtime_s", 0.0)
            return cls(id=d["id"], kind=d["kind"], title=d.get("title", d["id"]), expect=d["expect"],
                       verdict=d["verdict"], evidence=dict(d["evidence"]), summary=d.get("summary", ""),
                       plots=[dict(p) for p in d.get("plots", [])],
                       runtime_s=fjson.from_special(runtime),
                       seed=d.get("seed"), error=d.get("error"), caveats=list(d.get("caveats", [])),
                       guarantee=d.get("guarantee"),
                       explanation=None if d.get("explanation") is None else Explanation.from_dict(d["explanation"]),
                       self_tests=list(d.get("self_tests", [])))
        except (KeyError, TypeError) as exc:
            raise FedAuditError(f"claim {d.get('id', '?') if isinstance(d, Mapping) else '?'!r} is malformed: "
                                f"{type(exc).__name__} {exc}") from None


# ------------------------------------------------------------------------------ manifest
def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(args: list[str], cwd: Path) -> str | None:
    """stdout of ``git args`` run in ``cwd``, or None when git is missing or fails."""
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def package_checkout(package_dir: str | Path | None = None) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout the fedaudit package runs from, or ``(None, None)``.

    ``package_dir`` defaults to the directory of ``fedaudit/__init__.py`` — never the process's
    working directory, which may be any other repository. The checkout counts only when it
    *tracks* ``package_dir/__init__.py``: an installed copy inside some repository's virtualenv
    is not that repository's code. ``dirty`` is True when ``git status --porcelain`` lists
    anything (modified, staged or untracked, ignored files excepted): the commit alone does not
    then describe the code that ran.
    """
    if package_dir is None:
        package_dir = Path(__file__).resolve().parents[1]  # the fedaudit package directory
    pkg = Path(package_dir).resolve()
    if not pkg.is_dir():
        return None, None
    top = _git(["rev-parse", "--show-toplevel"], pkg)
    if top is None or _git(["ls-files", "--error-unmatch", "--", "__init__.py"], pkg) is None:
        return None, None
    sha = (_git(["rev-parse", "HEAD"], pkg) or "").strip()
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", sha):
        return None, None
    status = _git(["status", "--porcelain"], Path(top.strip()))
    return sha, (None if status is None else bool(status.strip()))


#: manifest fields added in schema 1.4, absent from older reports
OPTIONAL_1_4: tuple[str, ...] = ("plan_text", "plugins", "dependencies", "provenance")


def _plan_text(plan_bytes: bytes | None) -> str | None:
    """The plan's text for the manifest (None without a plan, or for bytes that are not UTF-8,
    which :func:`fedaudit.experiments.plan.load_plan` never accepts)."""
    try:
        return None if plan_bytes is None else plan_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _summary(key: str, value: Any) -> Any:
    """One line for a schema-1.4 manifest field in the renderings' manifest table (report.json
    holds the full value)."""
    if not isinstance(value, (str, dict)):
        return value
    if key == "plan_text":
        return f"{len(value)} characters, embedded in report.json (SHA-256: plan_sha256)"
    if key == "plugins":
        return ", ".join(f"{ref} (SHA-256 {str(entry.get('sha256') if isinstance(entry, dict) else None)[:12]})"
                         for ref, entry in value.items()) or "none named by the plan"
    if key == "dependencies":
        return ", ".join(f"{dist} {version}" for dist, version in value.items() if version is not None) or None
    stale = value.get("stale_bytecode") or []
    return (f"{value.get('modules')} fedaudit modules, sources SHA-256 {str(value.get('sources_sha256'))[:16]}…; "
            f"stale bytecode: {', '.join(map(str, stale)) or 'none'}")


@dataclass(frozen=True)
class Manifest:
    """Where and how a report was produced. Times are ISO-8601 UTC; ``plan_sha256`` is the
    SHA-256 of the plan file's bytes; ``seed_entropy`` the root ``SeedSequence`` entropy as a
    decimal string (it can exceed 64 bits). ``fedaudit`` is the package version; when the package
    runs from a git checkout, ``git_commit`` is that checkout's HEAD and ``git_dirty`` whether its
    tree differs from it (:func:`package_checkout`), otherwise both are None and the version is
    the provenance. ``artifacts`` is the artifact table that :func:`~fedaudit.reports.io.write_report`
    fills: ``{"rendered_from": content digest, "files": {name: {"sha256", "bytes"}}}``.
    ``engine`` is where the claims ran (``{"backend", "workers", "address", "parallel_claims"}``,
    the plan's ``[engine]`` table with the run's overrides, unset ones None); informative only —
    the results do not depend on it.

    Schema 1.4 adds what the digest and a signature then bind besides the claims (None in older
    reports, and left out of their JSON so their digests do not change): ``plan_text``, the
    plan's full text (its SHA-256 is ``plan_sha256``); ``plugins``, ``{"module:attr": {"sha256",
    "file"}}`` for every component reference the plan named (:func:`~fedaudit.reports.provenance.plugin_sources`);
    ``dependencies``, the versions of the libraries that compute numbers
    (:data:`~fedaudit.reports.provenance.DEPENDENCIES`, None when absent); ``provenance``, the
    fedaudit code that ran (:func:`~fedaudit.reports.provenance.code_provenance`: a hash of the
    sources of the modules imported and the modules whose bytecode is not their source)."""

    fedaudit: str
    numpy: str
    scipy: str
    torch: str | None
    python: str
    platform: str
    plan_sha256: str | None
    seed_entropy: str | None
    started: str
    finished: str
    git_commit: str | None
    command: str | None = None
    git_dirty: bool | None = None
    artifacts: dict | None = None
    engine: dict | None = None
    plan_text: str | None = None
    plugins: dict | None = None
    dependencies: dict | None = None
    provenance: dict | None = None

    @classmethod
    def collect(cls, plan_bytes: bytes | None, seed_entropy: Any, started: Any, finished: Any,
                command: str | None = None, *, package_dir: str | Path | None = None,
                engine: Mapping[str, Any] | None = None, plugins: Iterable[str] = ()) -> "Manifest":
        """Gather versions, platform, the plan hash and text and the provenance of the fedaudit code
        (:func:`package_checkout` of ``package_dir``, default the installed package's directory;
        :func:`~fedaudit.reports.provenance.code_provenance` of the modules this process imported),
        the dependencies' versions and the source hash of each ``module:attr`` of ``plugins``.
        ``started``/``finished`` may be datetimes, POSIX seconds or ISO-8601 strings."""
        import numpy
        import scipy

        from fedaudit.reports.provenance import code_provenance, dependency_versions, plugin_sources

        commit, dirty = package_checkout(package_dir)
        torch_mod = sys.modules.get("torch")
        torch_version = getattr(torch_mod, "__version__", None) if torch_mod is not None else _version("torch")
        return cls(
            fedaudit=__version__, numpy=numpy.__version__, scipy=scipy.__version__,
            torch=None if torch_version is None else str(torch_version),
            python=_platform.python_version(), platform=_platform.platform(),
            plan_sha256=None if plan_bytes is None else hashlib.sha256(plan_bytes).hexdigest(),
            seed_entropy=None if seed_entropy is None else str(seed_entropy),
            started=_iso(started), finished=_iso(finished), git_commit=commit, command=command, git_dirty=dirty,
            engine=None if engine is None else {k: engine.get(k) for k in ("backend", "workers", "address",
                                                                            "parallel_claims")},
            plan_text=_plan_text(plan_bytes), plugins=plugin_sources(plugins), dependencies=dependency_versions(),
            provenance=code_provenance(),
        )

    def to_dict(self) -> dict[str, Any]:
        """The manifest as JSON data; the schema-1.4 fields (:data:`OPTIONAL_1_4`) only when set."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if not (f.name in OPTIONAL_1_4 and getattr(self, f.name) is None)}

    def rendered_fields(self) -> list[tuple[str, Any]]:
        """``(field, value)`` rows of the manifest table of a rendering: every field but
        ``artifacts`` (null in a rendering, whose own hash that table holds; report.json has it),
        the engine as ``"backend process, workers 2, parallel_claims True"`` (its set keys)."""
        rows = []
        for key, value in self.to_dict().items():
            if key == "artifacts":
                continue
            if key == "engine" and isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in value.items() if v is not None) or None
            elif key in OPTIONAL_1_4:
                value = _summary(key, value)
            rows.append((key, value))
        return rows

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in d and n not in ("command", "git_dirty", "artifacts", "engine",
                                                                *OPTIONAL_1_4)]
        if missing:
            raise FedAuditError(f"manifest is missing {', '.join(missing)}")
        return cls(**{n: d.get(n) for n in names})


# ------------------------------------------------------------------------------ report
@dataclass(frozen=True)
class Report:
    """A compliance report: a manifest, claims, and (once sealed) a digest and signature.

    ``deployment`` (schema 1.5; None in older reports and left out of their JSON, so their digests
    do not change) holds the plan's deployment facts and each privacy claim's
    (:mod:`fedaudit.reports.deployment`): part of the content the digest and a signature cover."""

    manifest: Manifest
    claims: list[Claim]
    title: str = "fedaudit compliance report"
    schema_version: str = SCHEMA_VERSION
    digest: str | None = None
    signature: str | None = None
    deployment: dict | None = None

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for c in self.claims:
            if not isinstance(c, Claim):
                raise FedAuditError(f"claims must be Claim objects, got {type(c).__name__}")
            if c.id in seen:
                raise FedAuditError(f"claim ids must be unique, {c.id!r} appears twice")
            seen.add(c.id)

    @property
    def counts(self) -> dict[str, int]:
        """Number of claims per verdict (every verdict present, zero included)."""
        return {v: sum(c.verdict == v for c in self.claims) for v in VERDICTS}

    @property
    def overall(self) -> str:
        """PASS when every claim met its expectation, FAIL when any failed, else INCONCLUSIVE
        (also for a report without claims: nothing was shown)."""
        counts = self.counts
        if counts["FAIL"]:
            return "FAIL"
        if self.claims and counts["PASS"] == len(self.claims) and not self.self_test_failures():
            return "PASS"
        return "INCONCLUSIVE"

    def self_test_failures(self) -> list[str]:
        """``"claim-id: self-test name"`` of every failed auditor self-test (schema 1.5); a report
        with any is never an overall PASS (:attr:`overall`, :attr:`overall_label`)."""
        return [f"{c.id}: {t.get('name')}" for c in self.claims for t in c.failed_self_tests]

    @property
    def overall_label(self) -> str:
        """The overall line's verdict in words: "all expectations met", "N claim(s) did not meet
        their expectation", "N claim(s) inconclusive" or "no claims"."""
        counts = self.counts
        failures = self.self_test_failures()
        tail = f"; auditor self-test failed: {', '.join(failures)}" if failures else ""
        if counts["FAIL"]:
            return f"{counts['FAIL']} claim(s) did not meet their expectation{tail}"
        if self.overall == "PASS":
            return "all expectations met"
        if failures and not counts["INCONCLUSIVE"]:
            return tail[2:]
        return (f"{counts['INCONCLUSIVE']} claim(s) inconclusive{tail}") if self.claims else "no claims"

    @property
    def overall_tone(self) -> str:
        """The colour class of the overall line (:data:`TONES`): ``pass`` only when every
        expectation was met and no claim detected a violation; all expectations met with
        violations detected (as expected) is ``violation``, never green."""
        if self.overall == "FAIL":
            return "fail"
        if self.overall == "INCONCLUSIVE":
            return "inconclusive"
        return "violation" if any(c.violation_detected for c in self.claims) else "pass"

    def counts_line(self) -> str:
        """The claims counted by :attr:`Claim.label`: "5 claim(s): 2 PASS, 1 VIOLATION DETECTED
        (as expected), 1 FAIL, 1 INCONCLUSIVE" (labels with no claim left out, FAIL always shown)."""
        tally: dict[str, int] = {}
        for c in self.claims:
            key = "FAIL" if c.verdict == "FAIL" else c.label
            tally[key] = tally.get(key, 0) + 1
        order = ["PASS", _LABELS[("violation", "PASS")], "FAIL", "INCONCLUSIVE"]
        parts = [f"{tally.get(k, 0)} {k}" for k in order if tally.get(k) or k == "FAIL"]
        return f"{len(self.claims)} claim(s): " + ", ".join(parts)

    def guarantee_lines(self) -> list[tuple[str, str]]:
        """``(tone, sentence)`` per audited guarantee (privacy first), saying whether any claim
        of it failed, i.e. detected a violation, expected or not: "privacy: 3 of 4 claim(s)
        FAILED — a violation was detected (expected by the plan): a, b, c". Claims without a
        ``guarantee`` are counted under "guarantee"."""
        groups: dict[str, list[Claim]] = {}
        for c in self.claims:
            groups.setdefault(c.guarantee or "guarantee", []).append(c)
        order = sorted(groups, key=lambda g: (g != "privacy", g == "guarantee", g))
        lines = []
        for name in order:
            claims = groups[name]
            broken = [c for c in claims if c.violation_detected]
            if not broken:
                lines.append(("pass", f"{name}: no {name} claim failed ({len(claims)} audited)"))
                continue
            expected = [c.id for c in broken if c.expect == "violation"]
            unexpected = [c.id for c in broken if c.expect != "violation"]
            why = []
            if expected:
                why.append(f"expected by the plan: {', '.join(expected)}")
            if unexpected:
                why.append(f"NOT expected: {', '.join(unexpected)}")
            # say in the head whether the failure was expected: the line stands under the overall verdict,
            # which reads "all expectations met" when every failure was a plan's expected violation
            as_expected = (", as expected" if not unexpected else
                           f", {len(unexpected)} of them NOT expected" if expected else "")
            lines.append(("violation" if not unexpected else "fail",
                          f"{name}: {len(broken)} of {len(claims)} {name} claim(s) FAILED{as_expected} — a violation "
                          f"was detected ({'; '.join(why)})"))
        return lines

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(claim_id)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "schema_version": self.schema_version,
            "title": self.title,
            "overall": self.overall,
            "counts": self.counts,
            "manifest": fjson.jsonable(self.manifest.to_dict(), ".manifest"),
            "claims": [c.to_dict() for c in self.claims],
        }
        if self.deployment is not None:
            d["deployment"] = fjson.jsonable(dict(self.deployment), ".deployment")
        d.update(digest=self.digest, signature=self.signature)
        return d

    def to_json(self, indent: int | None = 2) -> str:
        """Readable JSON (key order as in ``to_dict``); the digest is over ``canonical_json``."""
        return fjson.dumps(self.to_dict(), indent=indent) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Report":
        """Rebuild a report; derived keys (``overall``, ``counts``) are recomputed, not read."""
        if not isinstance(d, Mapping):
            raise FedAuditError(f"a report must be a JSON object, got {type(d).__name__}")
        version = d.get("schema_version")
        if not isinstance(version, str) or version.split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise FedAuditError(f"unsupported report schema_version {version!r} (this fedaudit reads {SCHEMA_VERSION})")
        if not isinstance(d.get("manifest"), Mapping) or not isinstance(d.get("claims"), list):
            raise FedAuditError("a report needs a 'manifest' object and a 'claims' list")
        return cls(manifest=Manifest.from_dict(d["manifest"]),
                   claims=[Claim.from_dict(c) for c in d["claims"]],
                   title=d.get("title", "fedaudit compliance report"), schema_version=version,
                   digest=d.get("digest"), signature=d.get("signature"),
                   deployment=dict(d["deployment"]) if isinstance(d.get("deployment"), Mapping) else None)

    @classmethod
    def from_json(cls, text: str | bytes) -> "Report":
        """Parse strict JSON (NaN/Infinity tokens and duplicated keys are refused) into a report."""
        return cls.from_dict(fjson.loads(text, what="report"))

    def canonical_json(self) -> bytes:
        """UTF-8 canonical JSON of the report without ``digest`` and ``signature``."""
        return canonical.canonical_json_bytes(self.to_dict())

    def compute_digest(self) -> str:
        """SHA-256 (hex) of :meth:`canonical_json`."""
        return canonical.digest(self.canonical_json())

    def content_digest(self) -> str:
        """SHA-256 (hex) of the canonical JSON with ``manifest.artifacts`` null: what the
        renderings show and the artifact table records as ``rendered_from``."""
        return canonical.digest(canonical.canonical_json_bytes(self.to_dict(), without_artifacts=True))

    def rendering_view(self) -> "Report":
        """The report as the renderings show it: ``manifest.artifacts`` null, ``digest`` the
        :meth:`content_digest`. ``signature`` is kept only to say *whether* the report is signed;
        renderers must not print it (the real signature covers their own bytes). Rendering is a
        function of report.json: ``render_html(read_report(d).rendering_view())`` reproduces
        ``d/report.html`` byte for byte."""
        return dataclasses.replace(self, manifest=dataclasses.replace(self.manifest, artifacts=None),
                                   digest=self.content_digest(), claims=list(self.claims))

    def seal(self, key: bytes | str | None = None) -> "Report":
        """A sealed copy: ``digest`` = SHA-256 of the canonical JSON and, with a key, ``signature``
        = HMAC-SHA256(key, canonical JSON) in hex (without a key the copy is unsigned)."""
        body = self.canonical_json()
        signature = None if key is None or key == b"" or key == "" else \
            canonical.sign(body, key.encode("utf-8") if isinstance(key, str) else bytes(key))
        return dataclasses.replace(self, digest=canonical.digest(body), signature=signature,
                                   claims=list(self.claims))


# ------------------------------------------------------------------------------ display helpers
def format_value(value: Any, max_items: int = 6) -> str:
    """A short human-readable rendering of one evidence value (shared by HTML and Markdown)."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    special = nonfinite_text(value)
    if special is not None:
        return special
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return value if len(value) <= 160 else value[:157] + "…"
    if isinstance(value, Mapping):
        return f"{{{len(value)} fields}}" if value else "{}"
    if isinstance(value, (list, tuple)):
        n = len(value)
        if n == 0:
            return "[]"
        if all(isinstance(v, (list, tuple)) for v in value):
            inner = {len(v) for v in value}
            return f"{n}×{inner.pop()} array" if len(inner) == 1 else f"{n} rows"
        if any(isinstance(v, (Mapping, list, tuple)) for v in value):
            return f"{n} records"
        items = [format_value(v) for v in value]
        if n > max_items:
            items = items[:3] + ["…"] + items[-2:]
            return "[" + ", ".join(items) + f"] (n={n})"
        return "[" + ", ".join(items) + "]"
    return str(value)


def flatten_evidence(evidence: Mapping[str, Any], max_rows: int | None = None) -> list[tuple[str, str]]:
    """Nested dicts flattened to dotted keys with display strings, in insertion order.
    With ``max_rows``, longer lists end with a row saying how many fields were left out."""
    rows: list[tuple[str, str]] = []

    def walk(d: Mapping[str, Any], prefix: str) -> None:
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, Mapping) and v:
                walk(v, key)
            else:
                rows.append((key, format_value(v)))

    walk(fjson.jsonable(dict(evidence)), "")
    if max_rows is not None and len(rows) > max_rows:
        extra = len(rows) - max_rows
        rows = rows[:max_rows] + [("…", f"{extra} more field(s) in report.json")]
    return rows
