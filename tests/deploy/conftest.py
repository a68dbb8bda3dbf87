"""Shared fixtures of the deployment tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture()
def launch() -> Callable[[Path, Path], str]:
    """``launch(config, run_dir)``: `fedviews launch` as a user runs it; its output, rc checked."""

    def run(config: Path, out: Path) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "fedviews", "launch", str(config), "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output
        return output

    return run
