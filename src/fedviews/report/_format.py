"""Values as text: one rule for result tables (terminal, docs, report), one for config values.

A result is a measurement: two decimals from 1 up, three significant digits below 1, so a
small difference keeps its digits and a value that rounds to zero is never ``-0.00``. A
config value is what a person wrote in the TOML, printed back as TOML would spell it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: how the report shows a config value that is empty or unset (``[]``, ``{}``, ``""``)
EMPTY = "—"
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_value(v: Any) -> str:
    """A value of a result table as text.

    Parameters
    ----------
    v : Any
        A cell: a number, a string, a boolean, ``None`` (a NaN that went through JSON).

    Returns
    -------
    str
        Floats from 1 up with two decimals and thousands separators (``1,234.50``), below 1
        with three significant digits, trailing zeros kept (``0.912``, ``0.500``,
        ``-0.00446``, ``1.00e-05``), zero as ``0``
        (never ``-0.00``); integers with thousands separators; ``true`` / ``false``; NaN and
        ``None`` as ``n/a``; anything else as :class:`str` does.
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "n/a"
        if v == 0:
            return "0"
        return f"{v:,.2f}" if abs(v) >= 1 else f"{v:#.3g}"  # ("0.5" beside "0.833": no)
    if isinstance(v, int):
        return f"{v:,}"
    return "n/a" if v is None else str(v)


def format_config(v: Any) -> str:
    """A config value as the TOML it came from.

    Parameters
    ----------
    v : Any
        A value of a resolved config (``config.json``).

    Returns
    -------
    str
        Floats as Python's ``repr`` (``0.001``, ``1000.0``, ``1e-05``: TOML reads them back
        to the same float), ``true`` / ``false``, lists and tables as inline TOML
        (``["pix", "fou"]``, ``{kind = "label_rr"}``), a string as it is; :data:`EMPTY` for
        an empty or unset value (``[]``, ``{}``, ``""``, ``None``).
    """
    if v is None or (isinstance(v, (str, list, tuple, dict)) and not v):
        return EMPTY
    return v if isinstance(v, str) else _toml(v)


def _toml(v: Any) -> str:
    """``v`` in TOML's inline syntax."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)  # 0.001, 1000.0, 1e-05, inf, nan: all TOML
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_toml(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


def _key(k: Any) -> str:
    k = str(k)
    return k if _BARE_KEY.fullmatch(k) else json.dumps(k, ensure_ascii=False)
