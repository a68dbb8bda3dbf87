"""One rule for result cells, one for config values: digits kept, never ``-0.00``."""

from __future__ import annotations

import pytest

from fedviews._tables import tomllib  # tomli before Python 3.11
from fedviews.report import format_config, format_value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (91.2345, "91.23"),
        (1234.5, "1,234.50"),
        (0.91234, "0.912"),
        (-0.004464, "-0.00446"),  # Table 2's small differences: not -0.00
        (-0.0, "0"),
        (0.0, "0"),
        (1e-05, "1.00e-05"),  # a delta: not 0.00
        (-0.4, "-0.400"),  # three digits as beside -0.833 (it read -0.4)
        (float("nan"), "n/a"),
        (None, "n/a"),
        (True, "true"),
        (3000, "3,000"),
        ("90.00 ± 1.00", "90.00 ± 1.00"),
    ],
)
def test_result_cells_keep_their_digits(value, text):
    assert format_value(value) == text


@pytest.mark.parametrize(
    "value",
    [
        0.001,
        1000.0,
        1e-05,
        1024.0,
        -0.0,
        1e300,
        True,
        False,
        3,
        [0.1, 1.0],
        ["pix", "fou"],
        {"kind": "label_rr", "epsilon": 2.0},
        [{"label": "RR", "defense": {"kind": "x"}}],
        {"strip 0": "127.0.0.1:7101"},
        'say "hi"',
    ],
)
def test_config_values_read_back_as_the_toml_they_came_from(value):
    text = format_config(value)
    if isinstance(value, str):
        assert text == value
    else:
        assert tomllib.loads(f"v = {text}")["v"] == value


def test_empty_config_values_are_one_dash():
    assert {format_config(v) for v in ([], {}, "", None)} == {"—"}
    assert format_config(0.001) == "0.001" and format_config(1000.0) == "1000.0"
