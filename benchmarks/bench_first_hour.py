"""Time what a new user runs in the first hour, and make the record that the docs render.

    .venv/bin/python benchmarks/bench_first_hour.py [NAME ...] [--json PATH]
    .venv/bin/python benchmarks/bench_first_hour.py --json docs/results/first_hour_timings.json

Runs each named command (default: all of :data:`COMMANDS`, ``make test`` included: minutes,
and it installs the development tools) once, in a fresh process, as a user types it, and
prints its wall seconds with the load average just before it. ``--json PATH`` also writes
them, with the date and the machine, into the record at ``PATH`` (the other names' records
are kept, so one command can be timed again alone); without it nothing is written. A run
that fails stops the benchmark and records nothing. The second command above remakes the
committed record, which the docs show where a page says ``<!-- timing: NAME -->``
(``docs/hooks/timings.py``): no time in the docs is typed by hand
(``tests/test_docs.py::test_no_page_states_a_time_by_hand``). The record's ``command`` is
the command of the last run that timed every name.

The commands:

* ``demo``: ``make demo``'s command, ``fedviews run configs/mmvfl_handwritten.toml`` in the
  repository (the datasets already fetched, as after ``make data``);
* ``shipped_deployment``: ``fedviews run deploy_mmvfl_two_orgs`` in an empty folder: a
  config shipped in the package, run by name outside the repository (the deployment
  walk-through's one-machine shortcut: certificates, data files, PSI, one process per party);
* ``tests``: ``make test`` in the repository (lint, type check and the test suite, with the
  development environment installed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _args import parser, run_cli
from _record import command, json_option

from fedviews.experiments._reproduce import machine

ROOT = Path(__file__).resolve().parents[1]
#: name -> (the command as a user types it, whether it runs in the repository)
COMMANDS: dict[str, tuple[list[str], bool]] = {
    "demo": (["fedviews", "run", "configs/mmvfl_handwritten.toml"], True),
    "shipped_deployment": (["fedviews", "run", "deploy_mmvfl_two_orgs"], False),
    "tests": (["make", "test"], True),
}


def time_command(command: list[str], in_repository: bool) -> dict[str, Any]:
    """One run of ``command`` (``fedviews`` as ``python -m fedviews``, its run folder in a
    temporary folder; any other command as it is): its record."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd = ROOT if in_repository else Path(tmp)
        argv = command
        if command[0] == "fedviews":
            argv = [sys.executable, "-m", "fedviews", *command[1:], "--out", f"{tmp}/run"]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return {
        "command": " ".join(command),
        "where": "the repository root" if in_repository else "an empty folder",
        "wall_seconds": round(seconds, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine("cpu"),
        "load_average": round(load, 2),
    }


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "names", nargs="*", metavar="NAME", help=f"of {', '.join(COMMANDS)} (default: all)"
    )
    json_option(ap)
    args = ap.parse_args()
    names = args.names or list(COMMANDS)
    if unknown := [n for n in names if n not in COMMANDS]:
        ap.error(f"unknown command {unknown[0]!r}; known: {', '.join(COMMANDS)}")
    record: dict[str, Any] = {"command": command(), "timings": {}}
    if args.json is not None and args.json.is_file():
        record = json.loads(args.json.read_text(encoding="utf-8"))
    if set(names) == set(COMMANDS):  # this command remakes the whole record
        record["command"] = command()
    for name in names:
        timing = time_command(*COMMANDS[name])
        print(f"{name}: {timing['command']}: {timing['wall_seconds']} s "
              f"(load average {timing['load_average']})", flush=True)  # fmt: skip
        record["timings"][name] = timing
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    if args.json is not None:
        print(f"wrote {args.json}")


if __name__ == "__main__":
    run_cli(main)
