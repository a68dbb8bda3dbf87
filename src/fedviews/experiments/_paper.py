"""The papers' reported numbers (copied into the package; see paper_tables.json)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def paper_tables() -> dict[str, Any]:
    """Numbers transcribed from the four papers, for side-by-side tables."""
    text = resources.files("fedviews.experiments").joinpath("paper_tables.json").read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def fedmv_paper_tables() -> list[str]:
    """The FedMV paper's tables a FedMV experiment may print beside its results."""
    return [k for k in paper_tables() if k.startswith("fedmv_table")]


def mmvfl_paper_rows() -> list[str]:
    """The datasets of MMVFL's Table 2 (the rows an MMVFL experiment may print)."""
    return [k for k in paper_tables()["mmvfl_table2_performance_differences"] if k != "_about"]
