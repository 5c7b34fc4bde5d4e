"""Report integrity: JSON Schema validation, SHA-256 digest, optional HMAC-SHA256 signature.

* **digest** — SHA-256 (hex) of the canonical JSON (:func:`~fedaudit.reports.model.canonical_json_bytes`:
  the report object without ``digest``/``signature``, sorted keys, no whitespace, UTF-8). It detects
  accidental or casual edits; anyone can recompute it, so it proves nothing against a deliberate forger.
* **signature** — HMAC-SHA256 (hex) of the same bytes under the secret in ``FEDAUDIT_REPORT_KEY``
  (RFC 2104). Only a holder of the key can produce it. When a key is set, :func:`verify_report`
  requires a valid signature (an unsigned report then fails: its signature could have been stripped).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fedaudit.errors import FedAuditError

__all__ = ["KEY_ENV", "signing_key", "digest", "sign", "load_schema", "schema_errors", "validate_report_dict",
           "VerifyResult", "verify_report"]

#: environment variable holding the HMAC key (its UTF-8 bytes are the key)
KEY_ENV = "FEDAUDIT_REPORT_KEY"


def signing_key() -> bytes | None:
    """The HMAC key from ``FEDAUDIT_REPORT_KEY`` as bytes, or None when unset or empty."""
    value = os.environ.get(KEY_ENV)
    return value.encode("utf-8") if value else None


def digest(canonical: bytes) -> str:
    """SHA-256 hex digest of canonical report bytes."""
    return hashlib.sha256(canonical).hexdigest()


def sign(canonical: bytes, key: bytes) -> str:
    """HMAC-SHA256 hex of canonical report bytes under ``key``."""
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()


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


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_report`. ``signature`` is "valid", "invalid", "absent" or
    "unchecked (no key)"; ``ok`` is schema_ok and digest_ok and the signature acceptable
    (valid, or not checkable because no key is set; absent is acceptable only without a key)."""

    ok: bool
    schema_ok: bool
    digest_ok: bool
    signature: str
    problems: list[str] = field(default_factory=list)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def verify_report(path: str | os.PathLike) -> VerifyResult:
    """Check a written ``report.json`` (or a directory holding one): schema, digest and, when
    ``FEDAUDIT_REPORT_KEY`` is set, the HMAC signature. An unreadable or missing file raises
    :class:`FedAuditError`; a file that is not valid JSON is reported as not intact."""
    from fedaudit.reports.model import Report, canonical_json_bytes

    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise FedAuditError(f"cannot read report {path}: {exc.strerror or exc}") from None
    key = signing_key()
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        return VerifyResult(False, False, False, "invalid" if key else "unchecked (no key)",
                            [f"not a valid JSON report: {exc}"])

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

    stored = data.get("digest") if isinstance(data, dict) else None
    canonical = canonical_json_bytes(data) if isinstance(data, dict) else b""
    if not isinstance(stored, str):
        digest_ok = False
        problems.append("digest: the report carries no digest")
    else:
        computed = digest(canonical)
        digest_ok = hmac.compare_digest(stored, computed)
        if not digest_ok:
            problems.append(f"digest: stored {stored[:16]}… but the content hashes to {computed[:16]}…; "
                            f"the report was modified after it was written")

    sig = data.get("signature") if isinstance(data, dict) else None
    if sig is None:
        status = "absent"
        sig_ok = key is None
        if key is not None:
            problems.append(f"signature: the report is unsigned but {KEY_ENV} is set")
    elif key is None:
        status, sig_ok = "unchecked (no key)", True
    else:
        sig_ok = isinstance(sig, str) and hmac.compare_digest(sig, sign(canonical, key))
        status = "valid" if sig_ok else "invalid"
        if not sig_ok:
            problems.append(f"signature: HMAC-SHA256 does not match under the key in {KEY_ENV} "
                            f"(wrong key, or the report was modified)")
    return VerifyResult(ok=schema_ok and digest_ok and sig_ok, schema_ok=schema_ok, digest_ok=digest_ok,
                        signature=status, problems=problems)
