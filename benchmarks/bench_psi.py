"""Time the ECDH private set intersection (ristretto255) on random ID sets.

    .venv/bin/python benchmarks/bench_psi.py [N ...] [--overlap 0.5] [--ids int|str] [--parties 2]

For every ``N`` (default: 100000), ``--parties`` parties with ``N`` IDs each,
``overlap * N`` of them shared by all, run the PSI in one process over the
in-process transport (every message encoded and decoded, all parties sharing
this machine's cores). Prints one table row per size: wall seconds, CPU seconds
(all threads of the process), bytes on the wire (from the message log) and
messages.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fedviews.privacy import psi_intersect


def _id_sets(n: int, parties: int, overlap: float, kind: str) -> tuple[list[np.ndarray], int]:
    rng = np.random.default_rng(0)
    shared = int(overlap * n)
    own = n - shared
    pool = rng.choice(20 * n * parties, size=shared + own * parties, replace=False)
    common = pool[:shared]
    sets = [
        rng.permutation(np.concatenate([common, pool[shared + k * own : shared + (k + 1) * own]]))
        for k in range(parties)
    ]
    if kind == "str":
        sets = [np.char.add("user-", s.astype(str)) for s in sets]
    return sets, shared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sizes", nargs="*", type=int, default=[100_000], metavar="N")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--ids", choices=("int", "str"), default="int")
    ap.add_argument("--parties", type=int, default=2)
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"PSI (ristretto255), {args.parties} parties, {args.ids} IDs, "
        f"overlap {args.overlap:.0%}, in-process transport, {cores} cores"
    )
    head = f"{'IDs per party':>14} {'common':>10} {'wall s':>8} {'CPU s':>8} {'MB wire':>9} {'msgs':>5}"
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        sets, shared = _id_sets(n, args.parties, args.overlap, args.ids)
        t0, c0 = time.perf_counter(), time.process_time()
        common, transport = psi_intersect(sets)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        expected = sets[0]
        for s in sets[1:]:
            expected = np.intersect1d(expected, s)
        assert len(common) == shared and np.array_equal(common, expected)
        log = transport.log
        print(
            f"{n:>14,} {shared:>10,} {wall:>8.1f} {cpu:>8.1f} "
            f"{log.total_bytes / 1e6:>9.1f} {log.n_messages:>5}",
            flush=True,
        )


if __name__ == "__main__":
    main()
