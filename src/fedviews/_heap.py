"""Process-wide malloc settings for processes that move large messages.

A split-learning party receives and sends megabyte-sized arrays hundreds of times per
epoch (Multi-VFL on MNIST: about 200 MB each way per label owner and epoch). With
glibc's defaults every such buffer is freed back to the kernel and mapped again for the
next message, so each message costs page faults and the zeroing of fresh pages: in
``benchmarks/bench_grpc.py multivfl --direct --per-process`` (with ``MALLOC_PERTURB_=0``
set, which switches these settings off) each label owner spent 0.14-0.17 CPU-s per epoch
in the kernel beside 0.43 in user code. Keeping freed memory in the heap (no trimming, a
generous top pad, buffers below 32 MB from the heap rather than from ``mmap``) takes
that to about 0.07 CPU-s; the cost is that a party keeps the memory of its largest epoch
mapped until it exits.
"""

from __future__ import annotations

import ctypes
import os
import sys

# glibc malloc tunables: (mallopt parameter, environment variable, bytes)
_TUNABLES = (
    (-1, "MALLOC_TRIM_THRESHOLD_", 1 << 30),  # M_TRIM_THRESHOLD: keep up to 1 GiB freed
    (-2, "MALLOC_TOP_PAD_", 256 << 20),  # M_TOP_PAD: grow the heap 256 MiB at a time
    (-3, "MALLOC_MMAP_THRESHOLD_", 32 << 20),  # M_MMAP_THRESHOLD: glibc's maximum, 32 MiB
)


def _user_chose() -> bool:
    """Whether this process runs off Linux or the user set malloc variables (theirs win)."""
    return not sys.platform.startswith("linux") or any(k.startswith("MALLOC_") for k in os.environ)


def heap_env() -> dict[str, str]:
    """The tunables as environment variables, for a process about to be started (glibc
    reads them before the first allocation, which settles the heap most reliably); empty
    where :func:`_user_chose`."""
    return {} if _user_chose() else {var: str(value) for _, var, value in _TUNABLES}


def keep_freed_memory() -> bool:
    """Apply the tunables to this running process with ``mallopt``; return whether it did.

    Does nothing (returns ``False``) off glibc, or when any ``MALLOC_*`` variable is set
    (the user's settings, or :func:`heap_env`'s, already apply)."""
    if _user_chose():
        return False
    try:  # the C library this interpreter runs on (no ldconfig lookup at every start)
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, _, value in _TUNABLES)
