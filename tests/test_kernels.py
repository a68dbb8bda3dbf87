"""``fedviews reproduce`` computes with the AVX2 kernels on every x86-64 CPU (fedviews._kernels):
committed numbers reproduce on a CPU with AVX-512 too."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from fedviews._kernels import PINS, pins_missing

ROOT = Path(__file__).resolve().parents[1]
X86 = platform.machine().lower() in ("x86_64", "amd64")


def test_the_pins_are_missing_only_on_x86_without_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    assert pins_missing({}) and pins_missing({**PINS, "OPENBLAS_CORETYPE": "SkylakeX"})
    assert not pins_missing(dict(PINS))
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert not pins_missing({})


@pytest.mark.skipif(not X86, reason="the pins name x86-64 code paths")
def test_the_suite_computes_with_the_pinned_kernels() -> None:
    """tests/conftest.py sets them before numpy loads: the suite's own comparisons with
    committed numbers (and every process a test starts) use them."""
    assert not pins_missing()


@pytest.mark.skipif(not X86, reason="the pins name x86-64 code paths")
def test_reproduce_without_the_pins_runs_again_with_them(tmp_path: Path) -> None:
    """Started without them, `fedviews reproduce --check` runs itself again with them and
    matches the committed numbers (mmvfl_smoke drifted by 0.1 point, beyond its tolerance,
    on an Intel Xeon with AVX-512 without them; on a CPU without AVX-512 it matches either
    way)."""
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    r = subprocess.run(
        [sys.executable, "-m", "fedviews", "reproduce", "mmvfl_smoke", "--check", "-q"]
        + ["--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "matches the committed results" in r.stdout


def test_the_run_again_is_this_command_with_the_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    from fedviews import _kernels

    seen: dict[str, object] = {}

    def run(cmd: list[str], env: dict[str, str], check: bool) -> subprocess.CompletedProcess[str]:
        seen.update(cmd=cmd, env=env)
        return subprocess.CompletedProcess(cmd, 3)

    monkeypatch.setattr(_kernels.subprocess, "run", run)
    assert _kernels.pinned_run(["reproduce", "x", "--check"]) == 3
    assert seen["cmd"] == [sys.executable, "-m", "fedviews", "reproduce", "x", "--check"]
    env = seen["env"]
    assert isinstance(env, dict) and all(env[k] == v for k, v in PINS.items())
    assert env["OMP_WAIT_POLICY"] == os.environ.get("OMP_WAIT_POLICY", "PASSIVE")
