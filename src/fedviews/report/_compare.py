"""``fedviews compare RUN_DIR ...``: runs of one experiment (or one algorithm's
deployments) side by side: their headline numbers, the config values that differ,
and their curves overlaid."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedviews.errors import ConfigError
from fedviews.report._diagram import format_bytes
from fedviews.report._figures import curves_figure
from fedviews.report._format import format_config, format_value
from fedviews.report._html import table_html, write_page
from fedviews.report._run import BYTES, RunRecord, load_run

_MISSING = "—"


@dataclass(frozen=True)
class Comparison:
    """Several runs of one experiment (or of one algorithm's deployments).

    Attributes
    ----------
    runs : list of RunRecord
    labels : list of str
        One short, distinct label per run (its folder's name).
    metrics : list of (str, list)
        Headline numbers: ``(label, one value per run)`` (``"—"`` where a run has none).
    config : list of (str, list)
        The config keys whose values differ between the runs, with their values.
    measures : str
        What the headline table's numbers are (its title, with its metric and unit, e.g.
        ``"APFed Table 2 — MNIST accuracy (%)"``; the runs' titles joined by `` | ``
        where they differ); empty for deployments.
    """

    runs: list[RunRecord]
    labels: list[str]
    metrics: list[tuple[str, list[Any]]]
    config: list[tuple[str, list[Any]]]
    measures: str = ""

    def curves(self) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
        """Every run's curves, overlaid: ``{quantity: {"run · series": (x, y)}}``."""
        out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
        for label, run in zip(self.labels, self.runs, strict=True):
            for quantity, series in run.curves().items():
                for name, xy in series.items():
                    out.setdefault(quantity, {})[f"{label} · {name}" if name else label] = xy
        return out

    def rich_tables(self) -> list[Any]:
        """The two tables for the terminal (``rich.table.Table``)."""
        from rich.table import Table

        out = []
        head = f"headline metrics: {self.measures}" if self.measures else "headline metrics"
        for title, rows, first in (
            (head, self._metric_cells(), "metric"),
            ("config values that differ", self._config_cells(), "config key"),
        ):
            t = Table(title=title, title_justify="left")
            t.add_column(first)
            for label in self.labels:
                t.add_column(label, justify="right")
            for row in rows:
                t.add_row(*row)
            if not rows:
                t.add_row("(none)", *["" for _ in self.labels])
            out.append(t)
        return out

    def _metric_cells(self) -> list[list[str]]:
        """The headline metrics as text, a row per metric (bytes in kB / MB)."""
        return [
            [
                k,
                *[
                    format_bytes(v) if k == BYTES and isinstance(v, int) else format_value(v)
                    for v in vs
                ],
            ]
            for k, vs in self.metrics
        ]

    def _config_cells(self) -> list[list[str]]:
        """The config values that differ as their TOML, a row per key."""
        return [[k, *[format_config(v) for v in vs]] for k, vs in self.config]

    def write_html(self, path: Path) -> Path:
        """Write the comparison as a self-contained HTML page; returns ``path``."""
        what = self.runs[0].title
        parts = [
            f"<h1>{len(self.runs)} runs of {html.escape(what)}</h1>",
            "<ul>"
            + "".join(
                f"<li><b>{html.escape(label)}</b>: "
                f"<a href='{html.escape(_href(run.folder / 'report.html', path))}'>report</a> "
                f"<span class='note'>{html.escape(str(run.folder))}</span></li>"
                for label, run in zip(self.labels, self.runs, strict=True)
            )
            + "</ul>",
            "<h2>Headline metrics</h2>",
            f"<p>{html.escape(self.measures)}</p>" if self.measures else "",
            table_html("", ["metric", *self.labels], self._metric_cells()),
            "<h2>Config values that differ</h2>",
            table_html("", ["config key", *self.labels], self._config_cells())
            if self.config
            else "<p>none: the runs share every config value</p>",
        ]
        curves = self.curves()
        if curves:
            parts += [
                "<h2>Curves</h2>",
                f"<figure>{curves_figure(curves, xlabel='round / iteration')}</figure>",
            ]
        return write_page(path, f"compare · {what}", parts)


def _href(target: Path, page: Path) -> str:
    """``target`` relative to the folder of ``page`` when possible, else a file URI."""
    try:
        return target.resolve().relative_to(page.resolve().parent).as_posix()
    except ValueError:
        return target.resolve().as_uri()


def _labels(runs: Sequence[RunRecord]) -> list[str]:
    names = [r.folder.name for r in runs]
    if len(set(names)) == len(names):
        return names
    return [f"{r.folder.parent.name}/{r.folder.name}" for r in runs]


def compare_runs(folders: Sequence[Path | str]) -> Comparison:
    """Compare the runs in ``folders``.

    Parameters
    ----------
    folders : sequence of Path or str
        Two or more run folders (experiment runs, or launched/coordinator folders of
        deployments) of the same experiment or algorithm.

    Returns
    -------
    Comparison

    Raises
    ------
    ConfigError
        Fewer than two folders, a folder that holds no finished run, a party's folder,
        or runs of different experiments (or algorithms).
    """
    if len(folders) < 2:
        raise ConfigError("compare needs at least two run folders")
    runs = [load_run(f) for f in folders]
    for f, r in zip(folders, runs, strict=True):
        if r.kind == "party":
            raise ConfigError(
                f"{f} is one party's folder of a deployment: compare the deployments' "
                "folders (or their coordinator's)"
            )
    kinds = {(r.kind, r.what) for r in runs}
    if len(kinds) > 1:
        found = ", ".join(f"{f} is {r.title}" for f, r in zip(folders, runs, strict=True))
        raise ConfigError(f"runs of different experiments cannot be compared: {found}")
    if len({r.folder.resolve() for r in runs}) < len(runs):
        raise ConfigError("the same run folder is given twice")
    heads = [r.headline() for r in runs]
    keys = list(dict.fromkeys(k for h in heads for k in h))
    metrics = [(k, [h.get(k, _MISSING) for h in heads]) for k in keys]
    flats = [r.flat_config() for r in runs]
    ckeys = list(dict.fromkeys(k for f in flats for k in f))
    config = [
        (k, [f.get(k, _MISSING) for f in flats])
        for k in ckeys
        if len({repr(f.get(k, _MISSING)) for f in flats}) > 1
    ]
    titles = list(dict.fromkeys(t for t in (r.headline_title() for r in runs) if t))
    return Comparison(runs, _labels(runs), metrics, config, " | ".join(titles))
