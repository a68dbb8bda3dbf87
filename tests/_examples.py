"""Helpers of the tests of the docs' examples (``docs/examples``): a module imported the way a
user's module is, and ``fedviews`` run as a user runs it, with the folder on ``PYTHONPATH``."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"


@contextmanager
def example_module(name: str) -> Iterator[ModuleType]:
    """``docs/examples/<name>.py``, imported from a folder on the path (as a user's module)."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def example_env() -> dict[str, str]:
    """The environment with ``docs/examples`` first on ``PYTHONPATH``."""
    path = os.pathsep.join(p for p in (str(EXAMPLES), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def fedviews(
    *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """``fedviews ARGS`` in the repository root (``env``: default :func:`example_env`)."""
    return subprocess.run(
        [sys.executable, "-m", "fedviews", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env or example_env(),
    )
