"""fedviews._tables: TOML written back (the Flower App's copy of a deployment config)."""

from __future__ import annotations

import datetime
import math
from pathlib import Path

import pytest

from fedviews._tables import dump_toml, read_toml, tomllib  # tomli before Python 3.11
from fedviews.errors import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_reads_back_equal(path):
    table = read_toml(path)
    assert tomllib.loads(dump_toml(table)) == table


def test_strings_keys_numbers_and_nesting_read_back_equal():
    table = {
        "name": 'quote " backslash \\ newline \n tab \t é 😀',
        "n": -3,
        "x": 1e-300,
        "big": float("inf"),
        "flags": [True, False],
        "mixed": [[1, 2], ["a"], {"k": 0.5}],
        "a table": {"odd key.with dot": 1, "inner": {"deep": {"v": "w"}}, "empty": {}},
    }
    back = tomllib.loads(dump_toml(table))
    assert back == table
    assert math.isnan(tomllib.loads(dump_toml({"v": float("nan")}))["v"])


def test_values_a_config_does_not_hold_are_refused():
    with pytest.raises(ConfigError, match="cannot be written to a TOML config"):
        dump_toml({"when": datetime.date(2026, 1, 1)})
