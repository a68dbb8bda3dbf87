"""MkDocs hook: single results numbers in prose, rendered from committed results files.

A sentence that quotes a measured number says where it comes from instead of typing it:
``<!-- value: NAME PATH -->`` or ``<!-- value: NAME PATH | FORMAT -->``. ``NAME`` is a
results file ``docs/results/NAME.json`` (a ``fedviews reproduce NAME --record`` result or a
benchmark's ``--json`` record), ``PATH`` the ``/``-separated way to one value in it:

* in a mapping, a key (``wall_seconds``, ``timings/demo/wall_seconds``);
* in a list, an index from 0 (``tables/1``);
* in a table (a mapping with ``columns`` and ``rows``), the one row whose leading cells are
  the ``&``-joined ones (``2-1&APFed-C``: first cell ``2-1``, second ``APFed-C``), then a cell
  of that row picked by its column's header, the rest of the path (``mean ± std``,
  ``s / epoch (best)``), or by its index from 0 where two columns share a header.

``FORMAT`` is a Python format spec for a number (``.2f``, ``+.2f``, ``.0f``); without it the
value appears as the file holds it. Example: ``<!-- value: apfed_table2_fmnist
tables/1/2-1&APFed-C/mean ± std -->`` renders ``+0.92 ± 0.38``. A missing file, a path that
leads nowhere or a format that does not apply fails the build, naming the page, the mark and
what is missing; in code (a span or a fenced block) a mark is shown as it is.
``tests/test_docs_values.py`` checks that no page types a measured number in prose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path("docs/results")
MARK = re.compile(r"<!-- value: ([\w.-]+) (.+?)(?: \| (\S+))? -->")
#: fenced code blocks and code spans, where a mark is shown, not rendered
CODE = re.compile(r"^\s*```.*?^\s*```|`[^`]*`", flags=re.S | re.M)


def lookup(record: Any, path: str) -> Any:
    """The value at ``path`` (``/``-separated steps, see the module) in ``record``.

    Raises
    ------
    KeyError
        Naming the step that leads nowhere and what was there to choose from.
    """
    value = record
    steps = path.split("/")
    for i, step in enumerate(steps):
        if isinstance(value, dict) and {"columns", "rows"} <= value.keys() and step not in value:
            return _cell(value, steps[i:])  # a cell ends the path
        if isinstance(value, dict):
            if step not in value:
                raise KeyError(f"no {step!r} (there: {', '.join(map(str, value))})")
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        elif isinstance(value, list):
            raise KeyError(f"no {step!r} in a list of {len(value)}")
        else:
            raise KeyError(f"no {step!r}: {value!r} is not a mapping, list or table")
    return value


def _cell(table: dict[str, Any], steps: list[str]) -> Any:
    """The cell of ``table`` that ``steps`` name: a row's leading cells (``&``-joined), then a
    column's header or index. Either may hold a ``/`` (``w/o FL``, ``s / epoch``): the one way
    to cut ``steps`` into a row and a column that both exist is taken."""
    title, columns = table.get("title", ""), table["columns"]
    if len(steps) < 2:
        raise KeyError(f"table {title!r}: row {steps[0]!r} without a column")
    found, why = [], ""
    for cut in range(1, len(steps)):
        keys, column = "/".join(steps[:cut]).split("&"), "/".join(steps[cut:])
        rows = [r for r in table["rows"] if [str(c) for c in r[: len(keys)]] == keys]
        if columns.count(column) > 1:
            why = f"{columns.count(column)} columns {column!r}: give its index"
        elif column not in columns and not (column.isdigit() and int(column) < len(columns)):
            why = why or f"no column {column!r} (there: {columns})"
        elif len(rows) != 1:
            why = f"{len(rows)} rows start with {keys}, not one"
        else:
            index = columns.index(column) if column in columns else int(column)
            found.append(rows[0][index])
    if len(found) != 1:
        raise KeyError(f"table {title!r}: {why or f'{len(found)} cells fit {steps}, not one'}")
    return found[0]


def render_value(name: str, path: str, fmt: str | None, root: Path = ROOT) -> str:
    """The text of one ``<!-- value: NAME PATH | FORMAT -->``.

    Raises
    ------
    ValueError
        When the file, the value or its format is missing or wrong.
    """
    file = root / RESULTS / f"{name}.json"
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"no {RESULTS / f'{name}.json'}") from exc
    try:
        value = lookup(record, path)
    except KeyError as exc:
        raise ValueError(f"{RESULTS / f'{name}.json'}: {exc.args[0]}") from exc
    if isinstance(value, (dict, list)):
        raise ValueError(f"{RESULTS / f'{name}.json'}: {path!r} is not one value")
    if fmt is None:
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"format {fmt!r} for {value!r}, which is not a number")
    return format(value, fmt).replace("-", "−")


def render_page(markdown: str, page: str = "a page", root: Path = ROOT) -> str:
    """``markdown`` with every ``<!-- value: ... -->`` replaced by its value."""

    def one(m: re.Match[str]) -> str:
        try:
            return render_value(m.group(1), m.group(2), m.group(3), root)
        except ValueError as exc:
            raise PluginError(f"{page}: {m.group(0)}: {exc}") from exc

    out, done = [], 0
    for code in CODE.finditer(markdown):
        out += [MARK.sub(one, markdown[done : code.start()]), code.group(0)]
        done = code.end()
    return "".join([*out, MARK.sub(one, markdown[done:])])


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's value marks."""
    return render_page(markdown, page.file.src_uri)
