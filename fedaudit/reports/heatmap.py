"""Stress-grid heatmaps: one PNG per aggregator, worst case over attacks on the f × β grid.

Drawn from the plain summary that :func:`fedaudit.audit.stress.summarize` returns (lists and
numbers, no fedaudit objects), with matplotlib's object-oriented API on an Agg canvas (the
process-wide backend is never changed). Pass :func:`plot_heatmaps` as ``draw=`` to
:func:`fedaudit.audit.stress.run_stress`, or call it on a saved ``summary.json``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_heatmaps", "heatmap_filename"]


def heatmap_filename(spec: str) -> str:
    """``heatmap_<spec>.png`` with characters other than letters, digits and ``+._-`` replaced by ``_``."""
    return f"heatmap_{re.sub(r'[^A-Za-z0-9+._-]', '_', spec)}.png"


def plot_heatmaps(summary: dict[str, Any], out_dir: str | os.PathLike) -> list[str]:
    """One PNG per aggregator: worst case over attacks of final accuracy and of final loss on f × β.

    Rows are f, columns β; each cell shows the value and the attack attaining it. Accuracy is on
    a fixed [0, 1] scale; loss on a linear scale from 0 to the largest of the finite worst losses
    and the loss at x0 (shared by every aggregator, so the PNGs compare); diverged cells are grey.
    A cell where some attack caused a breakdown is marked "✗ k/m".
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fs, betas = summary["fs"], summary["betas"]
    finite = [v for s in summary["aggregators"].values() for row in s["worst_loss"] for v in row if v is not None]
    loss_max = max(finite + [summary.get("initial_loss") or 0.0]) or 1.0
    paths = []
    for agg, s in summary["aggregators"].items():
        fig = Figure(figsize=(3.2 + 2.2 * len(betas), 1.9 + 0.7 * len(fs)), layout="constrained")
        FigureCanvasAgg(fig)
        panels = (("worst_accuracy", "worst_accuracy_attack", "worst-case final test accuracy", "viridis", 1.0),
                  ("worst_loss", "worst_loss_attack", "worst-case final honest loss", "magma_r", loss_max))
        for k, (field_, att_field, title, cmap_name, vmax) in enumerate(panels):
            ax = fig.add_subplot(1, 2, k + 1)
            vals = np.array([[np.nan if v is None else v for v in row] for row in s[field_]], dtype=float)
            cmap = matplotlib.colormaps[cmap_name].with_extremes(bad="#b0b0b0")
            im = ax.imshow(vals, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
            fig.colorbar(im, ax=ax, shrink=0.9)
            for i in range(len(fs)):
                for j in range(len(betas)):
                    att = s[att_field][i][j]
                    if att is None:
                        text = "—"
                    elif np.isnan(vals[i, j]):
                        text = f"{'rule broke' if s['aggregator_breakdowns'][i][j] else 'diverged'}\n{att}"
                    else:
                        text = f"{vals[i, j]:.3g}\n{att}"
                    if att is not None and s["breakdowns"][i][j]:
                        text += f"\n✗ {s['breakdowns'][i][j]}/{s['attacks']}"
                    ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white",
                            bbox={"facecolor": "black", "alpha": 0.4, "pad": 1.5, "linewidth": 0})
            ax.set_xticks(range(len(betas)), [f"{b:g}" for b in betas])
            ax.set_yticks(range(len(fs)), [str(f) for f in fs])
            ax.set_xlabel("Dirichlet β")
            if k == 0:
                ax.set_ylabel("f (Byzantine clients)")
            ax.set_title(title, fontsize=9)
        cfg = summary["config"]
        fig.suptitle(f"{agg}: worst over {s['attacks']} attack(s) — {cfg['dataset']}, {cfg['optimizer']}, "
                     f"{cfg['rounds']} rounds, n_honest={cfg['n_honest']} (smaller β = more heterogeneous)",
                     fontsize=9)
        path = Path(out_dir) / heatmap_filename(agg)
        fig.savefig(path, dpi=110)
        paths.append(str(path))
    return paths
