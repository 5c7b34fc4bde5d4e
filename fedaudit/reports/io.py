"""Writing and reading report directories.

``write_report`` renders every requested format in memory, records the SHA-256 of each
rendering in the manifest's artifact table, seals the report (digest, and an HMAC signature under the key given, else
``FEDAUDIT_REPORT_KEY`` when it is set — both cover the table), validates its JSON against
``schema.json`` and only then writes each file atomically: a temporary file in the same
directory, flushed and fsynced, then ``os.replace`` — readers see the old file or the new one,
never half of one. ``report.json`` is written last. An existing non-empty directory is refused
unless ``force``.

Order of sealing (the renderings show a digest, and the digest covers their hashes):

1. ``manifest.artifacts`` = null; the report is rendered from :meth:`Report.rendering_view`, so
   the renderings show the *content digest* (SHA-256 of the canonical JSON with the table null);
2. each rendering's bytes are hashed into ``manifest.artifacts`` =
   ``{"rendered_from": content digest, "files": {"report.html": {"sha256", "bytes"}, ...}}``;
3. the report is sealed again: ``digest`` and ``signature`` now cover the table.

:func:`~fedaudit.reports.integrity.verify_report` re-hashes every listed file. Figures are
embedded in ``report.html`` (PNG data URIs), so they are covered by its hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Iterable

from fedaudit.errors import FedAuditError
from fedaudit.locking import create_directory
from fedaudit import json as fjson
from fedaudit.reports.integrity import (SIGNATURE_FILE, Rederive, VerifyResult, signing_key, validate_report_dict,
                                        verify_report)
from fedaudit.reports.model import Report

__all__ = ["FORMATS", "FILENAMES", "prepare_out_dir", "write_report", "write_sealed_report", "read_report", "atomic_write",
           "sign_report"]

FORMATS = ("json", "html", "md")
FILENAMES = {"json": "report.json", "html": "report.html", "md": "report.md"}


def prepare_out_dir(out_dir: str | os.PathLike, *, force: bool = False) -> Path:
    """Check that ``out_dir`` may receive a report and create it. A path that is a file, or an
    existing non-empty directory without ``force``, is a :class:`FedAuditError`. Call it before a
    long run so the refusal comes first, then ``write_report(..., force=True)`` at the end."""
    out = Path(out_dir)
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FedAuditError(f"report directory {out} exists and is not empty; pass --force to overwrite")
    return create_directory(out, what="report directory", flag="report directory")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` via a temporary file in the same
    directory and a rename."""
    blob = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_report(report: Report, out_dir: str | os.PathLike, *, force: bool = False,
                 formats: Iterable[str] = FORMATS) -> dict[str, Path]:
    """:func:`write_sealed_report` returning only ``{format: path}`` of the files written."""
    return write_sealed_report(report, out_dir, force=force, formats=formats)[1]


def write_sealed_report(report: Report, out_dir: str | os.PathLike, *, force: bool = False,
                        formats: Iterable[str] = FORMATS, key: bytes | None = None) -> tuple[Report, dict[str, Path]]:
    """Seal, validate and write ``report`` into ``out_dir`` as report.json / report.html / report.md.

    Returns the sealed report as written (``report`` itself is frozen and stays unsealed) and
    ``{format: path}`` for the files written. With ``force`` an existing report directory
    is reused: the report files are replaced, stale report files of formats not written are removed,
    and so is a detached Ed25519 signature (``signature.ed25519.json``: it signed the report replaced,
    whose digest this one does not have); other files are left alone. ``report.manifest.artifacts`` is (re)computed here, and the
    report is sealed with it (see the module docstring), signed under ``key`` when one is given,
    else under ``FEDAUDIT_REPORT_KEY`` when that is set.
    """
    formats = tuple(dict.fromkeys(formats))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise FedAuditError(f"formats must be a non-empty subset of {', '.join(FORMATS)}, got {list(formats)}")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FedAuditError(f"report directory {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FedAuditError(f"report directory {out} exists and is not empty; pass --force to overwrite")

    key = signing_key() if key is None else key
    report = dataclasses.replace(report, manifest=dataclasses.replace(report.manifest, artifacts=None)).seal(key)
    validate_report_dict(report.to_dict())
    view = report.rendering_view()
    texts: dict[str, bytes] = {}  # report.json last: once it is there, the renderings beside it are current
    if "html" in formats:
        from fedaudit.reports.html import render_html

        texts["html"] = render_html(view).encode("utf-8")
    if "md" in formats:
        from fedaudit.reports.markdown import render_markdown

        texts["md"] = render_markdown(view).encode("utf-8")
    artifacts = {
        "rendered_from": view.digest,
        "files": {FILENAMES[fmt]: {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
                  for fmt, blob in texts.items()},
    }
    report = dataclasses.replace(report, manifest=dataclasses.replace(report.manifest, artifacts=artifacts)).seal(key)
    validate_report_dict(report.to_dict())
    if "json" in formats:
        texts["json"] = report.to_json().encode("utf-8")

    prepare_out_dir(out, force=True)
    written: dict[str, Path] = {}
    try:
        for fmt, text in texts.items():
            path = out / FILENAMES[fmt]
            atomic_write(path, text)
            written[fmt] = path
        for fmt in FORMATS:
            if fmt not in texts and (out / FILENAMES[fmt]).is_file():
                (out / FILENAMES[fmt]).unlink()  # a stale rendering of an older report
        if (out / SIGNATURE_FILE).is_file() and not (out / SIGNATURE_FILE).is_symlink():
            (out / SIGNATURE_FILE).unlink()  # the Ed25519 signature of the report just replaced
    except OSError as exc:
        raise FedAuditError(f"cannot write report into {out}: {exc.strerror or exc}") from None
    fsync_dir(out)
    return report, written


def read_report(path: str | os.PathLike) -> Report:
    """Load ``report.json`` (or the one inside a report directory) into a :class:`Report`.
    This does not check integrity; use :func:`~fedaudit.reports.integrity.verify_report`."""
    p = Path(path)
    if p.is_dir():
        p = p / FILENAMES["json"]
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FedAuditError(f"cannot read report {p}: {getattr(exc, 'strerror', None) or exc}") from None
    return Report.from_json(text)


def sign_report(path: str | os.PathLike, key: bytes, *, force: bool = False,
                rederive: Rederive | None = None) -> tuple[str, VerifyResult]:
    """Sign a written report in place with the HMAC key ``key`` (``fedaudit sign DIR --key-file F``).

    Signing is a separate step after the run so that the key never has to be in the environment
    of ``fedaudit run``, where every plugin the plan names runs. The report is verified first
    (schema, digest, every rendering's SHA-256, its content; with ``rederive`` every verdict
    re-derived from its evidence, as ``fedaudit sign`` does): a report that is not intact or not
    consistent is refused, so a signature never vouches for an edited file or a forged verdict. Its renderings are then written again (they say
    "signed") and the report is sealed under ``key`` (:func:`fedaudit.reports.io.write_sealed_report`);
    the content digest, and so every claim and number, is unchanged (checked). Returns
    ``("signed" | "already signed", VerifyResult of the signed report)``. A report signed under
    another key is refused unless ``force``, and so is one that carries a detached Ed25519
    signature (:data:`~fedaudit.reports.integrity.SIGNATURE_FILE`): sealing rewrites the
    renderings, so the digest that signature binds would change (with ``force`` it is removed; sign
    with the HMAC key first, then with Ed25519)."""
    folder = Path(path)
    folder = folder.parent if folder.name == "report.json" and not folder.is_dir() else folder
    before = verify_report(folder, key=key, rederive=rederive)
    if before.authenticated:
        return "already signed", before
    problems = [p for p in before.problems if not p.startswith("signature:")]
    if not (before.schema_ok and before.digest_ok and before.artifacts_ok) or problems:
        raise FedAuditError(f"refusing to sign {folder}: the report is not intact ("
                            + "; ".join(problems or before.problems) + ")")
    if before.signature == "invalid" and not force:
        raise FedAuditError(f"refusing to sign {folder}: it is signed under another key (or that signature was "
                            f"forged); pass --force to replace the signature")
    if (folder / SIGNATURE_FILE).exists() and not force:
        raise FedAuditError(f"refusing to sign {folder} with the HMAC key: it carries an Ed25519 signature "
                            f"({SIGNATURE_FILE}) of its current digest, which HMAC signing would change; sign with "
                            f"the HMAC key first and with Ed25519 after, or pass --force to drop the Ed25519 "
                            f"signature")
    data = fjson.loads((folder / "report.json").read_bytes(), what="report.json")
    files = (data["manifest"].get("artifacts") or {}).get("files") or {}
    formats = ["json"] + [fmt for fmt, name in FILENAMES.items() if fmt != "json" and name in files]
    write_sealed_report(Report.from_dict(data), folder, force=True, formats=formats, key=key)
    after = verify_report(folder, key=key, rederive=rederive)
    if not after.authenticated or after.content_digest != before.content_digest:
        raise FedAuditError(f"signing {folder} changed its content (digest {before.content_digest} -> "
                            f"{after.content_digest}); the report was left signed but should be regenerated")
    return "signed", after
