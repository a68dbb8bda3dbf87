"""Figures: matplotlib on the Agg backend; the report's as inline SVG or PNG data, the
experiments' line panels as PNG files."""

from __future__ import annotations

import base64
import io
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r"(url\(#|href=\"#)([^)\"]+)")
_FIGURES = itertools.count(1)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported on first use:
    ``fedviews.report`` is imported by the runner, which must not pay for matplotlib)."""
    import logging

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # a math label falls back from the STIX fonts that a slim install lacks to DejaVu, as it
    # should: its 21 "findfont: Font family ... not found" lines a run printed are noise
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    return plt


def svg_of(fig: Any, plt: Any) -> str:
    """``fig`` as an ``<svg>`` element to put inline in HTML (text stays text); closes it."""
    buf = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "fedviews"}):
        fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return _prefix_ids(text[text.index("<svg") :], f"f{next(_FIGURES)}-")


def _prefix_ids(svg: str, prefix: str) -> str:
    """Make the element ids of one figure unique in a page of several (clip paths and
    glyphs are referred to by id: two figures must never share one)."""
    ids = set(_ID.findall(svg))
    svg = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    return _REF.sub(lambda m: m.group(1) + (prefix if m.group(2) in ids else "") + m.group(2), svg)


def png_data_uri(data: bytes) -> str:
    """A ``data:`` URI of PNG bytes, for an ``<img>`` of a self-contained page."""
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


#: one style per series of a line figure: a series that coincides with another stays visible
#: (the first drawn on top with small filled markers, the others under it, hollow and larger)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_LINESTYLES = ("-", "--", "-.", ":")


def _series_style(j: int, n: int) -> dict[str, Any]:
    """Marker, line style, size and z-order of series ``j`` of ``n`` in one panel."""
    return {
        "marker": _MARKERS[j % len(_MARKERS)],
        "linestyle": _LINESTYLES[j % len(_LINESTYLES)],
        "markersize": 3.5 + 1.5 * j,
        "markerfacecolor": None if j == 0 else "none",
        "linewidth": 1.4,
        "zorder": 3 + n - j,
    }


def _panels(plt: Any, n: int, ncols: int, size: tuple[float, float]) -> tuple[Any, Any]:
    """A figure of ``n`` panels in rows of at most ``ncols`` (each ``size`` inches), laid
    out by matplotlib's constrained layout, the unused cells of the last row blank;
    returns the figure and its ``n`` axes."""
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(size[0] * ncols, size[1] * nrows),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    return fig, axes.ravel()[:n]


def _shared_legend(fig: Any, axes: Any) -> None:
    """One legend for every panel (they draw the same series), under the panels."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=min(len(handles), 4 if len(axes) > 1 else 2),  # one panel: narrow
            fontsize=8,
        )


def curves_figure(
    panels: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]],
    *,
    xlabel: str,
    ncols: int = 3,
) -> str:
    """One panel per quantity (``{quantity: {series: (x, y)}}``), its name on the y axis,
    one line per series; SVG."""
    from matplotlib.ticker import MaxNLocator

    plt = pyplot()
    fig, axes = _panels(plt, len(panels), ncols, (4.1, 3.0))
    for ax, (pname, series) in zip(axes, panels.items(), strict=False):
        for j, (label, (x, y)) in enumerate(series.items()):
            # a value beyond 1e300 (a party's reported objective of 1.7e308) or not finite
            # is a gap: the axis's margins around it overflow (matplotlib: "arange: cannot
            # compute length"); results.json keeps it
            y = [v if abs(v) <= 1e300 else math.nan for v in map(float, y)]
            ax.plot(x, y, label=label, **_series_style(j, len(series)))
        ax.set_title(pname.replace("_", " "), fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(pname.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        xs = sorted({float(v) for x, _ in series.values() for v in x})
        if 0 < len(xs) < 3:  # one or two rounds: their own ticks, not 0.945 ... 1.050
            ax.set_xticks(xs)
            ax.set_xlim(xs[0] - 0.5, xs[-1] + 0.5)
        ax.ticklabel_format(axis="y", useOffset=False)
        if len(series) > 1 or next(iter(series), ""):
            ax.legend(fontsize=7)
    return svg_of(fig, plt)


def party_bars(per_party: Mapping[str, Mapping[str, float]]) -> str:
    """Bytes sent / received and handler seconds per party, as two bar panels; SVG."""
    plt = pyplot()
    names = sorted(per_party)
    x = np.arange(len(names))
    sent = [per_party[p].get("bytes_sent", 0) / 1e6 for p in names]
    recv = [per_party[p].get("bytes_received", 0) / 1e6 for p in names]
    secs = [per_party[p].get("wall_seconds", 0.0) for p in names]
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(8.0, 1.25 * len(names) + 5), 3.2))
    a.bar(x - 0.2, sent, 0.4, label="sent")
    a.bar(x + 0.2, recv, 0.4, label="received")
    a.set_ylabel("MB")
    a.set_title("bytes on the wire", fontsize=10)
    a.legend(fontsize=8)
    b.bar(x, secs, 0.6, color="#6a9f58")
    b.set_ylabel("seconds")
    b.set_title("time in message handlers", fontsize=10)
    tilt = len(names) > 5  # long rows of names: slanted
    for ax in (a, b):
        ax.set_xticks(x, names, rotation=30 if tilt else 0, ha="right" if tilt else "center")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return svg_of(fig, plt)


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
    fig, axes = _panels(plt, len(panels), ncols, (4.2, 3.3))
    for ax, (pname, series) in zip(axes, panels.items(), strict=False):
        for j, (label, ys) in enumerate(series.items()):
            ys_arr = np.asarray(ys, dtype=float)
            (line,) = ax.plot(x, ys_arr, label=label, **_series_style(j, len(series)))
            if errors and pname in errors and label in errors[pname]:
                e = np.asarray(errors[pname][label], dtype=float)
                ax.fill_between(x, ys_arr - e, ys_arr + e, alpha=0.15, color=line.get_color())
        ax.set(title=pname, xlabel=xlabel, ylabel=ylabel)
        if logx:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    _shared_legend(fig, axes)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out (unless a layout engine does), write (110 dpi) and close ``fig``; returns
    ``path``."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # nothing cut off at the edges
    pyplot().close(fig)
    return path
