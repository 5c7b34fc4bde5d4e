"""Renderings of a :class:`~fedaudit.reports.diff.ReportDiff`: plain text, Markdown, HTML, JSON.

Every rendering starts with the one-line summary (:meth:`ReportDiff.summary`), then one table of
what changed (:func:`diff_rows`: a row per verdict, number, parameter, added or removed claim,
plan table key and environment field that differs), the plan's unified diff, and the outcome
that decides the exit code. Markdown is compact, for a pull-request comment; HTML is one
self-contained file (inline CSS, no scripts, a Content-Security-Policy that loads nothing).

Everything a report holds is untrusted (claim ids, parameters, the plan text, library versions):
text passes through :func:`~fedaudit.reports.terminal.printable` (control characters such as ESC
shown as visible escapes), and then HTML's or Markdown's escaping
(:func:`~fedaudit.reports.markdown.markdown_cell`); the plan diff in Markdown sits in a code
fence longer than any backtick run inside it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from fedaudit import json as fjson
from fedaudit.reports.diff import FactChange, ReportDiff, fact_text, show
from fedaudit.reports.markdown import markdown_cell
from fedaudit.reports.terminal import printable

__all__ = ["DiffRow", "diff_rows", "render_diff", "DIFF_FORMATS"]

#: ``--format`` values
DIFF_FORMATS: tuple[str, ...] = ("text", "markdown", "html", "json")

#: the icon of each row status in Markdown
_ICON = {"worse": "🔺", "better": "✅", "within noise": "≈", "changed": "✏️", "not comparable": "❔",
         "added": "➕", "removed": "➖", "note": "ℹ️"}


@dataclass(frozen=True)
class DiffRow:
    """One line of the table: what changed in which claim (``claim`` is "(deployment)", "(plan)"
    or "(environment)" for rows outside the claims), its old and new value and the assessment;
    ``status`` is "worse", "better", "within noise", "changed", "not comparable", "added",
    "removed" or "note"."""

    claim: str
    what: str
    old: str
    new: str
    status: str
    note: str = ""


def diff_rows(diff: ReportDiff) -> list[DiffRow]:
    """The table every rendering shows: the plan's deployment facts and privacy hazards that
    changed (claim "(deployment)"); per compared claim its verdict change, the tracked numbers
    that moved, the parameters, self-tests and own deployment facts that differ; the added and
    removed claims; the plan's non-claim tables and the environment fields that differ."""
    rows = [_flagged_row("(deployment)", f) for f in diff.deployment]  # first, as a report shows its facts
    for c in diff.claims:
        if c.old_label != c.new_label:
            rows.append(DiffRow(c.id, "verdict", c.old_label, c.new_label, c.verdict_change or "changed"))
        for q in c.quantities:
            if q.assessment != "same":
                rows.append(DiffRow(c.id, q.tracked.label, q.value_text("old", interval=True), q.value_text("new", interval=True), q.assessment,
                                    q.basis + ("" if q.guarantee == c.guarantee or not q.guarantee
                                               else f"; speaks to {q.guarantee}")))
        rows += [DiffRow(c.id, f"parameter {ch.key}", show(ch.old), show(ch.new), "changed") for ch in c.config]
        rows += [_flagged_row(c.id, f) for f in c.flagged]
        rows += [DiffRow(c.id, "note", "", "", "note", n) for n in c.notes]
    rows += [DiffRow(r.id, f"claim ({r.kind})", "—", r.label, "added") for r in diff.added]
    rows += [DiffRow(r.id, f"claim ({r.kind})", r.label, "—", "removed",
                     "no longer audited" + (f" ({r.guarantee})" if r.guarantee else "")) for r in diff.removed]
    if diff.plan.changed:
        rows.append(DiffRow("(plan)", "plan SHA-256", (diff.plan.old_sha256 or "none")[:16],
                            (diff.plan.new_sha256 or "none")[:16], "changed"))
    rows += [DiffRow("(plan)", ch.key, show(ch.old), show(ch.new), "changed") for ch in diff.plan.tables]
    rows += [DiffRow("(environment)", ch.key, show(ch.old), show(ch.new), "changed") for ch in diff.environment]
    return rows


def _flagged_row(claim: str, change: FactChange) -> DiffRow:
    """The row of a deployment fact, hazard or self-test that changed: its assessment and why."""
    return DiffRow(claim, change.what, fact_text(change.old), fact_text(change.new), change.assessment, change.why)


def _assessment(row: DiffRow) -> str:
    return row.status + (f": {row.note}" if row.note else "")


def _thresholds(diff: ReportDiff) -> str:
    return (f"thresholds: --rel-tol {diff.tolerance.rel:g}, --abs-tol {diff.tolerance.abs:g} for numbers recorded as "
            f"points (recorded intervals are used where both reports have one); --fail-on {diff.fail_on}")


# ------------------------------------------------------------------------------ text
def render_text(diff: ReportDiff) -> str:
    """Plain text for a terminal or a CI log: summary, a fixed-width table, the plan diff, the outcome."""
    lines = [printable(diff.summary()), f"old: {printable(diff.old)}", f"new: {printable(diff.new)}", ""]
    rows = diff_rows(diff)
    if rows:
        table = [("claim", "what", "old", "new", "assessment")] + \
                [tuple(printable(x) for x in (r.claim, r.what, r.old, r.new, _assessment(r))) for r in rows]
        widths = [min(40, max(len(t[i]) for t in table)) for i in range(4)]
        for n, t in enumerate(table):
            lines.append("  ".join(t[i].ljust(widths[i]) for i in range(4)) + "  " + t[4])
            if n == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 10)
        lines.append("")
    if diff.plan.diff:
        lines.append("plan diff:")
        lines += ["  " + printable(line) for line in diff.plan.diff]
        if diff.plan.cut:
            lines.append(f"  … {diff.plan.cut} more line(s)")
        lines.append("")
    elif diff.plan.changed:
        lines += ["plan: the SHA-256 differs; a report embeds no plan text to show the difference", ""]
    lines += [_thresholds(diff), printable(diff.outcome())]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ Markdown
def _md(text: str) -> str:
    return markdown_cell(printable(text))


def render_markdown_diff(diff: ReportDiff) -> str:
    """GitHub-flavoured Markdown for a pull-request comment: a heading with the outcome, the
    summary, a compact table, the plan diff folded in ``<details>``."""
    failing = diff.exit_code() == 1
    head = "🔺 regression" if failing else ("no change" if diff.unchanged else "no regression")
    lines = [f"### fedaudit diff: {head}", "", f"**{_md(diff.summary())}**", "",
             f"{_md(diff.old)} → {_md(diff.new)}", ""]
    rows = diff_rows(diff)
    if rows:
        lines += ["| claim | what | old | new | assessment |", "|---|---|---|---|---|"]
        lines += [f"| {_md(r.claim)} | {_md(r.what)} | {_md(r.old)} | "
                  f"{_md(r.new)} | {_ICON.get(r.status, '')} {_md(_assessment(r))} |" for r in rows]
        lines.append("")
    if diff.plan.diff:
        body = [printable(line) for line in diff.plan.diff] + ([f"… {diff.plan.cut} more line(s)"]
                                                                if diff.plan.cut else [])
        longest = max((len(m) for line in body for m in re.findall(r"`+", line)), default=0)
        fence = "`" * max(3, longest + 1)
        lines += [f"<details><summary>plan diff ({len(diff.plan.diff)} line(s))</summary>", "",
                  f"{fence}diff", *body, fence, "", "</details>", ""]
    lines += [f"_{_md(_thresholds(diff))}_", "", f"**{_md(diff.outcome())}**", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------ HTML
_CSS = """
body { font: 14px/1.5 "DejaVu Sans", Arial, sans-serif; color: #1c2833; margin: 20px 28px; max-width: 1100px; }
h1 { font-size: 20px; margin: 0 0 8px; } p.summary { font-weight: 600; }
table { border-collapse: collapse; width: 100%; margin: 10px 0; }
th, td { border: 1px solid #d5d8dc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f4; } td.v { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; }
tr.worse td { background: #fdedec; } tr.better td { background: #eafaf1; } tr.removed td { background: #fef5e7; }
.outcome { font-weight: 700; } .outcome.fail { color: #c0392b; } .outcome.ok { color: #1e8449; }
pre { background: #f8f9fa; border: 1px solid #d5d8dc; padding: 8px; overflow-x: auto; font-size: 13px; }
.muted { color: #5d6d7e; font-size: 13px; }
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _h(text: str) -> str:
    return html.escape(printable(text), quote=True)


def render_html_diff(diff: ReportDiff) -> str:
    """One self-contained HTML page: the outcome, the summary, the table, the plan diff."""
    failing = diff.exit_code() == 1
    rows = "".join(f'<tr class="{_h(r.status)}"><td>{_h(r.claim)}</td><td>{_h(r.what)}</td><td class="v">'
                   f'{_h(r.old)}</td><td class="v">{_h(r.new)}</td><td>{_h(_assessment(r))}</td></tr>'
                   for r in diff_rows(diff))
    table = ('<table><thead><tr><th>claim</th><th>what</th><th>old</th><th>new</th><th>assessment</th></tr></thead>'
             f"<tbody>{rows}</tbody></table>") if rows else ""
    plan = ""
    if diff.plan.diff:
        more = f"\n… {diff.plan.cut} more line(s)" if diff.plan.cut else ""
        plan = f"<h2>plan diff</h2><pre>{_h(chr(10).join(diff.plan.diff) + more)}</pre>"
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>fedaudit diff</title><style>{_CSS}</style></head><body>"
            f"<h1>fedaudit diff</h1><p class=\"muted\">{_h(diff.old)} → {_h(diff.new)}</p>"
            f'<p class="summary">{_h(diff.summary())}</p>{table}{plan}'
            f'<p class="muted">{_h(_thresholds(diff))}</p>'
            f'<p class="outcome {"fail" if failing else "ok"}">{_h(diff.outcome())}</p></body></html>\n')


def render_diff(diff: ReportDiff, fmt: str) -> str:
    """``diff`` as ``fmt`` (:data:`DIFF_FORMATS`); json is strict JSON (:meth:`ReportDiff.to_dict`)."""
    if fmt == "json":
        return fjson.dumps(diff.to_dict(), indent=2) + "\n"
    return {"text": render_text, "markdown": render_markdown_diff, "html": render_html_diff}[fmt](diff)
