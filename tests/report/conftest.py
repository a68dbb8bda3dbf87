"""Fixtures of the report tests: tiny finished runs (an experiment and a launched
deployment) and headless Chromium's rendering of a page."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _runs import DEPLOY, DEPLOY_OVERRIDES, experiment_run


@pytest.fixture(scope="session")
def mmvfl_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny MMVFL experiment run."""
    return experiment_run(tmp_path_factory.mktemp("exp") / "run")


@pytest.fixture(scope="session")
def deployment_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished launched MMVFL deployment (coordinator + 5 party processes)."""
    pytest.importorskip("grpc")
    pytest.importorskip("rbcl")  # the PSI
    from fedviews.deploy import launch, load_deploy_config

    cfg = load_deploy_config(DEPLOY, DEPLOY_OVERRIDES)
    out = tmp_path_factory.mktemp("deploy") / "run"
    return launch(DEPLOY, cfg, DEPLOY_OVERRIDES, out_dir=out, echo=lambda _: None)


@pytest.fixture(scope="session")
def render(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], str]:
    """``render(page)``: the DOM of ``page`` after headless Chromium loaded it."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (`make install` installs it)")
    profile = tmp_path_factory.mktemp("chromium")

    def dump(page: Path) -> str:
        proc = subprocess.run(
            [
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    return dump
