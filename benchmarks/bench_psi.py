"""Time the ECDH private set intersection (ristretto255) on random ID sets.

    .venv/bin/python benchmarks/bench_psi.py [N ...] [--overlap 0.5] [--ids int|str]
        [--parties 2] [--baseline] [--breakdown] [--groups G [--layout disjoint|shared]]

For every ``N`` (default: 100000), ``--parties`` parties with ``N`` IDs each,
``overlap * N`` of them shared by all, run the PSI in one process over the
in-process transport (every message encoded and decoded, all parties sharing
this machine's cores). Prints one table row per size: wall seconds, CPU seconds
(all threads of the process), CPU seconds over the library floor (below), bytes
on the wire (from the message log) and messages.

``--baseline`` also runs the previous implementation (kept in this file: one list
of all encodings, chunks joined then copied) in the same process, before the
current one, and prints the ratio; the machine's load average is printed before
and after, as the cores are shared.

``--breakdown`` first measures, on one thread, what one ID costs in each stage
(encoding, SHA-512, hash to the group, scalar multiplication, the coordinator's
intersection) and the **library floor**: libsodium's ristretto255 operations
called back to back through ctypes with nothing else per ID. Each party hashes
and blinds its own IDs and re-blinds every other party's, so the PSI of ``K``
sets of ``N`` IDs cannot cost less than ``K N (hash + K mul)`` CPU seconds, that
divided by the cores in wall seconds. It also times the scalar multiplication
on all cores (libsodium releases the GIL: the threads scale) and, for
comparison, OpenSSL's X25519 (``cryptography``), the fastest maintained
Curve25519 scalar multiplication installable here.

``--groups G`` times a session of ``G`` alignment groups instead, each of
``--parties`` parties with ``N`` IDs: ``--layout disjoint`` gives every group parties
of its own (H-FedMV's one group per client), ``shared`` puts the same parties in every
group (Multi-VFL's data owners, with one group per label owner). It runs the groups one
after another (``sequential``: what the deployed coordinator does) and all at once from
threads (``concurrent``), and prints wall and CPU seconds of each (``--repeat R``: R runs
of each mode, alternating their order, and the ratio of the medians).
``--party-threads 1`` blinds on one thread per party, as if every party had a host with
one core of its own. The in-process transport runs a party's handlers concurrently,
where a deployed party runs them one at a time.

``--json PATH`` (without ``--groups``) also writes the per-ID costs and the runs as tables
(``benchmarks/_record.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from unittest import mock

import numpy as np
from _args import fraction, int_at_least, nonnegative_int, parser, positive_int, run_cli
from _record import NA, json_option, write_record

from fedviews.privacy import _psi, _psi_group, psi_intersect

T = TypeVar("T")


# -- the previous implementation (the baseline of --baseline) ------------------
def _old_chunked(fn: Callable[[int, int], bytes], n: int) -> bytes:
    workers = _psi_group._workers()
    if n < _psi_group._PARALLEL_MIN or workers == 1:
        return fn(0, n)
    step = -(-n // (4 * workers))
    bounds = [(lo, min(lo + step, n)) for lo in range(0, n, step)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return b"".join(pool.map(lambda b: fn(*b), bounds))


def _old_points(raw: bytes, n: int) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).reshape(n, 32).copy()


def _old_blind_ids(key: bytes, ids: Any) -> np.ndarray:
    enc = _psi_group._encode_ids(np.asarray(ids))
    rb = _psi_group._sodium()
    from_hash, mul = rb.crypto_core_ristretto255_from_hash, rb.crypto_scalarmult_ristretto255

    def work(lo: int, hi: int) -> bytes:
        return b"".join(
            [mul(key, from_hash(hashlib.sha512(_psi_group._DST + e).digest())) for e in enc[lo:hi]]
        )

    return _old_points(_old_chunked(work, len(enc)), len(enc))


def _old_reblind(key: bytes, points: Any, sender: str = "") -> np.ndarray:
    pts = np.ascontiguousarray(points)
    raw = pts.tobytes()
    mul = _psi_group._sodium().crypto_scalarmult_ristretto255

    def work(lo: int, hi: int) -> bytes:
        return b"".join([mul(key, raw[i * 32 : (i + 1) * 32]) for i in range(lo, hi)])

    return _old_points(_old_chunked(work, len(pts)), len(pts))


def _previous_implementation() -> Any:
    """Inside this context the parties blind and re-blind with the previous code."""
    return mock.patch.multiple(_psi, blind_ids=_old_blind_ids, reblind=_old_reblind)


# -- per-ID costs and the library floor ----------------------------------------
def _per_id(fn: Callable[[], T], n: int) -> tuple[float, T]:
    """CPU microseconds per item of ``fn()`` over ``n`` items, and its result."""
    c0 = time.process_time()
    out = fn()
    return (time.process_time() - c0) / n * 1e6, out


def _wall_per_id(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) / n * 1e6


def breakdown(m: int, n: int, parties: int, cores: int) -> tuple[float, list[tuple[str, float]]]:
    """Print the per-ID costs on ``m`` IDs; return the floor in CPU s of ``parties`` x ``n``
    and the costs (name, CPU microseconds per ID)."""
    rb = _psi_group._sodium()
    lib = importlib.import_module("rbcl._sodium")._sodium  # libsodium itself, via ctypes
    ids = np.random.default_rng(1).choice(40 * m, size=m, replace=False)
    key = _psi_group.new_key()
    rows: list[tuple[str, float]] = []

    us, enc = _per_id(lambda: _psi_group._encode_ids(ids), m)
    rows.append(("typed ID encoding (Python)", us))
    us, hs = _per_id(lambda: [hashlib.sha512(_psi_group._DST + e).digest() for e in enc], m)
    rows.append(("SHA-512 of DST || ID", us))
    us, pts = _per_id(lambda: [rb.crypto_core_ristretto255_from_hash(h) for h in hs], m)
    rows.append(("hash to group: from_hash (rbcl)", us))
    us, _ = _per_id(lambda: [rb.crypto_scalarmult_ristretto255(key, p) for p in pts], m)
    rows.append(("scalar mult (rbcl), per blinding", us))

    # the floor: the C functions back to back on preallocated buffers
    buf = ctypes.create_string_buffer(32)
    flat = b"".join(hs)
    raw = b"".join(pts)
    fh, sm = lib.crypto_core_ristretto255_from_hash, lib.crypto_scalarmult_ristretto255
    floor_hash, _ = _per_id(lambda: [fh(buf, flat[i * 64 : (i + 1) * 64]) for i in range(m)], m)
    floor_mul, _ = _per_id(lambda: [sm(buf, key, raw[i * 32 : (i + 1) * 32]) for i in range(m)], m)
    rows.append(("  floor: libsodium from_hash alone", floor_hash))
    rows.append(("  floor: libsodium scalarmult alone", floor_mul))
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(m, 32)
    other = np.ascontiguousarray(arr[np.random.default_rng(2).permutation(m)])
    us, _ = _per_id(lambda: _psi._common_positions([arr, other]), m)
    rows.append(("coordinator: intersect 2 sets (numpy)", us))

    print(f"per-ID costs on {m:,} IDs, one thread (CPU microseconds per ID):")
    for name, us in rows:
        print(f"  {name:<40} {us:8.2f}")
    with mock.patch.object(_psi_group, "_workers", lambda: 1):
        single = _wall_per_id(lambda: _psi_group.reblind(key, arr), m)
    threaded = _wall_per_id(lambda: _psi_group.reblind(key, arr), m)
    print(
        f"  re-blinding on {cores} threads: {threaded:.2f} us wall per element, "
        f"{single / threaded:.2f}x one thread's (idle cores: up to {cores}x)"
    )
    with contextlib.suppress(ImportError):
        from cryptography.hazmat.primitives.asymmetric import x25519

        sk = x25519.X25519PrivateKey.generate()
        pubs = [x25519.X25519PublicKey.from_public_bytes(p) for p in pts]
        us, _ = _per_id(lambda: [sk.exchange(q) for q in pubs], m)
        print(f"  for comparison: OpenSSL X25519 (cryptography)   {us:8.2f}")
        rows.append(("for comparison: OpenSSL X25519 (cryptography)", us))

    hash_us = rows[1][1] + floor_hash
    floor = parties * n * (hash_us + parties * floor_mul) / 1e6
    print(
        f"library floor for {parties} x {n:,} IDs: {parties} x {n:,} x (hash {hash_us:.1f} + "
        f"{parties} x mul {floor_mul:.1f} us) = {floor:.1f} CPU s = {floor / cores:.1f} s wall "
        f"on {cores} idle cores\n"
    )
    return floor, rows


# -- the benchmark -------------------------------------------------------------
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


def _timed(sets: list[np.ndarray], shared: int) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    common, transport = psi_intersect(sets)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    expected = sets[0]
    for s in sets[1:]:
        expected = np.intersect1d(expected, s)
    assert len(common) == shared and np.array_equal(common, expected)
    return wall, cpu, transport.log


class _GroupParty(_psi.PSIParty):
    """One ID list per group."""

    def __init__(self, name: str, by_group: dict[str, np.ndarray]) -> None:
        super().__init__(name, next(iter(by_group.values())))
        self.by_group = by_group

    def psi_ids(self, group: str) -> np.ndarray:
        return self.by_group[group]


def _timed_groups(
    n: int, args: argparse.Namespace, mode: str
) -> tuple[float, float, Any, dict[str, int]]:
    """One session of ``args.groups`` groups (see the module docstring), run in ``mode``."""
    from fedviews.federation import Coordinator, InProcessTransport

    layout: dict[str, list[str]] = {}
    ids: dict[str, dict[str, np.ndarray]] = {}
    for g in range(args.groups):
        sets, _ = _id_sets(n, args.parties, args.overlap, args.ids)
        prefix = f"g{g}-" if args.layout == "disjoint" else ""
        layout[f"group{g}"] = [f"{prefix}p{k}" for k in range(args.parties)]
        for name, ids_k in zip(layout[f"group{g}"], sets, strict=True):
            ids.setdefault(name, {})[f"group{g}"] = ids_k
    transport = InProcessTransport(_psi.PSI_POLICY)
    driver = Coordinator()
    transport.register(driver)
    for name, by_group in ids.items():
        transport.register(_GroupParty(name, by_group))
    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "concurrent":
        with ThreadPoolExecutor(max_workers=len(layout)) as pool:
            got = dict(zip(layout, pool.map(lambda g: _psi.run_psi(driver, layout[g], g), layout)))
    else:  # what the deployed coordinator does
        got = {g: _psi.run_psi(driver, parties, g) for g, parties in layout.items()}
    return time.perf_counter() - t0, time.process_time() - c0, transport.log, got


def _groups_main(args: argparse.Namespace) -> None:
    modes = ["sequential", "concurrent"]
    head = (
        f"{'IDs per party':>14} {'mode':>12} {'groups':>7} {'wall s':>8} {'CPU s':>8} "
        f"{'MB wire':>9} {'msgs':>5}"
    )
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        times: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
        sizes = None
        for r in range(args.repeat):  # the modes in turn, in the reverse order every other time
            for mode in modes if r % 2 == 0 else modes[::-1]:
                wall, cpu, log, got = _timed_groups(n, args, mode)
                assert sizes is None or got == sizes, (mode, got)  # the same intersections
                sizes = got
                times[mode].append((wall, cpu))
                print(
                    f"{n:>14,} {mode:>12} {args.groups:>7} {wall:>8.2f} {cpu:>8.2f} "
                    f"{log.total_bytes / 1e6:>9.1f} {log.n_messages:>5}",
                    flush=True,
                )
        med = {m: np.median(np.array(t), axis=0) for m, t in times.items()}
        w0, c0 = med["sequential"]
        for mode in modes[1:]:
            w1, c1 = med[mode]
            print(
                f"{'':>14} sequential / {mode} (medians of {args.repeat}): "
                f"wall {w0 / w1:.2f}x, CPU {c0 / c1:.2f}x"
            )
    print(f"load average after: {_load()}")


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "sizes", nargs="*", type=positive_int, default=[100_000], metavar="N", help="IDs per party"
    )
    ap.add_argument(
        "--overlap", type=fraction, default=0.5, help="the share of IDs that all parties hold"
    )
    ap.add_argument("--ids", choices=("int", "str"), default="int")
    ap.add_argument("--parties", type=int_at_least(2), default=2)
    ap.add_argument("--baseline", action="store_true", help="also time the previous code")
    ap.add_argument("--breakdown", action="store_true", help="per-ID costs and the floor")
    ap.add_argument("--groups", type=positive_int, default=1, help="alignment groups per session")
    ap.add_argument(
        "--layout",
        choices=("disjoint", "shared"),
        default="disjoint",
        help="with --groups: every group its own parties, or the same parties in every group",
    )
    ap.add_argument(
        "--repeat", type=positive_int, default=1, help="with --groups: runs of each mode"
    )
    json_option(ap)
    ap.add_argument(
        "--party-threads",
        type=nonnegative_int,
        default=0,
        help="threads per blinding (default: one per core); 1 plays parties on hosts of "
        "their own with one core each",
    )
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    print(
        f"PSI (ristretto255), {args.parties} parties, {args.ids} IDs, "
        f"overlap {args.overlap:.0%}, in-process transport, {cores} cores, "
        f"load average {_load()}"
    )
    if args.groups > 1:
        if args.json:
            ap.error("--json records the run of one alignment group: drop --groups")
        threads = args.party_threads or cores
        print(
            f"{args.groups} alignment groups, {args.layout} parties, {threads} threads per blinding"
        )
        with mock.patch.object(_psi_group, "_workers", lambda: threads):
            _groups_main(args)
        return
    floors: dict[int, float] = {}
    tables: list[dict[str, Any]] = []
    if args.breakdown:
        m = min(50_000, min(args.sizes))
        floors[args.sizes[0]], costs = breakdown(m, args.sizes[0], args.parties, cores)
        tables.append(
            {
                "title": f"per-ID costs on {m:,} IDs, one thread",
                "columns": ["stage", "CPU µs per ID"],
                "rows": [[name.strip(), round(us, 2)] for name, us in costs],
            }
        )
        for n in args.sizes[1:]:
            floors[n] = floors[args.sizes[0]] * n / args.sizes[0]
    head = (
        f"{'IDs per party':>14} {'code':>9} {'common':>10} {'wall s':>8} {'CPU s':>8} "
        f"{'/floor':>7} {'MB wire':>9} {'msgs':>5}"
    )
    print(head)
    print("-" * len(head))
    columns = ["IDs per party", "code", "common", "wall s", "CPU s", "CPU / library floor"]
    columns += ["MB on the wire", "messages"]
    rows: list[list[Any]] = []
    for n in args.sizes:
        sets, shared = _id_sets(n, args.parties, args.overlap, args.ids)
        runs = {}
        if args.baseline:
            with _previous_implementation():
                runs["previous"] = _timed(sets, shared)
        runs["current"] = _timed(sets, shared)
        for code, (wall, cpu, log) in runs.items():
            rel = f"{cpu / floors[n]:>6.2f}x" if n in floors else f"{'':>7}"
            print(
                f"{n:>14,} {code:>9} {shared:>10,} {wall:>8.1f} {cpu:>8.1f} {rel} "
                f"{log.total_bytes / 1e6:>9.1f} {log.n_messages:>5}",
                flush=True,
            )
            floor = round(cpu / floors[n], 2) if n in floors else NA
            rows.append([n, code, shared, round(wall, 1), round(cpu, 1), floor])
            rows[-1] += [round(log.total_bytes / 1e6, 1), log.n_messages]
        if args.baseline:
            (w0, c0, _), (w1, c1, _) = runs["previous"], runs["current"]
            print(f"{'':>14} previous / current: wall {w0 / w1:.2f}x, CPU {c0 / c1:.2f}x")
    print(f"load average after: {_load()}")
    title = (
        f"PSI (ristretto255), {args.parties} parties, {args.ids} IDs, overlap {args.overlap:.0%}"
    )
    tables.append({"title": title, "columns": columns, "rows": rows})
    write_record(args.json, title, tables)


if __name__ == "__main__":
    run_cli(main)
