"""The ``fedviews`` command as a user runs it, for the experiment tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fedviews(
    *args: str, cwd: Path = ROOT, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """``fedviews ARGS`` in a subprocess from the repository root (output captured; killed
    past ``timeout`` seconds, a cap for a hung command: the wait ends when it exits)."""
    return subprocess.run(
        [sys.executable, "-m", "fedviews", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )
