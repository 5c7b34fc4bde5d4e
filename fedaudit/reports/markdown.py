"""Markdown rendering of a :class:`~fedaudit.reports.model.Report`, for pull requests and tickets.

GitHub-flavoured: the overall verdict and per-guarantee lines, a verdict summary table (with each
claim's caveats next to its verdict), then per claim its verdict, caveats, expectation, summary and
evidence as bullets (nested fields as dotted keys, long lists shortened). Figures are not embedded;
each claim names its figures, which are in ``report.html``.

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

from fedaudit.reports.model import Claim, Report, flatten_evidence, format_value
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


def _claim(claim: Claim, index: int, max_rows: int) -> list[str]:
    lines = [f"### {index}. {_cell(claim.title)} — {_verdict(claim.label, claim.tone)}", ""]
    lines += [f"> ⚠️ **Caveat:** {_cell(c)}" for c in claim.caveats] + ([""] if claim.caveats else [])
    seed = "—" if claim.seed is None else str(claim.seed)
    lines.append(f"id {_inline(claim.id)} · kind **{_text(claim.kind)}** · expectation **{_text(claim.expect)}** · "
                 f"seed {seed} · runtime {_runtime(claim.runtime_s)}")
    lines.append("")
    if claim.summary:
        lines += [_text(claim.summary), ""]
    if claim.error:
        lines += [f"> **Error:** {_text(claim.error)}".replace("\n", "\n> "), ""]
    rows = flatten_evidence(claim.evidence, max_rows=max_rows)
    if rows:
        lines.append("<details><summary>Evidence</summary>" if len(rows) > 25 else "**Evidence**")
        lines.append("")
        lines += [f"- {_inline(k)}: {_cell(v)}" if k != "…" else f"- … {_cell(v)}" for k, v in rows]
        if len(rows) > 25:
            lines += ["", "</details>"]
        lines.append("")
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
