"""Time how long ``fedviews`` takes to report a config error (and, for comparison, ``--help``).

    .venv/bin/python benchmarks/bench_cli_startup.py [CONFIG ...] [--repeat 5]

For every experiment config (default: one per registered experiment family, from ``configs/``)
runs ``fedviews run CONFIG params.no_such_key=1`` in a fresh process ``--repeat`` times and
prints the median wall and CPU seconds (user + system of the child: less sensitive to other
jobs on shared cores than the wall time), plus those of ``fedviews --help`` (the floor: Python,
typer, rich). Each run must fail with exit status 2 and an ``unknown key`` error, so a run
that got further than the config check is not timed as a quick one. The machine's load
average is printed before and after, as the cores may be shared.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _args import parser, positive_int, run_cli

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = (
    "mmvfl_handwritten",
    "fedmv_vertical_handwritten",
    "multivfl_fig3_mnist",
    "apfed_table2_mnist",
    "audit_mmvfl_handwritten",
    "sfedmv_watch",
)


def _time(args: list[str], expect: str | None) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -m fedviews ARGS``; ``expect``: text its error must
    show."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "fedviews", *args], capture_output=True, text=True, cwd=ROOT
    )
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if expect is not None and (out.returncode != 2 or expect not in out.stderr):
        raise SystemExit(f"fedviews {' '.join(args)}: expected {expect!r}, got {out.stderr!r}")
    return seconds, cpu


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("configs", nargs="*", default=DEFAULT, help="config stems under configs/")
    ap.add_argument("--repeat", type=positive_int, default=5, help="runs of each (median)")
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    rows: list[tuple[str, list[str], str | None]] = [("fedviews --help", ["--help"], None)]
    rows += [
        (
            f"run {c} params.no_such_key=1",
            ["run", f"configs/{c}.toml", "params.no_such_key=1"],
            "unknown key",
        )
        for c in a.configs
    ]
    for label, args, expect in rows:
        wall, cpu = zip(*(_time(args, expect) for _ in range(a.repeat)))
        print(
            f"{label:<58} wall {statistics.median(wall):.2f} s (min {min(wall):.2f}), "
            f"CPU {statistics.median(cpu):.2f} s"
        )
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    run_cli(main)
