"""The runnable example at the top of an algorithm's page runs as printed and learns.

Only data-size knobs are made smaller (each replacement must match the page, so a changed page
fails here until this test follows it); everything else, hyper-parameters included, is the
page's. Held-out accuracy must reach three times chance, as in ``test_defaults_learn``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def first_python_block(page: str) -> str:
    """The first ```python block of ``docs/<page>``."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, f"docs/{page} has no python block"
    return match.group(1)


def smaller(block: str, replacements: dict[str, str]) -> str:
    """``block`` with each key replaced by its value; every key must occur exactly once."""
    for old, new in replacements.items():
        assert block.count(old) == 1, f"the page's example no longer contains {old!r}"
        block = block.replace(old, new)
    return block


def test_the_multivfl_page_example_learns() -> None:
    torch = pytest.importorskip("torch")
    block = smaller(
        first_python_block("algorithms/multivfl.md"),
        {
            "samples_per_owner=5000": "samples_per_owner=500",
            "rounds=6": "rounds=2",
            "eval_set=(te.images, te.y)": "eval_set=(te.images[:1000], te.y[:1000])",
            "verbose=True": "verbose=False",
        },
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    namespace: dict[str, Any] = {}
    try:
        exec(compile(block, "docs/algorithms/multivfl.md", "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
    est = namespace["est"]
    assert len(est.history_["accuracy"]) == 2
    assert est.history_["accuracy"][-1] >= 0.30
    assert est.predict(namespace["te"].images[:10]).shape == (10,)
    assert est.transport_.log.crossings()


def test_the_runtime_page_example_runs_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/runtime.md's first federation: the sums, the crossings and the refusal it prints."""
    exec(compile(first_python_block("runtime.md"), "runtime.md", "exec"), {"__name__": "page"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "{'a -> coordinator': ['s'], 'b -> coordinator': ['s']}"
    assert lines[2].startswith("LogEntry(sender='a', receiver='coordinator', round=0, kind=")
    assert lines[3].startswith("privacy policy 'colsum' forbids 'a' (party) from sending ['X']")
