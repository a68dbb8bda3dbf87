"""The suite's thread settings (tests/conftest.py) hold in its process and in the ones it starts."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np  # noqa: F401  (loads OpenBLAS, whose threads threadpoolctl reports)
from threadpoolctl import threadpool_info

PROBE = """
import json, os
import numpy
from threadpoolctl import threadpool_info
blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
print(json.dumps({"policy": os.environ.get("OMP_WAIT_POLICY"), "blas": blas}))
"""


def test_threads_wait_passively_and_numpy_blas_has_one_thread_here_and_in_children():
    """On a busy machine spinning threads made small loops 10-30x slower
    (benchmarks/bench_busy_threads.py); every process of the suite waits passively."""
    blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    assert blas and set(blas) == {1}
    child = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(child.stdout) == {"policy": "PASSIVE", "blas": [1]}
