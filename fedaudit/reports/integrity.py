"""Report integrity: JSON Schema validation, SHA-256 digest, optional HMAC-SHA256 signature.

* **digest** — SHA-256 (hex) of the canonical JSON (:func:`~fedaudit.reports.canonical.canonical_json_bytes`:
  the report object without ``digest``/``signature``, sorted keys, no whitespace, UTF-8). It detects
  accidental or casual edits; anyone can recompute it, so it proves nothing against a deliberate forger.
* **signature** — HMAC-SHA256 (hex) of the same bytes under a secret key (RFC 2104): the key in
  ``FEDAUDIT_REPORT_KEY`` when ``fedaudit run`` writes the report, or a key file given to
  ``fedaudit sign DIR --key-file F`` as a separate step after the run
  (:func:`fedaudit.reports.io.sign_report`, so that
  no plugin loaded by the run can read the key). Only a holder of the key can produce it, and every
  holder can: HMAC proves the report came from someone with the key, not which of them (an Ed25519
  signature, :mod:`fedaudit.reports.signatures`, proves which key holder signed). When a key
  is given, :func:`verify_report` requires a valid signature (an unsigned report then fails: its
  signature could have been stripped). A signed report checked *without* the key is not verified
  either: the digest alone can be forged. An unsigned report checked without a key is *intact*
  (its files agree with each other) but not *authentic*: anyone could have written it
  (:attr:`VerifyResult.authenticated`).
* **artifact hashes** — ``manifest.artifacts`` holds the SHA-256 of every rendering written beside
  report.json (HTML with its embedded figures, Markdown), so digest and signature cover them too;
  the renderings show the *content digest* (the canonical JSON with that table null), which the
  table records as ``rendered_from`` — see :mod:`fedaudit.reports.io` for the order of sealing.
* **what they bind** — the whole report: the claims with their verdicts and evidence and the
  manifest, which since schema 1.4 embeds the plan's full text, the source hash of every
  ``module:attr`` plugin the plan named, the versions of the libraries that compute numbers and
  the provenance of the fedaudit code that ran (:mod:`fedaudit.reports.provenance`); :func:`covered`
  lists them for a given report.
* **consistency** — a valid digest or signature proves who wrote a report, not that it is right.
  :func:`verify_report` also checks that overall and counts follow from the claims, that the
  embedded plan text hashes to ``plan_sha256`` (and, given the plan, that it is the plan the
  report came from: an old report replayed for another plan fails), that no fedaudit module ran
  from stale bytecode, and, with a ``rederive`` check, that every verdict is the one its
  recorded evidence gives.

The key. ``FEDAUDIT_REPORT_KEY``'s bytes, as the environment holds them, are the key (UTF-8 or
not); a variable that is set but empty is an error, never "unsigned". The CLI takes it out of its
environment before any command runs (:func:`key_out_of_environment`) and the engine starts no
worker with it (:data:`fedaudit.engine.PRIVATE_ENV`), so a plugin in a worker cannot read it from
its environment. The plugins of ``fedaudit run`` still run in the process that holds the key in
memory: ``fedaudit sign --key-file`` after the run keeps it from them altogether.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.reports.canonical import canonical_json_bytes, digest, sign
from fedaudit.reports.model import Report

__all__ = ["KEY_ENV", "UNCHECKED", "RENDERINGS", "signing_key", "key_out_of_environment", "read_key_file",
           "read_bounded", "load_schema", "schema_errors", "validate_report_dict", "VerifyResult", "Finding",
           "Rederive", "covered", "verify_report", "SIGNATURE_FILE", "NotRegular", "read_regular",
           "verify_and_load"]

#: environment variable holding the HMAC key (its bytes, as the environment holds them, are the key);
#: the engine never passes it to a worker process (it is in :data:`fedaudit.engine.PRIVATE_ENV`)
KEY_ENV = "FEDAUDIT_REPORT_KEY"


def signing_key() -> bytes | None:
    """The HMAC key in ``FEDAUDIT_REPORT_KEY``: the variable's bytes exactly as the environment
    holds them (UTF-8 text or not: a key is bytes, nothing is decoded), or None when it is unset.
    A variable that is set but empty is a :class:`FedAuditError`, never "unsigned": an empty
    value is a mistake (an unexported or failed ``$(cat key)``), and signing nothing would hide it."""
    environb = getattr(os, "environb", None)
    if environb is not None:
        value = environb.get(KEY_ENV.encode("ascii"))
    else:  # pragma: no cover - Windows: the environment is Unicode
        text = os.environ.get(KEY_ENV)
        value = None if text is None else text.encode("utf-8", "surrogatepass")
    if value is not None and not value:
        raise FedAuditError(f"{KEY_ENV} is set but empty; set it to the key (e.g. 32 random bytes in hex) or unset "
                            f"it to write and check unsigned reports")
    return value


@contextlib.contextmanager
def key_out_of_environment() -> Iterator[Callable[[], bytes | None]]:
    """Take ``FEDAUDIT_REPORT_KEY`` out of ``os.environ`` for the block (the CLI's ``main()`` does,
    before any command runs): the key then lives in this process's memory only, and no worker
    process, Ray instance or Flower simulation started meanwhile inherits it. Yields a function
    returning the key (:func:`signing_key`: an empty variable raises its :class:`FedAuditError`
    there, in the commands that read the key, not in the others); the variable's bytes are put
    back afterwards, so a ``main()`` called from a program leaves the environment as it was."""
    environb = getattr(os, "environb", None)
    if environb is None:  # pragma: no cover - Windows: the environment is Unicode
        saved: Any = os.environ.get(KEY_ENV)
    else:
        saved = environb.get(KEY_ENV.encode("ascii"))
    try:
        key: bytes | None | FedAuditError = signing_key()
    except FedAuditError as exc:
        key = exc
    os.environ.pop(KEY_ENV, None)

    def taken() -> bytes | None:
        if isinstance(key, FedAuditError):
            raise key
        return key

    try:
        yield taken
    finally:
        if saved is not None:
            if environb is None:  # pragma: no cover - Windows
                os.environ[KEY_ENV] = saved
            else:
                environb[KEY_ENV.encode("ascii")] = saved


#: a key file larger than this is not a key (64 KiB)
_MAX_KEY_BYTES = 1 << 16


def read_bounded(path: str | os.PathLike, limit: int, flag: str, why: str) -> bytes:
    """The bytes of the file that the command-line option ``flag`` names (``--key-file``,
    ``verify --plan``), read as data: an unreadable file, or one of more than ``limit`` bytes
    (``why`` says what it should hold), is a :class:`FedAuditError` naming the option."""
    try:
        with open(path, "rb") as fh:
            blob = fh.read(limit + 1)
    except OSError as exc:
        raise FedAuditError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if len(blob) > limit:
        raise FedAuditError(f"{flag} {path}: larger than {limit} bytes; {why}")
    return blob


def read_key_file(path: str | os.PathLike) -> bytes:
    """The HMAC key stored in the file ``path`` (``--key-file``): its bytes, less one trailing
    newline (``\\n`` or ``\\r\\n``, as ``echo`` or an editor leaves it). An unreadable, empty or
    larger than 64 KiB file is a :class:`FedAuditError`, and so is a PEM key (an Ed25519 key is
    not a shared secret: :mod:`fedaudit.reports.signatures`)."""
    key = read_bounded(path, _MAX_KEY_BYTES, "--key-file", "a key file holds one key")
    key = key.removesuffix(b"\n").removesuffix(b"\r")
    if b"-----BEGIN " in key and b" KEY-----" in key:  # an Ed25519 key given where the HMAC key goes
        raise FedAuditError(f"--key-file {path}: holds a PEM key, not an HMAC key: fedaudit sign takes an Ed25519 "
                            f"private key (fedaudit keygen makes one) and verify its public key as --public-key")
    if not key:
        raise FedAuditError(f"--key-file {path}: the file is empty; it must hold the key (e.g. 32 random bytes "
                            f"in hex: python3 -c \"import secrets; print(secrets.token_hex(32))\" > {path})")
    return key


@functools.lru_cache(maxsize=1)
def load_schema() -> dict[str, Any]:
    """The report JSON Schema shipped as package data (``fedaudit/reports/schema.json``)."""
    text = resources.files("fedaudit.reports").joinpath("schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def _validator():
    import jsonschema

    schema = load_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def schema_errors(data: Any, limit: int = 20) -> list[str]:
    """Schema violations of a report dictionary as readable lines (``path: message``), at most ``limit``."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    lines = []
    for e in errors[:limit]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path) or "(top level)"
        message = e.message if len(e.message) <= 200 else e.message[:197] + "..."
        lines.append(f"schema: {where.lstrip('.')}: {message}")
    if len(errors) > limit:
        lines.append(f"schema: … and {len(errors) - limit} more violation(s)")
    return lines


def validate_report_dict(data: Any) -> None:
    """Raise :class:`FedAuditError` if ``data`` does not satisfy the report schema."""
    problems = schema_errors(data, limit=5)
    if problems:
        raise FedAuditError("report does not match its schema: " + "; ".join(p.removeprefix("schema: ")
                                                                            for p in problems))


#: ``VerifyResult.signature`` when a signed report is checked without a key
UNCHECKED = "unchecked (no key)"

#: renderings ``write_report`` may put beside report.json; present but unlisted ones are flagged
RENDERINGS = ("report.html", "report.md")

#: the detached Ed25519 signature ``fedaudit sign --key-file PRIVATE.pem`` writes beside report.json
#: (:mod:`fedaudit.reports.signatures`); writing a new report into the folder removes a stale one
SIGNATURE_FILE = "signature.ed25519.json"


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_report`.

    ``signature`` is "valid", "invalid", "absent" or "unchecked (no key)". ``artifacts`` maps
    each rendering to "ok", "changed", "missing" or "unlisted" (present beside report.json but
    not in its artifact table). ``ok`` — the report is intact *and verified* — requires a valid
    schema and digest, every artifact "ok", and a valid signature, or no signature and no key;
    and that its content is consistent: overall and counts follow from the claims, every verdict
    re-derived from its evidence (with a ``rederive`` check) is the stored one, the embedded plan
    text hashes to ``plan_sha256`` (which matches the plan given, if one is), and no fedaudit
    module ran from bytecode that is not its source.
    A signed report checked without the key is **not** ok: whoever edits it can recompute the
    digest, so only the signature proves anything, and it was not checked. An ``ok`` report is
    :attr:`authenticated` only with a valid signature: an unsigned one is *integrity only* (its
    files agree with each other; who wrote them is not established)."""

    ok: bool
    schema_ok: bool
    digest_ok: bool
    signature: str
    problems: list[str] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)
    content_digest: str | None = None
    unlisted: list[str] = field(default_factory=list)
    #: the report's ``plan_sha256`` (None when it records none)
    plan_sha256: str | None = None
    #: what the digest (and a signature) bind, one phrase each (:func:`covered`)
    covers: list[str] = field(default_factory=list)
    #: verdicts re-derived from their evidence and found consistent (None: not checked)
    rederived: int | None = None
    #: what was not checked and why (a kind without ``decide()``): no failure
    notes: list[str] = field(default_factory=list)
    #: the check of the folder's detached Ed25519 signature (:class:`fedaudit.reports.signatures.Ed25519Check`,
    #: set by :func:`fedaudit.reports.signatures.verify_folder`); None when it was not looked at
    ed25519: Any = None

    @property
    def artifacts_ok(self) -> bool:
        """True when every rendering matches its recorded hash (and none is unlisted)."""
        return all(v == "ok" for v in self.artifacts.values())

    @property
    def authenticated(self) -> bool:
        """True when the report is intact and a signature of it is verified: its HMAC signature
        is valid under the key given (a holder of that key wrote or signed it), or its Ed25519
        signature is by the public key or fingerprint given (:attr:`ed25519`). False for an
        unsigned report, and for an Ed25519 signature checked against no trusted key."""
        return self.ok and (self.signature == "valid" or getattr(self.ed25519, "status", None) == "verified")

    def to_dict(self) -> dict[str, Any]:
        """The outcome as strict-JSON data (``artifacts_ok`` included)."""
        return fjson.jsonable({"ok": self.ok, "schema_ok": self.schema_ok, "digest_ok": self.digest_ok,
                               "signature": self.signature, "problems": list(self.problems),
                               "artifacts": dict(self.artifacts), "artifacts_ok": self.artifacts_ok,
                               "authenticated": self.authenticated,
                               "content_digest": self.content_digest, "unlisted": list(self.unlisted),
                               "plan_sha256": self.plan_sha256, "covers": list(self.covers),
                               "rederived": self.rederived, "notes": list(self.notes),
                               "ed25519": None if self.ed25519 is None else self.ed25519.to_dict()})


#: the largest report.json and rendering ``verify`` reads (a report folder is untrusted input)
MAX_REPORT_BYTES = 64 << 20
MAX_ARTIFACT_BYTES = 256 << 20
_CHUNK = 1 << 20


class NotRegular(OSError):
    """A path that ``verify`` refuses to read: not a regular file, outside the folder, or too large."""


def _open_regular(path: Path, limit: int, folder: Path | None = None) -> int:
    """A read-only descriptor of ``path`` when it is a regular file of at most ``limit`` bytes (and,
    with ``folder``, really inside it); else :class:`NotRegular`. The open never follows a final
    symlink and never blocks (a FIFO named ``report.html`` cannot hang ``verify``); the checks run
    on the opened descriptor, so the file cannot be swapped between check and read."""
    if folder is not None and not os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep):
        raise NotRegular(f"not inside the report folder (it resolves to {os.path.realpath(path)})")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise NotRegular("a symbolic link, not a regular file") from None
        raise exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegular("not a regular file (a FIFO, device or directory)")
    if st.st_size > limit:
        os.close(fd)
        raise NotRegular(f"{st.st_size} bytes, more than the {limit >> 20} MiB a report file may have")
    return fd


def read_regular(path: Path, limit: int, folder: Path | None = None) -> bytes:
    """The bytes of ``path`` through :func:`_open_regular` (at most ``limit``; with ``folder``,
    really inside it): :class:`NotRegular` for a link, a FIFO, a file outside ``folder`` or a
    larger one."""
    with os.fdopen(_open_regular(path, limit, folder), "rb") as fh:
        blob = fh.read(limit + 1)
    if len(blob) > limit:  # it grew while read
        raise NotRegular(f"more than the {limit >> 20} MiB a report file may have")
    return blob


def _sha256_regular(path: Path, limit: int, folder: Path) -> str:
    """SHA-256 (hex) of ``path``, streamed in 1 MiB blocks, through :func:`_open_regular`."""
    h, seen = hashlib.sha256(), 0
    with os.fdopen(_open_regular(path, limit, folder), "rb") as fh:
        while block := fh.read(_CHUNK):
            seen += len(block)
            if seen > limit:
                raise NotRegular(f"more than the {limit >> 20} MiB a report file may have")
            h.update(block)
    return h.hexdigest()


def _check_artifacts(data: dict, folder: Path, content: str) -> tuple[dict[str, str], list[str]]:
    """Re-hash every file of ``manifest.artifacts`` (relative to ``folder``); flag renderings
    present but not listed, and a ``rendered_from`` that is not the content digest."""
    manifest = data.get("manifest") if isinstance(data.get("manifest"), dict) else {}
    table = manifest.get("artifacts")
    files = table.get("files") if isinstance(table, dict) else None
    status: dict[str, str] = {}
    problems: list[str] = []
    if isinstance(table, dict) and table.get("rendered_from") != content:
        problems.append(f"artifacts: the renderings were made from content digest "
                        f"{str(table.get('rendered_from'))[:16]}… but this report's content hashes to {content[:16]}…")
    for name, entry in (files or {}).items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)) or "\x00" in name \
                or ".." in Path(name).parts or Path(name).is_absolute():
            status[name] = "changed"
            problems.append(f"artifact {name}: malformed entry in the artifact table")
            continue
        path = folder / name
        try:
            sha = _sha256_regular(path, MAX_ARTIFACT_BYTES, folder)
        except NotRegular as exc:
            status[name] = "changed"
            problems.append(f"artifact {name}: refused, {exc}")
            continue
        except OSError as exc:
            status[name] = "missing"
            problems.append(f"artifact {name}: missing ({exc.strerror or exc})")
            continue
        if hmac.compare_digest(sha.encode(), entry["sha256"].encode("utf-8", "replace")):
            status[name] = "ok"
        else:
            status[name] = "changed"
            problems.append(f"artifact {name}: changed after the report was written (SHA-256 "
                            f"{sha[:16]}…, recorded {entry['sha256'][:16]}…)")
    for name in RENDERINGS:
        if name not in status and (folder / name).exists():
            status[name] = "unlisted"
            problems.append(f"artifact {name}: present but not covered by the report's artifact table "
                            f"(not written with it, or the table was removed)")
    return status, problems


@dataclass(frozen=True)
class Finding:
    """What a ``rederive`` check (:func:`verify_report`) says of one claim whose verdict it did
    not confirm: a contradiction (``fails``: the stored verdict is not the one its evidence gives,
    or the evidence cannot decide one) or a note (its verdict could not be re-derived)."""

    fails: bool
    text: str


#: ``rederive(claim)``: the claim's JSON object -> None when its stored verdict is the one its
#: evidence gives (or it needs none), else a :class:`Finding`
Rederive = Callable[[Mapping[str, Any]], "Finding | None"]


def covered(data: Mapping[str, Any]) -> list[str]:
    """What the digest and signature of report ``data`` bind, one phrase each: the claims and
    their evidence, the plan (its text, or only its hash in reports before schema 1.4), the
    plugins' sources, the dependencies' versions, the fedaudit code's provenance, the renderings."""
    manifest = data.get("manifest") if isinstance(data.get("manifest"), Mapping) else {}
    claims = data.get("claims") if isinstance(data.get("claims"), list) else []
    out = [f"{len(claims)} claim(s) with their verdicts and evidence"]
    sha = manifest.get("plan_sha256")
    if isinstance(manifest.get("plan_text"), str):
        out.append(f"the plan's full text (SHA-256 {str(sha)[:16]}…)")
    else:
        out.append(f"the plan's SHA-256 only ({str(sha)[:16]}…; its text is not embedded)" if sha
                   else "no plan (none recorded)")
    if isinstance(data.get("deployment"), Mapping):  # schema 1.5
        out.append("the deployment facts (privacy unit, trust model, accounting, implementation)")
    plugins = manifest.get("plugins")
    if isinstance(plugins, Mapping):
        out.append(f"{len(plugins)} plugin source(s)")
    if isinstance(manifest.get("dependencies"), Mapping):
        out.append("the versions of the dependencies that compute numbers")
    if isinstance(manifest.get("provenance"), Mapping):
        out.append("the fedaudit provenance (the sources of the modules that ran)")
    elif manifest.get("git_commit"):
        out.append("the fedaudit git commit only (no provenance of the code that ran)")
    table = manifest.get("artifacts")
    files = table.get("files") if isinstance(table, Mapping) else None
    if isinstance(files, Mapping) and files:
        out.append("the renderings " + ", ".join(map(str, files)))
    return out


def _check_content(data: Mapping[str, Any], plan: bytes | None, rederive: Rederive | None,
                   problems: list[str], notes: list[str]) -> int | None:
    """The checks of a schema-valid report's content: the embedded plan text against
    ``plan_sha256``, ``plan`` (the bytes of the plan given) against both, stale bytecode in the
    provenance, and every claim's verdict through ``rederive``. Problems and notes are appended;
    returns how many verdicts ``rederive`` confirmed (None without it)."""
    manifest = data["manifest"]
    sha = manifest.get("plan_sha256")
    text = manifest.get("plan_text")
    if isinstance(text, str):
        text_sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        if text_sha != sha:
            problems.append(f"plan: the embedded plan text hashes to {text_sha[:16]}… but plan_sha256 is "
                            f"{str(sha)[:16]}…")
    if plan is not None:
        given = hashlib.sha256(plan).hexdigest()
        if sha is None:
            problems.append(f"plan: the report records no plan hash, so it cannot be matched to the plan given "
                            f"(SHA-256 {given[:16]}…)")
        elif not hmac.compare_digest(given, str(sha)):
            problems.append(f"plan: the report was made from the plan with SHA-256 {str(sha)[:16]}…, not from the "
                            f"plan given (SHA-256 {given[:16]}…)")
    prov = manifest.get("provenance")
    stale = prov.get("stale_bytecode") if isinstance(prov, Mapping) else None
    if stale:
        problems.append("provenance: the run executed bytecode that is not compiled from its source (a stale or "
                        "planted .pyc) in " + ", ".join(map(str, stale)))
    if rederive is None:
        return None
    confirmed = 0
    for claim in data["claims"]:
        try:
            finding = rederive(claim)
        except Exception as exc:  # a registered kind's decide() that fails in an unforeseen way
            finding = Finding(True, f"claim {claim.get('id')!r}: re-deriving its verdict failed: "
                                    f"{type(exc).__name__}: {exc}")
        if finding is None:
            confirmed += 1
        elif finding.fails:
            problems.append(f"verdict: {finding.text}")
        else:
            notes.append(finding.text)
    return confirmed


def verify_report(path: str | os.PathLike, *, key: bytes | None = None, plan: bytes | None = None,
                  rederive: Rederive | None = None) -> VerifyResult:
    """:func:`verify_and_load` without the data: the :class:`VerifyResult` of the report at ``path``."""
    return verify_and_load(path, key=key, plan=plan, rederive=rederive)[0]


def verify_and_load(path: str | os.PathLike, *, key: bytes | None = None, plan: bytes | None = None,
                    rederive: Rederive | None = None) -> tuple[VerifyResult, dict[str, Any] | None]:
    """Check a written ``report.json`` (or a directory holding one): schema, digest, the SHA-256
    of every rendering in its artifact table and, when a key is given (``key``, else
    ``FEDAUDIT_REPORT_KEY``), the HMAC signature; then its content: overall and counts against the
    claims (each on its own), the embedded plan text against ``plan_sha256``, the bytes of the
    plan file ``plan`` (when given) against both, and the provenance (no stale bytecode).
    ``rederive`` (:data:`Rederive`), when given, re-derives every claim's verdict from its
    recorded evidence (:func:`fedaudit.experiments.rederive.rederive_claim`: this package cannot
    import the claim kinds); a contradiction fails the report. An unreadable or missing file
    raises :class:`FedAuditError`; a file that is not strict JSON (NaN/Infinity tokens, a
    duplicated key) is reported as not intact. Nothing is imported or executed from the report's
    folder.

    Returns the result and the report's JSON data as it was read and checked (one read of the
    file: the data is the bytes that were verified, not a second read that could differ), or None
    when the file is not JSON. Commands that use a report's content (``fedaudit diff``) load it
    here, and use the data only when the result says it is intact."""
    path = Path(path)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise FedAuditError(f"{path} is not a report folder: it holds no report.json")
        path = path / "report.json"
    try:
        raw = read_regular(path, MAX_REPORT_BYTES)
    except NotRegular as exc:
        raise FedAuditError(f"refusing to read report {path}: {exc}") from None
    except OSError as exc:
        raise FedAuditError(f"cannot read report {path}: {exc.strerror or exc}") from None
    key = signing_key() if key is None else key
    try:
        data = fjson.loads(raw, what="report.json")
    except FedAuditError as exc:
        return VerifyResult(False, False, False, "invalid" if key else UNCHECKED, [str(exc)]), None
    if not isinstance(data, dict) or not {"schema_version", "manifest", "claims"} & set(data):
        raise FedAuditError(f"{path} is not a fedaudit report (no schema_version, manifest or claims)")

    problems = schema_errors(data)
    notes: list[str] = []
    rederived = None
    schema_ok = not problems
    if schema_ok:  # semantic checks the schema cannot express
        try:
            report = Report.from_dict(data)
        except FedAuditError as exc:
            problems.append(f"model: {exc}")
        else:
            if data["overall"] != report.overall:
                problems.append(f"model: stored overall {data['overall']} does not follow from the claims' verdicts "
                                f"({report.overall})")
            if data["counts"] != report.counts:
                problems.append(f"model: stored counts {data['counts']} do not follow from the claims' verdicts "
                                f"({report.counts})")
        schema_ok = not problems
    content_problems: list[str] = []
    if schema_ok:
        rederived = _check_content(data, plan, rederive, content_problems, notes)
    elif plan is not None:
        content_problems.append("plan: the report is malformed, so it cannot be matched to the plan given")
    problems += content_problems

    is_obj = isinstance(data, dict)
    stored = data.get("digest") if is_obj else None
    canonical = canonical_json_bytes(data) if is_obj else b""
    if not isinstance(stored, str):
        digest_ok = False
        problems.append("digest: the report carries no digest")
    else:
        computed = digest(canonical)
        digest_ok = hmac.compare_digest(stored.encode("utf-8", "replace"), computed.encode())  # bytes: any str
        if not digest_ok:
            problems.append(f"digest: stored {stored[:16]}… but the content hashes to {computed[:16]}…; "
                            f"the report was modified after it was written")

    content = digest(canonical_json_bytes(data, without_artifacts=True)) if is_obj else None
    artifacts, artifact_problems = _check_artifacts(data, path.parent, content) if is_obj else ({}, [])
    problems += artifact_problems

    sig = data.get("signature") if is_obj else None
    if sig is None:
        status = "absent"
        sig_ok = key is None
        if key is not None:
            problems.append("signature: the report is unsigned but a key was given")
    elif key is None:
        status, sig_ok = UNCHECKED, False
        problems.append(f"signature: signed, signature not checked (set {KEY_ENV} or pass --key-file)")
    else:
        sig_ok = isinstance(sig, str) and hmac.compare_digest(sig.encode("utf-8", "replace"),
                                                              sign(canonical, key).encode())
        status = "valid" if sig_ok else "invalid"
        if not sig_ok:
            problems.append("signature: HMAC-SHA256 does not match under the key given "
                            "(wrong key, or the report was modified)")
    ok = schema_ok and digest_ok and sig_ok and not artifact_problems and not content_problems
    manifest = data.get("manifest") if isinstance(data.get("manifest"), dict) else {}
    plan_sha = manifest.get("plan_sha256")
    return VerifyResult(ok=ok, schema_ok=schema_ok, digest_ok=digest_ok, signature=status, problems=problems,
                        artifacts=artifacts, content_digest=content,
                        unlisted=_unlisted(path.parent, {path.name, *artifacts}),
                        plan_sha256=plan_sha if isinstance(plan_sha, str) else None, covers=covered(data),
                        rederived=rederived, notes=notes), data


#: checkpoint directory a run keeps inside its report directory (:mod:`fedaudit.experiments.runner`)
CHECKPOINT_DIR = ".checkpoint"
#: intermediate files of running claims (stress grids) inside a report directory
WORK_DIR = ".work"
#: at most this many names of files the report does not cover are listed
_MAX_UNLISTED = 20


def _unlisted(folder: Path, covered: set[str]) -> list[str]:
    """Names in ``folder`` (top level, by name only: nothing is opened) that the report does not
    cover: not report.json, not in its artifact table, not the run's checkpoint and work folders. Listed so
    a reviewer sees what else the folder holds (a planted ``jsonschema.py``); they do not make the
    report fail, and ``verify`` never reads or runs them. At most 20 names, then a count."""
    try:
        names = sorted(e.name for e in os.scandir(folder)
                       if e.name not in covered and e.name not in (CHECKPOINT_DIR, WORK_DIR))
    except OSError:
        return []
    more = len(names) - _MAX_UNLISTED
    return names[:_MAX_UNLISTED] + ([f"… and {more} more"] if more > 0 else [])

