"""A self-contained HTML report of one run (tables, figures, config, message log).

The report sits below the experiments: it describes what it reads as protocols
(:class:`ReportTable`, :class:`ReportResult`, :class:`ReportConfig`), which the
runner's ``Table``, ``ExperimentResult`` and ``ExperimentConfig`` satisfy.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from fedviews.report._json import to_jsonable

__all__ = ["ReportConfig", "ReportResult", "ReportTable", "write_report"]


class ReportTable(Protocol):
    """A result table: title, column names, rows of cells and a note under it."""

    @property
    def title(self) -> str: ...

    @property
    def columns(self) -> Sequence[Any]: ...

    @property
    def rows(self) -> Sequence[Sequence[Any]]: ...

    @property
    def note(self) -> str: ...


class ReportResult(Protocol):
    """What a run produced: a summary, tables, figure files and the message log."""

    @property
    def summary(self) -> str: ...

    @property
    def tables(self) -> Sequence[ReportTable]: ...

    @property
    def figures(self) -> Sequence[Path | str]: ...

    @property
    def message_log(self) -> Mapping[str, Any] | None: ...


class _NamedData(Protocol):
    @property
    def name(self) -> str: ...


class ReportConfig(Protocol):
    """The resolved configuration of a run."""

    @property
    def name(self) -> str: ...

    @property
    def experiment(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def data(self) -> _NamedData: ...

    def to_dict(self) -> dict[str, Any]: ...


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%;border:1px solid #eee}pre{background:#f7f7f7;padding:1em;overflow:auto}
.note{color:#555;font-size:90%}
"""


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return html.escape(str(v))


def _table_html(t: ReportTable) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in t.rows
    )
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return f"<h3>{html.escape(t.title)}</h3><table><tr>{head}</tr>{body}</table>{note}"


def write_report(out_dir: Path, cfg: ReportConfig, result: ReportResult, seconds: float) -> Path:
    """Write ``out_dir/report.html`` and return its path.

    Parameters
    ----------
    out_dir : Path
        The run directory; figures are referred to by file name, relative to it.
    cfg : ReportConfig
        The resolved configuration (e.g. an ``ExperimentConfig``).
    result : ReportResult
        What the run produced (e.g. an ``ExperimentResult``).
    seconds : float
        How long the run took.

    Returns
    -------
    Path
        ``out_dir / "report.html"``.
    """
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(cfg.name)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(cfg.name)}</h1>",
        f"<p>experiment <code>{html.escape(cfg.experiment)}</code> on <code>{html.escape(cfg.data.name)}</code>, "
        f"seed {cfg.seed}, {seconds:.1f} s</p>",
    ]
    if result.summary:
        parts.append(f"<p>{html.escape(result.summary)}</p>")
    parts += [_table_html(t) for t in result.tables]
    for fig in result.figures:
        parts.append(
            f"<h3>{html.escape(Path(fig).stem)}</h3><img src='{html.escape(Path(fig).name)}'>"
        )
    if result.message_log:
        parts.append("<h2>What crossed the privacy barrier</h2>")
        parts.append(
            f"<pre>{html.escape(json.dumps(to_jsonable(result.message_log), indent=2))}</pre>"
        )
    parts.append("<h2>Resolved config</h2>")
    parts.append(f"<pre>{html.escape(json.dumps(to_jsonable(cfg.to_dict()), indent=2))}</pre>")
    parts.append("</body></html>")
    path = out_dir / "report.html"
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
