"""Reports: claims with verdicts and evidence, rendered as JSON, HTML and Markdown.

* :mod:`~fedaudit.reports.model` — :class:`Claim`, :class:`Manifest`, :class:`Report`
  (schema-versioned strict JSON, canonical form, digest, HMAC seal, content digest and the
  rendering view; provenance of the fedaudit checkout);
* :mod:`~fedaudit.reports.integrity` — schema validation, ``verify_report`` (digest, signature,
  the SHA-256 of every rendering, the content's consistency), the signing key from ``FEDAUDIT_REPORT_KEY``;
* :mod:`~fedaudit.reports.signatures` — Ed25519 key pairs, detached signatures of a report folder
  that prove who signed and bind the report digest, plan hash, code, seeds and environment;
* :mod:`~fedaudit.reports.provenance` — what code computed a report: the fedaudit modules imported
  (stale bytecode included), the plugins' sources, the dependencies' versions;
* :mod:`~fedaudit.reports.io` — ``write_report`` (renders, records artifact hashes, seals; atomic,
  refuses to overwrite without force);
* :mod:`~fedaudit.reports.diff`, :mod:`~fedaudit.reports.diff_render` — ``fedaudit diff``: two verified
  reports compared claim by claim (verdicts, tracked bounds beyond their noise, parameters, plans) and
  rendered as text, Markdown, HTML or JSON;
* :mod:`~fedaudit.reports.html`, :mod:`~fedaudit.reports.markdown`, :mod:`~fedaudit.reports.plots` — renderers.

It renders only: nothing in it runs an experiment.
"""

from fedaudit.reports.integrity import KEY_ENV, VerifyResult, load_schema, schema_errors, signing_key, verify_report
from fedaudit.reports.io import prepare_out_dir, read_report, sign_report, write_report, write_sealed_report
from fedaudit.reports.model import (
    EXPECTS,
    PLOT_TYPES,
    SCHEMA_VERSION,
    VERDICTS,
    Claim,
    Expect,
    Manifest,
    Report,
    Verdict,
    utc_now,
)

__all__ = [
    "Claim", "Manifest", "Report", "Verdict", "Expect", "VERDICTS", "EXPECTS", "PLOT_TYPES",
    "SCHEMA_VERSION", "utc_now", "write_report", "write_sealed_report", "sign_report", "read_report", "prepare_out_dir",
    "verify_report", "VerifyResult", "signing_key", "KEY_ENV", "load_schema", "schema_errors",
    "render_html", "render_markdown",
]


def render_html(report: Report) -> str:
    """See :func:`fedaudit.reports.html.render_html`."""
    from fedaudit.reports.html import render_html as _render

    return _render(report)


def render_markdown(report: Report, **kwargs) -> str:
    """See :func:`fedaudit.reports.markdown.render_markdown`."""
    from fedaudit.reports.markdown import render_markdown as _render

    return _render(report, **kwargs)
