"""gRPC transport, the wire: frames, one stream end (:class:`_Link`), pending requests.

The transport is this module (what crosses one stream), its settings
(:mod:`~fedviews.federation._grpc_options`), the base both ends share
(:mod:`~fedviews.federation._grpc_endpoint`), the coordinator's hub
(:mod:`~fedviews.federation._grpc_hub`: the topology) and a party's transport
(:mod:`~fedviews.federation._grpc_party`: direct links).

Wire format
-----------
One gRPC method, ``/fedviews.Hub/Connect`` (stream-stream, raw bytes: no protoc
step, no pickle). Every gRPC message is one *frame*::

    b"FVF1" | u8 type | u64 message id | u32 chunk index | u32 n_chunks | u32 CRC-32 | chunk

A :class:`Message` is encoded with :meth:`Message.encode` and split into chunks of
``chunk_size`` bytes (below gRPC's message limit); the receiver reassembles the
chunks and checks the CRC-32 of the whole encoded message before decoding it. Over
TLS the CRC field is 0 and not checked: every TLS record is authenticated already
(AES-GCM), and two checksum passes over every activation would cost more than the
copy into the frames.

Failure handling
----------------
Both ends send a heartbeat frame every ``heartbeat`` seconds (also while a
handler computes). A peer whose stream breaks, or from which nothing has arrived
for ``timeout`` seconds, is declared dead: every pending request to it raises
:class:`~fedviews.errors.PartyUnavailable` naming it. Every request also has a
deadline (``request_timeout``). A party retries connecting with exponential
backoff (``connect_retries`` attempts, one warning line for all of them); a host name
that does not resolve fails at once, as a :class:`~fedviews.errors.ConfigError`: a typo
or a missing DNS entry does not fix itself while a party waits.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import struct
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fedviews import errors
from fedviews.errors import FedViewsError, PartyUnavailable, ProtocolError, require
from fedviews.federation._budget import Budget
from fedviews.federation._grpc_options import GrpcOptions
from fedviews.federation._reports import error_payload

log = logging.getLogger("fedviews.grpc")

_METHOD = "/fedviews.Hub/Connect"
_PEER_METHOD = "/fedviews.Peer/Connect"  # a party's listener for direct links
_HEADER = struct.Struct("<4sBQIII")
_MAGIC = b"FVF1"
HELLO, WELCOME, REQUEST, REPLY, ERROR, HEARTBEAT, BYE, PEERS = range(1, 9)
Buffer = bytes | bytearray | memoryview


def _grpc() -> Any:
    return require("grpc", "grpc")


class _Link:
    """One stream end: chunked frames out (a queue), bounded reassembly in, liveness."""

    def __init__(
        self,
        peer: str,
        options: GrpcOptions,
        *,
        direct: bool = False,
        checksum: bool = True,
        budget: Budget | None = None,
    ) -> None:
        self.peer = peer
        #: what this link's peer may hold of its endpoint (shared by the endpoint's links)
        self.budget = budget or Budget(options)
        #: CRC-32 every message (plain text; over TLS the records are authenticated)
        self.checksum = checksum
        #: a direct party-to-party link (not the hub's); ``dialed``: this end dialed it
        self.direct = direct
        self.dialed = False
        self.chunk_size = options.chunk_size
        self.max_chunks = max(1, options.max_message_bytes // options.chunk_size)
        self.max_incomplete = options.max_incomplete
        self.out: queue.Queue[bytes | None] = queue.Queue()
        self.partial: dict[tuple[int, int], list[memoryview]] = {}
        self.last_seen = time.monotonic()
        self.closed = threading.Event()
        self.reason = ""
        self.bytes_out = 0
        self.bytes_in = 0
        self._lock = threading.Lock()

    def send(self, ftype: int, msg_id: int = 0, data: Buffer | Sequence[Buffer] = b"") -> None:
        """Queue one message as frames of at most ``chunk_size`` bytes.

        ``data``: the message's bytes, or the buffers that make them up one after the
        other (:meth:`Message.encode_parts`); either way every byte is copied once,
        straight into its frame.
        """
        if self.closed.is_set():
            raise PartyUnavailable(self.peer, self.reason or "connection closed")
        whole: Sequence[Buffer] = (
            [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        )
        parts = [memoryview(p).cast("B") for p in whole]
        crc = 0
        for p in parts if self.checksum else ():
            crc = zlib.crc32(p, crc)
        total = sum(len(p) for p in parts)
        n = max(1, -(-total // self.chunk_size))
        k = off = 0  # where the next chunk starts: part k, offset off
        with self._lock:  # the chunks of one message stay contiguous
            for i in range(n):
                want = min(self.chunk_size, total - i * self.chunk_size)
                pieces: list[Buffer] = [_HEADER.pack(_MAGIC, ftype, msg_id, i, n, crc)]
                while want > 0:
                    take = min(want, len(parts[k]) - off)
                    pieces.append(parts[k][off : off + take])
                    off, want = off + take, want - take
                    if off == len(parts[k]):
                        k, off = k + 1, 0
                frame = b"".join(pieces)
                self.bytes_out += len(frame)
                self.out.put(frame)

    def post(self, ftype: int, msg_id: int = 0, data: Buffer | Sequence[Buffer] = b"") -> None:
        """:meth:`send`, or nothing if the link has closed (a heartbeat, a goodbye)."""
        with contextlib.suppress(PartyUnavailable):
            self.send(ftype, msg_id, data)

    def receive(self, frame: bytes) -> tuple[int, int, Buffer] | None:
        """Feed one frame; return ``(type, id, data)`` once a message is complete.

        ``data`` is a read-only view of the frame (one chunk) or a fresh ``bytearray``
        (several chunks): no copy beyond the one reassembly needs.
        """
        self.last_seen = time.monotonic()
        self.bytes_in += len(frame)
        if len(frame) < _HEADER.size:
            raise ProtocolError(f"short frame from {self.peer!r}")
        magic, ftype, msg_id, i, n, crc = _HEADER.unpack_from(frame)
        if magic != _MAGIC:
            raise ProtocolError(f"bad frame magic from {self.peer!r}")
        chunk = memoryview(frame)[_HEADER.size :]
        if len(chunk) > self.chunk_size or not 0 <= i < n:
            raise ProtocolError(f"malformed frame header from {self.peer!r}")
        data: Buffer
        if n == 1:
            data = chunk
        else:
            if n > self.max_chunks:
                raise ProtocolError(
                    f"{self.peer!r} announced a message of {n} chunks; at most "
                    f"{self.max_chunks} are accepted (max_message_bytes)"
                )
            key = (ftype, msg_id)
            if key not in self.partial and len(self.partial) >= self.max_incomplete:
                raise ProtocolError(
                    f"{self.peer!r} has {len(self.partial)} incomplete messages in flight; "
                    f"at most {self.max_incomplete} are accepted"
                )
            parts = self.partial.setdefault(key, [])
            if i != len(parts):
                raise ProtocolError(
                    f"chunk {i} of message {msg_id} from {self.peer!r} out of order"
                )
            self.budget.hold(self, len(chunk))
            parts.append(chunk)
            if len(parts) < n:
                return None
            data = bytearray().join(self.partial.pop((ftype, msg_id)))
            self.budget.release(self, len(data))
        if self.checksum and zlib.crc32(data) != crc:
            raise ProtocolError(f"checksum mismatch on message {msg_id} from {self.peer!r}")
        return ftype, msg_id, data

    def outgoing(self) -> Iterator[bytes]:
        while True:
            frame = self.out.get()
            if frame is None:
                return
            yield frame

    def close(self, reason: str) -> None:
        if not self.closed.is_set():
            self.reason = reason
            self.closed.set()
            self.out.put(None)
        self.partial.clear()  # nothing half-sent is held for a closed link
        self.budget.release(self)


@dataclass
class _Slot:
    link: _Link
    event: threading.Event = field(default_factory=threading.Event)
    ftype: int = 0
    data: Buffer = b""


class _Calls:
    """Requests waiting for their reply, by message id.

    Ids are random 63-bit numbers, and a reply (or error) resolves a request only
    when it arrives over the link the request went out on: a party can neither
    guess another party's pending request nor answer it for that party.
    """

    def __init__(self) -> None:
        self._slots: dict[int, _Slot] = {}
        self._lock = threading.Lock()

    def new(self, link: _Link) -> tuple[int, _Slot]:
        slot = _Slot(link)
        with self._lock:
            msg_id = secrets.randbits(63) or 1
            while msg_id in self._slots:
                msg_id = secrets.randbits(63) or 1
            self._slots[msg_id] = slot
            return msg_id, slot

    def resolve(self, link: _Link, msg_id: int, ftype: int, data: Buffer) -> None:
        with self._lock:
            slot = self._slots.get(msg_id)
            if slot is None or slot.link is not link:
                log.warning("%r sent a reply to no request of its own: ignored", link.peer)
                return
            del self._slots[msg_id]
        slot.ftype, slot.data = ftype, data
        slot.event.set()

    def drop(self, msg_id: int) -> None:
        with self._lock:
            self._slots.pop(msg_id, None)


def _nbytes(parts: Sequence[Buffer]) -> int:
    return sum(memoryview(p).nbytes for p in parts)


def _check_sender(link: _Link, sender: str) -> None:
    """A party may send only in its own name (the name its certificate proved)."""
    if sender != link.peer:
        raise errors.PrivacyError(f"party {link.peer!r} tried to send a message as {sender!r}")


def _report(link: _Link, msg_id: int, exc: BaseException, what: str, by: str = "") -> None:
    """Send ``exc`` back as the ERROR reply to request ``msg_id`` (if the link still lives);
    ``by``: the reporter's stamp (:func:`error_payload`)."""
    if not isinstance(exc, FedViewsError):
        log.exception("%s failed", what)
    link.post(ERROR, msg_id, error_payload(exc, by))


def _tally(rows: dict[tuple[str, bool], list[int]], link: _Link) -> None:
    """Count ``link`` into ``rows[(peer, dialed)]``: ``[links, bytes out, bytes in]``."""
    row = rows.setdefault((link.peer, link.dialed), [0, 0, 0])
    row[0] += 1
    row[1] += link.bytes_out
    row[2] += link.bytes_in


def _certificate(context: Any) -> tuple[set[str], bytes]:
    """The common names and the PEM of the certificate a TLS client presented."""
    auth = context.auth_context()
    names = {v.decode() for v in auth.get("x509_common_name", [])}
    return names, auth.get("x509_pem_cert", [b""])[0]
