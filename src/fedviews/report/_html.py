"""The self-contained HTML report of one run (experiment, deployment or one party).

Everything the page shows is read back from the run's folder (:func:`load_run`),
and every figure is inside the page (inline SVG, or PNG as ``data:`` URIs): the
file can be mailed or archived alone. The JSON files are linked, never dumped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedviews.report._diagram import MAX_ARROWS, barrier_diagram, crossings_of, format_bytes
from fedviews.report._figures import curves_figure, party_bars, png_data_uri
from fedviews.report._format import EMPTY, format_config, format_value
from fedviews.report._run import BYTES, RunRecord, load_run, read_json

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:1.5em auto;
padding:0 1em;color:#1d2430;line-height:1.45}
h1{margin-bottom:.2em}h2{border-bottom:2px solid #e4e8ee;padding-bottom:.2em;margin-top:1.8em}
.sub{color:#556;margin-top:0}.summary{background:#f2f6fb;border-left:4px solid #4a7ab8;padding:.6em 1em}
nav a{margin-right:1em;font-size:92%}
table{border-collapse:collapse;margin:.6em 0 1em}td,th{border:1px solid #d4d9e0;padding:3px 9px;
text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}th{background:#eef1f5;text-align:left}
td:first-child,th:first-child{text-align:left}table.kv td:nth-child(2){text-align:left}
td.text{text-align:left;white-space:normal}
img,svg{max-width:100%;height:auto}figure{margin:1em 0}figcaption{color:#556;font-size:90%}
.note{color:#556;font-size:90%;margin-top:-.5em}.files a{margin-right:1.2em}
"""


def _cell(v: Any) -> str:
    return html.escape(format_value(v))


def table_html(
    title: str,
    columns: Sequence[Any],
    rows: Sequence[Sequence[Any]],
    note: str = "",
    *,
    cls: str = "",
) -> str:
    """An HTML table with a title (``<h3>``, omitted when empty) and a note under it."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='text'>{_cell(v)}</td>"
            if isinstance(v, str) and k and not v[:1].isdigit()
            else f"<td>{_cell(v)}</td>"
            for k, v in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    h = f"<h3>{html.escape(title)}</h3>" if title else ""
    n = f'<p class="note">{html.escape(note)}</p>' if note else ""
    c = f" class='{cls}'" if cls else ""
    return f"{h}<table{c}><tr>{head}</tr>{body}</table>{n}"


def _table(t: Mapping[str, Any]) -> str:
    """One of a run's result tables (``{"title", "columns", "rows", "note"}``) in HTML."""
    title, note = str(t.get("title", "")), str(t.get("note", ""))
    return table_html(title, t.get("columns", []), t.get("rows", []), note)


def _is_leakage(t: Mapping[str, Any]) -> bool:
    cols = [str(c) for c in t.get("columns", [])]
    return "attack" in cols or "leak" in str(t.get("title", "")).lower()


def _ledger_html(privacy: Mapping[str, Any]) -> str:
    """The privacy ledger: one row per party of what the run's defense spent."""
    parties: Mapping[str, Mapping[str, Any]] = privacy.get("parties") or {}
    keys = sorted({k for v in parties.values() for k in v})
    rows = [[p, *[v.get(k, "") for k in keys]] for p, v in sorted(parties.items())]
    return f"<p>{html.escape(str(privacy.get('mechanism', '')))}</p>" + table_html(
        "", ["party", *keys], rows
    )


def _ledgers(rec: RunRecord) -> dict[str, Mapping[str, Any]]:
    """``{label: ledger}``: the run's own, or one per setting of a defense sweep."""
    settings = rec.results.get("settings")
    runs = {"": rec.results, **(settings if isinstance(settings, dict) else {})}
    return {
        str(label): r["privacy"]
        for label, r in runs.items()
        if isinstance(r, dict)
        and isinstance(r.get("privacy"), dict)
        and r["privacy"].get("parties")
    }


#: the result a run's summary line names first, the first of these it has
_HEADLINE_KEYS = ("final_accuracy", "test_accuracy", "accuracy", "objective_final")


def run_summary(rec: RunRecord) -> str:
    """One line: what ran, how long, its headline result and the traffic."""
    parts = [f"{rec.name}: {rec.title}"]
    if rec.kind == "deployment":
        parts[0] += f" {rec.results.get('status', '?')}"
    if rec.seconds is not None:
        parts[0] += f" in {rec.seconds:.1f} s"
    objective = rec.results.get("objective")  # a deployment's per-round objective
    last = {"final objective": objective[-1]} if isinstance(objective, list) and objective else {}
    for key, v in [
        *((k.replace("_", " "), rec.results.get(k)) for k in _HEADLINE_KEYS),
        *last.items(),
    ]:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            parts.append(f"{key} {v:.4g}")
            break
    summary = rec.results.get("headline")  # the experiment's one-line summary
    if isinstance(summary, str) and summary:
        parts.append(summary)
    head = rec.headline()
    if "messages" in head:
        scope = rec.log_scope()
        parts.append(
            f"{head['messages']:,} messages, {format_bytes(head[BYTES])} across the privacy barrier"
            + (f" in {scope}" if scope else "")
        )
    return "; ".join(parts)


def _header(rec: RunRecord) -> list[str]:
    cfg = rec.config
    bits = [html.escape(rec.title)]
    data = cfg.get("data")
    if isinstance(data, dict) and (data.get("name") or data.get("dataset")):
        bits.append(f"on <code>{html.escape(str(data.get('name') or data.get('dataset')))}</code>")
    if "seed" in cfg:
        bits.append(f"seed {html.escape(str(cfg['seed']))}")
    if rec.seconds is not None:
        bits.append(f"{rec.seconds:.1f} s")
    return [
        f"<h1>{html.escape(rec.name)}</h1>",
        f"<p class='sub'>{', '.join(bits)}</p>",
        f"<p class='summary'>{html.escape(run_summary(rec))}</p>",
    ]


def _results(rec: RunRecord) -> list[str]:
    out = []
    if rec.kind == "deployment":
        rows = [[k, format_bytes(v) if k == BYTES else v] for k, v in rec.headline().items()]
        out.append(table_html("", ["result", "value"], rows, cls="kv"))
    return out + [_table(t) for t in rec.tables if not _is_leakage(t)]


def _figures(rec: RunRecord) -> list[str]:
    out = []
    curves = rec.curves()
    if curves:
        xlabel = "round" if rec.kind != "experiment" else "round / iteration"
        out.append(
            f"<figure>{curves_figure(curves, xlabel=xlabel)}"
            f"<figcaption>{html.escape(_curves_caption(rec, curves))}</figcaption></figure>"
        )
    for fig in rec.figures:
        out.append(
            f"<figure><img alt='{html.escape(fig.stem)}' src='{png_data_uri(fig.read_bytes())}'>"
            f"<figcaption>{html.escape(fig.stem.replace('_', ' '))} "
            f"(<a href='{html.escape(fig.name)}'>{html.escape(fig.name)}</a>)</figcaption></figure>"
        )
    return out


def _curves_caption(rec: RunRecord, curves: Mapping[str, Mapping[str, Any]]) -> str:
    """What the curves figure plots: which stored values, against what, one line per what."""
    words = {q: q.replace("_", " ") for q in curves}
    names = ", ".join(w if w == q else f"{w} ({q})" for q, w in words.items())
    lines = sorted({s for series in curves.values() for s in series if s})
    per = f"; one line per {', '.join(lines)}" if lines else ""
    if rec.kind == "experiment":
        return (
            f"{names}: the values metrics.json lists under that key, against their position "
            f"(the round or iteration they were logged at, from 1){per}"
        )
    return f"{names} of every round, from the per-round history in results.json{per}"


def _barrier(rec: RunRecord) -> list[str]:
    sums = rec.summaries()
    if not sums:
        return []
    label, first = next(iter(sums.items()))
    scope = rec.log_scope()
    out = [
        "<p>Every (sender, receiver) pair that exchanged messages in "
        + (html.escape(scope) if scope else "this run")
        + " is an arrow "
        f"(with more than {MAX_ARROWS} pairs, a filled cell of a sender × receiver table), "
        "labelled with the arrays that crossed and the bytes on the wire. What the "
        "algorithm's privacy policy forbids has none: the runtime refuses such a "
        "message at its sender and at its receiver.</p>",
        f"<figure class='barrier'>{barrier_diagram(first, coordinator=rec.coordinator)}"
        + (f"<figcaption>{html.escape(label)}</figcaption>" if label else "")
        + "</figure>",
    ]
    rows = [
        [c.sender, c.receiver, ", ".join(c.arrays) or "(metadata only)", format_bytes(c.nbytes)]
        for c in crossings_of(first)
    ]
    out.append(
        f"<details><summary>every pair: the arrays' full names and the bytes ({len(rows)} "
        "pairs)</summary>"
        + table_html("", ["sender", "receiver", "arrays", "bytes"], rows)
        + "</details>"
    )
    if len(sums) > 1:
        runs = [
            [k, s.get("rounds", 0), s.get("messages", 0), format_bytes(s.get("total_bytes", 0))]
            for k, s in sums.items()
        ]
        note = "the diagram shows the first; message_log.json holds all of them"
        out.append(
            table_html("Every logged run", ["run", "rounds", "messages", "bytes"], runs, note)
        )
    return out


def _own_time(folder: Path, party: str) -> dict[str, float]:
    """``{"wall_seconds": ...}`` of ``party`` from its own ``message_log.json`` (empty if
    its folder is not beside the coordinator's)."""
    path = folder / "message_log.json"
    if not path.is_file():
        return {}
    mine = (read_json(path).get("per_party") or {}).get(party) or {}
    return {"wall_seconds": float(mine["wall_seconds"])} if "wall_seconds" in mine else {}


def _cost(rec: RunRecord) -> list[str]:
    sums = rec.summaries()
    if not sums:
        return []
    per_party = next(iter(sums.values())).get("per_party") or {}
    if rec.kind == "deployment":  # the hub times no handler: the parties' own logs do
        per_party = {p: {**v, **_own_time(rec.folder.parent / p, p)} for p, v in per_party.items()}
    if not per_party:
        return []
    rows = [
        [
            p,
            format_bytes(v.get("bytes_sent")),
            format_bytes(v.get("bytes_received")),
            float(v.get("wall_seconds", 0.0)),
        ]
        for p, v in sorted(per_party.items())
    ]
    return [
        f"<figure>{party_bars(per_party)}</figure>",
        table_html("", ["party", "sent", "received", "handler seconds"], rows),
    ]


def _config(rec: RunRecord) -> list[str]:
    flat = rec.flat_config()
    if not flat:
        return ["<p>no config.json in this folder</p>"]
    rows = [[k, format_config(v)] for k, v in flat.items()]
    note = f"{EMPTY}: empty or unset" if any(v == EMPTY for _, v in rows) else ""
    return [table_html("", ["key", "value"], rows, note, cls="kv")]


def _files(rec: RunRecord) -> list[str]:
    links = " ".join(
        f"<a href='{html.escape(p.name)}'>{html.escape(p.name)}</a>" for p in rec.json_files()
    )
    return [f"<p class='files'>{links}</p>"]


def write_report(folder: Path | str) -> Path:
    """Write ``folder/report.html`` for the run in ``folder`` and return its path.

    Parameters
    ----------
    folder : Path or str
        A finished run's folder (see :func:`load_run`).

    Returns
    -------
    Path
        ``folder / "report.html"`` (of the coordinator's folder for a launch folder).
    """
    rec = load_run(folder)
    ledgers = [
        (f"<h3>{html.escape(k)}</h3>" if k else "") + _ledger_html(v)
        for k, v in _ledgers(rec).items()
    ]
    sections = [
        ("results", "Results", _results(rec)),
        ("barrier", "What crossed the privacy barrier", _barrier(rec)),
        ("curves", "Curves and figures", _figures(rec)),
        ("cost", "Per-party traffic and time", _cost(rec)),
        ("leakage", "Leakage", [_table(t) for t in rec.tables if _is_leakage(t)]),
        ("ledger", "Privacy ledger", ledgers),
        ("config", "Config", _config(rec)),
        ("files", "Files", _files(rec)),
    ]
    sections = [s for s in sections if s[2]]
    nav = " ".join(f"<a href='#{sid}'>{html.escape(title)}</a>" for sid, title, _ in sections)
    parts = [*_header(rec), f"<nav>{nav}</nav>"]
    for sid, title, body in sections:
        parts += [f"<section id='{sid}'><h2>{html.escape(title)}</h2>", *body, "</section>"]
    parts.append(
        f"<p class='note'>written by fedviews from the files in {html.escape(str(rec.folder))}</p>"
    )
    return write_page(rec.folder / "report.html", f"{rec.name} · fedviews", parts)


def write_page(path: Path, title: str, body: Sequence[str]) -> Path:
    """Write ``body`` as a self-contained HTML page in the report's style; returns ``path``."""
    head = (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{CSS}</style></head><body>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([head, *body, "</body></html>"]), encoding="utf-8")
    return path
