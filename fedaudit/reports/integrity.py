"""Report integrity: JSON Schema validation, SHA-256 digest, optional HMAC-SHA256 signature.

* **digest** — SHA-256 (hex) of the canonical JSON (:func:`~fedaudit.reports.canonical.canonical_json_bytes`:
  the report object without ``digest``/``signature``, sorted keys, no whitespace, UTF-8). It detects
  accidental or casual edits; anyone can recompute it, so it proves nothing against a deliberate forger.
* **signature** — HMAC-SHA256 (hex) of the same bytes under a secret key (RFC 2104): the key in
  ``FEDAUDIT_REPORT_KEY`` when ``fedaudit run`` writes the report, or a key file given to
  ``fedaudit sign DIR --key-file F`` as a separate step after the run
  (:func:`fedaudit.reports.io.sign_report`, so that
  no plugin loaded by the run can read the key). Only a holder of the key can produce it, and every
  holder can: HMAC proves the report came from someone with the key, not which of them. When a key
  is given, :func:`verify_report` requires a valid signature (an unsigned report then fails: its
  signature could have been stripped). A signed report checked *without* the key is not verified
  either: the digest alone can be forged. An unsigned report checked without a key is *intact*
  (its files agree with each other) but not *authentic*: anyone could have written it
  (:attr:`VerifyResult.authenticated`).
* **artifact hashes** — ``manifest.artifacts`` holds the SHA-256 of every rendering written beside
  report.json (HTML with its embedded figures, Markdown), so digest and signature cover them too;
  the renderings show the *content digest* (the canonical JSON with that table null), which the
  table records as ``rendered_from`` — see :mod:`fedaudit.reports.io` for the order of sealing.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import stat
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.reports.canonical import canonical_json_bytes, digest, sign
from fedaudit.reports.model import Report

__all__ = ["KEY_ENV", "UNCHECKED", "RENDERINGS", "signing_key", "read_key_file", "load_schema", "schema_errors",
           "validate_report_dict", "VerifyResult", "verify_report"]

#: environment variable holding the HMAC key (its UTF-8 bytes are the key)
KEY_ENV = "FEDAUDIT_REPORT_KEY"


def signing_key() -> bytes | None:
    """The HMAC key from ``FEDAUDIT_REPORT_KEY`` as bytes, or None when unset or empty."""
    value = os.environ.get(KEY_ENV)
    return value.encode("utf-8") if value else None


#: a key file larger than this is not a key (64 KiB)
_MAX_KEY_BYTES = 1 << 16


def read_key_file(path: str | os.PathLike) -> bytes:
    """The HMAC key stored in the file ``path`` (``--key-file``): its bytes, less one trailing
    newline (``\\n`` or ``\\r\\n``, as ``echo`` or an editor leaves it). An unreadable, empty or
    larger than 64 KiB file is a :class:`FedAuditError`."""
    try:
        with open(path, "rb") as fh:
            key = fh.read(_MAX_KEY_BYTES + 1)
    except OSError as exc:
        raise FedAuditError(f"--key-file {path}: cannot read it ({exc.strerror or exc})") from None
    if len(key) > _MAX_KEY_BYTES:
        raise FedAuditError(f"--key-file {path}: larger than {_MAX_KEY_BYTES} bytes; a key file holds one key")
    key = key.removesuffix(b"\n").removesuffix(b"\r")
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


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_report`.

    ``signature`` is "valid", "invalid", "absent" or "unchecked (no key)". ``artifacts`` maps
    each rendering to "ok", "changed", "missing" or "unlisted" (present beside report.json but
    not in its artifact table). ``ok`` — the report is intact *and verified* — requires a valid
    schema and digest, every artifact "ok", and a valid signature, or no signature and no key.
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

    @property
    def artifacts_ok(self) -> bool:
        """True when every rendering matches its recorded hash (and none is unlisted)."""
        return all(v == "ok" for v in self.artifacts.values())

    @property
    def authenticated(self) -> bool:
        """True when the report is intact and its HMAC signature is valid under the key given: it
        was written (or signed) by a holder of that key. False for an unsigned report."""
        return self.ok and self.signature == "valid"

    def to_dict(self) -> dict[str, Any]:
        """The outcome as strict-JSON data (``artifacts_ok`` included)."""
        return fjson.jsonable({"ok": self.ok, "schema_ok": self.schema_ok, "digest_ok": self.digest_ok,
                               "signature": self.signature, "problems": list(self.problems),
                               "artifacts": dict(self.artifacts), "artifacts_ok": self.artifacts_ok,
                               "authenticated": self.authenticated,
                               "content_digest": self.content_digest, "unlisted": list(self.unlisted)})


#: the largest report.json and rendering ``verify`` reads (a report folder is untrusted input)
MAX_REPORT_BYTES = 64 << 20
MAX_ARTIFACT_BYTES = 256 << 20
_CHUNK = 1 << 20


class _NotRegular(OSError):
    """A path that ``verify`` refuses to read: not a regular file, outside the folder, or too large."""


def _open_regular(path: Path, limit: int, folder: Path | None = None) -> int:
    """A read-only descriptor of ``path`` when it is a regular file of at most ``limit`` bytes (and,
    with ``folder``, really inside it); else :class:`_NotRegular`. The open never follows a final
    symlink and never blocks (a FIFO named ``report.html`` cannot hang ``verify``); the checks run
    on the opened descriptor, so the file cannot be swapped between check and read."""
    if folder is not None and not os.path.realpath(path).startswith(os.path.realpath(folder) + os.sep):
        raise _NotRegular(f"not inside the report folder (it resolves to {os.path.realpath(path)})")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if os.path.islink(path):
            raise _NotRegular("a symbolic link, not a regular file") from None
        raise exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _NotRegular("not a regular file (a FIFO, device or directory)")
    if st.st_size > limit:
        os.close(fd)
        raise _NotRegular(f"{st.st_size} bytes, more than the {limit >> 20} MiB a report file may have")
    return fd


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` through :func:`_open_regular` (at most ``limit``)."""
    with os.fdopen(_open_regular(path, limit), "rb") as fh:
        blob = fh.read(limit + 1)
    if len(blob) > limit:  # it grew while read
        raise _NotRegular(f"more than the {limit >> 20} MiB a report file may have")
    return blob


def _sha256_regular(path: Path, limit: int, folder: Path) -> str:
    """SHA-256 (hex) of ``path``, streamed in 1 MiB blocks, through :func:`_open_regular`."""
    h, seen = hashlib.sha256(), 0
    with os.fdopen(_open_regular(path, limit, folder), "rb") as fh:
        while block := fh.read(_CHUNK):
            seen += len(block)
            if seen > limit:
                raise _NotRegular(f"more than the {limit >> 20} MiB a report file may have")
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
        except _NotRegular as exc:
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


def verify_report(path: str | os.PathLike, *, key: bytes | None = None) -> VerifyResult:
    """Check a written ``report.json`` (or a directory holding one): schema, digest, the SHA-256
    of every rendering in its artifact table and, when a key is given (``key``, else
    ``FEDAUDIT_REPORT_KEY``), the HMAC signature. An unreadable or missing file raises
    :class:`FedAuditError`; a file that is not strict JSON (NaN/Infinity tokens, a duplicated key)
    is reported as not intact. Nothing is imported or executed from the report's folder."""
    path = Path(path)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise FedAuditError(f"{path} is not a report folder: it holds no report.json")
        path = path / "report.json"
    try:
        raw = _read_regular(path, MAX_REPORT_BYTES)
    except _NotRegular as exc:
        raise FedAuditError(f"refusing to read report {path}: {exc}") from None
    except OSError as exc:
        raise FedAuditError(f"cannot read report {path}: {exc.strerror or exc}") from None
    key = signing_key() if key is None else key
    try:
        data = fjson.loads(raw, what="report.json")
    except FedAuditError as exc:
        return VerifyResult(False, False, False, "invalid" if key else UNCHECKED, [str(exc)])
    if not isinstance(data, dict) or not {"schema_version", "manifest", "claims"} & set(data):
        raise FedAuditError(f"{path} is not a fedaudit report (no schema_version, manifest or claims)")

    problems = schema_errors(data)
    schema_ok = not problems
    if schema_ok:  # semantic checks the schema cannot express
        try:
            report = Report.from_dict(data)
        except FedAuditError as exc:
            problems.append(f"model: {exc}")
        else:
            if data["overall"] != report.overall or data["counts"] != report.counts:
                problems.append(f"model: stored overall {data['overall']} / counts {data['counts']} do not follow "
                                f"from the claims ({report.overall} / {report.counts})")
        schema_ok = not problems

    is_obj = isinstance(data, dict)
    stored = data.get("digest") if is_obj else None
    canonical = canonical_json_bytes(data) if is_obj else b""
    if not isinstance(stored, str):
        digest_ok = False
        problems.append("digest: the report carries no digest")
    else:
        computed = digest(canonical)
        digest_ok = hmac.compare_digest(stored, computed)
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
        sig_ok = isinstance(sig, str) and hmac.compare_digest(sig, sign(canonical, key))
        status = "valid" if sig_ok else "invalid"
        if not sig_ok:
            problems.append("signature: HMAC-SHA256 does not match under the key given "
                            "(wrong key, or the report was modified)")
    ok = schema_ok and digest_ok and sig_ok and not artifact_problems
    return VerifyResult(ok=ok, schema_ok=schema_ok, digest_ok=digest_ok, signature=status, problems=problems,
                        artifacts=artifacts, content_digest=content,
                        unlisted=_unlisted(path.parent, {path.name, *artifacts}))


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

