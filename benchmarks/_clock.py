"""The clocks the speed benchmarks time with (``--clock``).

``wall`` is the wall clock. ``cpu`` is this process's CPU time: on a shared machine the
other jobs then stay out of the ratio (the benchmarks run torch single-threaded there); it
does not see GPU time, so on a GPU use the wall clock. A federated run's training is timed
by wrapping the method of the party that drives it (:func:`cpu_of`): in one process every
other party's handler runs inside it, and the run's setup stays out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


@contextmanager
def cpu_of(cls: type, method: str) -> Iterator[list[float]]:
    """The CPU seconds of every call of ``cls.method`` made inside the block."""
    seconds: list[float] = []
    real = getattr(cls, method)

    def timed(*args: Any, **kw: Any) -> Any:
        t0 = time.process_time()
        try:
            return real(*args, **kw)
        finally:
            seconds.append(time.process_time() - t0)

    setattr(cls, method, timed)
    try:
        yield seconds
    finally:
        setattr(cls, method, real)
