"""Fixtures shared by the test folders: the wheel, built once per session; the threads'
waiting policy of the whole suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Set before numpy or torch loads here, and inherited by every process a test starts. On a
# busy machine (2 cores shared with other jobs) a thread that waits at a barrier for one that
# is descheduled spins out its time slice: a small torch training loop with 2 OpenMP threads
# took 5-15 s instead of 0.4 s, 3,000 small numpy products with 2 OpenBLAS threads 10-27 s
# instead of 2.2 s (benchmarks/bench_busy_threads.py). Threads that wait passively keep
# torch's thread count, so its float32 sums are unchanged (checked bit for bit); OpenBLAS's
# threads cannot wait passively, so numpy's BLAS has one thread everywhere, as the algorithms'
# own computations already have (Algorithm.compute_limits, linear small_blas).
# A variable set in the environment stays as set.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# The CPU kernels of `fedviews reproduce` (fedviews._kernels: the AVX2 code paths on every
# x86-64 CPU), also here, before numpy or torch loads: the tests that compare with committed
# numbers get the numbers the records were made with on any such CPU.
from fedviews._kernels import PINS, pins_missing  # noqa: E402

if pins_missing():
    for _k, _v in PINS.items():
        os.environ.setdefault(_k, _v)


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


@pytest.fixture(scope="session")
def _torch_default_threads() -> int | None:
    """torch's thread count before any test changed it (None without torch)."""
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


@pytest.fixture(autouse=True)
def _torch_threads_restored(_torch_default_threads):
    """A test (or a module fixture) that hosts a deployed party in this process may set
    torch's thread count (the party's ``torch_threads``, process-wide); every test ends with
    the default back. With fewer intra-op threads in the main thread than in a Flower test
    grid's worker threads (MKL keeps its own count per thread), the two sides of an equality
    test rounded float32 sums apart."""
    yield
    torch = sys.modules.get("torch")
    if _torch_default_threads is not None and torch is not None:
        if torch.get_num_threads() != _torch_default_threads:
            torch.set_num_threads(_torch_default_threads)
