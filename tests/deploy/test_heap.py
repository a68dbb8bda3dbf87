"""Malloc settings of fedviews processes (fedviews._heap)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from fedviews._heap import heap_env, keep_freed_memory
from fedviews.deploy import process_env

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _clear(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(k)


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_launched_processes_get_the_settings_and_glibc_accepts_them(monkeypatch):
    _clear(monkeypatch)
    env = process_env(3)
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)
    assert env["MALLOC_TRIM_THRESHOLD_"] == str(1 << 30)
    assert env["MALLOC_TOP_PAD_"] == str(256 << 20)
    # every value is within what mallopt accepts (it returns 1 for each)
    code = "from fedviews._heap import keep_freed_memory; print(keep_freed_memory())"
    clean = {k: v for k, v in env.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


def test_the_users_malloc_settings_win(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert heap_env() == {}
    assert keep_freed_memory() is False
    assert "MALLOC_TOP_PAD_" not in process_env(3)
