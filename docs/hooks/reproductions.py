"""MkDocs hook: results tables rendered from the committed results of ``reproductions.toml``.

A page holds ``<!-- reproduce: NAME -->`` on a line of its own where the entry
``NAME`` of the manifest is to appear: the hook puts there the entry's tables as its
committed results file holds them (written by ``fedviews reproduce NAME --record``),
with the command, date, machine and wall time of the run that made them, or a note
that no run is committed yet. ``<!-- reproduce-digest: NAME NAME ... -->`` puts there one
table over several leakage audits (:func:`~fedviews.experiments._render.render_digest`:
per audit, attacker role and secret, the attack that learned the most). An unknown entry
fails the build. ``tests/experiments/
test_reproduce.py`` checks that no results table of the docs is typed by hand.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- reproduce: ([\w.-]+) -->$", flags=re.M)
DIGEST = re.compile(r"^<!-- reproduce-digest: ([\w. -]+) -->$", flags=re.M)


def render_page(markdown: str, root: Path = ROOT) -> str:
    """``markdown`` with every ``<!-- reproduce: NAME -->`` replaced by the entry's tables."""
    from fedviews.experiments._render import render_digest, render_markdown
    from fedviews.experiments._reproduce import MANIFEST, load_manifest, read_results
    from fedviews.experiments._sessions import committed_cells

    if not MARK.search(markdown) and not DIGEST.search(markdown):
        return markdown
    entries = load_manifest(root / MANIFEST)

    def entry(name: str) -> Any:
        if name not in entries:
            raise PluginError(f"<!-- reproduce: {name} -->: no such entry in {MANIFEST}")
        return entries[name]

    def one(m: re.Match[str]) -> str:
        e = entry(m.group(1))
        done = committed_cells(e, root)
        kept = (root / e.kept_cells).is_file()
        return render_markdown(e, read_results(root / e.results), done, kept)

    def digest(m: re.Match[str]) -> str:
        chosen = [entry(name) for name in m.group(1).split()]
        return render_digest([(e, read_results(root / e.results)) for e in chosen])

    return DIGEST.sub(digest, MARK.sub(one, markdown))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's reproduction marks."""
    return render_page(markdown)
