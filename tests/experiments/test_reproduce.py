"""``fedviews reproduce``: the manifest, ``--list``, ``--check`` against committed results,
``--record``, the docs hook that renders them, and no hand-typed results table in the docs."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from _cli import ROOT, fedviews

from _modules import load_file
from fedviews.errors import ConfigError
from fedviews.experiments._render import render_markdown, render_tables
from fedviews.experiments._reproduce import MANIFEST, compare_tables, load_manifest, read_results

#: a fast, deterministic smoke entry (V-FedMV, one split: a few seconds)
FAST = "vfedmv_smoke"


def _copy_entry(tmp_path: Path, name: str) -> Path:
    """A manifest in ``tmp_path`` holding only ``name``, with its config and committed results."""
    src = (ROOT / MANIFEST).read_text(encoding="utf-8")
    block = re.search(rf"^\[{name}\]\n.*?(?=^\[|\Z)", src, flags=re.S | re.M)
    assert block is not None
    entry = load_manifest(ROOT / MANIFEST)[name]
    for rel in (entry.config, entry.results):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    (tmp_path / MANIFEST).write_text(block.group(0), encoding="utf-8")
    return tmp_path / MANIFEST


def test_list_shows_every_entry_with_tier_and_cost():
    r = fedviews("reproduce", "--list")
    assert r.returncode == 0, r.stderr
    entries = load_manifest(ROOT / MANIFEST)
    lines = r.stdout.splitlines()
    for e in entries.values():
        row = next((ln for ln in lines if f"│ {e.name} " in ln), None)
        assert row is not None, e.name
        made = read_results(ROOT / e.results)
        took = None if made is None else made.get("cells_seconds", made.get("wall_seconds"))
        # what the committed run took; the typed estimate only where none is committed
        said = f"~{e.cost_s:g} s (estimate)" if took is None else f"{took:.0f} s recorded"
        assert f"│ {e.tier} " in row and said in row, row


def test_smoke_tier_has_an_entry_per_algorithm():
    smoke = [e for e in load_manifest(ROOT / MANIFEST).values() if e.tier == "smoke"]
    experiments = {e.config for e in smoke}
    for config in (
        "configs/mmvfl_handwritten.toml",
        "configs/fedmv_vertical_handwritten.toml",
        "configs/fedmv_horizontal_handwritten.toml",
        "configs/sfedmv_watch.toml",
        "configs/multivfl_fig3_mnist.toml",
        "configs/apfed_table2_mnist.toml",  # APFed-R, APFed-C, TVFL, SingleVL
        "configs/defenses_splitnn_mnist.toml",  # split NN: its accuracy and what leaks
        "configs/audit_mmvfl_handwritten.toml",  # the leakage audit
        "configs/defenses_vfedmv_handwritten.toml",  # a defense sweep
    ):
        assert config in experiments, config
    assert sum(e.cost_s for e in smoke) < 360  # CI runs them all: under 6 minutes on 2 cores
    for e in smoke:  # every smoke entry is committed: CI checks it
        assert (ROOT / e.results).is_file(), e.results


def test_check_passes_then_names_a_number_changed_by_hand(tmp_path):
    manifest = _copy_entry(tmp_path / "repo", FAST)
    r = fedviews("reproduce", FAST, "--check", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches the committed results" in r.stdout
    assert (tmp_path / "runs").is_dir()  # the run folders, under the working directory

    results = tmp_path / "repo" / load_manifest(manifest)[FAST].results
    rec = json.loads(results.read_text(encoding="utf-8"))
    row = rec["tables"][0]["rows"][0]
    committed = row[1]
    mean = float(committed.split(" ± ")[0])
    row[1] = committed.replace(f"{mean:.2f}", f"{mean - 0.5:.2f}", 1)
    rec["machine"]["cpu"] = "Another CPU"
    results.write_text(json.dumps(rec), encoding="utf-8")
    r = fedviews(
        "reproduce",
        FAST,
        "--check",
        "-q",
        "--manifest",
        str(manifest),
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    title, column = rec["tables"][0]["title"], rec["tables"][0]["columns"][1]
    assert (
        f"drift: {FAST}: table {title!r}, row {row[0]!r}, column {column!r}: "
        f"committed {row[1]!r}, fresh {committed!r} (tolerance 0.01)" in r.stderr
    ), r.stderr
    # where this machine differs from the record's (its CPU here), after the drifts
    assert f"note: {FAST} was recorded on another machine (cpu: Another CPU -> " in r.stderr
    assert "Traceback" not in r.stderr


def test_record_writes_tables_and_provenance(tmp_path):
    manifest = _copy_entry(tmp_path, FAST)
    entry = load_manifest(manifest)[FAST]
    before = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    (tmp_path / entry.results).unlink()
    r = fedviews("reproduce", FAST, "--record", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    assert rec["tables"] == before["tables"]  # deterministic: the committed numbers exactly
    assert rec["command"] == f"fedviews reproduce {FAST} --record"
    assert rec["run_command"].startswith(f"fedviews run {entry.config} params.n_repeats=1")
    assert {"cpu", "cores", "gpu"} <= set(rec["machine"]) and rec["wall_seconds"] > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", rec["date"])


def test_compare_tables_checks_every_number():
    table = {
        "title": "t",
        "columns": ["method", "acc", "seconds"],
        "rows": [["a", "90.00 ± 1.00", 3.0], ["b", 80.0, float("nan")]],
    }
    same = json.loads(json.dumps(table))
    same["rows"][0][2] = 99.0  # a timing: unchecked
    same["rows"][1][1] = 80.01
    assert compare_tables("e", [table], [same], 0.01, unchecked=["seconds"]) == []
    moved = json.loads(json.dumps(same))
    moved["rows"][0][1] = "90.00 ± 1.02"
    moved["rows"][1][0] = "c"
    drifts = compare_tables("e", [table], [moved], 0.01, unchecked=["seconds"])
    assert [(d.row, d.column) for d in drifts] == [("a", "acc"), ("b", "method")]
    assert compare_tables("e", [table], [], 0.01)[0].table == "(tables)"
    assert compare_tables("e", [table], [table], 0.01) == []  # nan equals nan


def test_check_compares_integers_exactly_whatever_the_tolerance():
    table = {
        "title": "t",
        "columns": ["alpha", "rounds", "reached", "acc"],
        "rows": [["1", 792, "3 of 3", "90.00 ± 1.00"]],
    }
    near = json.loads(json.dumps(table))
    near["rows"][0][3] = "90.90 ± 1.00"  # a float: within the tolerance
    near["rows"][0][1] = 792.0  # the same count, written as a float
    assert compare_tables("e", [table], [near], 1.0) == []
    moved = json.loads(json.dumps(table))
    moved["rows"][0][1:3] = [793, "2 of 3"]  # one round, one seed: within 1.0, but counts
    drifts = compare_tables("e", [table], [moved], 1.0)
    assert [(d.column, d.fresh, d.tolerance) for d in drifts] == [
        ("rounds", 793, 0),
        ("reached", "2 of 3", 0),
    ]
    assert "(tolerance 0)" in str(drifts[0])
    off = json.loads(json.dumps(table))
    off["rows"][0][1] = 792.5  # a count that turned fractional
    assert [d.column for d in compare_tables("e", [table], [off], 1.0)] == ["rounds"]


def test_bad_manifest_is_a_clean_error(tmp_path):
    bad = tmp_path / MANIFEST
    bad.write_text('[x]\ntitle = "x"\ntier = "smoke"\nconfig = "c.toml"\n', encoding="utf-8")
    r = fedviews("reproduce", "--list", "--manifest", str(bad))
    assert r.returncode == 2 and "error: ConfigError" in r.stderr and "Traceback" not in r.stderr
    bad.write_text('[x]\ntier = "smok"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="missing"):
        load_manifest(bad)
    bad.write_text(
        '[x]\ntitle = "x"\ntier = "smok"\nconfig = "c.toml"\nresults = "r.json"\n'
        'page = "p.md"\ncost_s = 1\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="tier must be one of"):
        load_manifest(bad)
    r = fedviews("reproduce", "no_such_entry", "--check")
    assert r.returncode == 2 and "no reproduction 'no_such_entry'" in r.stderr
    r = fedviews("reproduce", "--check")  # not every entry, hours of it, by accident
    assert r.returncode == 2 and "give entry NAMEs or --tier" in r.stderr
    r = fedviews("reproduce", FAST, "--check", "--record")
    assert r.returncode == 2 and "give one" in r.stderr


def test_an_entry_puts_its_pythonpath_on_the_path_of_its_config(tmp_path):
    """``fedridge_handwritten``'s config imports modules of docs/examples, which fedviews does
    not ship: the entry's ``pythonpath`` puts that folder on the path (nobody sets
    ``PYTHONPATH``), its run line shows it, and ``--check`` matches the committed numbers."""
    name = "fedridge_handwritten"
    entry = load_manifest(ROOT / MANIFEST)[name]
    assert entry.run_command == f"PYTHONPATH=docs/examples fedviews run {entry.config}"
    r = fedviews("reproduce", name, "--check", "-q", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches the committed results" in r.stdout
    bad = tmp_path / MANIFEST
    (tmp_path / "c.toml").write_text("", encoding="utf-8")
    common = 'title = "x"\ntier = "smoke"\nresults = "r.json"\npage = "p.md"\ncost_s = 1\n'
    bad.write_text(f'[x]\n{common}config = "c.toml"\npythonpath = ["nope"]\n', "utf-8")
    with pytest.raises(ConfigError, match="pythonpath folder nope does not exist"):
        load_manifest(bad)
    bad.write_text(f'[x]\n{common}script = "c.toml"\npythonpath = ["."]\n', "utf-8")
    with pytest.raises(ConfigError, match="overrides and pythonpath with a config"):
        load_manifest(bad)


# --- the docs ---


def _hook() -> ModuleType:
    return load_file(ROOT / "docs" / "hooks" / "reproductions.py", "reproductions_hook")


def test_hook_renders_committed_tables_with_provenance():
    pytest.importorskip("mkdocs")
    hook = _hook()
    page = hook.render_page(f"intro\n\n<!-- reproduce: {FAST} -->\n\nafter\n")
    entry = load_manifest(ROOT / MANIFEST)[FAST]
    rec = json.loads((ROOT / entry.results).read_text(encoding="utf-8"))
    first = rec["tables"][0]
    assert f"**{first['title']}**" in page
    assert "| " + " | ".join(first["columns"]) + " |" in page
    assert "| " + " | ".join(str(v) for v in first["rows"][0]) + " |" in page
    assert rec["date"] in page and rec["machine"]["cpu"] in page
    assert f"wall time {rec['wall_seconds']:g} s" in page and rec["run_command"] in page
    assert page.startswith("intro\n") and page.endswith("after\n")
    with pytest.raises(Exception, match="no such entry"):
        hook.render_page("<!-- reproduce: nope -->\n")


def test_asterisks_of_a_title_or_note_stay_text():
    """A note such as ``w*: closed form ...`` (fedridge_handwritten's) renders as one
    emphasis with its asterisk, not as an emphasised ``w`` and a stray ``*``."""
    markdown = pytest.importorskip("markdown")
    table = {"title": "a*b", "columns": ["x"], "rows": [[1]], "note": "w*: closed form"}
    html = markdown.markdown("\n".join(render_tables([table])), extensions=["tables"])
    assert "<strong>a*b</strong>" in html and "<em>w*: closed form</em>" in html


def test_an_entry_without_results_renders_as_not_reproduced():
    entry = next(e for e in load_manifest(ROOT / MANIFEST).values() if e.tier == "full")
    text = render_markdown(entry, None)
    assert "Not reproduced yet" in text and f"fedviews reproduce {entry.name} --record" in text


#: pages that present experiment results (benchmark timings of the runtime, deployment and
#: PSI live in docs/deployment-benchmarks.md, flower.md, threat-model.md and benchmarks.md, made by
#: the benchmarks/ scripts, not by experiment configs)
RESULT_PAGES = ("README.md", "docs/index.md", "docs/experiments.md", "docs/algorithms/*.md")
RESULT_PAGES += ("docs/privacy/*.md", "docs/adding-an-algorithm.md")
#: a number with a decimal point, outside code spans
_DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+")

#: results tables still typed by hand (page, first header cell): none is left; a results
#: table is a manifest entry's committed run, rendered (keep this empty)
HAND_TYPED: set[tuple[str, str]] = set()


def _tables(text: str) -> list[list[str]]:
    """The Markdown tables of ``text`` outside fenced code, each as its lines."""
    out: list[list[str]] = []
    fenced = False
    current: list[str] = []
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            current.append(line)
            continue
        if current:
            out.append(current)
            current = []
    return out


def results_tables(page: Path) -> list[str]:
    """The first header cell of every *results table* of ``page``: a Markdown table (outside
    fenced code) with a number with a decimal point in a body row, outside code spans."""
    found = []
    for table in _tables(page.read_text(encoding="utf-8")):
        body = [re.sub(r"`[^`]*`", "", row) for row in table[2:]]
        if any(_DECIMAL.search(row) for row in body):
            found.append(table[0].strip("|").split("|")[0].strip())
    return found


def _hand_typed(patterns: tuple[str, ...], allowed: set[tuple[str, str]], how: str) -> int:
    """Fail on a results table of the pages ``patterns`` that is neither rendered nor in
    ``allowed`` (page, first header cell), and on an entry of ``allowed`` that is gone;
    the number of pages."""
    pages = sorted({p for pattern in patterns for p in ROOT.glob(pattern)})
    seen = set()
    for page in pages:
        rel = page.relative_to(ROOT).as_posix()
        for head in results_tables(page):
            assert (rel, head) in allowed, (
                f"{rel}: the results table '| {head} |...' is typed by hand: {how}"
            )
            seen.add((rel, head))
    assert seen == allowed, f"rendered now, drop from the allowance: {allowed - seen}"
    return len(pages)


def test_no_docs_page_holds_a_hand_typed_results_table():
    how = f"make it a manifest entry and render it with <!-- reproduce: NAME --> ({MANIFEST})"
    assert _hand_typed(RESULT_PAGES, HAND_TYPED, how) > 8


#: the pages of benchmark results, made by the benchmarks/ scripts
BENCH_PAGES = ("docs/benchmarks.md", "docs/deployment-benchmarks.md", "docs/flower.md")
#: benchmark tables still typed by hand (page, first header cell), each a dated historical
#: measurement whose command the page shows, of a run that cannot be made on the 2-core CI
#: VM; shrink this set, never grow it
BENCH_HAND_TYPED = {
    # code before 4c00cbf against after, loaded VM: the old code's run cannot be repeated
    ("docs/deployment-benchmarks.md", "Multi-VFL, 4 rounds"),
    # perf record -a samples per epoch: needs perf and root, not a benchmarks/ script
    ("docs/deployment-benchmarks.md", "per epoch"),
    # every party on one H200 (16 cores): the lead re-runs it on a GPU with --json
    ("docs/deployment-benchmarks.md", "Multi-VFL over loopback gRPC"),
    # cProfile of one CUDA epoch (bench_multivfl.py --device cuda --profile 20), H200
    ("docs/deployment-benchmarks.md", "cost, one federated CUDA epoch"),
    # old and new code in turn on the H200 (pinned host memory): the old code is gone
    ("docs/deployment-benchmarks.md", ""),
    # sudo bench_wan.py: network namespaces and TUN devices need root
    ("docs/deployment-benchmarks.md", "algorithm, one round"),
}


def test_no_benchmark_page_holds_a_hand_typed_table():
    how = (
        "run its benchmark with --json docs/results/bench_NAME.json and render it with "
        "<!-- bench: bench_NAME --> (docs/hooks/bench_results.py)"
    )
    assert _hand_typed(BENCH_PAGES, BENCH_HAND_TYPED, how) == len(BENCH_PAGES)


def test_every_rendered_entry_is_on_its_page():
    entries = load_manifest(ROOT / MANIFEST)
    marked = {}
    for page in ROOT.glob("docs/**/*.md"):
        for name in re.findall(r"^<!-- reproduce: ([\w.-]+) -->$", page.read_text(), flags=re.M):
            marked[name] = page.relative_to(ROOT).as_posix()
    for name, page in marked.items():
        assert name in entries and entries[name].page == page, name
    for e in entries.values():  # a committed result is shown in the docs
        if (ROOT / e.results).is_file():
            assert marked.get(e.name) == e.page, f"{e.name}: no <!-- reproduce --> on {e.page}"


@pytest.mark.slow
def test_smoke_tier_reproduces_the_committed_numbers(tmp_path):
    # a cap past the whole tier on a busy machine: 541 s under load (a 2-core machine
    # shared with 3 other jobs), where 600 s would be reached at a little more load
    r = fedviews(
        "reproduce", "--tier", "smoke", "--check", "-q", "--out", str(tmp_path), timeout=2400
    )
    assert r.returncode == 0, r.stdout + r.stderr
    smoke = [e for e in load_manifest(ROOT / MANIFEST).values() if e.tier == "smoke"]
    assert r.stdout.count("matches the committed results") == len(smoke), r.stdout


def test_continue_records_a_run_made_over_sessions(tmp_path, monkeypatch):
    """``--record --continue``: each finished cell is committed at once; a killed run loses
    only the cell in progress and the next ``--continue`` finishes the same tables."""
    from fedviews.errors import FedViewsError
    from fedviews.experiments import reproduce
    from fedviews.experiments._config import load_config
    from fedviews.experiments._runner import RunContext

    name = "defenses_vfedmv_smoke"  # one cell per defense setting, a few seconds
    manifest = _copy_entry(tmp_path, name)
    entry = load_manifest(manifest)[name]
    committed = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    (tmp_path / entry.results).unlink()
    cell, computed = RunContext.cell, []

    def dies_at_the_second(self, key, compute):
        def counted():
            if len(computed) == 1:
                raise KeyboardInterrupt  # the session ends
            computed.append(key)
            return compute()

        return cell(self, key, counted)

    monkeypatch.setattr(RunContext, "cell", dies_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        reproduce(entry, tmp_path, out_dir=tmp_path / "a", record=True, resume=True)
    saved = json.loads((tmp_path / entry.cells).read_text(encoding="utf-8"))
    assert list(saved["cells"]) == computed and len(computed) == 1
    assert list(saved["seconds"]) == computed  # each cell's compute time, kept across sessions
    assert not (tmp_path / entry.results).exists()
    # a parameter added to the experiment since (at its default) does not orphan the cells
    params = load_config(tmp_path / entry.config, entry.overrides).params
    added = next(
        f.name
        for f in dataclasses.fields(params)
        if f.default is not dataclasses.MISSING and getattr(params, f.name) == f.default
    )
    del saved["config"]["params"][added]
    (tmp_path / entry.cells).write_text(json.dumps(saved), encoding="utf-8")

    monkeypatch.setattr(RunContext, "cell", cell)
    out = reproduce(entry, tmp_path, out_dir=tmp_path / "b", record=True, resume=True)
    rec = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    assert rec["tables"] == committed["tables"]  # the same numbers as one uninterrupted run
    assert out.recorded is not None and not (tmp_path / entry.cells).exists()
    # the wall time is this session's; the cells' summed time covers both sessions
    assert rec["cells_seconds"] >= saved["seconds"][computed[0]]
    assert f"its cells took {rec['cells_seconds']:g} s in all" in render_markdown(entry, rec)

    saved["config"]["seed"] += 1  # cells of another config are never mixed in
    (tmp_path / entry.cells).write_text(json.dumps(saved), encoding="utf-8")
    with pytest.raises(FedViewsError, match="made by another config"):
        reproduce(entry, tmp_path, out_dir=tmp_path / "c", record=True, resume=True)


def test_a_script_entry_records_and_checks_a_benchmarks_tables(tmp_path):
    """``script = ...``: the tables come from ``python SCRIPT ARGS --json FILE`` (a benchmark);
    its timing columns are recorded but not checked."""
    (tmp_path / "bench.py").write_text(
        "import json, sys, time\n"
        "out = sys.argv[sys.argv.index('--json') + 1]\n"
        "n = int(sys.argv[1])\n"
        "rows = [['a', float(n), time.perf_counter()]]\n"
        "json.dump({'tables': [{'title': 't', 'columns': ['x', 'MB', 'seconds'], "
        "'rows': rows, 'note': ''}]}, open(out, 'w'))\n",
        encoding="utf-8",
    )
    entry = (
        '[b]\ntitle = "a benchmark"\ntier = "full"\nscript = "bench.py"\nargs = ["{n}"]\n'
        'cost_s = 1\nunchecked = ["seconds"]\nresults = "b.json"\npage = "p.md"\n'
    )
    manifest = tmp_path / MANIFEST
    manifest.write_text(entry.format(n=3), encoding="utf-8")
    r = fedviews("reproduce", "b", "--record", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))
    assert rec["run_command"] == "python bench.py 3" and rec["tables"][0]["rows"][0][1] == 3.0
    r = fedviews("reproduce", "b", "--check", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr  # another time, the same MB
    manifest.write_text(entry.format(n=4), encoding="utf-8")
    r = fedviews("reproduce", "b", "--check", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode == 1 and "column 'MB': committed 3, fresh 4" in r.stderr, r.stderr
    manifest.write_text(entry.format(n="x"), encoding="utf-8")  # the script fails
    r = fedviews("reproduce", "b", "--check", "-q", "--manifest", str(manifest), cwd=tmp_path)
    assert r.returncode != 0 and "b: python bench.py x failed:" in r.stderr, r.stderr
    assert "ValueError: invalid literal" in r.stderr  # the end of the script's own output


def test_record_copies_the_runs_figures_to_the_docs_and_check_leaves_them(tmp_path):
    """``figures = {RUN FILE = DOCS PATH}``: ``--record`` copies the run's figure to the docs
    (a page's figure is the committed run's); ``--check`` leaves the docs as they are; a
    figure that the run did not make stops ``--record`` before it writes anything."""
    (tmp_path / "bench.py").write_text(
        "import json, sys, time, pathlib\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--json') + 1])\n"
        "json.dump({'tables': [{'title': 't', 'columns': ['x', 'MB'], "
        "'rows': [['a', 1.0]], 'note': ''}]}, open(out, 'w'))\n"
        "(out.parent / 'fig.png').write_text(f'made at {time.perf_counter()}')\n",
        encoding="utf-8",
    )
    entry = (
        '[b]\ntitle = "a benchmark"\ntier = "full"\nscript = "bench.py"\ncost_s = 1\n'
        'results = "b.json"\npage = "p.md"\nfigures = {{ "{made}" = "img/b.png" }}\n'
    )
    manifest = tmp_path / MANIFEST
    manifest.write_text(entry.format(made="fig.png"), encoding="utf-8")
    out = tmp_path / "runs"
    args = ["--manifest", str(manifest), "-q", "--out", str(out)]
    r = fedviews("reproduce", "b", "--record", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    recorded = (tmp_path / "img" / "b.png").read_text(encoding="utf-8")
    assert recorded == (out / "b" / "fig.png").read_text(encoding="utf-8")
    r = fedviews("reproduce", "b", "--check", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "b" / "fig.png").read_text(encoding="utf-8") != recorded  # a new run
    assert (tmp_path / "img" / "b.png").read_text(encoding="utf-8") == recorded
    manifest.write_text(entry.format(made="other.png"), encoding="utf-8")
    (tmp_path / "b.json").unlink()
    r = fedviews("reproduce", "b", "--record", *args, cwd=tmp_path)
    assert r.returncode != 0 and "b: the run made no " in r.stderr, r.stderr
    assert "other.png (figures)" in r.stderr and not (tmp_path / "b.json").exists()
    for made, dest in (("fig.png", "../b.png"), ("../fig.png", "img/b.png"), ("f", "/b.png")):
        text = entry.format(made=made).replace('"img/b.png"', f'"{dest}"')
        manifest.write_text(text, encoding="utf-8")
        r = fedviews("reproduce", "b", "--record", *args, cwd=tmp_path)
        assert r.returncode != 0 and "both relative" in r.stderr, r.stderr


def test_every_figure_of_the_manifest_is_in_the_docs():
    """Each docs figure that an entry's run makes exists (a page shows it)."""
    for entry in load_manifest(ROOT / MANIFEST).values():
        for dest in entry.figures.values():
            assert (ROOT / dest).is_file(), f"{entry.name}: {dest}"


def test_the_audit_digest_spans_each_role_attack_and_metric():
    """``<!-- reproduce-digest: ... -->``: one row per audit, role, attack and metric; a score
    as its range, an error (MSE) as its ratio to chance; an audit not run yet says so."""
    from fedviews.experiments._render import render_digest
    from fedviews.experiments._reproduce import Reproduction

    cols = ["attacker", "role", "observes", "attack", "secret", "aux", "metric", "value", "chance"]
    rows = [
        ["a", "party", "Z", "argmax", "labels of p", "none", "label recovery %", 90.0, 10.0],
        ["b", "party", "Z", "argmax", "labels of p", "none", "label recovery %", 100.0, 12.0],
        ["c", "coordinator", "Z_k of a", "inverse model", "features of a", "500 rows", "mse", "2", "8"],
        ["c", "coordinator", "Z_k of b", "inverse model", "features of b", "500 rows", "mse", "3", "4"],
    ]  # fmt: skip

    def entry(name: str) -> Reproduction:
        return Reproduction(name, "t", "full", f"{name}.json", "p.md", 1.0, config="c.toml")

    rec = {"tables": [{"title": "What leaks", "columns": cols, "rows": rows, "note": ""}]}
    lines = render_digest([(entry("done"), rec), (entry("later"), None)]).splitlines()
    assert lines[2] == (
        "| `done` | a, b (party) | Z | argmax | none | labels of p "
        "| **90.0–100.0** (label recovery %) | 10.0–12.0 |"
    )
    assert lines[3] == (
        "| `done` | c (coordinator) | Z_k of a, Z_k of b | inverse model | 500 rows "
        "| features of a, features of b | **0.25–0.75** × chance (mse) | 1 |"
    )
    assert "`later` | *not reproduced yet: `fedviews reproduce later --record`*" in lines[4]
    assert len(lines) == 5


def test_an_entry_in_progress_renders_its_committed_cells_and_the_continue_command():
    entry = load_manifest(ROOT / MANIFEST)[FAST]
    assert "Not reproduced yet" in render_markdown(entry, None)
    text = render_markdown(entry, None, cells=3)
    assert text.startswith(f'!!! note "In progress: {entry.title}"')
    assert f"3 finished cells of this run are committed in `{entry.cells}`" in text
    assert f"`fedviews reproduce {FAST} --record --continue`" in text


def test_continue_into_the_unfinished_run_folder_goes_on_from_it(tmp_path, monkeypatch):
    """``--continue --out DIR`` where DIR is this entry's killed run (say, carried back from
    a GPU machine) continues that folder: finished cells are not computed again; a folder
    of anything else is refused."""
    from fedviews.errors import FedViewsError
    from fedviews.experiments import reproduce
    from fedviews.experiments._runner import RunContext

    name = "defenses_vfedmv_smoke"
    manifest = _copy_entry(tmp_path, name)
    entry = load_manifest(manifest)[name]
    committed = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    (tmp_path / entry.results).unlink()
    cell, computed = RunContext.cell, []

    def counted(dies: bool):
        def wrapped(self, key, compute):
            def run():
                if dies and len(computed) == 1:
                    raise KeyboardInterrupt
                computed.append(key)
                return compute()

            return cell(self, key, run)

        return wrapped

    monkeypatch.setattr(RunContext, "cell", counted(dies=True))
    with pytest.raises(KeyboardInterrupt):
        reproduce(entry, tmp_path, out_dir=tmp_path / "a", record=True, resume=True)
    (tmp_path / entry.cells).unlink()  # only the run folder knows the finished cell
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x", encoding="utf-8")
    with pytest.raises(FedViewsError, match="not a run folder of defenses_vfedmv_smoke"):
        reproduce(entry, tmp_path, out_dir=tmp_path / "other", record=True, resume=True)
    monkeypatch.setattr(RunContext, "cell", counted(dies=False))
    reproduce(entry, tmp_path, out_dir=tmp_path / "a", record=True, resume=True)
    rec = json.loads((tmp_path / entry.results).read_text(encoding="utf-8"))
    assert rec["tables"] == committed["tables"]
    assert len(computed) == len(set(computed))  # the first cell was not computed again


def test_the_manifest_entry_that_experiments_md_prints_is_the_manifest_s():
    """The page's example entry had lost an override of the real one."""
    import tomllib

    page = (ROOT / "docs" / "experiments.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```toml\n(.*?)```", page, re.S) if "[vfedmv_smoke]" in b)
    shown = tomllib.loads(block)["vfedmv_smoke"]
    real = tomllib.loads((ROOT / MANIFEST).read_text(encoding="utf-8"))["vfedmv_smoke"]
    assert shown == real
