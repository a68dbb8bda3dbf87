"""Numbers in the docs' prose: rendered from committed results (``docs/hooks/values.py``),
never typed."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from _modules import load_file

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")


def _hook() -> ModuleType:
    return load_file(ROOT / "docs/hooks/values.py")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    """A checkout with one results file, ``docs/results/x.json``."""
    record = {
        "wall_seconds": 12.5,
        "timings": {"demo": {"wall_seconds": 32.6}},
        "tables": [
            {
                "title": "paired",
                "columns": ["setting", "method", "mean ± std", "s / epoch", "ratio", "ratio"],
                "rows": [
                    ["2-1", "APFed-R", "-9.13 ± 7.94", 0.25, 1.5, 2.5],
                    ["2-1", "APFed-C", "+0.18 ± 1.66", 0.5, 1.25, 2.25],
                    ["3-1", "APFed-R", "+3.32 ± 2.16", -0.125, 1.0, 2.0],
                    ["3-1 w/o FL", "SingleVL", "+1.00 ± 0.10", 0.75, 1.0, 2.0],
                ],
            }
        ],
    }
    path = tmp_path / "docs/results/x.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record), encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("mark", "text"),
    [
        ("x wall_seconds", "12.5"),
        ("x wall_seconds | .0f", "12"),
        ("x timings/demo/wall_seconds", "32.6"),
        ("x tables/0/2-1&APFed-C/mean ± std", "+0.18 ± 1.66"),
        ("x tables/0/3-1/mean ± std", "+3.32 ± 2.16"),  # a prefix of the row, when it is one row
        ("x tables/0/3-1&APFed-R/s / epoch | +.2f", "−0.12"),  # a "/" in a header, a minus
        ("x tables/0/2-1&APFed-R/s / epoch | .0%", "25%"),
        ("x tables/0/2-1&APFed-R/5", "2.5"),  # a duplicated header by its index
        ("x tables/0/3-1 w/o FL/s / epoch", "0.75"),  # a "/" in a row and in a header
    ],
)
def test_a_value_mark_renders_the_committed_value(results: Path, mark: str, text: str) -> None:
    page = f"It took <!-- value: {mark} --> here.\n"
    assert _hook().render_page(page, "p.md", results) == f"It took {text} here.\n"


def test_a_mark_in_code_is_shown_not_rendered(results: Path) -> None:
    page = (
        "`<!-- value: NAME PATH -->` shows <!-- value: x wall_seconds -->\n"
        "```\n<!-- value: nope x -->\n```\n"
    )
    assert _hook().render_page(page, "p.md", results) == page.replace(
        "<!-- value: x wall_seconds -->", "12.5"
    )


@pytest.mark.parametrize(
    ("mark", "why"),
    [
        ("nope wall_seconds", "no docs/results/nope.json"),
        ("x wall_minutes", "x.json: no 'wall_minutes' \\(there: wall_seconds, timings, tables\\)"),
        ("x tables/1/2-1/ratio", "no '1' in a list of 1"),
        ("x tables/0/2-1/mean ± std", "2 rows start with \\['2-1'\\], not one"),
        ("x tables/0/4-1/mean ± std", "0 rows start with"),
        ("x tables/0/3-1/median", "no column 'median'"),
        ("x tables/0/3-1/ratio", "2 columns 'ratio': give its index"),
        ("x tables/0/3-1", "row '3-1' without a column"),
        ("x timings", "'timings' is not one value"),
        ("x tables/0/3-1/mean ± std | .2f", "format '.2f' for '\\+3.32 ± 2.16', which is not a"),
    ],
)
def test_a_mark_without_its_value_fails_the_build_naming_the_page(
    results: Path, mark: str, why: str
) -> None:
    from mkdocs.exceptions import PluginError

    with pytest.raises(
        PluginError, match=f"^docs/p.md: <!-- value: {re.escape(mark)} -->: .*{why}"
    ):
        _hook().render_page(f"a\n<!-- value: {mark} -->\n", "docs/p.md", results)


def test_every_value_mark_of_the_docs_renders() -> None:
    """Each ``<!-- value -->`` of README and the docs names a committed value (the site build
    checks the same, slower)."""
    hook = _hook()
    marks = 0
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        marks += len(hook.MARK.findall(hook.CODE.sub("", text)))
        rendered = hook.render_page(text, page.relative_to(ROOT).as_posix())
        assert not hook.MARK.search(hook.CODE.sub("", rendered))
    assert marks >= 50


#: a unit after a number: time, size, share, ratio, accuracy points
_UNIT = r"%|×(?!\s*\d)|µs|ms|s|min|hours?|MB|GB|KB|MiB|GiB|GB/s|points?|CPU-s|CPU-ms|CPU-hours?"
#: a number in prose that is typed (not a section, equation, figure, table or version number)
_NUMBER = re.compile(
    r"(?<![\w.,+−-])(?<!Sec\. )(?<!Eq\. )(?<!Fig\. )(?<!Table )(?<!Section )(?<!flwr )"
    r"(?<!torch )(?<!CUDA )(?<!Python )"
    rf"(?P<n>[+−]?\d+(?:,\d{{3}})*(?:\.\d+)?)(?:\s*(?P<u>{_UNIT})(?![\w/])|(?![\w.,]\d|\w))"
)


def typed_numbers(markdown: str) -> list[str]:
    """The numbers typed in the prose of ``markdown`` that look measured: a signed number, a
    number with a decimal point, or a number with a unit (``0.24 s``, ``14.2×``, ``+0.92``,
    ``96 %``). Code blocks and spans, tables (``tests/experiments/test_reproduce.py`` and
    ``tests/test_bench_results.py`` check those), HTML comments (the value marks) and link
    targets are not prose. Not seen: a bare integer (``61 of them``) and the first number of a
    range (the ``1`` of ``1-2 s``; its ``2 s`` is)."""
    found = []
    for i, part in enumerate(re.split(r"^\s*```.*$", markdown, flags=re.M)):
        if i % 2:  # a fenced code block
            continue
        lines = [line for line in part.splitlines() if not line.lstrip().startswith("|")]
        prose = re.sub(r"<!--.*?-->", "", " ".join(lines))  # a span may cross a line break
        prose = re.sub(r"\]\([^)]*\)", "]", re.sub(r"`[^`]*`", "", prose))
        for m in _NUMBER.finditer(prose):
            n, unit = m.group("n"), m.group("u")
            if unit or "." in n or n[0] in "+−":
                found.append(f"{n} {unit}" if unit else n)
    return found


#: numbers still typed in each page's prose, none of them a result of a committed run: a
#: setting (lr 0.01, a 5 s timeout, Flower's 3 s poll), a paper's number quoted as the paper's,
#: arithmetic (45 % = e²/(e² + 9)), a number a command on the page prints but no record keeps,
#: or a dated measurement of a run that cannot be repeated (old code, root, perf); shrink this,
#: never grow it: a measured number belongs in a results file and the page shows it with
#: <!-- value: NAME PATH --> (docs/hooks/values.py)
TYPED_IN_PROSE: dict[str, str] = {
    # the demo deal's share of samples
    "docs/adding-an-algorithm.md": "95 %",
    # settings (lr, momentum, λ, τ); the paper's gains; the 95 % interval
    "docs/algorithms/apfed.md": "0.03 · 0.01 · 0.9 · 0.1 · 0.1 · 0.1 · 0.5 · 0.01 · 0.03 · 0.4 · 1 point · 0.01 · 0.9 · 0.1 · 0.1 · +0.97 · +0.81 · +0.33 · +0.89 points · 95 %",
    # the 95 % interval; data-term weights 1/(1+ζ); the paper's numbers; the ≥ 10× goal
    "docs/algorithms/mmvfl.md": "95 % · 0.1 % · +6.5 points · 20 % · −1.21 · −0.88 · 10 ×",
    # settings (lr, β1, β2, server lr, 90 % target); the paper's 2–3 points; 32/8 bits; a test set's standard error
    "docs/algorithms/multivfl.md": "0.1 · 0.9 · 0.99 · 3 points · 0.9 · 0.99 · 95 % · 90 % · 4 × · 1.3 points · 0.01 · 4 ×",
    # window length, test share
    "docs/algorithms/sfedmv.md": "6 s · 25 %",
    # defaults and message sizes
    "docs/architecture.md": "5 s · 2 MiB · 1 MB",
    # the goals
    "docs/benchmarks.md": "1.1 · 1.3 · 1.3 ×",
    # Flower's poll; the goals; malloc settings; message sizes; the dated perf, GPU, CUDA-profile, pinned-memory and WAN measurements beside their typed tables (BENCH_HAND_TYPED: root, perf, old code, the H200)
    "docs/deployment-benchmarks.md": "3 s · 1.5 × · 2 × · 1.5 × · 1 GiB · 256 MiB · 32 MiB · 1.5 × · 2 × · 8 s · 8 s · 2 ms · 94 % · 0.8 CPU-s · 0.70 CPU-s · 20 % · 1.6 MB · 2 × · 1.5 × · 1.0 CPU-s · 0.43 · 5.2 CPU-s · 4.5 · 1.8 × · 0.175 s · 1.055 s · 6.0 × · 0.46 s · 0.90 s · 1.96 × · 12.7 MB · 1.24 s · 1.6 MB · 0.12 · 1.20 × · 1.68 × · 0.95 s · 4.69 s · 4.9 × · 2.46 s · 2.6 × · 41.3 s · 44 × · 18.2 s · 19 × · 1.34 s · 3.77 s · 2.8 × · 2.65 s · 2.0 × · 23.7 s · 18 × · 12.4 s · 9.3 × · 0.03 s · 1.6 × · 0.16 s · 7.6 × · 30 % · 3.51 · 2.46 s · 4 ×",
    # heartbeat period; flwr version
    "docs/deployment.md": "2 s · 1.42",
    # the tolerances
    "docs/experiments.md": "0.01 · 1.0",
    # flwr's versions and poll intervals; the 3× goal; message size
    "docs/flower.md": "1.42 · 0.02 s · 3 s · 3 s · 3 s · 6 s · 3 s · 1 s · 0.05 s · 0.05 s · 0.5 s · 3 × · 3 s · 0.1 s · 3 s · 1.6 MB · 1.6 MB · 1.6 MB",
    # the goals; lr settings; Flower's poll
    "docs/known-gaps.md": "1.3 × · 0.01 · 10 × · 1.5 × · 2 × · 1.5 × · 3 s · 3 s · 1.1 ×",
    # a default; randomized response's e^ε/(e^ε + 9)
    "docs/privacy/defenses.md": "8.0 · 45 % · 23 %",
    # VFLAIR's reported numbers; chance
    "docs/privacy/leakage.md": "97.5 % · 99.7 % · 10 %",
    # buffers seen in the typed half-sent runs, the budgets they give, 64 GiB = defaults' product; 50 % overlap; the 60 s goal
    "docs/threat-model.md": "40 MiB · 1.1 GiB · 2.1 GiB · 64 GiB · 50 % · 60 s",
}


def _against(
    find: Callable[[str], list[str]], allowance: dict[str, str], skip: str = ""
) -> tuple[list[str], list[str]]:
    """The numbers ``find`` sees in every page beyond its ``allowance``, and those of the
    allowance no longer there (``page: number``)."""
    typed, gone = [], []
    for page in _pages():
        rel = page.relative_to(ROOT).as_posix()
        if rel == skip:
            continue
        found = Counter(find(page.read_text(encoding="utf-8")))
        allowed = Counter(allowance.get(rel, "").split(" · ")) - Counter([""])
        typed += [f"{rel}: {n!r}" for n in (found - allowed).elements()]
        gone += [f"{rel}: {n!r}" for n in (allowed - found).elements()]
    return typed, gone


def test_no_page_types_a_measured_number_in_prose() -> None:
    typed, gone = _against(typed_numbers, TYPED_IN_PROSE)
    assert not typed, (
        "typed in prose: render each from its committed results file with <!-- value: NAME "
        "PATH --> (docs/hooks/values.py), or link the rendered table:\n" + "\n".join(typed)
    )
    assert not gone, "no longer typed: drop from TYPED_IN_PROSE:\n" + "\n".join(gone)


def typed_in_tables(markdown: str) -> list[str]:
    """The numbers :func:`typed_numbers` would find in the cells of ``markdown``'s tables
    (outside fenced code): a hand-written table row quotes measurements too."""
    rows = []
    for i, part in enumerate(re.split(r"^\s*```.*$", markdown, flags=re.M)):
        if not i % 2:
            rows += [line for line in part.splitlines() if line.lstrip().startswith("|")]
    return typed_numbers("\n".join(row.replace("|", " ; ") for row in rows))


#: numbers typed in the cells of each page's hand-written tables, none a result of a
#: committed run (the rules of TYPED_IN_PROSE); deployment-benchmarks.md's typed tables are
#: its dated historical measurements (BENCH_HAND_TYPED, tests/experiments/test_reproduce.py);
#: shrink this, never grow it
TYPED_IN_TABLES: dict[str, str] = {
    # the emulated links' round-trip times (settings)
    "docs/benchmarks.md": "1 ms · 20 ms · 50 ms",
    # a dataset's shape
    "docs/data.md": "2000 ×",
    # timeouts (settings); a message's size; the attack runs' dated memory and time, each
    # beside the test that asserts its bound; the PSI's historical 10⁶-ID run
    "docs/threat-model.md": "10 s · 600 s · 1.6 MB · 10 s · 3,296 MiB · 64 GiB · 1 MiB · 48 MiB · 36 MiB · 64 MiB · 577 MiB · +680 MiB · 240 MB · 30 MiB · 11 MiB · 162 MiB · +73 MiB · 70 s · +1.0 · 1.2 MiB · +6.7 MiB · −1 · 496 MiB · 645 MiB · 164 MiB · 1016 MiB · 1142 MiB · 371 MiB · 1058 s · 174.1 s · 1.04 × · 196 MB · 823 s · 174.2 s · 1.04 × · 196 MB",
}


def test_no_page_types_a_measured_number_in_a_table() -> None:
    typed, gone = _against(typed_in_tables, TYPED_IN_TABLES, "docs/deployment-benchmarks.md")
    assert not typed, (
        "typed in a table: render the table from its results file (<!-- bench: NAME -->, "
        "<!-- reproduce: NAME -->) or each number with <!-- value: NAME PATH -->:\n"
        + "\n".join(typed)
    )
    assert not gone, "no longer typed: drop from TYPED_IN_TABLES:\n" + "\n".join(gone)


def test_typed_numbers_finds_measured_numbers_and_skips_the_rest() -> None:
    text = (
        "The fit takes 0.24 s, **14.2×** the naive code, +0.92 points, 96 % right, "
        "12.40 ± 1.15 %.\n"
        "Sec. 4.4, Eq. 12, flwr 1.42.0, 127.0.0.1, a 7×28 strip, 1e-3, 2,000 images, "
        "`0.5 s` <!-- value: x y --> [a](b-1.5.md)\n"
        "| 0.5 | 3 s |\n```\n9.9 s\n```\n"
    )
    assert typed_numbers(text) == ["0.24 s", "14.2 ×", "+0.92 points", "96 %", "12.40", "1.15 %"]
    assert typed_in_tables(text) == ["0.5", "3 s"]
