"""The canonical bytes of a report and what is computed over them: the SHA-256 digest and the
HMAC-SHA256 signature.

``canonical_json_bytes`` is the UTF-8 encoding of the report dictionary *without* its ``digest``
and ``signature`` keys, with sorted keys and no whitespace (floats in Python's shortest
round-trip form, non-finite numbers as the strings of :mod:`fedaudit.json`). Both the model
(:mod:`fedaudit.reports.model`, which seals) and :mod:`fedaudit.reports.integrity` (which
verifies) build on this module, so neither imports the other's internals.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Mapping

from fedaudit import json as fjson

__all__ = ["canonical_bytes", "canonical_json_bytes", "digest", "sign"]


def canonical_bytes(data: Any) -> bytes:
    """The canonical form of any JSON data: sorted keys, no whitespace, non-ASCII kept, UTF-8
    encoded (strict JSON of :mod:`fedaudit.json`). A report's form drops its seal first
    (:func:`canonical_json_bytes`); an Ed25519 signature statement is signed in this form whole
    (:mod:`fedaudit.reports.signatures`)."""
    return fjson.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")


def canonical_json_bytes(data: Mapping[str, Any], *, without_artifacts: bool = False) -> bytes:
    """The canonical form of a report dictionary: top-level ``digest`` and ``signature`` removed,
    sorted keys, no whitespace, non-ASCII kept, UTF-8 encoded. With ``without_artifacts`` the
    manifest's ``artifacts`` is set to null first: the bytes of the *content digest*, which the
    renderings show (see :mod:`fedaudit.reports.model`)."""
    body = {k: v for k, v in data.items() if k not in ("digest", "signature")}
    if without_artifacts and isinstance(body.get("manifest"), Mapping):
        body["manifest"] = {**body["manifest"], "artifacts": None}
    return canonical_bytes(body)


def digest(canonical: bytes) -> str:
    """SHA-256 hex digest of canonical report bytes."""
    return hashlib.sha256(canonical).hexdigest()


def sign(canonical: bytes, key: bytes) -> str:
    """HMAC-SHA256 hex of canonical report bytes under ``key`` (RFC 2104)."""
    return hmac.new(key, canonical, hashlib.sha256).hexdigest()
