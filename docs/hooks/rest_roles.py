"""MkDocs hook: the reST cross-references of fedviews' docstrings as links.

The numpy-style docstrings cite objects Sphinx's way (``:class:`~fedviews.federation.Defense```),
which mkdocstrings renders verbatim (``:class:<code>~fedviews...</code>``). This hook turns
each into a code span that mkdocs-autorefs links to the object's API entry: ``~a.b.c`` shows
``c``, ``a.b.c`` shows ``a.b.c``, and a bare name is also looked up in the module of the API
page it is on. A name with no API entry stays a plain code span.
"""

from __future__ import annotations

import html
import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|obj|exc|const):<code>(~?)([^<]+)</code>")


def on_page_content(content: str, page: Any, **_: Any) -> str:
    """Rewrite the roles of one page (before autorefs resolves the links of every page)."""
    src = page.file.src_uri
    module = ""
    if src.startswith("reference/api/"):
        stem = src.removeprefix("reference/api/").removesuffix(".md")
        module = "fedviews" if stem == "index" else f"fedviews.{stem}"

    def link(m: re.Match[str]) -> str:
        target = html.unescape(m.group(2)).strip()
        shown = target.rsplit(".", 1)[-1] if m.group(1) else target
        slug = f' slug="{html.escape(module + "." + target)}"' if module else ""
        return (
            f'<autoref identifier="{html.escape(target)}"{slug} optional>'
            f"<code>{html.escape(shown)}</code></autoref>"
        )

    return _ROLE.sub(link, content)
