"""MkDocs hook: the configuration reference, generated from the code at every build.

Every key of every registered experiment's ``Params`` dataclass, of every registered
algorithm's ``Params`` (a deployment's ``[params]``) and of the deployment tables
(``[federation]``, ``[data]``, ``[defense]``) is listed with its type, its default and
its description, read from the code itself, so the reference cannot drift from what
``fedviews run`` accepts; an algorithm's field also shows the values it allows, from the
constraint it declares (:func:`fedviews._params.spec`), the one the validator checks.
A field's description is, in this order:

1. its attribute docstring (a string right under the field);
2. its comment (on the field's line, or the comment lines right above it);
3. its entry in the ``Parameters`` / ``Attributes`` section of a dataclass's docstring,
   or, for an algorithm's ``Params``, of its estimator's docstring (the estimator's
   ``__init__`` takes exactly these fields);
4. the sentences of a dataclass's docstring that start with the field's name in double
   backquotes (````beta````: ...).

A field declared in a base class (experiment params extend the algorithm's) is looked
up along the method resolution order. ``tests/test_docs.py`` builds the site and checks
that every key is in the page with a description.
"""

from __future__ import annotations

import ast
import dataclasses
import html
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import griffe
from mkdocs.structure.files import File, Files

PAGE = "reference/config.md"
ROOT = Path(__file__).resolve().parents[2]

_ABBREV = re.compile(r"(\be\.g|\bi\.e|\bEqs?|\bAlg|\bSec|\bFig|\bcf|\bvs|\bal|\bapprox)\.$")
_LEAD = re.compile(r"^(``[\w.]+``(\s*(/|,|and|or)\s*)?)+")


def _sentences(text: str) -> list[str]:
    """``text`` (one paragraph) cut into sentences, abbreviations such as "e.g." kept whole."""
    parts = re.split(r"(?<=[.;])\s+(?=[A-Z`(\[])", " ".join(text.split()))
    out: list[str] = []
    for p in parts:
        if out and _ABBREV.search(out[-1]):
            out[-1] += " " + p
        else:
            out.append(p)
    return out


def _docstring_sections(doc: str) -> tuple[dict[str, str], str]:
    """(name → description from the numpy Parameters/Attributes sections, the prose)."""
    parsed = griffe.Docstring(inspect.cleandoc(doc)).parse("numpy", warnings=False)
    named: dict[str, str] = {}
    prose: list[str] = []
    for section in parsed:
        if section.kind.value in ("parameters", "attributes"):
            for item in section.value:
                desc = " ".join(item.description.split())
                if desc:
                    named.setdefault(item.name, desc)
        elif section.kind.value == "text":
            prose.append(section.value)
    return named, "\n\n".join(prose)


_NAMES = r"(?:``[\w.]+``(?:\s*(?:,|/|and|or)\s*)?)+"
_COLON = re.compile(rf"({_NAMES}):\s")


def _prose_entries(prose: str) -> dict[str, str]:
    """Name → description from a docstring's prose: ````name````: text (up to the next
    ````other````:), or else the sentence that opens with ````name```` and its follow-ups."""
    out: dict[str, str] = {}
    for para in re.split(r"\n\s*\n", prose):
        text = " ".join(para.split())
        hits = list(_COLON.finditer(text))
        for hit, nxt in zip(hits, [*hits[1:], None], strict=False):
            desc = text[hit.end() : nxt.start() if nxt else len(text)]
            # ... or up to a sentence that opens with another name
            desc = re.split(r"(?<=[.;])\s+(?=``[\w.]+``)", desc)[0].strip(" ;,")
            for n in re.findall(r"``([\w.]+)``", hit.group(1)):
                out.setdefault(n, desc[0].upper() + desc[1:] if desc else desc)
        current: list[str] = []
        names: list[str] = []
        for sentence in [*_sentences(text), ""]:
            lead = _LEAD.match(sentence)
            if lead or not sentence:
                for n in names:
                    out.setdefault(n, " ".join(current))
                names = re.findall(r"``([\w.]+)``", lead.group(0)) if lead else []
                current = [sentence]
            elif names:
                current.append(sentence)
    return out


def _source_notes(cls: type) -> dict[str, str]:
    """Field name → its attribute docstring or comment, for the fields ``cls`` declares."""
    try:
        src = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    lines = src.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(src).body[0]
    assert isinstance(body, ast.ClassDef)
    out: dict[str, str] = {}
    for i, stmt in enumerate(body.body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        nxt = body.body[i + 1] if i + 1 < len(body.body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            out[stmt.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
            continue
        end = stmt.end_lineno or stmt.lineno
        trailing = [comments[n] for n in range(stmt.lineno, end + 1) if n in comments]
        above: list[str] = []
        n = stmt.lineno - 1
        while n >= 1 and lines[n - 1].strip().startswith("#"):
            above.insert(0, comments.get(n, ""))
            n -= 1
        note = " ".join(above + trailing).strip()
        if note:
            out[stmt.target.id] = note
    return out


class Describer:
    """Finds the description of a dataclass field (see the module docstring)."""

    def __init__(self, estimators: dict[type, type]) -> None:
        #: an algorithm's Params class → its estimator class (whose docstring documents it)
        self.estimators = estimators

    def describe(self, cls: type, name: str) -> str:
        mro = [c for c in cls.__mro__ if dataclasses.is_dataclass(c)]
        for c in mro:
            if name in c.__dict__.get("__annotations__", {}):
                note = _source_notes(c).get(name)
                if note:
                    return note
        for c in mro:
            for doc_of in (c, self.estimators.get(c)):
                if doc_of is not None and doc_of.__doc__:
                    named, _ = _docstring_sections(doc_of.__doc__)
                    if name in named:
                        return named[name]
        for c in mro:
            if c.__doc__:
                entry = _prose_entries(_docstring_sections(c.__doc__)[1]).get(name)
                if entry:
                    return entry
        return ""


def _toml(value: Any) -> str:
    """A default as it would be written in a TOML config."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        return "(table)"
    return repr(value)


def _type(f: dataclasses.Field[Any]) -> str:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace("typing.", "").replace("collections.abc.", "")


def _cell(text: str) -> str:
    """``text`` (reST-flavoured docstring prose) as one Markdown table cell."""
    # :role:`~a.b.c` shows `c`, :role:`a.b.c` shows `a.b.c` (as Sphinx does)
    text = re.sub(r":\w+:`~([^`]+)`", lambda m: "`" + m.group(1).rsplit(".", 1)[-1] + "`", text)
    text = re.sub(r":\w+:`([^`]+)`", r"`\1`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    # a pipe outside a code span would end the cell (inside one, Python-Markdown keeps it)
    parts = text.split("`")
    parts[::2] = [p.replace("|", "\\|") for p in parts[::2]]
    return "`".join(parts).replace("\n", " ")


def anchor(scope: str, key: str) -> str:
    """The HTML id of a key's row (``tests/test_docs.py`` looks keys up by it)."""
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"{scope}--{key}")


def field_table(
    cls: type, scope: str, describer: Describer, skip: Iterable[str] = ()
) -> Iterator[str]:
    """The Markdown table of ``cls``'s fields: key, type, allowed values (the constraint the
    field declares, :mod:`fedviews._params`), default, description."""
    from fedviews._params import constraint

    yield "| key | type | allowed | default | description |"
    yield "|---|---|---|---|---|"
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.default is not dataclasses.MISSING:
            default = _toml(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _toml(f.default_factory())
        else:
            default = "(required)"
        desc = describer.describe(cls, f.name)
        c = constraint(f)
        allowed = _cell(html.escape(c.describe(), quote=False)) if c is not None else ""
        yield (
            f'| <span id="{anchor(scope, f.name)}"></span>`{f.name}` | {_cell(f"`{_type(f)}`")} '
            f"| {allowed} | {_cell(f'`{default}`')} | {_cell(desc)} |"
        )


def _configs_by(key: str) -> dict[str, list[str]]:
    """``configs/*.toml`` grouped by the value of their top-level ``key``."""
    import tomllib

    out: dict[str, list[str]] = {}
    for path in sorted((ROOT / "configs").glob("*.toml")):
        value = tomllib.loads(path.read_text(encoding="utf-8")).get(key)
        if isinstance(value, str):
            out.setdefault(value, []).append(path.name)
    return out


def render() -> str:
    """The whole reference page (Markdown)."""
    from fedviews.deploy import DeployConfig, FederationSpec, SplitSpec
    from fedviews.experiments import ExperimentConfig, get_algorithm, list_experiments
    from fedviews.federation import ALGORITHMS, Defense, get_algorithm_spec

    specs = {name: get_algorithm_spec(name) for name in ALGORITHMS.names()}
    estimators: dict[type, type] = {}
    for name, spec in specs.items():
        try:
            estimators[spec.Params] = get_algorithm(name)
        except Exception:  # an algorithm without an estimator (split NN) documents its Params
            pass
    describer = Describer(estimators)
    experiments = list_experiments()
    exp_configs = _configs_by("experiment")
    deploy_configs = _configs_by("algorithm")

    out = [
        "# Configuration reference",
        "",
        "Generated from the code at every build of this site (`docs/hooks/config_reference.py`):",
        "every key of every experiment's and algorithm's `Params` dataclass, and of the deployment",
        "tables, with its type, the values it allows (where the field declares them: what `fit`,",
        "`fedviews run` and a deployment check), its default and description. Any key can be",
        "overridden on the command line (`fedviews run CONFIG params.betas=[0.1,1] seed=3`); an",
        "unknown key is an error that names the closest valid key. How to write and run configs:",
        "[Experiments](../experiments.md)",
        "and [Deployment](../deployment.md).",
        "",
        "## Experiment configs",
        "",
        "`fedviews run CONFIG` with a top-level `experiment = ...` runs an experiment in one process.",
        "Top-level keys:",
        "",
        *field_table(ExperimentConfig, "experiment", describer),
        "",
        "`[data]`: `name` (the dataset, see [Data formats](../data.md)) and any options of",
        "`fedviews.data.load` for that dataset (e.g. `n_views`, `subset`). `[params]`: the",
        "experiment's own table below.",
        "",
    ]
    for exp in experiments:
        configs = exp_configs.get(exp.name, [])
        out += [
            f"### `{exp.name}`",
            "",
            exp.description + ("." if exp.description and exp.description[-1] != "." else ""),
            f"Default dataset: `{exp.default_dataset}`."
            + (f" Needs the `{exp.needs}` extra." if exp.needs else ""),
            "Configs: "
            + (", ".join(f"`{c}`" for c in configs) if configs else "none shipped")
            + ".",
            "",
            f"`[params]` (`{exp.params.__module__}.{exp.params.__qualname__}`):",
            "",
            *field_table(exp.params, f"experiment-{exp.name}", describer),
            "",
        ]
    out += [
        "## Deployment configs",
        "",
        "`fedviews run` with a top-level `algorithm = ...` and a `[federation]` table, or",
        "`fedviews launch` / `coordinator` / `party`, runs a deployment: one process per party.",
        "Top-level keys:",
        "",
        *field_table(DeployConfig, "deploy", describer, skip=("federation", "data", "defense")),
        "",
        "### `[federation]`",
        "",
        *field_table(FederationSpec, "federation", describer),
        "",
        "### `[data]`",
        "",
        "What `fedviews launch` and `fedviews split-data --config` generate for the parties.",
        "",
        *field_table(SplitSpec, "data", describer),
        "",
        "### `[defense]`",
        "",
        "The run's defense, also `defense=` of an estimator and `[params.defense]` of",
        "`privacy_audit` (see [Defenses](../privacy/defenses.md)).",
        "",
        *field_table(Defense, "defense", describer),
        "",
        "### `[params]` of each algorithm",
        "",
        "The algorithm's `Params`: the same names and defaults as its estimator's parameters.",
        "",
    ]
    for name, spec in specs.items():
        configs = deploy_configs.get(name, [])
        out += [
            f"#### `{name}`",
            "",
            f"`{spec.Params.__module__}.{spec.Params.__qualname__}`. Configs: "
            + (", ".join(f"`{c}`" for c in configs) if configs else "none shipped")
            + ".",
            "",
            *field_table(spec.Params, f"algorithm-{name}", describer),
            "",
        ]
    return "\n".join(out)


def on_files(files: Files, config: Any) -> Files:
    """Add the generated page to the site (it exists only in the build)."""
    files.append(File.generated(config, PAGE, content=render()))
    return files
