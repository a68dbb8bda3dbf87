"""The clocks the speed benchmarks time with (``--clock``).

``wall`` is the wall clock. ``cpu`` is this process's CPU time: on a shared machine the
other jobs then stay out of the ratio. With it :func:`use_clock` runs torch on one thread
(unless the script's ``--threads`` says otherwise), so that no thread's idle spinning is
counted; it does not see GPU time, so on a GPU use the wall clock. A federated run's training is timed
by wrapping the method of the party that drives it (:func:`cpu_of`): in one process every
other party's handler runs inside it, and the run's setup stays out.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from _args import device_option, nonnegative_int
from _record import pair_ratios

T = TypeVar("T")

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


@contextmanager
def cpu_of(
    cls: type, method: str, clock: Callable[[], float] = time.process_time
) -> Iterator[list[float]]:
    """The CPU seconds (by ``clock``) of every call of ``cls.method`` made inside the block."""
    seconds: list[float] = []
    real = getattr(cls, method)

    def timed(*args: Any, **kw: Any) -> Any:
        t0 = clock()
        try:
            return real(*args, **kw)
        finally:
            seconds.append(clock() - t0)

    setattr(cls, method, timed)
    try:
        yield seconds
    finally:
        setattr(cls, method, real)


def best(fn: Callable[[], Any], repeats: int) -> float:
    """The shortest wall time of ``repeats`` calls of ``fn`` (seconds)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def us_per_call(fn: Callable[[], object], n: int, clock: Callable[[], float]) -> float:
    """Microseconds (by ``clock``) per call of ``fn`` over ``n`` calls in a row."""
    t0 = clock()
    for _ in range(n):
        fn()
    return (clock() - t0) / n * 1e6


def warm_rounds(
    one_round: Callable[[], T], repeats: int, warm_up: Callable[[], object] | None = None
) -> list[T]:
    """``repeats`` results of ``one_round`` (one round of interleaved runs at the full size),
    after one untimed round of the same (or of ``warm_up``, where a whole round would cost too
    much), each round started from a collected heap.

    The warm-up round meets everything the timed ones meet: a smaller one of whole batches left
    out the last, partial batch, whose shapes were new to the caches (the hand-over's byte counts,
    the kernels) in the first timed round only. The collection frees the last round's objects
    (reference cycles: federations, estimators) before the next round starts, not in whichever
    timed run's collection comes next.
    """
    gc.collect()
    (warm_up or one_round)()
    results = []
    for _ in range(repeats):
        gc.collect()
        results.append(one_round())
    return results


def print_ratio(label: str, federated: list[float], plain: list[float]) -> None:
    """Print the median of the ratios of the interleaved pairs of runs, and every pair's."""
    ratios = pair_ratios(federated, plain)
    print(
        f"{label:<16}: {statistics.median(ratios):8.3f}  (median of the pairs "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; goal <= 1.1 on a CPU, <= 1.3 on a GPU)"
    )


def clock_option(ap: argparse.ArgumentParser, default: str = "wall") -> None:
    """The ``--clock`` option of a benchmark (read it with :func:`use_clock`)."""
    ap.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default=default,
        help="wall: the wall clock; cpu: this process's CPU time, with torch single-threaded "
        "(where the script has --threads, as many as it says), so that other jobs on a shared "
        f"machine stay out (default: {default})",
    )


def use_clock(args: argparse.Namespace) -> Callable[[], float]:
    """The clock that ``args.clock`` names. ``cpu`` also sets torch to one thread, unless the
    script has a ``--threads`` option that was given (``0``: torch's default); a ``--threads``
    given sets that many whatever the clock. Call it before any work: the printed header
    and the record's title then show the thread count it set."""
    threads = getattr(args, "threads", None)
    if threads is None and args.clock == "cpu":
        threads = 1
    if threads:
        import torch

        torch.set_num_threads(threads)
    return CLOCKS[args.clock]


def ratio_options(ap: argparse.ArgumentParser, parties: str) -> None:
    """The options of a benchmark of a split-learning epoch against its plain loop:
    ``--device``, ``--clock``, ``--one-backward-each`` (one backward pass per party of
    ``parties``, the ones that stage theirs) and ``--profile``."""
    device_option(ap)
    clock_option(ap)
    ap.add_argument(
        "--one-backward-each",
        action="store_true",
        help=f"also time the run with one backward pass per {parties} (not one for them all)",
    )
    ap.add_argument(
        "--profile",
        type=nonnegative_int,
        default=0,
        metavar="N",
        help="also profile one more federated epoch and print its N costliest functions",
    )
