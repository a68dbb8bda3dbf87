"""The Makefile's targets, as ``make -n`` spells them out (nothing is run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_docs_builds_the_site_without_materials_end_of_life_banner():
    """Material for MkDocs prints an end-of-life banner (ANSI colour codes on stderr) unless
    ``NO_MKDOCS_2_WARNING`` is set; ``make docs`` sets it for the build."""
    out = subprocess.run(
        ["make", "-n", "docs"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    (build,) = [line for line in out.stdout.splitlines() if "mkdocs" in line]
    assert build == "NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict"
