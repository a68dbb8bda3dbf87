"""The deep algorithms' package layout: one package per algorithm, parties never import
their spec, the specs and protocols load without torch, no module over 600 lines."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import fedviews

DEEP = Path(fedviews.__file__).resolve().parent / "deep"
PACKAGES = ("apfed", "multivfl", "sfedmv", "splitnn")


def _imported(path: Path) -> set[str]:
    """Every module ``path`` imports (also inside functions and under ``TYPE_CHECKING``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return out


def _reached(package: str, module: str) -> set[str]:
    """The modules of ``fedviews.deep.<package>`` that ``module`` of it imports, transitively."""
    prefix = f"fedviews.deep.{package}."
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += [
            m.removeprefix(prefix).split(".")[0]
            for m in _imported(DEEP / package / f"{name}.py")
            if m.startswith(prefix) and (DEEP / package / f"{m.removeprefix(prefix)}.py").is_file()
        ]
    return seen - {module}


@pytest.mark.parametrize("package", PACKAGES)
def test_parties_never_import_their_spec(package: str) -> None:
    assert (DEEP / package / "spec.py").is_file()
    reached = _reached(package, "parties")
    assert "spec" not in reached, reached
    root = f"fedviews.deep.{package}"  # whose lazy names would reach the spec unseen
    for module in {"parties"} | reached:
        assert root not in _imported(DEEP / package / f"{module}.py"), module


def test_the_reach_sees_imports() -> None:
    """The check above can fail: it sees what a module imports, directly and through others."""
    assert "spec" in _reached("multivfl", "estimator")  # estimator -> spec (directly)
    assert {"nets", "dp", "protocol"} <= _reached("multivfl", "parties")


def test_no_deep_module_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(DEEP)): n
        for p in DEEP.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, long


def test_specs_and_protocols_load_without_torch(tmp_path: Path) -> None:
    """The registry's providers, the specs' params and the shared protocols need no torch."""
    (tmp_path / "torch.py").write_text(  # found before the installed torch, and refuses
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    code = """
import importlib, sys
from fedviews.federation import ALGORITHMS

print(ALGORITHMS.names())
for m in ("multivfl.protocol", "sfedmv.protocol", "_strips"):
    importlib.import_module(f"fedviews.deep.{m}")
from fedviews.deep.apfed import APFedParams
from fedviews.deep.sfedmv import GRUConfig, SFedMVParams
from fedviews.deep.splitnn import SplitNNParams
assert "torch" not in sys.modules
try:
    import fedviews.deep.sfedmv.nets
except ImportError as exc:
    print(type(exc).__name__)
"""
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr
    names = ["apfed", "hfedmv", "mmvfl", "multivfl", "sfedmv", "splitnn", "vfedmv"]
    assert done.stdout.strip().splitlines() == [str(names), "MissingDependency"]
