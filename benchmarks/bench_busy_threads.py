"""Time small torch and numpy loops with 1 and 2 threads on a busy machine (the test suite's
thread settings, tests/conftest.py).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_busy_threads.py [--busy 2] [--repeats 3] [--json PATH]

``--busy N`` starts N busy loops (``yes > /dev/null``, as issue #30's load) for the run and
stops them at its end. Each loop runs in a fresh process (the waiting policy is read when
OpenMP loads): a torch MLP's 300 SGD steps (batch 256) with 1 thread, with 2 threads that
spin at barriers (OpenMP's default) and with 2 that wait passively (``OMP_WAIT_POLICY=
PASSIVE``); 3,000 numpy products (300x200 @ 200x100) with 1 and 2 OpenBLAS threads. Every
row is a ratio to the 1-thread loop run just before it (the machine is noisy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from _args import nonnegative_int, parser, positive_int, run_cli
from _record import json_option, ratio_table, write_record

TORCH = """
import time, torch
torch.set_num_threads({threads})
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(196, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
o = torch.optim.SGD(m.parameters(), lr=0.1)
X, y = torch.randn(256, 196), torch.randint(0, 10, (256,))
t = time.perf_counter()
for _ in range(300):
    o.zero_grad(); torch.nn.functional.cross_entropy(m(X), y).backward(); o.step()
print(time.perf_counter() - t)
"""
NUMPY = """
import time, numpy as np
from threadpoolctl import threadpool_limits
rng = np.random.default_rng(0)
A, B = rng.standard_normal((300, 200)), rng.standard_normal((200, 100))
with threadpool_limits({threads}, user_api="blas"):
    t = time.perf_counter()
    for _ in range(3000):
        A @ B
print(time.perf_counter() - t)
"""


def _seconds(code: str, threads: int, **env: str) -> float:
    """The loop's seconds in a fresh process (OpenMP reads its policy when it loads)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", code.format(threads=threads)],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--busy", type=nonnegative_int, default=0, help="busy loops to start for the run"
    )
    ap.add_argument("--repeats", type=positive_int, default=3, help="interleaved rounds of runs")
    json_option(ap)
    args = ap.parse_args()
    busy = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.busy)]
    try:
        time.sleep(1.0 if busy else 0.0)
        one: list[float] = []
        spin: list[float] = []
        passive: list[float] = []
        blas1: list[float] = []
        blas2: list[float] = []
        for _ in range(args.repeats):
            one.append(_seconds(TORCH, 1))
            spin.append(_seconds(TORCH, 2))
            passive.append(_seconds(TORCH, 2, OMP_WAIT_POLICY="PASSIVE"))
            blas1.append(_seconds(NUMPY, 1))
            blas2.append(_seconds(NUMPY, 2))
    finally:
        for proc in busy:  # always: never leave a busy loop behind
            proc.kill()
            proc.wait()
    torch_table = ratio_table(
        f"torch MLP, 300 SGD steps, {args.busy} busy loops",
        one,
        {
            "2 threads, spinning (OpenMP default)": spin,
            "2 threads, OMP_WAIT_POLICY=PASSIVE": passive,
        },
        unit="s",
        baseline="1 thread",
    )
    numpy_table = ratio_table(
        f"numpy, 3,000 products 300x200 @ 200x100, {args.busy} busy loops",
        blas1,
        {"2 OpenBLAS threads": blas2},
        unit="s",
        baseline="1 OpenBLAS thread",
    )
    for table in (torch_table, numpy_table):
        print(table["title"])
        for row in table["rows"]:
            print("  ", row[0], "best", row[1], f"s; x {table['rows'][0][0]}", row[3])
    write_record(
        args.json,
        "Threads that wait at barriers on a busy machine",
        [torch_table, numpy_table],
        busy_loops=args.busy,
        cores=os.cpu_count(),
    )


if __name__ == "__main__":
    run_cli(main)
