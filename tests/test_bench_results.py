"""The docs hook that renders committed benchmark results (``docs/hooks/bench_results.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from _modules import load_file

ROOT = Path(__file__).resolve().parents[1]


def _hook() -> ModuleType:
    return load_file(ROOT / "docs/hooks/bench_results.py")


def _flower_record_checks(text: str, tables: list[dict]) -> None:
    """Every row of a Flower record of the old layout is on the rendered page, a run equal
    to in-process."""
    for table in tables:
        for r in table["rows"]:
            assert f"| {r['transport']} | {r['rounds']} | {r['seconds_per_round']:.4f} |" in text
            assert r["equal_to_in_process"] is True


@pytest.mark.parametrize(
    ("name", "algorithms"),
    [("bench_flower", {"mmvfl", "vfedmv"}), ("bench_flower_batch", {"splitnn", "multivfl"})],
)
def test_flower_page_renders_the_committed_benchmark(name, algorithms, tmp_path, monkeypatch):
    """docs/flower.md's tables are bench_flower.py's committed JSON files, every row of them:
    the coarse-round algorithms, and the per-batch ones (deployment engine with fedviews'
    executor only: Flower's refuses them). The committed files predate the standard record
    that bench_flower.py now writes (``rounds_table`` + ``write_record``); the same numbers
    in that layout render on the page too, so re-recording them changes no test."""
    hook = _hook()
    page = (ROOT / "docs/flower.md").read_text()
    assert f"<!-- bench: {name} -->" in page
    res = json.loads((ROOT / f"docs/results/{name}.json").read_text())
    assert res["command"].startswith("python benchmarks/bench_flower.py")
    if "tables" in res:  # re-recorded: the standard record
        old = None
        assert {t["title"].split(",")[0] for t in res["tables"]} == algorithms
    else:
        old = res
        assert set(res["algorithms"]) == algorithms
    text = hook.render_page(page)
    assert "<!-- bench:" not in text and res["command"] in text
    if old is not None:
        monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its own helper modules
        _flower_record_checks(text, list(old["algorithms"].values()))
        bench = load_file(ROOT / "benchmarks/bench_flower.py")
        tables = [bench.rounds_table(a, t) for a, t in old["algorithms"].items()]
        monkeypatch.setattr("sys.argv", old["command"].split()[1:])
        path = tmp_path / f"docs/results/{name}.json"
        _record_module().write_record(path, "Flower rounds", tables, flwr=old["flwr"])
        res = json.loads(path.read_text())
        text = hook.render_page(f"<!-- bench: {name} -->\n", root=tmp_path)
    for table in res["tables"]:
        assert table["title"] in text
        transports = [row[0] for row in table["rows"]]
        assert transports[:2] == ["in-process", "fedviews gRPC hub"]
        assert "Flower deployment (fedviews executor)" in transports
        for row in table["rows"]:
            assert row[-1] == "yes"  # equal to in-process
            assert f"| {row[0]} | {row[1]} |" in text


def test_a_missing_result_fails_the_build(tmp_path):
    from mkdocs.exceptions import PluginError

    with pytest.raises(PluginError, match="no docs/results/nope.json"):
        _hook().render_page("<!-- bench: nope -->\n", root=tmp_path)


def _record_module() -> ModuleType:
    return load_file(ROOT / "benchmarks/_record.py")


def test_a_benchmark_record_renders_with_its_command_machine_and_table(tmp_path, monkeypatch):
    """What ``--json PATH`` of a benchmark writes (benchmarks/_record.py) is what the hook
    renders: title, command (with the environment that shaped it), date, machine, load, wall
    time, then every row of the table."""
    rec = _record_module()
    monkeypatch.setattr("sys.argv", ["benchmarks/bench_x.py", "--clock", "cpu"])
    for name in rec._ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    table = rec.ratio_table("x epoch", [1.0, 2.0], {"federated": [1.5, 2.2]})
    path = tmp_path / "docs/results/bench_x.json"
    rec.write_record(path, "x benchmark", [table], flwr="1.42.0")
    res = json.loads(path.read_text())
    assert res["command"] == "OMP_NUM_THREADS=1 python benchmarks/bench_x.py --clock cpu"
    assert table["rows"][1][1:4] == [1.5, "1.500, 2.200", 1.3]  # median of 1.5 and 1.1
    text = _hook().render_page("intro\n<!-- bench: bench_x -->\nafter\n", root=tmp_path)
    head = text.splitlines()[1]
    assert head.startswith(f"*x benchmark*: `{res['command']}` — {res['date']}, ")
    assert res["machine"]["cpu"] in head and f"torch {res['machine']['torch']}" in head
    assert "flwr 1.42.0" in head and f"wall time {res['wall_seconds']:g} s" in head
    assert "| run | s / epoch (best) | runs | × plain loop (median of pairs) | pairs |" in text
    assert "| plain loop | 1.00 | 1.000, 2.000 | — | — |" in text
    assert "| federated | 1.50 | 1.500, 2.200 | 1.30 | 1.500, 1.100 |" in text
    assert text.startswith("intro\n") and text.endswith("after\n")


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        (lambda r: r.pop("tables"), "no tables"),
        (lambda r: r["machine"].pop("cpu"), "no machine.cpu"),
        (lambda r: r["tables"][0]["rows"][0].pop(), "table .x.: a row of 4 cells under 5 columns"),
        (lambda r: r["tables"][0].pop("columns"), "a table without columns"),
        (lambda r: r.update(tables=[]), "no table"),
    ],
)
def test_a_malformed_record_fails_the_build_naming_the_file(tmp_path, broken, why):
    from mkdocs.exceptions import PluginError

    rec = _record_module()
    path = tmp_path / "docs/results/bench_x.json"
    rec.write_record(path, "x", [rec.ratio_table("x", [1.0], {"federated": [1.2]})])
    res = json.loads(path.read_text())
    broken(res)
    path.write_text(json.dumps(res))
    with pytest.raises(PluginError, match=f"docs/results/bench_x.json is malformed: {why}"):
        _hook().render_page("<!-- bench: bench_x -->\n", root=tmp_path)
    path.write_text("{not json")
    with pytest.raises(PluginError, match="bench_x.json is malformed: Expecting"):
        _hook().render_page("<!-- bench: bench_x -->\n", root=tmp_path)


def test_every_committed_benchmark_result_is_rendered_on_a_page():
    """Each ``docs/results/bench_*.json`` renders and is shown by a ``<!-- bench -->`` mark."""
    hook = _hook()
    marked = {}
    for page in (ROOT / "docs").glob("**/*.md"):
        for name in hook.MARK.findall(page.read_text(encoding="utf-8")):
            marked[name] = page
    files = sorted(p.stem for p in (ROOT / "docs/results").glob("bench_*.json"))
    assert len(files) >= 6
    for name in files:
        assert name in marked, f"docs/results/{name}.json: no <!-- bench: {name} --> on a page"
        hook.render_page(f"<!-- bench: {name} -->\n")
