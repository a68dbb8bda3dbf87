"""Figures used by several experiments."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fedviews.report._figures import pyplot


def line_panels(
    path: Path,
    x: Sequence[float],
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    errors: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    ncols: int = 3,
    logx: bool = False,
) -> Path:
    """One panel per key of ``panels``; in each, one line per series (``{label: y}``).

    ``errors`` (same structure) draws a shaded ±band. Returns ``path``.
    """
    plt = pyplot()
    n = len(panels)
    ncols = min(ncols, n)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.3 * nrows), squeeze=False)
    for ax, (pname, series) in zip(axes.ravel(), panels.items(), strict=False):
        for label, ys in series.items():
            ys_arr = np.asarray(ys, dtype=float)
            ax.plot(x, ys_arr, marker="o", markersize=3, label=label)
            if errors and pname in errors and label in errors[pname]:
                e = np.asarray(errors[pname][label], dtype=float)
                ax.fill_between(x, ys_arr - e, ys_arr + e, alpha=0.2)
        ax.set_title(pname)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logx:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
