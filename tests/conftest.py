"""Fixtures shared by the test folders: the wheel, built once per session."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Wheel(NamedTuple):
    """A wheel built from the working tree, and the build's output (stdout + stderr)."""

    path: Path
    log: str


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    """Build the wheel (offline: no build isolation) from a copy of the project, once a session."""
    tmp = tmp_path_factory.mktemp("wheel")
    project = tmp / "project"
    shutil.copytree(ROOT / "src", project / "src", symlinks=True, ignore=_ignored)
    shutil.copytree(ROOT / "configs", project / "configs")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project / name)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(project), "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-v", "-w", str(tmp / "dist")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = (tmp / "dist").glob("fedviews-*.whl")
    return Wheel(path, build.stdout + build.stderr)


def _ignored(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n in ("__pycache__", "build") or n.endswith(".egg-info")]
