"""Output files: checked before any work starts (:func:`check_output_file`), then written as
strict JSON or drawn as plots, each announced with one line on stdout.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.reports.terminal import escape
from fedaudit.cli.progress import out


def check_output_file(flag: str, path: str | None, *, plot: bool = False) -> None:
    """Refuse an output file that cannot be written — before any work, as a FedAuditError (exit 2).

    The file is opened for appending (an existing file is left unchanged; a new one is removed
    again), so a missing or non-directory parent, a directory, a read-only location and paths
    such as /proc/x.json are caught. With ``plot`` the extension must be an image format
    matplotlib writes (no extension: PNG, as matplotlib does).
    """
    if path is None:
        return
    p = Path(path)
    if plot:
        from fedaudit.reports.figures import image_formats

        formats = image_formats()
        ext = p.suffix[1:].lower()
        if ext and ext not in formats:
            raise FedAuditError(f"{flag} {path}: unknown image format {ext!r}; use one of {', '.join(sorted(formats))}")
        if not ext:
            p = p.with_name(p.name + ".png")
    if p.is_dir():
        raise FedAuditError(f"{flag} {path} is a directory; give a file name")
    parent = p.parent
    if not parent.exists():
        raise FedAuditError(f"{flag} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise FedAuditError(f"{flag} {path}: {parent} is not a directory")
    existed = p.exists()
    try:
        with open(p, "a"):
            pass
    except OSError as exc:
        raise FedAuditError(f"{flag} {path} cannot be written: {exc.strerror or exc}") from None
    if not existed:
        with contextlib.suppress(OSError):
            p.unlink()


def write_json(path: str | None, result) -> None:
    """Write ``result.to_dict()`` to ``path`` (when given) as strict JSON (:mod:`fedaudit.json`:
    non-finite numbers as "inf"/"-inf"/"nan") and say where."""
    if path:
        from fedaudit import json as fjson

        fjson.write(path, result.to_dict())
        out.print(f"json: {escape(path)}")


def save_plot(path: str | None, spec: dict) -> None:
    """Draw a plot specification (:mod:`fedaudit.reports.plots`) into ``path`` and say where."""
    if path:
        from fedaudit.reports.figures import save_figure
        from fedaudit.reports.plots import render_figure

        out.print(f"plot: {escape(str(save_figure(render_figure(spec), path)))}")


def write_data(path: str | None, data: dict) -> None:
    """Write ``data`` (already a to_dict() view) to ``path`` as strict JSON and say where."""
    if path:
        from fedaudit import json as fjson

        fjson.write(path, fjson.jsonable(data))
        out.print(f"json: {escape(path)}")
