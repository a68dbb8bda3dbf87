"""The docs hook that renders committed benchmark results (``docs/hooks/bench_results.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_results", ROOT / "docs/hooks/bench_results.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("name", "algorithms"),
    [("bench_flower", {"mmvfl", "vfedmv"}), ("bench_flower_batch", {"splitnn", "multivfl"})],
)
def test_flower_page_renders_the_committed_benchmark(name, algorithms):
    """docs/flower.md's tables are bench_flower.py's committed JSON files, every row of them:
    the coarse-round algorithms, and the per-batch ones (deployment engine with fedviews'
    executor only: Flower's refuses them)."""
    hook = _hook()
    page = (ROOT / "docs/flower.md").read_text()
    assert f"<!-- bench: {name} -->" in page
    res = json.loads((ROOT / f"docs/results/{name}.json").read_text())
    assert res["command"].startswith("python benchmarks/bench_flower.py")
    assert set(res["algorithms"]) == algorithms
    text = hook.render_page(page)
    assert "<!-- bench:" not in text and res["command"] in text
    for table in res["algorithms"].values():
        transports = [r["transport"] for r in table["rows"]]
        assert transports[:2] == ["in-process", "fedviews gRPC hub"]
        assert "Flower deployment (fedviews executor)" in transports
        for r in table["rows"]:
            assert f"| {r['transport']} | {r['rounds']} | {r['seconds_per_round']:.4f} |" in text
            assert r["equal_to_in_process"] is True


def test_a_missing_result_fails_the_build(tmp_path):
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="no docs/results/nope.json"):
        _hook().render_page("<!-- bench: nope -->\n", root=tmp_path)
