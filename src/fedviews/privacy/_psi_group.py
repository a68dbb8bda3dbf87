"""The group operations of the PSI (:mod:`fedviews.privacy._psi`): IDs hashed to ristretto255
and blinded by secret scalars, in chunks on every core.

Hash to group: ``H(id) = ristretto255_from_hash(SHA-512(DST || enc(id)))``
with ``DST = "fedviews-psi-v2|ristretto255|SHA-512|"`` — the 64-byte uniform
string is mapped by the RFC 9496 one-way map (two Elligator maps and a point
addition), the standard hash-to-ristretto255, so ``H`` behaves as a random
oracle into the group and no discrete logarithm of ``H(id)`` is known. IDs are
encoded with their type (``i:<decimal int>``, ``s:<utf-8>``, ``b:<bytes>``), so
``5`` and ``"5"`` never collide. Elements travel as their canonical 32-byte
encodings; a party rejects (:class:`~fedviews.errors.ProtocolError`) any element
that is not a canonical encoding or is the identity. The group operations are
libsodium's (bundled by the ``rbcl`` package); they release the GIL, so every
party blinds its chunks on all its cores.

Cost
----
Each party hashes and blinds its own IDs and re-blinds every other party's set,
so ``K`` sets of ``N`` IDs take ``K N`` hashes to the group and ``K^2 N`` scalar
multiplications: on this project's 2-core reference machine about 10.7 µs
(SHA-512 and ``from_hash``) and 36 µs (``scalarmult``) of libsodium each, i.e.
83 µs per ID and party for two parties. Everything else (ID encoding, threads,
messages, the coordinator's sort-based intersection) adds about 4 %: two sets
of 1M IDs cost 174 CPU s against a floor of 167 CPU s, i.e. at least 84 s on
two idle cores (``benchmarks/bench_psi.py --breakdown`` measures the breakdown
and the floor). Only a faster group implementation would lower it; OpenSSL's
X25519 (``cryptography``) is 1.5x faster per multiplication, but there is no
maintained hash to its curve (libsodium's Elligator to edwards25519 and the
conversion to X25519 cost about 48 µs per ID), and two threads of it were no
faster than one in our measurement (on a loaded machine, so not conclusive).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from fedviews.errors import DataError, ProtocolError, require

_DST = b"fedviews-psi-v2|ristretto255|SHA-512|"
_WIDTH = 32  # bytes of an encoded ristretto255 element
_PARALLEL_MIN = 2048  # below this, one thread: a pool costs more than it saves
_CHUNK = 65536  # IDs per chunk at most: bounds the Python lists a chunk builds


_RBCL: Any = None
_RBCL_LOCK = threading.Lock()


def _sodium() -> Any:
    """The ``rbcl`` module: libsodium's ristretto255 functions (GIL released in C)."""
    global _RBCL
    with _RBCL_LOCK:
        if _RBCL is None:
            rb = require("rbcl", "grpc")
            _drop_library_copy(rb)
            _RBCL = rb
    return _RBCL


def _drop_library_copy(rb: Any) -> None:
    """Remove the copy of libsodium that ``rbcl`` writes to a fresh temporary file at
    every import and never deletes; once loaded it is not needed (POSIX keeps the
    mapping), so processes that use the PSI do not leave megabytes behind."""
    path = getattr(getattr(rb, "_sodium", None), "_name", None)
    if (
        os.name == "posix"
        and isinstance(path, str)
        and os.path.dirname(path) == tempfile.gettempdir()
        and os.path.basename(path).startswith("tmp")
        and path.endswith(".so")
    ):
        with contextlib.suppress(OSError):
            os.unlink(path)


# -- ID encoding and hash to group ------------------------------------------
def _encode_id(v: Any) -> bytes:
    if isinstance(v, (bytes, np.bytes_)):
        return b"b:" + bytes(v)
    if isinstance(v, (str, np.str_)):
        return b"s:" + str(v).encode("utf-8")
    if isinstance(v, (int, np.integer)):  # bool is an int
        return b"i:%d" % int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return b"i:%d" % int(v)
    raise DataError(f"PSI IDs must be integers, strings or bytes, got {v!r}")


def _encode_ids(ids: np.ndarray) -> list[bytes]:
    """Typed, injective byte encodings of the IDs (vectorised per dtype)."""
    kind = ids.dtype.kind
    if kind in "iub":
        return [b"i:%d" % v for v in ids.tolist()]
    if kind == "U":
        return [b"s:" + v.encode("utf-8") for v in ids.tolist()]
    if kind == "S":
        return [b"b:" + v for v in ids.tolist()]
    if kind == "f" and _integral(ids):
        return [b"i:%d" % int(v) for v in ids.tolist()]
    if kind == "O":
        return [_encode_id(v) for v in ids.tolist()]
    raise DataError(f"PSI IDs must be integers, strings or bytes, got dtype {ids.dtype}")


def _integral(ids: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(ids))) and bool(np.all(ids == np.trunc(ids)))


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _fill(n: int, work: Callable[[int, int], bytes]) -> np.ndarray:
    """An ``(n, 32)`` uint8 array whose rows ``lo:hi`` are the bytes ``work(lo, hi)``.

    Chunks run on a thread per core (libsodium releases the GIL for every group
    operation, so the threads scale: the Python around the calls is about 1 % of
    the time per ID, see ``benchmarks/bench_psi.py --breakdown``); each chunk is
    written straight into the result, which is never joined or copied as a whole.
    """
    out = np.empty((n, _WIDTH), dtype=np.uint8)
    flat = out.reshape(-1)

    def run(bounds: tuple[int, int]) -> None:
        lo, hi = bounds
        flat[lo * _WIDTH : hi * _WIDTH] = np.frombuffer(work(lo, hi), dtype=np.uint8)

    workers = _workers()
    if n < _PARALLEL_MIN or workers == 1:
        run((0, n))
        return out
    step = min(_CHUNK, -(-n // (4 * workers)))  # a few chunks per thread even out the load
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(run, [(lo, min(lo + step, n)) for lo in range(0, n, step)]))
    return out


def new_key() -> bytes:
    """A fresh secret blinding scalar: 32 bytes, uniform and non-zero modulo the group order."""
    return bytes(_sodium().crypto_core_ristretto255_scalar_random())


def _hasher(ids: Any, key: bytes | None) -> Callable[[int, int], bytes]:
    """``work(lo, hi)``: the encodings of ``H(id)``, or of ``key * H(id)``, for ``ids[lo:hi]``.

    Each chunk encodes its own IDs: no list of all encodings or hashes is built."""
    arr = np.asarray(ids)
    rb = _sodium()
    from_hash, mul = rb.crypto_core_ristretto255_from_hash, rb.crypto_scalarmult_ristretto255
    sha512, dst = hashlib.sha512, _DST

    def work(lo: int, hi: int) -> bytes:
        enc = _encode_ids(arr[lo:hi])
        if key is None:
            return b"".join([from_hash(sha512(dst + e).digest()) for e in enc])
        try:
            return b"".join([mul(key, from_hash(sha512(dst + e).digest())) for e in enc])
        except RuntimeError:  # pragma: no cover - an ID hashing to the identity: 2^-252
            raise ProtocolError("an ID hashed to the identity element") from None

    return work


def _check_ids(ids: Any) -> int:
    """The number of IDs; a :class:`DataError` before any work if their type is not allowed."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise DataError(f"PSI IDs must be one-dimensional, got shape {arr.shape}")
    kind = arr.dtype.kind
    if kind not in "iubUSfO" or (kind == "f" and not _integral(arr)):
        raise DataError(f"PSI IDs must be integers, strings or bytes, got dtype {arr.dtype}")
    return len(arr)


def hash_ids(ids: Any) -> np.ndarray:
    """``(n, 32)`` uint8 encodings of the unblinded ``H(id)`` (for tests and audits)."""
    return _fill(_check_ids(ids), _hasher(ids, None))


def blind_ids(key: bytes, ids: Any) -> np.ndarray:
    """``(n, 32)`` uint8 encodings of ``key * H(id)`` for every ID, in order."""
    return _fill(_check_ids(ids), _hasher(ids, key))


def reblind(key: bytes, points: Any, sender: str = "the sender") -> np.ndarray:
    """Multiply every element of ``points`` ((n, 32) uint8 encodings) by ``key``.

    Raises :class:`~fedviews.errors.ProtocolError`, naming ``sender``, on a wrong
    dtype or shape, a non-canonical or invalid encoding, or the identity element.
    """
    pts = _check_set(np.ascontiguousarray(points), sender, "sent")
    raw, w = pts.tobytes(), _WIDTH
    mul = _sodium().crypto_scalarmult_ristretto255

    def work(lo: int, hi: int) -> bytes:
        try:
            return b"".join([mul(key, raw[o : o + _WIDTH]) for o in range(lo * w, hi * w, w)])
        except RuntimeError:  # libsodium: not a canonical encoding, or the identity
            raise ProtocolError(
                f"{sender!r} sent a psi_set whose element {_first_invalid(raw, lo, hi)} is not "
                "a valid ristretto255 element"
            ) from None

    return _fill(len(pts), work)


def _check_set(pts: np.ndarray, sender: str, verb: str) -> np.ndarray:
    """``pts`` if it is a set of encodings (uint8, ``(n, 32)``), else a
    :class:`ProtocolError` naming ``sender``."""
    if pts.dtype != np.uint8 or pts.ndim != 2 or pts.shape[1] != _WIDTH:
        raise ProtocolError(
            f"{sender!r} {verb} a psi_set of {pts.dtype} {pts.shape}: it must be uint8 of "
            f"shape (n, {_WIDTH})"
        )
    return pts


def _first_invalid(raw: bytes, lo: int, hi: int) -> int:
    """The first of the elements ``lo:hi`` of ``raw`` that is not the canonical encoding of a
    non-identity ristretto255 element."""
    valid = _sodium().crypto_core_ristretto255_is_valid_point
    identity = bytes(_WIDTH)
    for i in range(lo, hi):
        p = raw[i * _WIDTH : (i + 1) * _WIDTH]
        if p == identity or not valid(p):
            return i
    return lo  # pragma: no cover - libsodium refused an element it calls valid
