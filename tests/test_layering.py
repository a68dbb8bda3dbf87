"""The package layering, checked statically, and the registries' strictness.

Every module under ``src/fedviews`` is parsed with :mod:`ast`; every import
statement counts, also one inside a function or under ``TYPE_CHECKING``. A
module name given as a string (a registry's lazy provider) is not an import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import fedviews
from fedviews.errors import ConfigError

SRC = Path(fedviews.__file__).resolve().parent

#: lower modules every layer may import, private names included
SHARED = (
    "fedviews._console",
    "fedviews._estimator",
    "fedviews._heap",
    "fedviews._registry",
    "fedviews._tables",
    "fedviews.errors",
)


@dataclass(frozen=True)
class Import:
    """One imported dotted name: a module, or ``module.name`` of a ``from`` import."""

    module: str  # the importing module
    line: int
    target: str
    statement: str  # the import statement, as written

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.statement}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(source: str, name: str, *, is_package: bool = False) -> list[Import]:
    """Every name module ``name`` imports; ``from m import a`` yields ``m.a`` (inside ``m``)."""
    package = name if is_package else name.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        out += [Import(name, node.lineno, t, ast.unparse(node)) for t in targets]
    return out


ALL_IMPORTS = [
    imp
    for path in sorted(SRC.rglob("*.py"))
    for imp in _imports(
        path.read_text(encoding="utf-8"), _module_name(path), is_package=path.name == "__init__.py"
    )
]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _violations(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        {
            str(imp)
            for imp in ALL_IMPORTS
            if _within(imp.module, layer) and any(_within(imp.target, f) for f in forbidden)
        }
    )


LAYERS = {
    "fedviews.data": (
        "fedviews.privacy",
        "fedviews.report",
        "fedviews.experiments",
        "fedviews.deploy",
        "fedviews.linear",
        "fedviews.deep",
        "fedviews.cli",
    ),
    "fedviews.report": ("fedviews.experiments", "fedviews.deploy", "fedviews.cli"),
    "fedviews.linear": (
        "fedviews.experiments",
        "fedviews.deploy",
        "fedviews.cli",
        "fedviews.report",
    ),
    "fedviews.deep": ("fedviews.experiments", "fedviews.deploy", "fedviews.cli", "fedviews.report"),
    "fedviews.deploy": ("fedviews.linear", "fedviews.deep", "fedviews.cli"),
    "fedviews.federation": (
        "fedviews.linear",
        "fedviews.deep",
        "fedviews.experiments",
        "fedviews.deploy",
        "fedviews.cli",
    ),
}


def test_the_import_scan_sees_every_kind_of_import() -> None:
    source = """
from typing import TYPE_CHECKING
import fedviews.linear as lin
from . import _sibling
from .._registry import Registry
if TYPE_CHECKING:
    from fedviews.experiments import Table
def f():
    from fedviews.report import write_report
"""
    targets = {imp.target for imp in _imports(source, "fedviews.data._mod")}
    assert targets == {
        "typing.TYPE_CHECKING",
        "fedviews.linear",
        "fedviews.data._sibling",
        "fedviews._registry.Registry",
        "fedviews.experiments.Table",
        "fedviews.report.write_report",
    }
    assert {
        imp.target for imp in _imports("from . import x", "fedviews.data", is_package=True)
    } == {"fedviews.data.x"}
    assert len({imp.module for imp in ALL_IMPORTS}) > 50  # the scan found the package


#: layers whose rule is known to be broken, and why (remove the entry once fixed)
PENDING: dict[str, str] = {}


@pytest.mark.parametrize(
    "layer",
    [
        pytest.param(layer, marks=pytest.mark.xfail(strict=True, reason=PENDING[layer]))
        if layer in PENDING
        else layer
        for layer in sorted(LAYERS)
    ],
)
def test_layer_does_not_import_the_layers_above(layer: str) -> None:
    violations = _violations(layer, LAYERS[layer])
    assert not violations, "\n".join(violations)


def _subpackage(module: str) -> str:
    """``fedviews.linear._mmvfl`` -> ``linear``; ``fedviews.cli`` -> ``cli``; ``fedviews`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _private_violations() -> list[str]:
    found = set()
    for imp in ALL_IMPORTS:
        if not _within(imp.target, "fedviews") or any(_within(imp.target, s) for s in SHARED):
            continue
        if _subpackage(imp.target) == _subpackage(imp.module):
            continue
        if any(_is_private(part) for part in imp.target.split(".")[1:]):
            found.add(str(imp))
    return sorted(found)


def test_no_private_names_across_subpackages() -> None:
    """A subpackage uses another one only through its public names."""
    violations = _private_violations()
    print("\n".join(violations))
    assert not violations, f"{len(violations)} private imports:\n" + "\n".join(violations)


def test_a_dataset_name_registers_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedviews import data
    from fedviews._registry import Registry
    from fedviews.data import _registry
    from fedviews.data._dataset import MultiViewDataset

    monkeypatch.setattr(_registry, "_DATASETS", Registry("dataset"))
    options = {
        "description": "toy",
        "size": "0",
        "source": "test",
        "fetch": lambda: Path("."),
        "location": lambda: None,
        "available": lambda: True,
    }

    def load_toy() -> MultiViewDataset:
        raise NotImplementedError

    data.register_dataset("toy", **options)(load_toy)
    assert data.list_datasets() == ["toy"]
    with pytest.raises(ConfigError, match="dataset 'toy' is registered twice"):
        data.register_dataset("toy", **options)(load_toy)


def test_a_registered_dataset_cannot_be_replaced() -> None:
    from fedviews import data

    before = data.info("handwritten")
    with pytest.raises(ConfigError, match="registered twice"):
        data.register_dataset(
            "handwritten",
            description="impostor",
            size="0",
            source="test",
            fetch=lambda: Path("."),
            location=lambda: None,
            available=lambda: True,
        )(lambda: None)
    assert data.info("handwritten") == before


def test_an_intersection_method_cannot_be_replaced() -> None:
    from fedviews.data import align, register_intersection

    with pytest.raises(ConfigError, match="registered twice"):
        register_intersection("plain")(lambda id_arrays: id_arrays[0])
    assert [p.tolist() for p in align([3, 1], [1, 2])] == [[1], [0]]


def test_importing_linear_loads_neither_experiments_nor_rich() -> None:
    code = (
        "import sys, fedviews.linear\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'"
        " or m.startswith('fedviews.experiments')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
