"""MkDocs hook: the times that the docs state, rendered from the committed timing record.

A page says ``<!-- timing: NAME -->`` where it states how long a command takes: the hook puts
there the wall time of ``NAME`` in ``docs/results/first_hour_timings.json`` (written by
``python benchmarks/bench_first_hour.py``) with the date, the machine and its load average,
e.g. ``61 s on 2026-11-28 (AMD EPYC, 2 cores, load average 3.2)``. A name without a record
fails the build. ``tests/test_docs.py`` checks that no page states a time such as "about N
s" by hand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
RECORD = Path("docs/results/first_hour_timings.json")
MARK = re.compile(r"<!-- timing: ([\w-]+) -->")


def render_timing(timing: dict[str, Any]) -> str:
    """One recorded run as the docs state it: wall time, date, machine, load average."""
    m = timing["machine"]
    return (
        f"{timing['wall_seconds']:.0f} s on {timing['date'][:10]} ({m['cpu']}, "
        f"{m['cores']} cores, load average {timing['load_average']:.1f})"
    )


def render_page(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every ``<!-- timing: NAME -->`` replaced by ``NAME``'s record."""
    if not MARK.search(markdown):
        return markdown
    try:
        timings = json.loads((root / RECORD).read_text(encoding="utf-8"))["timings"]
    except (OSError, ValueError, KeyError) as exc:
        raise PluginError(f"{RECORD}: no timing record ({exc})") from exc

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in timings:
            raise PluginError(
                f"<!-- timing: {m.group(1)} -->: not in {RECORD} "
                f"(python benchmarks/bench_first_hour.py {m.group(1)} --json {RECORD})"
            )
        return render_timing(timings[m.group(1)])

    return MARK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's timing marks."""
    return render_page(markdown)
