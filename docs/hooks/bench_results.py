"""MkDocs hook: benchmark tables rendered from committed ``docs/results/NAME.json`` files.

A page holds ``<!-- bench: NAME -->`` on a line of its own; the hook puts there, per
algorithm of the file (written by ``benchmarks/bench_flower.py --json``), its table of
seconds per round by transport, with the command, date, machine, flwr version and load
of the run that made it. A missing file fails the build.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- bench: ([\w.-]+) -->$", flags=re.M)


def render_bench(res: dict[str, Any]) -> str:
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


def render_page(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every ``<!-- bench: NAME -->`` replaced by its tables."""

    def one(m: re.Match[str]) -> str:
        path = root / "docs" / "results" / f"{m.group(1)}.json"
        if not path.is_file():
            raise PluginError(f"<!-- bench: {m.group(1)} -->: no {path.relative_to(root)}")
        return render_bench(json.loads(path.read_text(encoding="utf-8")))

    return MARK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's benchmark marks."""
    return render_page(markdown)
