"""Figures of results that are not report claims: the CLI's ``--plot`` files.

Drawn with matplotlib's object-oriented API (a :class:`~matplotlib.figure.Figure` on its own
Agg canvas; no pyplot state, no backend switch). The functions take result objects by their
attributes (a :class:`~fedaudit.audit.variance.VarianceCurve`, an
:class:`~fedaudit.audit.oracle.OracleFit`) and import nothing that computes them.

* :func:`variance_figure` — MSE against d/k on log–log axes, CI bars, fitted slopes and the
  vqSGD / PrivUnitG references;
* :func:`oracle_figure` — the inexact-oracle scatter e_k = ‖g_k − ∇L_H‖² against
  s_k = ‖∇L_H‖² with the LP envelope ζ² + α·s, the least-squares line and κ·(Ĝ² + B̂²·s);
* :func:`save_figure` — write a figure to a file (format from the extension, PNG without one);
  :func:`image_formats` lists the formats.

The stress-grid heatmaps are :mod:`fedaudit.reports.heatmap`; the figures inside reports are
:mod:`fedaudit.reports.plots`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError

__all__ = ["variance_figure", "oracle_figure", "save_figure", "image_formats"]

_ORACLE_FIELDS = ("s", "e", "zeta2", "alpha", "zeta2_ls", "alpha_ls", "zeta2_bound", "alpha_bound", "kappa",
                  "optimizer")


def _figure(width: float, height: float, dpi: float = 100.0):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def image_formats() -> dict[str, str]:
    """The file formats :func:`save_figure` writes: extension -> description (png, svg, pdf, …)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg.get_supported_filetypes()


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: float | None = None) -> str | os.PathLike:
    """Write ``fig`` to ``path`` (``dpi`` default: the figure's own); returns ``path``."""
    fig.savefig(path, **({} if dpi is None else {"dpi": dpi}))
    return path


def variance_figure(curve: Any):
    """Log–log MSE against d/k of a ``VarianceCurve``: private and non-private SSTQ with CI bars
    (legend: the fitted log–log slopes) and the vqSGD, vqSGD non-private and PrivUnitG MSE as
    horizontal references."""
    dk = np.asarray(curve.d_over_k)
    fig, ax = _figure(6.4, 4.4, dpi=120)
    for rows, label, marker in ((curve.sstq, f"SSTQ ε={curve.epsilon:g} (slope {curve.slope_private:.2f})", "o"),
                                (curve.sstq_nonprivate, f"SSTQ no privacy (slope {curve.slope_nonprivate:.2f})", "s")):
        mse = np.array([r.mse for r in rows])
        err = np.array([[r.mse - r.ci_low for r in rows], [r.ci_high - r.mse for r in rows]])
        ax.errorbar(dk, mse, yerr=err, marker=marker, capsize=3, label=label)
    ax.axhline(curve.vqsgd.mse, color="tab:red", ls="--", label=f"vqSGD ε={curve.epsilon:g}")
    ax.axhline(curve.vqsgd_nonprivate.mse, color="tab:purple", ls="-.", label="vqSGD no privacy")
    ax.axhline(curve.privunitg.mse, color="tab:green", ls=":", label=f"PrivUnitG ε={curve.epsilon:g} (optimal)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d / k")
    ax.set_ylabel("MSE  E‖x̂ − x‖²")
    ax.set_title(f"MSE vs d/k at d={curve.dim}, s={curve.levels}, ‖x‖=clip")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def oracle_figure(fit: Any, *, title: str | None = None):
    """Scatter e_k = ‖g_k − ∇L_H‖² against s_k = ‖∇L_H‖² (log axes) of an ``OracleFit`` with the
    LP envelope ζ² + α·s, the least-squares line and, when available, κ·(Ĝ² + B̂²·s)."""
    missing = [name for name in _ORACLE_FIELDS if not hasattr(fit, name)]
    if missing:
        raise FedAuditError(f"fit must be an OracleFit (fedaudit.audit.oracle.fit_oracle), got "
                            f"{type(fit).__name__} without {', '.join(missing[:3])}")
    s = np.asarray(fit.s)
    e = np.asarray(fit.e)
    fig, ax = _figure(5.5, 4.2)
    pos = (s > 0) & (e > 0)
    ax.scatter(s[pos], e[pos], s=10, alpha=0.6, label="rounds (s_k, e_k)")
    lo = float(s[pos].min()) if pos.any() else 1e-6
    hi = float(s[pos].max()) if pos.any() else 1.0
    grid = np.geomspace(lo, hi, 200) if hi > lo else np.array([lo, lo * 10])
    ax.plot(grid, fit.zeta2 + fit.alpha * grid, "k-", label=f"envelope ζ²={fit.zeta2:.3g}, α={fit.alpha:.3g}")
    ax.plot(grid, fit.zeta2_ls + fit.alpha_ls * grid, "k--", lw=1, label="least squares")
    if fit.zeta2_bound is not None and fit.alpha_bound is not None:
        ax.plot(grid, fit.zeta2_bound + fit.alpha_bound * grid, "r:", label=f"κ(G² + B²s), κ={fit.kappa:.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("‖∇L_H(x_k)‖²")
    ax.set_ylabel("‖g_k − ∇L_H(x_k)‖²")
    ax.set_title(title or f"inexact oracle along {fit.optimizer or 'run'}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
