"""Run a validated plan claim by claim and assemble the :class:`~fedaudit.reports.model.Report`.

``run_plan`` validates the whole plan first (one :class:`FedAuditError` for any mistake, before
anything runs), then runs the claims in plan order. A claim whose run raises is recorded as
INCONCLUSIVE with the error (``"TypeName: message"``) and the remaining claims still run:
validation has already caught the user's mistakes, so what is left is a failure of the
machinery, which must not pass silently but must not hide the other verdicts either.
(``KeyboardInterrupt`` and ``SystemExit`` still stop the run.)

Self-tests. After a claim's run, the runner runs the auditor self-tests its kind declares
(:meth:`~fedaudit.experiments.kind.ClaimKind.self_tests`: a null test and a planted violation
with the claim's auditor settings, :mod:`fedaudit.audit.self_tests`) and records them in the
claim; a failed one makes the verdict INCONCLUSIVE where it no longer stands and is named in the
summary and caveats (:func:`~fedaudit.reports.self_tests.verdict_after_self_tests`). A resumed
checkpoint's verdict is re-derived with its self-tests counted, as ``fedaudit verify`` does.

The manifest records the plan's text and the SHA-256 of its bytes, the root seed (the
``SeedSequence`` entropy every claim seed derives from, see :mod:`fedaudit.experiments.plan`), the
start and end times, the source hash of every ``module:attr`` plugin the plan names
(:attr:`~fedaudit.experiments.plan.Plan.references`), the dependencies' versions and the
provenance of the fedaudit code that ran (:mod:`fedaudit.reports.provenance`).

Checkpoints and resume. :func:`run_plan_to_dir` runs into a report directory it locks for the
whole run (:func:`fedaudit.locking.directory_lock`: a second run into it is refused). Each
finished claim is checkpointed at once in ``DIR/.checkpoint/<claim-id>.json`` — written to a
temporary file, fsynced and renamed, so a checkpoint is whole or absent — together with the
plan's SHA-256 and the fedaudit version. Stress grids keep their cells in
``DIR/.work/<claim-id>/`` (not in the system's temporary directory). After SIGKILL, power loss
or Ctrl-C, ``resume=True`` (``fedaudit run PLAN --out DIR --resume``) reloads every checkpoint,
runs only the claims without one (a stress grid continues from its finished cells) and writes
the report an uninterrupted run writes: claim results are identical because every claim's seed
is a function of the plan alone; only timestamps differ. Checkpoints written for another plan
or another fedaudit version are refused. Claims that ended INCONCLUSIVE with an error are not
checkpointed, so a resume retries them. Once the report is written, ``.checkpoint/`` and
``.work/`` are removed.

Checkpoints are evidence, not verdicts. Whoever can write ``DIR`` could edit a checkpoint, and a
resumed run signs what it reloads, so the checkpoints are a tamper-evident chain
(:class:`Checkpoints`, :mod:`fedaudit.chain`): ``_run.json`` binds the plan's SHA-256, the
version, the root seed, the start time and a fresh nonce; every claim's record carries ``seq``
(the order claims finished), the MAC of the record before it and its own HMAC under a key derived
from the nonce and a secret ``DIR`` does not hold — the report signing key when the run signs its
report, else this user's fedaudit secret in the state directory (``FEDAUDIT_STATE_DIR``). On
resume every MAC and the chain are checked (an edited record, one from another run, or one
missing before the last is refused; a missing *last* record is what a kill leaves, and that claim
runs again), the record must be the plan's claim (id, kind, expect, title, seed), and its verdict
is re-derived from its evidence through its kind
(:func:`~fedaudit.experiments.kind.derived_verdict`) and must be the verdict it records; a kind
that cannot re-derive verdicts has its claim run again. A tampered, inconsistent or
unauthenticated checkpoint is one :class:`FedAuditError` naming the file (CLI: exit 2), and no
report is written. A stress grid's ``DIR/.work/<claim-id>/cells.jsonl`` is such a chain too
(:mod:`fedaudit.audit.stress`, with this user's secret): a cell that fails its check raises
:class:`~fedaudit.errors.CheckpointError`, which stops the run instead of making the claim
INCONCLUSIVE. Checkpoints written under the signing key resume only with it; those written
with the user's secret only by that user on that machine.

Engine and parallel claims. The plan's ``[engine]`` table, with the ``engine=`` keywords of
:func:`run_plan` in its place (:func:`fedaudit.experiments.plan.engine_options`), is applied with
:func:`fedaudit.engine.engine_defaults` around every claim, so each audit that leaves its
backend unset runs there. With ``parallel_claims`` (the default), a backend other than
``serial`` (:func:`fedaudit.engine.default_backend`: the table, else ``FEDAUDIT_BACKEND``, else
``process``) and more than one claim still to run, those claims are tasks of
:func:`fedaudit.engine.run_tasks`: each runs in a worker (where the engine's own default is
``serial``: no nested pools), comes back as it completes and is checkpointed at once, and the
report lists the claims in plan order. A claim's result is the same either way: its seed is a
function of the plan and its id only, and every audit is bit-identical on every backend. A
claim whose kind ``runs_alone`` (the Flower simulation starts its own Ray) or whose own
``backend`` key is ``process`` or ``ray`` runs in this process after the parallel ones. While
claims run in parallel the progress hooks hear of each claim's verdict when it has finished
(``claim_started``, ``advance`` by the units it reported, ``claim_finished``) and, meanwhile,
which claims a worker is running and how many units each has done (``claims_running``, about
every :data:`POLL_S` seconds, from small progress files the workers rewrite in a temporary
directory; on a remote Ray cluster, whose workers do not share it, only the finished claims).
An error inside a parallel claim is the same INCONCLUSIVE claim as in a serial run; a worker
that dies (killed, out of memory) makes the claims still running INCONCLUSIVE with that error,
never a crashed run, and a resume retries them.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fedaudit import chain
from fedaudit import json as fjson
from fedaudit.deprecation import module_aliases
from fedaudit.engine import (available_cores, check_run_options, default_backend, default_workers, engine_defaults,
                             require_ray, run_tasks)
from fedaudit.errors import CheckpointError, FedAuditError, writing
from fedaudit.experiments.kind import (ClaimKind, ClaimSpec, EvidenceError, Progress, derived_claim_verdict,
                                       derived_verdict, run_self_tests, trim, verdict)
from fedaudit.experiments.kinds import claim_kind
from fedaudit.experiments.deployment import report_deployment
from fedaudit.experiments.plan import Plan, engine_options, load_plan
from fedaudit.reports.explain import Explanation, generic_explanation
from fedaudit.reports.integrity import CHECKPOINT_DIR, WORK_DIR
from fedaudit.reports.model import Claim, Manifest, Report
from fedaudit.version import __version__

__all__ = ["PlanProgress", "Checkpoints", "run_claim", "work_units", "run_plan", "run_plan_to_dir",
           "CHECKPOINT_DIR", "WORK_DIR"]

#: version of the checkpoint file layout (2: the chained, authenticated records)
RUN_CHECKPOINT_FORMAT = 2
#: seconds between two looks at the parallel claims' progress files (``claims_running``)
POLL_S = 0.5
#: a parallel claim's worker rewrites its progress file at most this often (seconds)
PROGRESS_WRITE_S = 0.25


class PlanProgress:
    """Progress hooks for :func:`run_plan` (every method is a no-op here; override what you need,
    or pass any object with the first four methods — ``claim_resumed`` is optional)."""

    def plan_started(self, plan: Plan) -> None:
        """Called once, after validation, before the first claim."""

    def claim_started(self, spec: ClaimSpec, total: int, unit: str) -> None:
        """A claim begins; it will report about ``total`` units of work (``unit``: "samples", …)."""

    def advance(self, n: int) -> None:
        """``n`` more units of the current claim are done."""

    def claim_finished(self, spec: ClaimSpec, claim: Claim) -> None:
        """A claim has its verdict (``claim.runtime_s`` is set)."""

    def claim_resumed(self, spec: ClaimSpec, claim: Claim) -> None:
        """A claim's verdict was loaded from its checkpoint instead of being computed."""

    def claims_running(self, running: Mapping[str, tuple[ClaimSpec, int, int, str]]) -> None:
        """While claims run in parallel, about every :data:`POLL_S` seconds: ``{claim id: (spec,
        units done, units expected, unit)}`` of the claims a worker has started and not yet finished
        (optional, like ``claim_resumed``; called from a helper thread, never at the same time as
        another hook)."""

    def notice(self, text: str) -> None:
        """A one-line remark about how the run runs, before the first claim (optional): e.g. that
        more workers were asked for than the machine has cores, so fewer processes start."""


def work_units(spec: ClaimSpec) -> int:
    """How many progress units the claim's run reports (an estimate for pair searches)."""
    return max(1, int(claim_kind(spec.kind).work_units(spec.params)))


def run_claim(spec: ClaimSpec, progress: Progress | None = None, *, workdir: str | None = None) -> Claim:
    """Run one claim through its kind and turn the :class:`~fedaudit.experiments.kind.Evidence`
    into a :class:`~fedaudit.reports.model.Claim`, timed (exceptions propagate; :func:`run_plan`
    records them).

    The kind gets the claim's generator ``default_rng(spec.seed)`` (``spec.seed`` is
    ``derive_seed(plan seed, "claim=<id>")`` unless pinned). The verdict follows from the
    evidence and ``expect`` (:func:`~fedaudit.experiments.kind.verdict`); unless the evidence
    states its own parameters, the plan's parameters that are set follow the results, so a report
    shows what was found before how it was configured. Lists of more than
    :data:`~fedaudit.experiments.kind.MAX_NUMBERS` numbers are trimmed. ``workdir``: a directory
    for the claim's intermediate files (stress grids keep their cells there, so a killed run
    resumes cell by cell)."""
    return _run_kind(claim_kind(spec.kind), spec, progress or (lambda n: None), workdir)


def _run_kind(kind: ClaimKind, spec: ClaimSpec, progress: Progress, workdir: str | None) -> Claim:
    """:func:`run_claim` with the kind already built (a parallel claim's worker gets it with the
    task, so a kind registered at run time in the driver runs there too)."""
    t0 = time.perf_counter()
    found = kind.run(spec, np.random.default_rng(spec.seed), progress, workdir=workdir)
    evidence = dict(found.evidence)
    if not found.states_parameters:
        evidence["parameters"] = {k: v for k, v in spec.params.items() if v is not None}
    evidence = trim(evidence)
    decided = verdict(spec.expect, found)
    recorded = derived_verdict(kind, spec.expect, fjson.loads(fjson.dumps(evidence), what="evidence"))
    if recorded is not None and recorded != decided:  # the rule a reader re-runs must be the rule that decided
        raise AssertionError(f"claim kind {spec.kind!r}: decide() of the recorded evidence gives {recorded}, "
                             f"the run decided {decided}")
    records, final, summary, caveats = _self_tested(kind, spec, evidence, decided, found)
    return Claim(id=spec.id, kind=spec.kind, title=spec.title, expect=spec.expect, verdict=final,
                 evidence=evidence, summary=summary, plots=[dict(p) for p in found.plots], seed=spec.seed,
                 runtime_s=time.perf_counter() - t0, caveats=caveats, guarantee=kind.guarantee,
                 explanation=explain_claim(kind, spec, evidence, final), self_tests=records)


def explain_claim(kind: ClaimKind, spec: ClaimSpec, evidence: Mapping[str, Any], decided: str) -> Explanation:
    """The claim's plain-language :class:`~fedaudit.reports.explain.Explanation`: the kind's
    ``explain`` of the evidence *as recorded* (JSON data, as a reader of report.json has it), with
    the layout of the evidence keys present (``evidence_fields``). A kind whose ``explain`` raises
    loses only its wording: the claim gets the generic account, which names the error."""
    recorded = fjson.loads(fjson.dumps(evidence), what="evidence")
    try:
        found = kind.explain(spec.params, recorded, decided, spec.expect)
    except Exception as exc:  # a user's kind: its verdict stands, its explanation says why it is generic
        found = generic_explanation(title=spec.title, kind=spec.kind, expect=spec.expect, verdict=decided,
                                    parameters=spec.params)
        found = dataclasses.replace(found, does_not_show=found.does_not_show + (
            f"the kind's own explanation, which failed: {type(exc).__name__}: {exc}",))
    fields = {k: f for k, f in dict(kind.evidence_fields).items() if k.split(".")[0] in recorded}
    return dataclasses.replace(found, fields={**fields, **dict(found.fields)})


def _self_tested(kind: ClaimKind, spec: ClaimSpec, evidence: Mapping[str, Any], decided: str,
                 found: Any) -> tuple[list[dict[str, Any]], str, str, list[str]]:
    """Run the kind's auditor self-tests for the claim (:meth:`ClaimKind.self_tests`) and count
    them: ``(records, verdict, summary, caveats)``. A failed self-test makes the verdict
    INCONCLUSIVE where it no longer stands (:func:`~fedaudit.reports.self_tests.verdict_after_self_tests`)
    and is named in the summary and the caveats."""
    from fedaudit.reports.self_tests import failed_self_tests, verdict_after_self_tests

    records = run_self_tests(list(kind.self_tests(spec, evidence) or []))
    final = verdict_after_self_tests(decided, spec.expect, records)
    summary, caveats = found.summary, list(found.caveats)
    failed = failed_self_tests(records)
    if failed:
        what = "; ".join(f"{r['name']}: expected {r['expected']}, observed {r['observed']}"
                         + (f" ({r['evidence']['error']})" if r["evidence"].get("error") else "") for r in failed)
        summary += f" — auditor self-test failed: {what}" + (f"; the verdict {decided} does not stand"
                                                            if final != decided else "")
        caveats.append(f"auditor self-test failed ({what}): the auditor did not show on the day it ran that it "
                       f"certifies nothing on identical inputs and catches a planted violation")
    return records, final, summary, caveats


def _guarded(kind: ClaimKind, spec: ClaimSpec, progress: Progress, workdir: str | None) -> Claim:
    """The claim, or its INCONCLUSIVE error claim when the run raises; ``runtime_s`` is the wall
    time of either (in the driver or in a parallel claim's worker alike)."""
    t0 = time.perf_counter()
    try:
        claim = _run_kind(kind, spec, progress, workdir)
    except CheckpointError:  # what the claim resumed from cannot be trusted: the run stops, no report
        raise
    except Exception as exc:  # recorded, never swallowed: the claim is INCONCLUSIVE with the error
        claim = _error_claim(spec, exc, kind)
    return dataclasses.replace(claim, runtime_s=time.perf_counter() - t0)


def _write_progress(path: str | None, units: int) -> None:
    """Record a running claim's units in its progress file (temporary file + rename: a reader
    sees the old count or the new one; a failed write only loses a progress line)."""
    if path is None:
        return
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as fh:
            fh.write(str(units))
        os.replace(tmp, path)
    except OSError:
        pass


def _claim_task(task: tuple[ClaimSpec, ClaimKind, str | None, str | None]) -> tuple[Claim, int]:
    """One claim of the parallel batch, in an engine worker: ``(claim, units it reported)``. When
    the driver gave a progress file, the worker writes it when the claim starts and then at most
    every :data:`PROGRESS_WRITE_S` seconds, so the driver sees which claims run and how far
    they are (:meth:`PlanProgress.claims_running`)."""
    spec, kind, workdir, progress_file = task
    units, last = [0], [time.monotonic()]
    _write_progress(progress_file, 0)

    def count(n: int) -> None:
        units[0] += n
        now = time.monotonic()
        if progress_file is not None and now - last[0] >= PROGRESS_WRITE_S:
            last[0] = now
            _write_progress(progress_file, units[0])

    return _guarded(kind, spec, count, workdir), units[0]


class _ProgressPoller:
    """The driver's side of the progress files: a helper thread that reads them every
    :data:`POLL_S` seconds and calls ``hooks.claims_running`` with the claims started and not
    yet finished (under ``lock``, which the driver also holds while it finishes a claim)."""

    def __init__(self, hooks: Any, specs: Mapping[str, tuple[ClaimSpec, int, str]], lock: threading.Lock):
        self.hooks, self.specs, self.lock = hooks, dict(specs), lock
        method = getattr(type(hooks), "claims_running", None)
        # nobody listens: no thread, no files (PlanProgress's own hook does nothing)
        self.active = callable(getattr(hooks, "claims_running", None)) and method is not PlanProgress.claims_running
        self.dir = tempfile.mkdtemp(prefix="fedaudit-progress-") if self.active else None
        self.done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fedaudit-claims-progress", daemon=True)

    def path(self, claim_id: str) -> str | None:
        """The progress file of ``claim_id`` (None when nobody listens)."""
        return None if self.dir is None else os.path.join(self.dir, f"{claim_id}.units")

    def start(self) -> "_ProgressPoller":
        if self.active:
            self._thread.start()
        return self

    def finished(self, claim_id: str) -> None:
        """Called under the lock when the driver has the claim's result."""
        self.done.add(claim_id)

    def poll(self) -> None:
        """One look at the progress files: ``claims_running`` of the claims running now."""
        running = {}
        for claim_id, (spec, total, unit) in self.specs.items():
            if claim_id in self.done:
                continue
            try:
                with open(self.path(claim_id), encoding="ascii") as fh:
                    units = int(fh.read() or 0)
            except (OSError, ValueError):
                continue  # not started yet (or a write in flight)
            running[claim_id] = (spec, units, total, unit)
        with self.lock:
            running = {k: v for k, v in running.items() if k not in self.done}
            self.hooks.claims_running(running)

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.poll()
            except Exception:  # a progress display must never stop the run
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def _engine_settings(plan: Plan, engine: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`~fedaudit.experiments.plan.engine_options`, and Ray importable when the run's backend
    is ``ray`` (refused before any claim, rather than every claim failing on it)."""
    options = engine_options(plan, engine)
    with engine_defaults(options["backend"], options["workers"], options["address"]):
        backend = default_backend()
    if backend == "ray":
        require_ray()
    return options


def workers_notice(plan: Plan, options: Mapping[str, Any]) -> str | None:
    """The line that says which worker counts of the run (``options``' workers, each claim's own
    ``workers`` key) exceed :func:`~fedaudit.engine.available_cores` on the process backend and so
    are capped there (:func:`~fedaudit.engine.process_workers`); None when none does."""
    cores = available_cores()
    with engine_defaults(options["backend"], options["workers"], options["address"]):
        run_backend, workers, _ = check_run_options()  # the run's own, FEDAUDIT_WORKERS included
        asked = [("workers", workers)] if run_backend == "process" else []
        asked += [(f"claim {spec.id!r} workers", spec.params["workers"]) for spec in plan.claims
                  if isinstance(spec.params.get("workers"), int)
                  and (spec.params.get("backend") or run_backend) == "process"]
    over = [f"{what} = {n}" for what, n in asked if n is not None and n > cores]
    if not over:
        return None
    return (f"{', '.join(over)}: more than the {cores} cores of this machine, so at most {cores} worker processes "
            f"run (the results are the same); --allow-large (allow_large=True) starts them all")


def _runs_alone(kind: ClaimKind, spec: ClaimSpec) -> bool:
    """A claim that must run in the driver: its kind says so, or it runs its own pool or Ray."""
    return bool(kind.runs_alone) or spec.params.get("backend") in ("process", "ray")


def _error_claim(spec: ClaimSpec, exc: BaseException, kind: ClaimKind | None = None) -> Claim:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    message = f"{type(exc).__name__}: {exc}"
    return Claim(id=spec.id, kind=spec.kind, title=spec.title, expect=spec.expect, verdict="INCONCLUSIVE",
                 evidence={"parameters": dict(spec.params)}, summary=f"the audit could not run: {message}",
                 seed=spec.seed, error=message + where, guarantee=getattr(kind, "guarantee", None))


class Checkpoints:
    """The finished claims of one plan run in ``root/.checkpoint/`` (one JSON file per claim), a
    tamper-evident chain (:mod:`fedaudit.chain`).

    ``_run.json`` (claim ids cannot start with ``_``) is the chain's header, written before the
    first claim: ``{"format", "fedaudit", "plan_sha256", "seed", "run_started", "nonce", "secret",
    "key_id", "mac"}``, so even a run killed inside its first claim (a stress grid half done in
    ``.work/``) can only be resumed with its own plan. ``secret`` says what the run's MAC key
    ``derive_key(secret, "plan-checkpoint", nonce)`` comes from: ``"report key"`` (``key``, the
    key that signs the report) or ``"user secret"`` (this user's fedaudit secret, outside the
    report directory). Each claim's file holds ``{"format", "fedaudit", "plan_sha256", "claim_id",
    "run_started", "claim", "seq", "prev", "mac"}`` where ``claim`` is ``Claim.to_dict()`` and
    ``seq`` numbers the records in the order claims finished. Files are written atomically
    (temporary file in the same directory, fsync, rename, fsync of the directory).

    :meth:`load` authenticates the header and every record in ``seq`` order, then re-derives each
    claim's verdict from its evidence through its kind (:func:`~fedaudit.experiments.kind.derived_verdict`):
    a claim is reused only when that gives the verdict it records; a kind that cannot re-derive
    (no ``decide``) has its claim run again.
    """

    RUN_FILE = "_run.json"
    #: ``secret`` of the header: what the run's MAC key is derived from
    REPORT_KEY, USER_SECRET = "report key", "user secret"

    def __init__(self, root: str | os.PathLike, plan: Plan, *, key: bytes | None = None):
        """``key``: the report signing key of the run (the checkpoints of a new run are
        authenticated with it), None for this user's secret (:func:`fedaudit.chain.user_secret`)."""
        self.root = Path(root)
        self.dir = self.root / CHECKPOINT_DIR
        self.plan = plan
        self.key = key
        self._chain: chain.Chain | None = None
        self._recorded: set[str] = set()  # claim ids with a record in the chain

    def path(self, claim_id: str) -> Path:
        """The checkpoint file of ``claim_id`` (ids are ``[A-Za-z0-9_.-]``, safe as file names)."""
        return self.dir / f"{claim_id}.json"

    def load(self) -> tuple[dict[str, Claim], float | None]:
        """``({claim id: Claim}, start time of the run)`` of the checkpoints present that may be
        reused; afterwards :meth:`save` continues their chain.

        Raises :class:`FedAuditError` for a checkpoint of another plan (SHA-256 differs), of
        another fedaudit version or format, of a claim the plan does not have, one that cannot be
        read, records without their header, checkpoints that cannot be authenticated here (the
        secret is missing or another one) and a tampered or inconsistent record: one that fails
        its MAC, breaks the chain (a record before it is missing or out of place), differs from the
        plan's claim or records a verdict its evidence does not give. The caller must not mix
        results of different plans, nor write a report from such evidence.
        """
        self._chain, self._recorded = None, set()
        if not self.dir.is_dir():
            return {}, None
        records: list[tuple[int, Path, dict[str, Any]]] = []
        header: dict[str, Any] | None = None
        # the claims' files first: a checkpoint of another plan is named by its claim's file
        for path in sorted(self.dir.iterdir(), key=lambda p: (p.name == self.RUN_FILE, p.name)):
            if path.name.startswith("."):  # a temporary file of an interrupted write
                continue
            data = self._read(path)
            if path.name == self.RUN_FILE:
                header = data
                continue
            seq = data.get("seq")
            if type(seq) is not int or seq < 1:
                raise FedAuditError(f"checkpoint {path} has no valid seq (altered?); {_START_OVER}")
            records.append((seq, path, data))
        if header is None:
            if records:
                raise FedAuditError(f"checkpoint {self.dir / self.RUN_FILE} is missing, so the checkpoints in "
                                    f"{self.dir} cannot be authenticated; {_START_OVER}")
            return {}, None
        link = self._header_chain(header)
        specs = {spec.id: spec for spec in self.plan.claims}
        found: dict[str, Claim] = {}
        for _, path, data in sorted(records, key=lambda r: r[0]):
            if not link.follows(data):
                raise FedAuditError(f"checkpoint {path} fails its authentication: the record was altered, or one "
                                    f"written before it is missing or out of place; {_START_OVER}")
            claim_id = data.get("claim_id")
            if claim_id not in specs or path.name != f"{claim_id}.json" or claim_id in self._recorded:
                raise FedAuditError(f"checkpoint {path} names claim {claim_id!r}, which is not in the plan")
            self._recorded.add(claim_id)
            claim = self._reusable(path, data, specs[claim_id])
            if claim is not None:
                found[claim_id] = claim
        self._chain = link
        started = header.get("run_started")
        return found, (started if type(started) in (int, float) else None)

    def _header_chain(self, header: dict[str, Any]) -> "chain.Chain":
        """The chain of a ``_run.json`` read back: the secret it names, the key of its nonce, its
        mac checked (each failure one :class:`FedAuditError` saying what to do)."""
        where = f"checkpoint {self.dir / self.RUN_FILE}"
        nonce, source = header.get("nonce"), header.get("secret")
        if not chain.is_nonce(nonce) or source not in (self.REPORT_KEY, self.USER_SECRET):
            raise FedAuditError(f"{where} has no valid nonce or secret (altered?); {_START_OVER}")
        if source == self.REPORT_KEY:
            secret = self.key
            if secret is None:
                raise FedAuditError(f"{where}: the run's checkpoints are authenticated with the report signing key "
                                    f"(FEDAUDIT_REPORT_KEY): set it to resume, or {_START_OVER}")
            other = "they were written under another signing key (FEDAUDIT_REPORT_KEY)"
        else:
            secret = chain.user_secret(create=False)
            if secret is None:
                raise FedAuditError(f"{where}: the checkpoints cannot be authenticated on this machine by this user "
                                    f"(fedaudit's secret {chain.secret_path()} does not exist); {_START_OVER}")
            other = (f"the checkpoints cannot be authenticated on this machine by this user: they were written with "
                     f"another secret than {chain.secret_path()}")
        if chain.key_id(secret) != header.get("key_id"):
            raise FedAuditError(f"{where}: {other}; {_START_OVER}")
        link = chain.Chain(chain.derive_key(secret, chain.PLAN_PURPOSE, nonce), header)
        if not link.header_ok() or header.get("seed") != str(self.plan.seed):
            raise FedAuditError(f"{where} fails its authentication (altered); {_START_OVER}")
        return link

    def _reusable(self, path: Path, data: dict[str, Any], spec: ClaimSpec) -> Claim | None:
        """The authenticated checkpoint's claim when it may be reused: it is the plan's claim
        (id, kind, expect, title, seed) and its verdict is the one its evidence gives through the
        kind; None when the kind cannot re-derive verdicts (the claim is run again)."""
        where = f"checkpoint {path}"
        try:
            claim = Claim.from_dict(data["claim"]) if isinstance(data.get("claim"), dict) else None
        except FedAuditError as exc:
            raise FedAuditError(f"{where}: {exc}; {_START_OVER}") from None
        if claim is None or (claim.id, claim.kind, claim.expect, claim.title, claim.seed) != \
                (spec.id, spec.kind, spec.expect, spec.title, spec.seed):
            raise FedAuditError(f"{where} does not match claim {spec.id!r} of the plan (id, kind, expect, title or "
                                f"seed differ); {_START_OVER}")
        kind = claim_kind(spec.kind)
        try:
            derived = derived_claim_verdict(kind, spec.expect, claim.evidence, claim.self_tests)
        except EvidenceError as exc:
            raise FedAuditError(f"{where}: the verdict cannot be re-derived from its evidence ({exc}); "
                                f"{_START_OVER}") from None
        if derived is None:
            return None
        if derived != claim.verdict or claim.error is not None:
            raise FedAuditError(f"{where} records the verdict {claim.verdict!r}, its evidence gives {derived!r}; "
                                f"{_START_OVER}")
        return claim

    def _read(self, path: Path) -> dict[str, Any]:
        """A checkpoint file's record, after checking its format, plan SHA-256 and version."""
        where = f"checkpoint {path}"
        try:
            data = fjson.loads(path.read_bytes(), what=where)
        except (OSError, FedAuditError) as exc:
            raise FedAuditError(f"cannot read {where}: {exc}; {_START_OVER}") from None
        if not isinstance(data, dict) or data.get("format") != RUN_CHECKPOINT_FORMAT:
            raise FedAuditError(f"{where} has an unknown format; {_START_OVER}")
        if data.get("plan_sha256") != self.plan.sha256:
            raise FedAuditError(
                f"{where} belongs to a different plan (sha256 {str(data.get('plan_sha256'))[:12]}, this plan "
                f"{self.plan.sha256[:12]}); resume with the plan that started the run, or {_START_OVER}")
        if data.get("fedaudit") != __version__:
            raise FedAuditError(f"{where} was written by fedaudit {data.get('fedaudit')}, this is "
                                f"{__version__}; {_START_OVER}")
        return data

    def _write(self, path: Path, record: dict[str, Any]) -> Path:
        from fedaudit.reports.io import atomic_write, fsync_dir

        text = fjson.dumps(record, sort_keys=True)
        with writing(f"checkpoint {path}"):  # a full disk stops the run with one line; earlier checkpoints stay
            self.dir.mkdir(parents=True, exist_ok=True)
            atomic_write(path, text)
        fsync_dir(self.dir)
        return path

    def _header(self) -> dict[str, Any]:
        return {"format": RUN_CHECKPOINT_FORMAT, "fedaudit": __version__, "plan_sha256": self.plan.sha256}

    def begin(self, run_started: float) -> None:
        """Start the chain of a new run (plan SHA-256, version, seed, start time, a fresh nonce),
        discarding any earlier checkpoint files; a no-op after :meth:`load` found a run to continue."""
        if self._chain is not None:
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        self._recorded = set()
        nonce = chain.new_nonce()
        if self.key is not None:
            secret, source = self.key, self.REPORT_KEY
        else:
            secret, source = chain.user_secret(create=True), self.USER_SECRET
        key = chain.derive_key(secret, chain.PLAN_PURPOSE, nonce)
        header = chain.Chain.seal_header(key, {**self._header(), "seed": str(self.plan.seed),
                                               "run_started": run_started, "nonce": nonce, "secret": source,
                                               "key_id": chain.key_id(secret)})
        self._write(self.dir / self.RUN_FILE, header)
        self._chain = chain.Chain(key, header)

    def save(self, claim: Claim, run_started: float) -> Path:
        """Write the checkpoint of ``claim`` atomically as the chain's next record (starting the
        chain if :meth:`begin` was not called); returns its path. A claim that already has a record
        in the chain (one :meth:`load` did not reuse: its kind cannot re-derive verdicts) keeps it:
        it is never reused, and replacing it would leave a gap in the chain."""
        if self._chain is None:
            self.begin(run_started)
        path = self.path(claim.id)
        if claim.id in self._recorded:
            return path
        record = self._chain.seal({**self._header(), "claim_id": claim.id, "run_started": run_started,
                                   "claim": fjson.jsonable(claim.to_dict())})
        self._write(path, record)
        self._recorded.add(claim.id)
        return path

    def clear(self) -> None:
        """Remove every checkpoint (and the claims' intermediate files)."""
        for name in (CHECKPOINT_DIR, WORK_DIR):
            shutil.rmtree(self.root / name, ignore_errors=True)
        self._chain, self._recorded = None, set()


#: the advice of every refused checkpoint
_START_OVER = "rerun without --resume (and with --force) to start over"


def run_plan(plan: str | Path | Mapping[str, Any] | Plan, *, progress: PlanProgress | None = None,
             command: str | None = None, checkpoints: Checkpoints | None = None,
             resume: bool = False, engine: Mapping[str, Any] | None = None, allow_large: bool = False) -> Report:
    """Validate and run a plan (a TOML path, a parsed dict or a :class:`Plan`); return the report.

    ``progress`` receives :class:`PlanProgress` callbacks; ``command`` is recorded in the
    manifest (the CLI passes its command line). With ``checkpoints`` every finished claim is
    saved there as soon as it has its verdict, and stress grids keep their cells under
    ``<root>/.work/<claim-id>/``; with ``resume`` as well, claims already checkpointed are loaded
    instead of run (see the module docstring). ``engine``: ``{"backend", "workers", "address",
    "parallel_claims"}`` (any of them; None keeps the plan's) in place of the plan's ``[engine]``
    table — where the claims run, never what they find. ``allow_large`` accepts claims estimated
    above the budget (:func:`~fedaudit.experiments.plan.load_plan`; a :class:`Plan` given here was
    checked when it was loaded) and lets the process backend start more workers than cores;
    otherwise worker counts above the cores are capped, said once through ``progress.notice``.
    Raises :class:`FedAuditError` for an invalid plan, engine option or unusable checkpoints; a
    claim that errors while running is INCONCLUSIVE.
    """
    if not isinstance(plan, Plan):
        plan = load_plan(plan, allow_large=allow_large)
    options = _engine_settings(plan, engine)
    if resume and checkpoints is None:
        raise FedAuditError("resume=True needs checkpoints (a report directory to resume from)")
    hooks = progress or PlanProgress()
    notice = None if allow_large else workers_notice(plan, options)
    if notice is not None and hasattr(hooks, "notice"):
        hooks.notice(notice)
    done, first_started = checkpoints.load() if (checkpoints is not None and resume) else ({}, None)
    started = first_started if first_started is not None else time.time()
    if checkpoints is not None:
        checkpoints.begin(started)
    hooks.plan_started(plan)
    claims: dict[str, Claim] = {}
    todo: list[tuple[ClaimSpec, ClaimKind]] = []
    for spec in plan.claims:
        if spec.id in done:
            claims[spec.id] = done[spec.id]
            getattr(hooks, "claim_resumed", hooks.claim_finished)(spec, done[spec.id])
        else:
            todo.append((spec, claim_kind(spec.kind)))

    def workdir(spec: ClaimSpec) -> str | None:
        if checkpoints is None:
            return None
        path = checkpoints.root / WORK_DIR / spec.id
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    def finish(spec: ClaimSpec, claim: Claim, where: str | None) -> None:
        if checkpoints is not None:
            if claim.error is None:
                checkpoints.save(claim, started)
            shutil.rmtree(where, ignore_errors=True)
        claims[spec.id] = claim
        hooks.claim_finished(spec, claim)

    with engine_defaults(options["backend"], options["workers"], options["address"], oversubscribe=allow_large):
        batch = [(spec, kind) for spec, kind in todo if not _runs_alone(kind, spec)]
        if options["parallel_claims"] and len(batch) > 1 and default_backend() != "serial":
            _run_parallel(batch, options, workdir, finish, hooks)
            todo = [(spec, kind) for spec, kind in todo if spec.id not in claims]
        for spec, kind in todo:
            hooks.claim_started(spec, work_units(spec), kind.unit)
            where = workdir(spec)
            finish(spec, _guarded(kind, spec, hooks.advance, where), where)
    finished = time.time()
    manifest = Manifest.collect(plan.source, str(plan.seed), started, finished, command=command, engine=options,
                                plugins=plan.references)
    return Report(manifest=manifest, claims=[claims[spec.id] for spec in plan.claims], title=plan.title,
                  deployment=report_deployment(plan))


def _run_parallel(batch, options, workdir, finish, hooks) -> None:
    """Run ``batch`` (``(spec, kind)`` pairs) as engine tasks, finishing each claim as it completes;
    if the pool itself fails (a worker died), the claims without a result become error claims.
    While they run, the workers' progress files feed ``hooks.claims_running`` (:class:`_ProgressPoller`)."""
    lock = threading.Lock()
    poller = _ProgressPoller(hooks, {spec.id: (spec, work_units(spec), kind.unit) for spec, kind in batch}, lock)
    tasks = [(spec, kind, workdir(spec), poller.path(spec.id)) for spec, kind in batch]
    workers = options["workers"]
    if workers is None and default_backend() == "process":
        workers = min(default_workers(), len(tasks))
    pending = {spec.id: (spec, where) for spec, _, where, _ in tasks}
    results = run_tasks(_claim_task, tasks, workers=workers)
    poller.start()
    try:
        while pending:
            try:
                (spec, kind, where, _), (claim, units) = next(results)
            except CheckpointError:  # a claim's resumed files cannot be trusted (see _guarded)
                raise
            except Exception as exc:  # the pool failed, not a claim (a claim's error comes back as a claim)
                with lock:
                    for spec, where in pending.values():
                        poller.finished(spec.id)
                        finish(spec, _error_claim(spec, exc, claim_kind(spec.kind)), where)
                return
            del pending[spec.id]
            with lock:
                poller.finished(spec.id)
                hooks.claim_started(spec, work_units(spec), kind.unit)
                hooks.advance(units)
                finish(spec, claim, where)
    finally:
        poller.close()
        results.close()


def run_plan_to_dir(plan: str | Path | Mapping[str, Any] | Plan, out_dir: str | os.PathLike, *,
                    force: bool = False, resume: bool = False, progress: PlanProgress | None = None,
                    command: str | None = None, formats: tuple[str, ...] | None = None,
                    engine: Mapping[str, Any] | None = None, key: bytes | None = None,
                    allow_large: bool = False) -> tuple[Report, dict[str, Path]]:
    """Run ``plan`` into the report directory ``out_dir``, checkpointing every claim; return the
    report and ``{format: path}`` of the files written.

    Everything that can be refused is refused before the first claim runs: an invalid plan or
    ``engine`` option (as in :func:`run_plan`), an ``out_dir`` that is a file or cannot be created
    or written, a directory locked by another run, a non-empty directory without ``force`` or
    ``resume``, checkpoints of another plan, checkpoints that cannot be authenticated here or were
    tampered with (:class:`Checkpoints`). Without ``resume`` old checkpoints are discarded; with
    it they are reused (whatever the engine options of either run). ``allow_large`` as in
    :func:`run_plan`.

    ``key`` signs the report (default :func:`fedaudit.reports.integrity.signing_key`, i.e.
    ``FEDAUDIT_REPORT_KEY``; None there: unsigned) and, when there is one, authenticates the
    checkpoints of a new run; without one they are authenticated with this user's fedaudit secret
    (:mod:`fedaudit.chain`), kept outside ``out_dir``. The CLI takes ``FEDAUDIT_REPORT_KEY`` out of
    its environment at start and passes it here, so no worker inherits it.
    """
    from fedaudit.locking import create_directory, directory_lock
    from fedaudit.reports.integrity import signing_key
    from fedaudit.reports.io import write_sealed_report

    if not isinstance(plan, Plan):
        plan = load_plan(plan, allow_large=allow_large)
    _engine_settings(plan, engine)  # refused before the directory is touched
    out = create_directory(out_dir, what="report directory")
    with directory_lock(out, what="report directory"):
        others = [p for p in out.iterdir() if p.name not in (".lock", CHECKPOINT_DIR, WORK_DIR)]
        has_checkpoints = (out / CHECKPOINT_DIR).is_dir() and any((out / CHECKPOINT_DIR).iterdir())
        if not (force or resume) and (others or has_checkpoints):
            raise FedAuditError(f"report directory {out} exists and is not empty; pass --force to overwrite "
                                f"or --resume to continue an interrupted run")
        key = signing_key() if key is None else key
        checkpoints = Checkpoints(out, plan, key=key)
        if resume:
            checkpoints.load()  # refuse foreign checkpoints before anything runs
        else:
            checkpoints.clear()
        report = run_plan(plan, progress=progress, command=command, checkpoints=checkpoints, resume=resume,
                          engine=engine, allow_large=allow_large)
        report, paths = write_sealed_report(report, out, force=True, key=key,
                                            **({} if formats is None else {"formats": formats}))
        checkpoints.clear()
    return report, paths


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"CHECKPOINT_FORMAT": ("RUN_CHECKPOINT_FORMAT", lambda: RUN_CHECKPOINT_FORMAT)})
