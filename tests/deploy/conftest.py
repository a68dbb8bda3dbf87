"""Shared fixtures of the deployment tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _protocol import launch_config


@pytest.fixture()
def launch() -> Callable[[Path, Path], str]:
    """``launch(config, run_dir)``: `fedviews launch` as a user runs it; its output, rc checked."""
    return launch_config
