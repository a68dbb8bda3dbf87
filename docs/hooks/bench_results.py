"""MkDocs hook: benchmark tables rendered from committed ``docs/results/NAME.json`` files.

A page holds ``<!-- bench: NAME -->`` on a line of its own; the hook puts there the
file's tables with the title, command, date, machine, load average and wall time of the
run that made it. A file is either the record of any benchmark's ``--json PATH``
(``benchmarks/_record.py``: ``tables`` of ``columns`` and ``rows``) or one of
``benchmarks/bench_flower.py --json`` (per algorithm, seconds per round by transport). A
missing or malformed file fails the build, naming the file and what is wrong with it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

from fedviews.experiments._render import render_tables

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- bench: ([\w.-]+) -->$", flags=re.M)


def render_flower(res: dict[str, Any]) -> str:
    """The Markdown of one ``bench_flower.py --json`` result."""
    out = []
    for algorithm, table in res["algorithms"].items():
        out += [
            f"**{algorithm}**, {table['samples']} samples × {table['parties']} parties:",
            "",
            "| transport | rounds | s / round | × fedviews hub | median exchange s | "
            "equals in-process |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for r in table["rows"]:
            exchange = r["median_exchange_seconds"]
            out.append(
                f"| {r['transport']} | {r['rounds']} | {r['seconds_per_round']:.4f} | "
                f"{r['x_hub']:.1f} | {'—' if exchange is None else f'{exchange:.3f}'} | "
                f"{'yes' if r['equal_to_in_process'] else '**no**'} |"
            )
        out.append("")
    load = ", ".join(f"{x:g}" for x in res["load_average_after"])
    out.append(
        f"`{res['command']}` — {res['date']}, {res['machine']}, flwr {res['flwr']}, "
        f"load average {load} at its end, wall time {res['wall_seconds']:g} s."
    )
    return "\n".join(out) + "\n"


def render_record(res: dict[str, Any]) -> str:
    """The Markdown of one ``benchmarks/_record.py`` record: its title, where and how it was
    made, then its tables."""
    m = res["machine"]
    gpu = "" if m.get("gpu", "none") == "none" else f", GPU {m['gpu']}"
    extra = "".join(f", {k} {res[k]}" for k in res.keys() - _RECORD_KEYS)
    load = ", ".join(f"{x:g}" for x in res["load_average"])
    # a record of one table usually has that table's title: shown once, above the table
    title = "" if res["title"] in {t["title"] for t in res["tables"]} else f"*{res['title']}*: "
    out = [
        f"{title}`{res['command']}` — {res['date']}, {m['cpu']} ({m['cores']} "
        f"cores{gpu}), device {res['device']}, torch {m['torch']}, Python {m['python']}"
        f"{extra}; load average {load} at its end, wall time {res['wall_seconds']:g} s.",
        "",
        *render_tables(res["tables"]),
    ]
    return "\n".join(out)


#: the keys of a record (``benchmarks/_record.py``); any other is shown as ``key value``
_RECORD_KEYS = {"title", "command", "date", "machine", "device", "wall_seconds"}
_RECORD_KEYS |= {"load_average", "tables"}


def _check_record(res: dict[str, Any]) -> None:
    """Raise ``ValueError`` saying what is missing or inconsistent in a record."""
    missing = _RECORD_KEYS - res.keys()
    missing |= {f"machine.{k}" for k in ("cpu", "cores", "python", "torch")} - {
        f"machine.{k}" for k in res.get("machine", {})
    }
    if missing:
        raise ValueError(f"no {', '.join(sorted(missing))}")
    if not res["tables"]:
        raise ValueError("no table")
    for t in res["tables"]:
        for key in ("title", "columns", "rows"):
            if key not in t:
                raise ValueError(f"a table without {key}")
        for row in t["rows"]:
            if len(row) != len(t["columns"]):
                raise ValueError(
                    f"table {t['title']!r}: a row of {len(row)} cells under "
                    f"{len(t['columns'])} columns: {row}"
                )


def render_bench(res: dict[str, Any]) -> str:
    """The Markdown of one benchmark result file (a record, or ``bench_flower.py``'s)."""
    if "algorithms" in res:
        return render_flower(res)
    _check_record(res)
    return render_record(res)


def render_page(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every ``<!-- bench: NAME -->`` replaced by its tables."""

    def one(m: re.Match[str]) -> str:
        path = root / "docs" / "results" / f"{m.group(1)}.json"
        rel = path.relative_to(root)
        if not path.is_file():
            raise PluginError(f"<!-- bench: {m.group(1)} -->: no {rel}")
        try:
            return render_bench(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError is a ValueError
            raise PluginError(f"<!-- bench: {m.group(1)} -->: {rel} is malformed: {exc}") from exc

    return MARK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's benchmark marks."""
    return render_page(markdown)
