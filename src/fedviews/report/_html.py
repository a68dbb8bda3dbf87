"""A self-contained HTML report of one run (tables, figures, config, message log)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedviews.experiments._config import ExperimentConfig
    from fedviews.experiments._runner import ExperimentResult, Table

__all__ = ["write_report"]

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


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>" for row in t.rows
    )
    note = f'<p class="note">{html.escape(t.note)}</p>' if t.note else ""
    return f"<h3>{html.escape(t.title)}</h3><table><tr>{head}</tr>{body}</table>{note}"


def write_report(
    out_dir: Path, cfg: ExperimentConfig, result: ExperimentResult, seconds: float
) -> Path:
    """Write ``out_dir/report.html`` and return its path."""
    from fedviews.experiments._runner import to_jsonable

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
