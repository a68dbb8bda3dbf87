"""gRPC transport: a coordinator hub that parties dial out to.

Topology
--------
The coordinator process runs :class:`GrpcHub` (a gRPC server). Every other party
runs :class:`GrpcPartyTransport`, which **dials out** to the hub (parties usually
sit behind firewalls) and keeps one bidirectional stream open for the whole run.
``hub.request(msg)`` pushes the encoded :class:`Message` down the receiver's
stream and waits for its reply; a party's own ``send`` (e.g. a data owner sending
activations to a label owner from inside its handler) goes up to the hub, which
relays it to the receiver and relays the reply back. Both ends enforce the
:class:`PrivacyPolicy` before anything leaves them and keep a :class:`MessageLog`;
the hub's log sees every message it relays.

**Direct links.** A party may also listen (``direct``: the deployment config's
``[federation.listen]``). A peer that sends it a message dials that endpoint
(``/fedviews.Peer/Connect``) on its first message and keeps the stream: the
message crosses one link instead of two, and either end may send requests over
it. The listener checks the dialer's certificate (federation CA, exact party
name, not revoked) and proves its own exact name by signing the hello's nonce,
as the hub does; both ends check the privacy policy and log every message as on
the relayed path (the hub does not see it: the two parties' logs do). A declared
endpoint that cannot be reached, refuses, or presents the wrong certificate makes
the sender relay that peer's messages through the hub for the rest of the run
(logged once). A party behind a firewall declares nothing and only dials out.

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
backoff (``connect_retries`` attempts).
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import secrets
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from fedviews import errors
from fedviews.errors import (
    ConfigError,
    FedViewsError,
    PartyUnavailable,
    ProtocolError,
    RemoteError,
    require,
)
from fedviews.federation._budget import Budget
from fedviews.federation._e2e import E2EKeys, HubProof, check_bundle
from fedviews.federation._message import Message, error_payload, raise_remote, stamp_report
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._transport import Transport

if TYPE_CHECKING:
    from fedviews.federation._certs import TLSFiles

log = logging.getLogger("fedviews.grpc")

_METHOD = "/fedviews.Hub/Connect"
_PEER_METHOD = "/fedviews.Peer/Connect"  # a party's listener for direct links
_HEADER = struct.Struct("<4sBQIII")
_MAGIC = b"FVF1"
HELLO, WELCOME, REQUEST, REPLY, ERROR, HEARTBEAT, BYE, PEERS = range(1, 9)
_MB = 1024 * 1024
Buffer = bytes | bytearray | memoryview


def _grpc() -> Any:
    return require("grpc", "grpc")


@dataclass(frozen=True)
class GrpcOptions:
    """Timing and size settings shared by the hub and the parties.

    Parameters
    ----------
    timeout : float
        Seconds of silence (no frame, not even a heartbeat) after which a peer is
        declared unavailable.
    heartbeat : float
        Seconds between heartbeat frames.
    request_timeout : float
        Deadline of one request (its handler's whole computation), in seconds.
    connect_timeout : float
        Seconds to wait for each connection attempt (and for all parties to join).
    connect_retries : int
        Connection attempts before a party gives up.
    backoff : float
        First pause between connection attempts (doubled after each failure).
    chunk_size : int
        Bytes per frame; messages larger than this are split.
    max_message_bytes : int
        The largest message a receiver reassembles; a peer that announces a larger
        one (its chunk count times ``chunk_size``) is cut off, named.
    max_incomplete : int
        Messages a peer may have half-sent at once (their chunks are held in memory).
    max_buffered_bytes : int
        Bytes of half-sent messages held from all peers together (each peer may hold
        ``max_message_bytes``); past it the peer holding the most is cut off, named.
    max_streams_per_peer : int
        Streams one certificate may have open to a listener at once, hello-less ones
        included (the rest are refused at once, naming it).
    max_connections : int
        Connections a listener accepts at once (at most half the process's descriptor
        limit); one that starts no call within ``hello_timeout`` is closed.
    max_log_entries : int
        Messages of one sender the message log keeps one by one (beyond, only counted).
    hello_timeout : float
        Seconds a new stream may take to say hello before the hub cancels it (and a new
        connection to finish its handshake and start a call).
    end_to_end : bool
        With TLS, seal every party-to-party payload between the two parties
        (:mod:`fedviews.federation._e2e`): the hub relays it but can neither read
        nor alter it. The hub and every party must agree (a mismatch is refused at
        join, or at the first party-to-party message, with a clear error).
    direct_timeout : float
        Seconds one attempt to open a direct link to a peer's declared endpoint may
        take (two attempts; then its messages go through the hub). The deployment
        config's ``federation.direct_timeout``.
    """

    timeout: float = 20.0
    heartbeat: float = 2.0
    request_timeout: float = 3600.0
    connect_timeout: float = 30.0
    connect_retries: int = 8
    backoff: float = 0.5
    chunk_size: int = 2 * _MB
    max_message_bytes: int = 1024 * _MB
    max_incomplete: int = 64
    max_buffered_bytes: int = 2048 * _MB
    max_streams_per_peer: int = 4
    max_connections: int = 256
    max_log_entries: int = 1_000_000
    hello_timeout: float = 10.0
    end_to_end: bool = True
    direct_timeout: float = 5.0

    def channel_options(self) -> list[tuple[str, int]]:
        limit = self.chunk_size + 64 * 1024
        return [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.keepalive_time_ms", int(max(self.heartbeat, 1.0) * 5000)),
            ("grpc.keepalive_timeout_ms", int(self.timeout * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
        ]


# -- framing ------------------------------------------------------------------


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


@contextlib.contextmanager
def _from(peer: str, what: str) -> Iterator[None]:
    """The one place where a failure to take in what ``peer`` sent is attributed: whatever
    goes wrong inside is ``peer``'s doing, never the local party's nor a third party's.

    A fedviews error keeps its type and names ``peer`` (``party``, and its text); one that named
    another party (e.g. a :class:`PartyUnavailable` for a receiver that ``peer`` made up)
    or any other exception (a decoder's ``TypeError``) becomes a :class:`ProtocolError`
    naming ``peer``. An error reply is ``peer``'s report: :func:`raise_remote` names its
    reporter, and the :class:`RemoteError` passes unchanged.
    """
    try:
        yield
    except RemoteError:
        raise
    except FedViewsError as exc:
        if exc.party not in (None, peer):
            raise ProtocolError(f"{what} from {peer!r}: {exc}", party=peer) from exc
        if exc.party is None and repr(peer) not in str(exc):  # its text names the peer too
            exc.args = (f"{what} from {peer!r}: {exc}",)
        exc.party = peer
        raise
    except Exception as exc:
        raise ProtocolError(
            f"{what} from {peer!r} is malformed: {type(exc).__name__}: {exc}", party=peer
        ) from exc


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


class _Endpoint(Transport):
    """What the hub and a party transport share: waiting for replies, heartbeats, serving
    streams that others dial (the hub; a party's direct-link listener) and dialing them."""

    #: whether the streams this end accepts are direct party-to-party links
    _serves_peers = False

    def __init__(self, policy: PrivacyPolicy, options: GrpcOptions, keep_entries: bool) -> None:
        super().__init__(policy, keep_entries=keep_entries)
        self.options = options
        self.log.max_entries = options.max_log_entries
        #: what each peer may hold of this end: half-sent messages, streams, connections
        self.budget = Budget(options)
        self.calls = _Calls()
        self.tls: TLSFiles | None = None
        #: why connections to this end were refused, the latest 256 (for the operator and tests)
        self.refusals: deque[str] = deque(maxlen=256)
        self.server: Any = None
        self.port = 0
        self._stop = threading.Event()
        self._fanout: ThreadPoolExecutor | None = None
        self._fanout_size = 0
        self._fanout_lock = threading.Lock()

    def _links(self) -> list[_Link]:
        raise NotImplementedError

    def _close_fanout(self) -> None:
        with self._fanout_lock:
            if self._fanout is not None:
                self._fanout.shutdown(wait=False, cancel_futures=True)
                self._fanout = None

    def request_many(self, msgs: list[Message]) -> list[Message]:
        """Send to several parties at once: they compute in parallel, replies keep their order.

        Used by the coordinator's broadcasts and by a party that sends to several
        others (a Multi-VFL label owner asking every data owner for its activations).
        """
        remote = [m for m in msgs if m.receiver not in self.local]
        if len(remote) < 2 or any(m.kind.startswith("deploy:") for m in msgs):
            # session control (setup, build, finish) stays sequential and ordered
            return [self.request(m) for m in msgs]
        with self._fanout_lock:
            if self._fanout is None or self._fanout_size < len(msgs):
                if self._fanout is not None:
                    self._fanout.shutdown(wait=False)
                self._fanout_size = max(len(msgs), 4)
                self._fanout = ThreadPoolExecutor(
                    max_workers=self._fanout_size, thread_name_prefix="fedviews-fanout"
                )
            pool = self._fanout
        return list(pool.map(self.request, msgs))

    def _heartbeats(self) -> None:
        while not self._stop.wait(self.options.heartbeat):
            for link in self._links():
                link.post(HEARTBEAT)

    def _await(self, link: _Link, msg_id: int, slot: _Slot, kind: str) -> tuple[int, Buffer]:
        deadline = time.monotonic() + self.options.request_timeout
        try:
            while not slot.event.wait(0.2):
                now = time.monotonic()
                if link.closed.is_set():
                    raise PartyUnavailable(link.peer, link.reason or "connection closed")
                if now - link.last_seen > self.options.timeout:
                    reason = f"no message or heartbeat for {self.options.timeout:g} s"
                    link.close(reason)
                    raise PartyUnavailable(link.peer, reason)
                if now > deadline:
                    raise PartyUnavailable(
                        link.peer,
                        f"no reply to {kind!r} within {self.options.request_timeout:g} s",
                    )
        finally:
            self.calls.drop(msg_id)
        return slot.ftype, slot.data

    def _encode(self, msg: Message, link: _Link) -> Sequence[Buffer]:
        """``msg`` as it goes on the wire over ``link``, as the buffers :meth:`_Link.send`
        copies into frames (a party seals relayed party-to-party messages)."""
        return msg.encode_parts()

    def _decode(self, data: Buffer, link: _Link) -> Message:
        """A message that arrived over ``link`` (a party opens the sealed ones)."""
        return Message.decode(data)

    def _remote_request(self, link: _Link, msg: Message) -> Message:
        """Send ``msg`` over ``link`` and wait for the reply (policy checked, both logged)."""
        self._check_send(msg)
        wire = self._encode(msg, link)
        self._check_and_log(msg, _nbytes(wire))
        msg_id, slot = self.calls.new(link)
        link.send(REQUEST, msg_id, wire)
        ftype, data = self._await(link, msg_id, slot, msg.kind)
        return self._take_reply(link, msg, ftype, data)

    def _take_reply(self, link: _Link, msg: Message, ftype: int, data: Buffer) -> Message:
        """The reply to ``msg`` that arrived over ``link`` (``ftype``: REPLY or ERROR), checked
        and logged; whatever is wrong with it names ``msg.receiver``, and an error reply is
        its (or the relaying hub's) report."""
        with _from(msg.receiver, f"the reply to {msg.kind!r}"):
            if ftype == ERROR:
                raise_remote(msg.receiver, msg.kind, data, self._relay(link))
            reply = self._decode(data, link)
            self._check_reply(msg, reply)
            self._check_and_log(reply, len(data))
        return reply

    def _relay(self, link: _Link) -> str:
        """The hub that relays what arrives over ``link`` (it stamps its own error replies),
        or ``""``."""
        return ""

    def _serve_request(self, link: _Link, msg_id: int, data: Buffer) -> None:
        """Answer a request that arrived over ``link`` (runs in a worker thread)."""
        try:
            reply = self._answer(link, self._decode(data, link), len(data))
            rwire = self._encode(reply, link)
            self._check_and_log(reply, _nbytes(rwire))
            link.send(REPLY, msg_id, rwire)
        except Exception as exc:  # reported to the requester, which raises it
            _report(link, msg_id, exc, "handler")

    def _answer(self, link: _Link, msg: Message, nbytes: int) -> Message:
        """Check and log ``msg`` and produce its reply (by a party hosted here; the reply is
        policy-checked before it leaves). Subclasses check the sender first."""
        self._check_request(msg)
        self._check_and_log(msg, nbytes)
        party = self.local.get(msg.receiver)
        if party is None:
            raise PartyUnavailable(msg.receiver, "not hosted here")
        return self._handle(party, msg)

    # -- frames in ---------------------------------------------------------------
    def _submit(self, link: _Link, msg_id: int, data: Buffer) -> None:
        """Have a worker answer the request ``msg_id`` that arrived over ``link``."""
        raise NotImplementedError

    def _dispatch(self, link: _Link, ftype: int, msg_id: int, data: Buffer) -> bool:
        """Act on one complete frame from ``link``; ``False`` once the peer says goodbye."""
        if ftype in (REPLY, ERROR):
            self.calls.resolve(link, msg_id, ftype, data)
        elif ftype == REQUEST:
            self._submit(link, msg_id, data)
        elif ftype == BYE:
            return False
        return True

    def _read(self, link: _Link, frames: Iterator[bytes]) -> None:
        """Read ``link``'s stream until it ends (a reader thread of its own)."""
        try:
            with _from(link.peer, "a frame"):
                for frame in frames:
                    got = link.receive(frame)
                    if got is not None and not self._dispatch(link, *got):
                        break
            link.close("peer left")
        except ProtocolError as exc:  # the stream broke or the peer broke the protocol: named
            link.close(f"connection lost: {exc}")

    # -- serving streams that others dial ------------------------------------------
    def _start_server(self, listen: str, service: str, workers: int) -> None:
        """Listen on ``listen`` (``HOST:PORT``) for streams of ``service``; sets :attr:`port`."""
        grpc = _grpc()
        # no SO_REUSEPORT (grpc's default on Linux): a second server on a port in use would
        # bind it too, and the kernel would hand each connecting party to one of the two
        options = [
            *self.options.channel_options(),
            ("grpc.so_reuseport", 0),
            *self.budget.server_options(),
        ]
        self.server = grpc.server(ThreadPoolExecutor(max_workers=workers), options=options)
        handler = grpc.method_handlers_generic_handler(
            service, {"Connect": grpc.stream_stream_rpc_method_handler(self._connect)}
        )
        self.server.add_generic_rpc_handlers((handler,))
        try:
            if self.tls is None:
                self.port = self.server.add_insecure_port(listen)
            else:
                self.port = self.server.add_secure_port(listen, self.tls.server_credentials())
        except RuntimeError as exc:  # grpc's answer to an address it cannot parse or bind
            raise ConfigError(
                f"cannot listen on {listen!r} (expected HOST:PORT of this machine, "
                f"not in use by another process): {exc}"
            ) from None
        if self.port == 0:
            raise ProtocolError(f"could not listen on {listen!r} (address in use?)")
        self.server.start()

    def _refuse(self, context: Any, reason: str) -> NoReturn:
        log.warning("refused a connection from %s: %s", context.peer(), reason)
        self.refusals.append(reason)
        context.abort(_grpc().StatusCode.PERMISSION_DENIED, reason)
        raise AssertionError("unreachable")  # context.abort raises

    def _members(self) -> set[str]:
        """The names that may dial this end."""
        raise NotImplementedError

    def _live_link(self, name: str) -> _Link | None:
        """The stream ``name`` dialed this end with, if it is still open."""
        raise NotImplementedError

    def _screen(self, context: Any) -> None:
        """Refuse a TLS connection at once, before waiting for its hello, when its
        certificate is revoked or names nobody who may dial this end (so idle
        connections of outsiders cannot hold this end's threads)."""
        if self.tls is None:
            return
        names, pem = _certificate(context)
        if not names & self._members():
            self._refuse(context, f"certificate of {sorted(names) or 'nobody'} is not a party's")
        if self.tls.is_revoked(pem):
            self._refuse(context, f"certificate of {sorted(names)} is revoked")

    def _count_stream(self, context: Any) -> str:
        """Count a new stream against its certificate's budget until it ends (refused, naming
        the certificate, past ``max_streams_per_peer``); who opened it, for the refusals.
        Without TLS nobody is authenticated, so nothing is counted."""
        if self.tls is None:
            return f"the unauthenticated peer at {context.peer()}"
        names, _ = _certificate(context)
        who = ", ".join(sorted(names)) or "nobody"
        refused = self.budget.open_stream(who)
        if refused is not None:
            self._refuse(context, refused)
        if not context.add_callback(lambda: self.budget.close_stream(who)):
            self.budget.close_stream(who)  # the stream has ended already
        return repr(who)

    def _identify(self, context: Any, hello: Buffer) -> tuple[str, dict[str, Any]]:
        """The party a hello claims to be, checked against its certificate (exact name,
        not revoked), this end's members and the streams already open."""
        try:
            said = json.loads(bytes(hello))
            claimed = str(said["party"])
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError):
            self._refuse(context, "malformed hello")
        if self.tls is not None:
            names, pem = _certificate(context)
            if claimed not in names:
                self._refuse(
                    context,
                    f"certificate of {sorted(names) or 'nobody'} claims to be party {claimed!r}",
                )
            if self.tls.is_revoked(pem):
                self._refuse(context, f"certificate of party {claimed!r} is revoked")
            said["pem"] = pem.decode("ascii")
        members = self._members()
        if claimed not in members:
            self._refuse(context, f"unknown party {claimed!r}; expected {sorted(members)}")
        live = self._live_link(claimed)
        if live is not None and not live.closed.is_set():
            self._refuse(context, f"party {claimed!r} is already connected")
        return claimed, said

    def _welcome(self, name: str, hello: dict[str, Any]) -> dict[str, Any]:
        """What this end answers ``name``'s hello with (with TLS, the proof is added)."""
        return {}

    def _attach(self, name: str, link: _Link, hello: dict[str, Any]) -> None:
        """Take ``name``'s accepted stream into use."""
        raise NotImplementedError

    def _connect(self, request_iterator: Iterator[bytes], context: Any) -> Iterator[bytes]:
        self._screen(context)
        who = self._count_stream(context)
        # a stream that does not say hello within hello_timeout is cancelled: it holds one
        # of the server's threads, and idle streams must not keep the parties out
        expired = threading.Event()

        def expire() -> None:
            expired.set()  # before the cancel, which wakes the reader below at once
            context.cancel()

        silent = threading.Timer(self.options.hello_timeout, expire)
        silent.daemon = True
        silent.start()
        try:
            first = next(request_iterator)
        except BaseException as exc:  # cancelled (no hello in time: it may end or raise) or broke
            if expired.is_set():
                self.refusals.append(f"{who} sent no hello within {self.options.hello_timeout:g} s")
            if isinstance(exc, (StopIteration, Exception)):
                return
            raise
        finally:
            silent.cancel()
        probe = _Link("?", self.options, checksum=self.tls is None)
        try:
            got = probe.receive(first)
        except ProtocolError as exc:  # refused (logged), not a traceback in a server thread
            self._refuse(context, f"malformed hello: {exc}")
        if got is None or got[0] != HELLO:
            self._refuse(context, "the first frame must be a hello")
        name, hello = self._identify(context, got[2])
        link = _Link(
            name,
            self.options,
            direct=self._serves_peers,
            checksum=self.tls is None,
            budget=self.budget,
        )
        link.bytes_in = probe.bytes_in
        context.add_callback(lambda: link.close("stream cancelled"))
        welcome = self._welcome(name, hello)
        if self.tls is not None:  # prove the exact name of this end's certificate
            try:
                nonce = bytes.fromhex(str(hello.get("nonce")))
            except ValueError:
                self._refuse(context, "malformed hello")
            welcome["proof"] = HubProof.make(self.tls, name, nonce)
        link.send(WELCOME, 0, json.dumps(welcome).encode())
        self._attach(name, link, hello)
        log.info("party %r connected from %s", name, context.peer())
        threading.Thread(
            target=self._read, args=(link, request_iterator), daemon=True, name=f"read-{name}"
        ).start()
        yield from link.outgoing()

    # -- dialing ---------------------------------------------------------------------
    def _dial(
        self, address: str, peer: str, method: str, hello: dict[str, Any], timeout: float
    ) -> tuple[_Link, Any, Any, dict[str, Any]]:
        """One attempt to open a stream to ``peer`` at ``address``: ``(link, channel, call,
        welcome)``.

        With TLS, the server's certificate must be signed by the federation CA and
        name ``peer`` (TLS, case-insensitively), and the server must sign the hello's
        nonce with the key of a certificate named exactly ``peer`` (:class:`HubProof`).
        Raises ``grpc.RpcError`` (unreachable, handshake failed, refused) or a
        :class:`~fedviews.errors.FedViewsError` (the proof failed).
        """
        grpc = _grpc()
        opts: list[tuple[str, Any]] = list(self.options.channel_options())
        if self.tls is None:
            channel = grpc.insecure_channel(address, options=opts)
        else:
            opts.append(("grpc.ssl_target_name_override", peer))
            channel = grpc.secure_channel(address, self.tls.channel_credentials(), options=opts)
        link = _Link(
            peer,
            self.options,
            direct=method == _PEER_METHOD,
            checksum=self.tls is None,
            budget=self.budget,
        )
        link.send(HELLO, 0, json.dumps(hello).encode())
        call = channel.stream_stream(method)(link.outgoing())
        timer = threading.Timer(timeout, call.cancel)
        timer.start()
        try:
            first = next(call, None)
            if first is None:
                raise ProtocolError(f"{peer!r} closed the stream without a welcome", party=peer)
            with _from(peer, "the welcome"):
                got = link.receive(first)
                if got is None or got[0] != WELCOME:
                    raise ProtocolError(f"{peer!r} did not answer the hello with a welcome")
                welcome = json.loads(bytes(got[2]))
                if not isinstance(welcome, dict):
                    raise ProtocolError(f"{peer!r} sent a welcome that is not a JSON object")
                if self.tls is not None:
                    nonce = bytes.fromhex(hello["nonce"])
                    HubProof.check(self.tls, peer, hello["party"], nonce, welcome.get("proof"))
            return link, channel, call, welcome
        except BaseException:  # not the peer we meant, or no connection: drop it
            link.close("refused")
            call.cancel()
            channel.close()
            raise
        finally:
            timer.cancel()

    def _hello(self, name: str) -> dict[str, Any]:
        """A hello in ``name``'s name (with TLS, a fresh nonce the server signs)."""
        hello: dict[str, Any] = {"party": name}
        if self.tls is not None:
            hello["nonce"] = secrets.token_bytes(16).hex()
        return hello


# -- coordinator side -----------------------------------------------------------


class GrpcHub(_Endpoint):
    """The coordinator's transport: a gRPC server that parties dial out to.

    Parameters
    ----------
    policy : PrivacyPolicy
        Enforced on every message that crosses the hub.
    parties : mapping of str to str
        The remote parties expected, ``{name: role}``. Nobody else may join.
    listen : str
        ``HOST:PORT`` to listen on (port 0 picks a free port, see :attr:`port`).
    tls : TLSFiles or None
        The coordinator's certificate, key and the federation CA. Clients must
        present a certificate signed by that CA whose common name is the party
        name they claim. ``None`` means plain text (insecure; for tests only).
    options : GrpcOptions
        Timeouts, heartbeats, chunk size.
    """

    def __init__(
        self,
        policy: PrivacyPolicy,
        parties: Mapping[str, str],
        *,
        listen: str = "127.0.0.1:0",
        tls: TLSFiles | None = None,
        options: GrpcOptions | None = None,
        keep_entries: bool = True,
    ) -> None:
        super().__init__(policy, options or GrpcOptions(), keep_entries)
        self.expected = dict(parties)
        self.roles.update(self.expected)
        self.links: dict[str, _Link] = {}
        self.tls = tls
        #: the parties' signed end-to-end keys (with TLS), handed to all once all joined
        self.bundles: dict[str, dict[str, str]] = {}
        self.session = secrets.token_bytes(16)
        self._joined = threading.Condition()
        # a relay holds its worker until the reply comes back: room for every pair at once
        n = len(self.expected)
        self._pool = ThreadPoolExecutor(
            max_workers=min(64, n * n + 4), thread_name_prefix="fedviews-relay"
        )
        if tls is None:
            log.warning("coordinator listening WITHOUT TLS (--insecure): anyone can join")
        # every party's streams (max_streams_per_peer each) and room to refuse others
        self._start_server(listen, "fedviews.Hub", n * self.options.max_streams_per_peer + 4)
        threading.Thread(target=self._heartbeats, daemon=True).start()

    def _links(self) -> list[_Link]:
        return list(self.links.values())

    @property
    def name(self) -> str:
        """The coordinator's name (the party registered here), which stamps the hub's reports."""
        return next(iter(self.local), "")

    # -- joining ---------------------------------------------------------------
    def _members(self) -> set[str]:
        return set(self.expected)

    def _live_link(self, name: str) -> _Link | None:
        return self.links.get(name)

    def _identify(self, context: Any, hello: Buffer) -> tuple[str, dict[str, Any]]:
        claimed, said = super()._identify(context, hello)
        if self.tls is not None:
            bundle = said.get("e2e") if self.options.end_to_end else {}
            if not isinstance(bundle, dict) or not isinstance(said.get("nonce"), str):
                self._refuse(
                    context,
                    f"party {claimed!r} sent no end-to-end key in its hello "
                    "(federation.end_to_end must be the same for every process)",
                )
            said["bundle"] = {
                "cert": said["pem"],
                "x25519": str(bundle.get("x25519", "")),
                "sig": str(bundle.get("sig", "")),
            }
            if self.options.end_to_end:  # one party's bad key must not fail the others
                try:
                    check_bundle(self.tls, claimed, said["bundle"])
                except FedViewsError as exc:
                    self._refuse(context, f"party {claimed!r} sent a bad end-to-end key: {exc}")
        return claimed, said

    def _welcome(self, name: str, hello: dict[str, Any]) -> dict[str, Any]:
        return {"roles": self.roles}

    def _attach(self, name: str, link: _Link, hello: dict[str, Any]) -> None:
        with self._joined:
            self.links[name] = link
            if self.tls is not None and self.options.end_to_end:
                self.bundles[name] = hello["bundle"]
                self._hand_out_keys()
            self._joined.notify_all()

    def _hand_out_keys(self) -> None:
        """Once every party has joined (again), give each the others' signed keys."""
        if set(self.bundles) != set(self.expected):
            return
        frame = json.dumps({"session": self.session.hex(), "peers": self.bundles}).encode()
        for link in self.links.values():
            link.post(PEERS, 0, frame)

    def _submit(self, link: _Link, msg_id: int, data: Buffer) -> None:
        self._pool.submit(self._serve_request, link, msg_id, data)

    def departed(self) -> list[str]:
        """The parties whose stream to this hub has closed: what the hub saw itself (a
        party's report that another is unavailable arrives as a mere ProtocolError)."""
        return [p for p, link in self.links.items() if link.closed.is_set()]

    def wait_for_parties(self, timeout: float | None = None) -> None:
        """Block until every expected party has joined; else raise PartyUnavailable."""
        limit = self.options.connect_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._joined:
            while True:
                missing = [p for p in self.expected if p not in self.links]
                if not missing:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    detail = f"did not join within {limit:g} s"
                    if self.refusals:
                        detail += f"; refused: {list(self.refusals)}"
                    raise PartyUnavailable(", ".join(missing), detail)
                self._joined.wait(min(left, 0.5))

    # -- messaging -----------------------------------------------------------
    def request(self, msg: Message) -> Message:
        if msg.receiver not in self.local:
            return self._remote_request(self._link_to(msg.receiver), msg)
        return self._loopback(self.local[msg.receiver], msg)

    def _link_to(self, name: str) -> _Link:
        """The stream of the remote party ``name`` (PartyUnavailable if it has none)."""
        if name not in self.roles:
            raise PartyUnavailable(name, "no such party in this federation")
        link = self.links.get(name)
        if link is None:
            raise PartyUnavailable(name, "has not joined")
        return link

    def _serve_request(self, link: _Link, msg_id: int, data: Buffer) -> None:
        """Answer a party's request; relay it unchanged if it is for another party.

        A relayed message is not decoded: its header names sender, receiver and
        arrays, which is all the policy check and the log need, and its bytes go on
        as they came (per-batch activations cross the hub without a copy).
        """
        try:
            head = Message.peek(data)
            if head.receiver in self.local:
                super()._serve_request(link, msg_id, data)  # reports its own errors
                return
            _check_sender(link, head.sender)
            target = self._link_to(head.receiver)
            self._check_request(head)
            self._admit(head, len(data))
            rid, slot = self.calls.new(target)
            target.send(REQUEST, rid, data)
            ftype, rdata = self._await(target, rid, slot, head.kind)
            if ftype == ERROR:  # the receiver's report goes back stamped with its name
                link.send(ERROR, msg_id, stamp_report(target.peer, head.kind, rdata))
                return
            with _from(target.peer, f"the reply to {head.kind!r}"):
                rhead = Message.peek(rdata)
                self._check_reply(head, rhead)
                self._admit(rhead, len(rdata))
            link.send(REPLY, msg_id, rdata)
        except Exception as exc:  # reported to the requester, in the hub's name
            _report(link, msg_id, exc, "relay", by=self.name)

    def _answer(self, link: _Link, msg: Message, nbytes: int) -> Message:
        _check_sender(link, msg.sender)
        # only messages for the coordinator get here (others are relayed undecoded)
        return super()._answer(link, msg, nbytes)

    @property
    def wire_bytes(self) -> int:
        """Frame bytes sent and received by the hub (message bytes plus frame headers)."""
        return int(sum(lk.bytes_out + lk.bytes_in for lk in self.links.values()))

    def close(self, grace: float = 2.0) -> None:
        """Say goodbye to every party and stop the server."""
        for link in self.links.values():
            link.post(BYE)
        deadline = time.monotonic() + grace
        for link in self.links.values():
            while not link.out.empty() and time.monotonic() < deadline:
                time.sleep(0.02)
        self._stop.set()
        for link in self.links.values():
            link.close("coordinator shut down")
        self.server.stop(grace).wait(grace + 1.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_fanout()


# -- party side ---------------------------------------------------------------


class GrpcPartyTransport(_Endpoint):
    """A party's transport: dials out to the coordinator's hub and serves requests.

    Party-to-party messages go over a **direct link** where the receiver declared an
    endpoint (``direct``), checked as strictly as the hub's stream and falling back to
    the hub when it fails (*Direct links* in the module docstring). Either end of a
    direct link may send requests over it, so a party that only dials out still talks
    directly to the parties it dialed.

    Parameters
    ----------
    policy : PrivacyPolicy
        Checked before anything leaves this party.
    coordinator : str
        ``HOST:PORT`` of the hub.
    tls : TLSFiles or None
        This party's certificate and key and the federation CA (the hub's
        certificate must be signed by it and name ``server_name``). ``None``
        means plain text (insecure).
    server_name : str
        Name in the coordinator's certificate (default ``"coordinator"``).
    options : GrpcOptions
        Timeouts, heartbeats, retries, chunk size.
    direct : mapping of str to str
        ``{party: "HOST:PORT"}``: where parties listen for direct links (the
        deployment config's ``[federation.listen]``). This party listens too when it
        is listed.
    listen : str or None
        The address this party binds for direct links, if not its ``direct`` entry
        (e.g. ``0.0.0.0:7101`` behind a NAT that peers reach as ``host:7101``).
    """

    _serves_peers = True

    def __init__(
        self,
        policy: PrivacyPolicy,
        coordinator: str,
        *,
        tls: TLSFiles | None = None,
        server_name: str = "coordinator",
        options: GrpcOptions | None = None,
        keep_entries: bool = True,
        direct: Mapping[str, str] | None = None,
        listen: str | None = None,
    ) -> None:
        super().__init__(policy, options or GrpcOptions(), keep_entries)
        self.address = coordinator
        self.tls = tls
        self.server_name = server_name
        self.direct = dict(direct or {})
        self.listen = listen
        self.name = ""
        self.link: _Link | None = None
        self._channel: Any = None
        self._call: Any = None
        self._work = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fedviews-handler")
        #: with TLS, party-to-party payloads are sealed end to end (see ``_e2e``)
        self.e2e: E2EKeys | None = None
        #: the open direct link to each peer (dialed by either end)
        self.peers: dict[str, _Link] = {}
        #: peers whose declared endpoint failed, and why (their messages go through the hub)
        self.relayed: dict[str, str] = {}
        self._direct_links: list[_Link] = []
        #: the links of ``_direct_links`` that closed, by ``(peer, dialed)``: [links, out, in]
        self._gone: dict[tuple[str, bool], list[int]] = {}
        self._channels: list[Any] = []
        self._peer_lock = threading.Lock()
        self._dialing: dict[str, threading.Lock] = {}

    def _links(self) -> list[_Link]:
        hub = [self.link] if self.link is not None else []
        with self._peer_lock:
            return hub + [lk for lk in self._direct_links if not lk.closed.is_set()]

    def connect(self) -> None:
        """Listen for direct links if this party declared an endpoint, then dial the hub
        (bounded retries with backoff), say hello, receive the roles."""
        grpc = _grpc()
        if len(self.local) != 1:
            raise ProtocolError("register exactly one local party before connect()")
        (name,) = self.local
        self.name = name
        bind = self.listen or self.direct.get(name)
        if bind is not None and self.server is None:
            self._start_server(bind, "fedviews.Peer", 64)
            log.info("%r listens for direct links on %s", name, bind)
        pause = self.options.backoff
        last = ""
        hello = self._hello(name)
        if self.tls is not None and self.options.end_to_end:
            self.e2e = E2EKeys(name, self.tls, hub=self.server_name)
            hello["e2e"] = self.e2e.bundle()
        for attempt in range(1, self.options.connect_retries + 1):
            try:
                link, channel, call, welcome = self._dial(
                    self.address, self.server_name, _METHOD, hello, self.options.connect_timeout
                )
            except grpc.RpcError as exc:
                code = exc.code()
                last = f"{code.name}: {exc.details()}"
                if code == grpc.StatusCode.PERMISSION_DENIED:
                    raise errors.PrivacyError(
                        f"the coordinator refused {name!r}: {exc.details()}"
                    ) from None
                log.warning("connection attempt %d to %s failed: %s", attempt, self.address, last)
            else:
                roles = welcome.get("roles")
                if not isinstance(roles, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in roles.items()
                ):
                    call.cancel()
                    channel.close()
                    raise ProtocolError(
                        f"{self.server_name!r} sent a welcome without the roles",
                        party=self.server_name,
                    )
                self.roles.update(roles)
                self.link, self._channel, self._call = link, channel, call
                return
            if attempt < self.options.connect_retries:
                time.sleep(pause)
                pause *= 2
        hint = "" if self.tls is None else " (or the TLS handshake failed: check the certificates)"
        raise PartyUnavailable(
            self.server_name,
            f"could not reach {self.address} after {self.options.connect_retries} attempts{hint}; "
            f"last error: {last}",
        )

    def serve(self) -> None:
        """Answer requests until the coordinator says goodbye; raise if it disappears."""
        grpc = _grpc()
        link = self.link
        if link is None:
            raise ProtocolError("call connect() first")
        threading.Thread(target=self._heartbeats, daemon=True).start()
        watchdog = threading.Thread(target=self._watch, args=(link,), daemon=True)
        watchdog.start()
        try:
            with _from(self.server_name, "a frame"):
                try:
                    for frame in self._call:
                        got = link.receive(frame)
                        if got is not None and not self._dispatch(link, *got):
                            self._work.shutdown(wait=True)
                            return
                except grpc.RpcError as exc:
                    raise PartyUnavailable(
                        self.server_name, link.reason or f"connection lost: {exc.code().name}"
                    ) from None
                raise PartyUnavailable(self.server_name, link.reason or "the stream ended")
        finally:
            self.close()

    def _dispatch(self, link: _Link, ftype: int, msg_id: int, data: Buffer) -> bool:
        if ftype == PEERS and link is self.link and self.e2e is not None:
            with _from(self.server_name, "the key bundles"):  # the hub checked each at its hello
                keys = json.loads(bytes(data))
                peers, session = keys["peers"], bytes.fromhex(keys["session"])
                if not isinstance(peers, dict):
                    raise ProtocolError(f"{self.server_name!r} sent key bundles that are no table")
                self.e2e.set_peers(peers, session)
            return True
        return super()._dispatch(link, ftype, msg_id, data)

    def _submit(self, link: _Link, msg_id: int, data: Buffer) -> None:
        # one worker for every link: this party's handlers run one at a time, in order
        self._work.submit(self._serve_request, link, msg_id, data)

    def _watch(self, link: _Link) -> None:
        while not link.closed.wait(0.5):
            if time.monotonic() - link.last_seen > self.options.timeout:
                link.close(f"no message or heartbeat for {self.options.timeout:g} s")
                self._call.cancel()

    def _relay(self, link: _Link) -> str:
        return self.server_name if link is self.link else ""

    def _encode(self, msg: Message, link: _Link) -> Sequence[Buffer]:
        # a direct link is TLS between the two parties: nobody in between to seal against
        if self.e2e is not None and not link.direct and msg.receiver != self.server_name:
            return [self.e2e.seal(msg)]
        return msg.encode_parts()

    def _decode(self, data: Buffer, link: _Link) -> Message:
        if link.direct:  # a sealed message has no business here: decode refuses it
            return Message.decode(data)
        if self.e2e is not None and Message.peek(data).sender != self.server_name:
            return self.e2e.open(data)
        return Message.decode(data)

    def _answer(self, link: _Link, msg: Message, nbytes: int) -> Message:
        if msg.receiver not in self.local:
            raise ProtocolError(f"received a message for {msg.receiver!r}")
        if link.direct:  # the hub checks this for relayed ones
            _check_sender(link, msg.sender)
        return super()._answer(link, msg, nbytes)

    def request(self, msg: Message) -> Message:
        if msg.receiver not in self.roles:
            raise PartyUnavailable(msg.receiver, "no such party in this federation")
        if self.link is None:
            raise ProtocolError("not connected")
        return self._remote_request(self._route(msg.receiver), msg)

    # -- direct links ------------------------------------------------------------
    def _members(self) -> set[str]:
        return {p for p in self.roles if p != self.server_name and p not in self.local}

    def _live_link(self, name: str) -> _Link | None:
        with self._peer_lock:
            for lk in self._direct_links:
                if lk.peer == name and not lk.dialed and not lk.closed.is_set():
                    return lk
        return None

    def _screen(self, context: Any) -> None:
        if self.link is None:  # the roster comes with the hub's welcome
            self._refuse(context, f"{self.name or 'this party'} has not joined the federation yet")
        super()._screen(context)

    def _keep(self, link: _Link) -> None:
        """Add ``link`` to the direct links, and fold the closed ones into byte counts (a peer
        that connects and disconnects again and again must not grow this list). Call it with
        ``_peer_lock`` held."""
        for lk in self._direct_links:
            if lk.closed.is_set():
                _tally(self._gone, lk)
        self._direct_links = [lk for lk in self._direct_links if not lk.closed.is_set()]
        self._direct_links.append(link)

    def _attach(self, name: str, link: _Link, hello: dict[str, Any]) -> None:
        with self._peer_lock:
            self._keep(link)
            held = self.peers.get(name)
            if held is None or held.closed.is_set():
                self.peers[name] = link

    def _open_link(self, peer: str) -> _Link | None:
        """The open direct link to ``peer``, if any (a closed one is forgotten)."""
        with self._peer_lock:
            link = self.peers.get(peer)
            if link is not None and link.closed.is_set():
                del self.peers[peer]
                link = None
            return link

    def _route(self, peer: str) -> _Link:
        """The link a message to ``peer`` goes over: an open direct link, else one dialed
        now when ``peer`` declared an endpoint, else (and after a failed dial) the hub."""
        assert self.link is not None
        if peer == self.server_name:
            return self.link
        link = self._open_link(peer)
        address = self.direct.get(peer)
        if link is not None or address is None:
            return link or self.link
        with self._peer_lock:
            lock = self._dialing.setdefault(peer, threading.Lock())
        with lock:  # one dial per peer, whichever thread comes first
            link = self._open_link(peer)
            if link is not None or peer in self.relayed:
                return link or self.link
            try:
                link = self._dial_peer(peer, address)
            except (FedViewsError, _grpc().RpcError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if isinstance(exc, _grpc().RpcError):
                    reason = f"{exc.code().name}: {exc.details()}"
                self.relayed[peer] = reason
                log.warning(
                    "no direct link to %r at %s (%s): its messages go through the hub",
                    peer,
                    address,
                    reason,
                )
                return self.link
            with self._peer_lock:
                self._keep(link)
                self.peers[peer] = link
            log.info("direct link to %r at %s", peer, address)
            return link

    def _dial_peer(self, peer: str, address: str) -> _Link:
        """A direct stream to ``peer`` (two attempts, ``direct_timeout`` each), read by a
        thread of its own."""
        grpc = _grpc()
        last: Any = None
        for _ in range(2):
            try:
                link, channel, call, _ = self._dial(
                    address, peer, _PEER_METHOD, self._hello(self.name), self.options.direct_timeout
                )
            except grpc.RpcError as exc:
                last = exc
                if exc.code() == grpc.StatusCode.PERMISSION_DENIED:
                    break
                continue
            link.dialed = True
            with self._peer_lock:
                self._channels.append(channel)
            threading.Thread(
                target=self._read, args=(link, call), daemon=True, name=f"read-{peer}"
            ).start()
            return link
        raise last

    def link_summary(self) -> dict[str, Any]:
        """Bytes over the hub link and over every direct link, and the peers whose declared
        endpoint failed (with why): what ``message_log.json`` reports under ``links``."""
        counts = ("bytes_out", "bytes_in")
        with self._peer_lock:  # one row per peer and direction, closed links included
            rows = {key: list(c) for key, c in self._gone.items()}
            for lk in self._direct_links:
                _tally(rows, lk)
        direct = [
            {"peer": peer, "dialed": dialed, "links": c[0], **dict(zip(counts, c[1:], strict=True))}
            for (peer, dialed), c in rows.items()
        ]
        return {
            "hub": {k: getattr(self.link, k, 0) for k in counts},
            "direct": direct,
            "relayed": dict(self.relayed),
        }

    def close(self) -> None:
        self._stop.set()
        if self.link is not None:
            self.link.close("closed")
        if self._channel is not None:
            self._channel.close()
        with self._peer_lock:
            links, channels = list(self._direct_links), list(self._channels)
        for lk in links:
            lk.close("closed")
        for channel in channels:
            channel.close()
        if self.server is not None:
            self.server.stop(0)
        self._work.shutdown(wait=False, cancel_futures=True)
        self._close_fanout()
