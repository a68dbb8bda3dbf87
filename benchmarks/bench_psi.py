"""Time the ECDH private set intersection (P-256) on random ID sets.

    .venv/bin/python benchmarks/bench_psi.py [--n 100000] [--overlap 0.5]

Two parties with ``n`` IDs each, ``overlap`` of them shared, run in one process
over the in-process transport (every message encoded and decoded). Prints the
wall time and the bytes that crossed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedviews.privacy import psi_intersect


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--overlap", type=float, default=0.5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, shared = args.n, int(args.overlap * args.n)
    ids = rng.choice(10 * n, size=2 * n - shared, replace=False)
    a, b = ids[:n], ids[n - shared :]
    t0 = time.perf_counter()
    common, transport = psi_intersect([a, b])
    dt = time.perf_counter() - t0
    assert len(common) == shared and np.array_equal(common, np.sort(np.intersect1d(a, b)))
    mb = transport.log.total_bytes / 1e6
    print(f"PSI {n:,} x {n:,} IDs ({shared:,} shared): {dt:.1f} s, {mb:.1f} MB on the wire")


if __name__ == "__main__":
    main()
