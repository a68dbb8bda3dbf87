"""The CPU kernels that ``fedviews reproduce`` computes with: the same on every x86-64 CPU.

numpy's OpenBLAS, torch's own vectorised kernels, MKL and oneDNN each pick their code path by
the CPU they run on: on a CPU with AVX-512 (an Intel Xeon) they sum in another order than on
one without (an AMD EPYC of the recorded runs), and the last bits differ. A short training
run amplifies that: the smoke entry ``apfed_smoke`` ended 1.6 points apart and
``mmvfl_smoke`` 0.1 apart (measured on an Intel Xeon against the records of an AMD EPYC),
beyond their tolerances. Pinned to the AVX2 code paths, which every x86-64 CPU since 2013
runs, both reproduce the records bit for bit there. The variables are read when each library
loads, so they are set before the process starts: :func:`pinned_run` runs the command again
in a process of its own with them set, where the running one lacks them.

Elsewhere (ARM, or a user's own runs) the libraries keep their own choice: the pins cost the
speed of AVX-512 and apply to reproducing committed numbers only.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping

#: the environment that pins each library to its AVX2 code path
PINS: Mapping[str, str] = {
    "OPENBLAS_CORETYPE": "Haswell",  # numpy's and scipy's OpenBLAS
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised CPU kernels
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility (torch's BLAS)
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (torch's convolutions)
}


def pins_missing(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``env`` (default: this process's) lacks a pin on an x86-64 CPU (never
    elsewhere: the pins name x86 code paths)."""
    env = os.environ if env is None else env
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    return any(env.get(k) != v for k, v in PINS.items())


def pinned_run(args: list[str]) -> int:
    """Run ``python -m fedviews ARGS`` with the pins set (its output to this process's), and
    return its exit status. Unless the environment says otherwise, its OpenMP threads also
    wait passively (``OMP_WAIT_POLICY=PASSIVE``, as the test suite's): a waiting thread no
    longer spins out its time slice when other jobs share the cores (two reproductions at
    once on two cores ran several times slower), and the sums are the same bit for bit."""
    env = {**os.environ, **PINS}
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return subprocess.run(
        [sys.executable, "-m", "fedviews", *args], env=env, check=False
    ).returncode
