"""The documentation site: ``mkdocs build --strict`` passes, the configuration reference
documents every key of every ``Params`` dataclass, and the site renders offline."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _modules import load_file
from fedviews._params import constraint

ROOT = Path(__file__).resolve().parents[1]
HOOK = ROOT / "docs" / "hooks" / "config_reference.py"

for _mod in ("mkdocs", "material", "mkdocstrings_handlers.python"):
    pytest.importorskip(_mod, reason="the docs extra: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, strictly, from this checkout (its ``src`` first on the path)."""
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml")]
        + ["-d", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert "WARNING" not in log, log
    return out


def _hook(path: Path = HOOK) -> ModuleType:
    """The MkDocs hook module at ``path`` (default: the configuration reference's)."""
    return load_file(path)


def _param_classes() -> list[tuple[str, type]]:
    """(anchor scope, dataclass) of every table the reference must document."""
    from fedviews.deploy import FederationSpec, SplitSpec
    from fedviews.experiments import ExperimentConfig, list_experiments
    from fedviews.federation import ALGORITHMS, Defense, get_algorithm_spec

    out: list[tuple[str, type]] = [
        ("experiment", ExperimentConfig),
        ("federation", FederationSpec),
        ("data", SplitSpec),
        ("defense", Defense),
    ]
    out += [(f"experiment-{e.name}", e.params) for e in list_experiments()]
    out += [(f"algorithm-{n}", get_algorithm_spec(n).Params) for n in ALGORITHMS.names()]
    # the shipped ones: other tests register algorithms of their own (tests/...) in this
    # process, which the site (built in a fresh process) rightly does not document
    return [(scope, cls) for scope, cls in out if cls.__module__.startswith("fedviews.")]


def _rows(page: str) -> dict[str, list[str]]:
    """Row anchor → the row's cells (as text) of the generated reference page."""
    rows: dict[str, list[str]] = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S):
        anchor = re.search(r'<span id="([^"]+)"></span>', row)
        if anchor:
            cells = re.findall(r"<td>(.*?)</td>", row, flags=re.S)
            rows[anchor.group(1)] = [
                html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells
            ]
    return rows


def test_every_config_key_is_documented(site: Path) -> None:
    hook = _hook()
    rows = _rows((site / "reference" / "config.html").read_text(encoding="utf-8"))
    classes = _param_classes()
    assert len(classes) >= 20  # 11 experiments, 7 algorithms, the deployment tables
    for scope, cls in classes:
        for f in dataclasses.fields(cls):
            key = hook.anchor(scope, f.name)
            assert key in rows, f"{cls.__qualname__}.{f.name} is not in the config reference"
            name, type_, allowed, default, desc = rows[key]
            assert name == f.name and type_ and default
            assert len(desc) > 3, f"{cls.__qualname__}.{f.name} has no description"
            c = constraint(f)  # the allowed values: the constraint the validator checks
            assert allowed == (c.describe() if c is not None else ""), key


def test_reference_shows_defaults_as_toml(site: Path) -> None:
    rows = _rows((site / "reference" / "config.html").read_text(encoding="utf-8"))
    assert rows["experiment-mmvfl_feature_selection--betas"][3] == (
        "[1e-05, 0.0001, 0.001, 0.01, 0.1, 1.0, 10.0]"
    )
    assert rows["algorithm-mmvfl--standardize"][3] == "false"
    assert rows["algorithm-multivfl--optimizer"][3] == '"fedavg"'
    assert rows["algorithm-mmvfl--beta"][1] == "float | tuple[float, ...]"
    assert rows["algorithm-mmvfl--beta"][2] == "a finite number > 0, or one per party"
    assert rows["algorithm-mmvfl--max_iter"][2] == "an integer >= 1"
    # the estimator's docstring documents the algorithm's Params
    assert rows["algorithm-mmvfl--eta"][4].startswith("Label penalty η")


def test_site_renders_offline(site: Path) -> None:
    pages = list(site.rglob("*.html"))
    assert len(pages) > 20
    for page in pages:
        text = page.read_text(encoding="utf-8")
        remote = re.findall(
            r'<(?:link|script|img)\b[^>]*\b(?:href|src)="(?:https?:)?//[^"]+"', text
        )
        assert not remote, f"{page.relative_to(site)} loads {remote}"
        for src in re.findall(r'<img\b[^>]*\bsrc="([^"]+)"', text):
            assert (page.parent / src).resolve().is_file(), f"{page.name}: missing image {src}"


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/algorithms/") for link in links)
    for link in links:
        if not re.match(r"[a-z]+://", link):
            assert (ROOT / link).is_file(), f"README links to a missing {link}"


def test_descriptions_come_from_every_source() -> None:
    hook = _hook()

    @dataclass(frozen=True)
    class Base:
        """Base.

        ``gamma``: from the prose. ``delta`` is described by a sentence.

        Attributes
        ----------
        beta : int
            From the numpy section.
        """

        alpha: int = 1
        """From the attribute docstring."""
        beta: int = 2
        gamma: tuple[int, ...] = (1, 2)
        delta: str = "d"
        # from the comment above
        epsilon: float = 0.5
        zeta: bool = True  # from the trailing comment
        eta: Any = None

    @dataclass(frozen=True)
    class Child(Base):
        alpha: int = 3

    describe = hook.Describer({}).describe
    assert describe(Child, "alpha") == "From the attribute docstring."
    assert describe(Child, "beta") == "From the numpy section."
    assert describe(Child, "gamma") == "From the prose."
    assert describe(Child, "delta") == "``delta`` is described by a sentence."
    assert describe(Child, "epsilon") == "from the comment above"
    assert describe(Child, "zeta") == "from the trailing comment"
    assert describe(Child, "eta") == ""
    table = "\n".join(hook.field_table(Child, "x", hook.Describer({})))
    assert "`[1, 2]`" in table and "`true`" in table and "`(unset)`" in table


def test_api_reference_links_docstring_cross_references(site: Path) -> None:
    api = site / "reference" / "api"
    pages = {p.name: p.read_text(encoding="utf-8") for p in api.glob("*.html")}
    assert {"linear.html", "deep.html", "federation.html", "data.html", "errors.html"} <= set(pages)
    for name, text in pages.items():
        assert not re.search(r":(class|func|meth|data|mod):<code>", text), name
    # ':func:`~fedviews.data.align`' in fedviews.data's docstrings links to its entry
    assert 'href="#fedviews.data.align"><code>align</code></a>' in pages["data.html"]
    assert "MultiVFL" in pages["deep.html"] and "MMVFL" in pages["linear.html"]
    assert "fedviews.deep.SplitNN" in pages["deep.html"]


def test_architecture_names_every_shared_module() -> None:
    """``docs/architecture.md`` names every module below the layers (``fedviews/_*.py``),
    every module of the federation runtime and every shared module of ``linear/`` and
    ``deep/`` (``_classifier``, ``_persist``, ``_configs``, ``_lazy``,
    ``federation/_tensors`` and ``deep/_factory`` had been added without a line there)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    src = ROOT / "src" / "fedviews"
    shared = [
        *src.glob("_*.py"),
        *src.glob("federation/_*.py"),
        *src.glob("linear/_*.py"),
        *src.glob("deep/_*.py"),
    ]
    missing = [
        str(p.relative_to(src))
        for p in shared
        if not p.name.startswith("__") and not re.search(rf"\b{re.escape(p.name)}\b", page)
    ]
    assert missing == []


#: a time stated in words: "about 25 s", "under a minute", "around 4 min"
_STATED_TIME = re.compile(
    r"\b(about|under|around|roughly|nearly)\s+(\d[\d.,]*\s*|(an?|one|half an?)\s+)"
    r"(s|secs?|seconds?|min|mins|minutes?|h|hours?)\b",
    flags=re.I,
)


def test_no_page_states_a_time_by_hand() -> None:
    """A time that README or a docs page states is rendered from the committed timing record
    (``<!-- timing: NAME -->``, ``benchmarks/bench_first_hour.py``) or from a committed
    results file, never typed ("about 25 s" for a demo that took 42 s, "about 4 min" of
    tests); code spans quote a program's output and are not checked, code blocks are."""
    stated = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        parts = re.split(r"^```.*$", page.read_text(encoding="utf-8"), flags=re.M)
        for i, part in enumerate(parts):  # odd parts: fenced code blocks
            checked = part if i % 2 else re.sub(r"`[^`]*`", "", part)
            rel = page.relative_to(ROOT).as_posix()
            stated += [f"{rel}: {m.group(0)}" for m in _STATED_TIME.finditer(checked)]
    assert stated == []


def test_timing_marks_render_the_committed_record(tmp_path: Path) -> None:
    """Every ``<!-- timing: NAME -->`` of the docs names a run of the committed record, and
    renders its wall time, date, machine and load; an unrecorded name fails the build."""
    hook = _hook(ROOT / "docs" / "hooks" / "timings.py")
    record = json.loads((ROOT / hook.RECORD).read_text(encoding="utf-8"))
    marked = {
        name
        for page in (ROOT / "docs").rglob("*.md")
        for name in hook.MARK.findall(page.read_text())
    }
    assert marked and marked <= set(record["timings"])
    demo = record["timings"]["demo"]
    assert demo["command"] == "fedviews run configs/mmvfl_handwritten.toml"
    page = hook.render_page("It took <!-- timing: demo -->.\n")
    m = demo["machine"]
    assert page == (
        f"It took {demo['wall_seconds']:.0f} s on {demo['date'][:10]} ({m['cpu']}, "
        f"{m['cores']} cores, load average {demo['load_average']:.1f}).\n"
    )
    with pytest.raises(Exception, match="not in docs/results/first_hour_timings.json"):
        hook.render_page("<!-- timing: nope -->")
    with pytest.raises(Exception, match="no timing record"):
        hook.render_page("<!-- timing: demo -->", root=tmp_path)
