"""Markdown rendering of a :class:`~fedaudit.reports.model.Report`, for pull requests and tickets.

GitHub-flavoured: the overall verdict and per-guarantee lines, a verdict summary table (with each
claim's caveats next to its verdict), then per claim its verdict, caveats, the claim in plain
language (claimed, tested, what it means and does not show, next step), expectation, summary and
the evidence as tables grouped like the HTML's (result, configuration, and diagnostics folded in a
``<details>`` element; human names with the report.json key, every value complete: long arrays and
lists of records in ``<details>``). Figures are not embedded; each claim names its figures, which
are in ``report.html``.

Everything that comes from a plan or a run (report and claim titles, ids, summaries, error
strings, evidence keys and values, figure descriptions, manifest values such as the command
line) is user-controlled. Markdown renderers pass raw HTML through, so such text is escaped:
``&``, ``<`` and ``>`` become entities (``<script>`` shows as text and never runs), and the
Markdown punctuation that could open a link, an image, emphasis or code (backslash, backtick,
``*``, ``_``, ``[``, ``]``, ``|``) is backslash-escaped. Inline code spans use a fence longer
than any backtick run inside.
"""

from __future__ import annotations

import math
import re

from fedaudit.reports.explain import GROUP_TITLES, Row, evidence_groups, summarize_rows
from fedaudit.reports.model import Claim, Report, format_value
from fedaudit.reports.plots import describe

__all__ = ["render_markdown", "markdown_cell"]

#: the icon of each verdict tone (:data:`fedaudit.reports.model.TONES`)
_ICON = {"pass": "✅", "violation": "🚨", "fail": "❌", "inconclusive": "⚠️"}


_MD_PUNCT = re.compile(r"([\\`*_\[\]|])")


def _text(text: object) -> str:
    """User-controlled text as inert Markdown: HTML-escaped (``& < >``) and with the
    punctuation that opens links, images, emphasis, code or table cells backslash-escaped."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_PUNCT.sub(r"\\\1", s)


def _cell(text: object) -> str:
    """User-controlled text safe inside a Markdown table cell (one line)."""
    return _text(str(text).replace("\r", " ").replace("\n", " "))


def _inline(text: object, *, in_table: bool = False) -> str:
    """Text as an inline code span (rendered literally, HTML included), with a fence longer
    than any run of backticks inside so it cannot be closed early. In a table cell a pipe
    would end the cell even inside code, so there it is escaped (GFM renders ``\\|`` as ``|``)."""
    s = str(text).replace("\r", " ").replace("\n", " ")
    if in_table:
        s = s.replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest or s.startswith(" ") or s.endswith(" ") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _verdict(label: str, tone: str) -> str:
    """A verdict as Markdown: the tone's icon and the label (:attr:`Claim.label`) in bold."""
    return f"{_ICON[tone]} **{label}**"


def _runtime(seconds: float) -> str:
    return format_value(seconds) if not math.isfinite(seconds) else f"{seconds:.3g} s"


def _explanation(claim: Claim) -> list[str]:
    """The claim in plain language (:meth:`Claim.plain`) as a bullet list."""
    x = claim.plain()
    lines = ["**In plain language**", "", f"- **Claimed:** {_cell(x.claimed)}", f"- **Tested:** {_cell(x.tested)}",
             f"- **What it means:** {_cell(x.means)}"]
    for title, items in (("Does not show", x.does_not_show), ("Next step", x.next_steps)):
        if items:
            lines.append(f"- **{title}:**")
            lines += [f"  - {_cell(t)}" for t in items]
    return lines + [""]


def _value(row: Row) -> str:
    text = row.text + (f" {row.unit}" if row.unit and row.numeric else "")
    if row.full is not None or row.records is not None:
        text += " (in full below)"
    return _cell(text)


def _evidence_table(rows: list[Row]) -> list[str]:
    """One group's rows as a table, then each summarised array and list of records in full."""
    lines = ["| quantity | value |", "|---|---:|"]
    extra: list[str] = []
    for row in rows:
        label = ("↳ " * row.depth) + _cell(row.label)
        lines.append(f"| {label} {_inline(row.key, in_table=True)} | {_value(row)} |")
        if row.full is not None:  # numbers and brackets only: safe in a code block
            extra += ["", f"<details><summary>{_cell(row.label)}: all values</summary>", "", "```", row.full, "```",
                      "", "</details>"]
        if row.records is not None:
            rec = row.records
            extra += ["", f"<details><summary>{_cell(row.label)}: {len(rec.rows)} row(s)</summary>", "",
                      "| " + " | ".join(_cell(c) for c in rec.columns) + " |", "|" + "---:|" * len(rec.columns)]
            extra += ["| " + " | ".join(_cell(v) for v in r) + " |" for r in rec.rows]
            extra += ["", "</details>"]
    return lines + extra + [""]


def _evidence(claim: Claim, max_rows: int) -> list[str]:
    """The evidence grouped as in the HTML: result and configuration as tables (configuration
    folded when both together exceed ``max_rows`` rows), diagnostics folded; nothing cut."""
    groups = evidence_groups(claim.evidence, claim.explanation.fields if claim.explanation is not None else None)
    lines: list[str] = []
    shown = 0
    for group, rows in groups:
        shown += len(rows) if group != "diagnostics" else 0
        fold = group == "diagnostics" or (group == "configuration" and shown > max_rows)
        if fold:
            title = f"{GROUP_TITLES[group]}: {summarize_rows(rows)} ({len(rows)} row(s))"
            lines += [f"<details><summary>Evidence — {_cell(title)}</summary>", ""]
        else:
            lines += [f"**Evidence — {GROUP_TITLES[group]}**", ""]
        lines += _evidence_table(rows)
        if fold:
            lines += ["</details>", ""]
    return lines


def _claim(claim: Claim, index: int, max_rows: int) -> list[str]:
    lines = [f"### {index}. {_cell(claim.title)} — {_verdict(claim.label, claim.tone)}", ""]
    lines += [f"> ⚠️ **Caveat:** {_cell(c)}" for c in claim.caveats] + ([""] if claim.caveats else [])
    lines += _explanation(claim)
    seed = "—" if claim.seed is None else str(claim.seed)
    lines.append(f"id {_inline(claim.id)} · kind **{_text(claim.kind)}** · expectation **{_text(claim.expect)}** · "
                 f"seed {seed} · runtime {_runtime(claim.runtime_s)}")
    lines.append("")
    if claim.self_tests:
        mark = "❌ **auditor self-test failed** — " if claim.failed_self_tests else ""
        lines += [f"{mark}{_text(claim.self_test_line())}", ""]
    if claim.summary:
        lines += [_text(claim.summary), ""]
    if claim.error:
        lines += [f"> **Error:** {_text(claim.error)}".replace("\n", "\n> "), ""]
    lines += _evidence(claim, max_rows)
    if claim.plots:
        names = "; ".join(_cell(describe(p).rstrip(".")) for p in claim.plots)
        lines += [f"_Figures ({len(claim.plots)}) in report.html: {names}._", ""]
    return lines


# ------------------------------------------------------------------------------ deployment (issue #26 §1)
def _deployment(report: Report) -> list[str]:
    """The "Deployment" section at the top (:mod:`fedaudit.reports.deployment`): the plan's facts in
    plain names, one row per privacy claim, and the NIST SP 800-226 hazards the plan did not
    address. Nothing for a report without deployment facts (before schema 1.5)."""
    from fedaudit.reports.deployment import CLAIM_COLUMNS, claim_rows, fact_rows, hazards

    if report.deployment is None:
        return []
    lines = ["## Deployment", "", "| fact | value |", "|---|---|"]
    lines += [f"| {_cell(name)} | {_cell(value)} |" for name, value in fact_rows(report.deployment)]
    rows = claim_rows(report.deployment)
    if rows:
        lines += ["", "| " + " | ".join(CLAIM_COLUMNS) + " |", "|" + "---|" * len(CLAIM_COLUMNS)]
        lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    found = hazards(report.deployment)
    if found:
        lines += ["", f"**Privacy hazards not addressed ({len(found)}):**", ""]
        lines += [f"- {_cell(h.text)}" + (f" (claims: {_cell(', '.join(h.claims))})" if h.claims else "")
                  for h in found]
    return lines + [""]


def render_markdown(report: Report, *, max_rows: int = 40) -> str:
    """The report as GitHub-flavoured Markdown (no images; figures are referenced). Pass
    :meth:`Report.rendering_view` (as ``write_report`` does) for the file whose hash is recorded:
    the digest shown is then the content digest, and the signature is only said to be present."""
    m = report.manifest
    lines = [f"# {_cell(report.title)}", "",
             f"**Overall:** {_verdict(report.overall_label, report.overall_tone)} — {_cell(report.counts_line())}",
             ""]
    if report.claims:
        lines += [f"- {_ICON[tone]} {_cell(text)}" for tone, text in report.guarantee_lines()] + [""]
    lines += _deployment(report)  # deployment facts first (issue #26 §1)
    lines += ["| # | claim | kind | expectation | verdict | runtime |", "|---:|---|---|---|---|---:|"]
    for i, claim in enumerate(report.claims, 1):
        lines.append(f"| {i} | {_cell(claim.title)} ({_inline(claim.id, in_table=True)}) | {_cell(claim.kind)} | {_cell(claim.expect)} | "
                     f"{_verdict(claim.label, claim.tone)}"
                     + "".join(f"<br>⚠️ caveat: {_cell(v)}" for v in claim.caveats) + f" | {_runtime(claim.runtime_s)} |")
    if not report.claims:
        lines.append("| — | no claims | | | | |")
    lines += ["", "## Claims", ""]
    for i, claim in enumerate(report.claims, 1):
        lines += _claim(claim, i, max_rows)
    lines += ["## Manifest", "", "| field | value |", "|---|---|"]
    for key, value in m.rendered_fields():
        lines.append(f"| {_cell(key)} | {_cell('—' if value is None else value)} |")
    lines += [f"| schema_version | {_cell(report.schema_version)} |",
              f"| content digest (SHA-256) | {_inline(report.digest or 'not sealed', in_table=True)} |",
              f"| signature | {'signed (HMAC-SHA256)' if report.signature else 'unsigned'} |",
              "", "The content digest is SHA-256 of report.json's canonical form with `manifest.artifacts` null; "
              "report.json's own digest and signature also cover this file's SHA-256. "
              "Verify with `fedaudit verify DIR`.", ""]
    return "\n".join(lines)


#: the escaping of user-controlled text in a table cell, for the other Markdown renderings (``fedaudit diff``)
markdown_cell = _cell
