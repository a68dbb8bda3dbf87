"""What the gRPC hub and a party transport share: replies awaited, heartbeats, the server
that accepts streams (the hub; a party's direct-link listener) and the dialing of one."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NoReturn

from fedviews.errors import ConfigError, PartyUnavailable, ProtocolError
from fedviews.federation._budget import Budget
from fedviews.federation._e2e import HubProof
from fedviews.federation._grpc import (
    _PEER_METHOD,
    BYE,
    ERROR,
    HEARTBEAT,
    HELLO,
    REPLY,
    REQUEST,
    WELCOME,
    Buffer,
    _Calls,
    _certificate,
    _grpc,
    _Link,
    _nbytes,
    _report,
    _Slot,
    log,
)
from fedviews.federation._grpc_options import GrpcOptions
from fedviews.federation._message import Message
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._reports import raise_remote
from fedviews.federation._transport import Transport, attributed

if TYPE_CHECKING:
    from fedviews.federation._certs import TLSFiles


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
        self.check_send(msg)
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
        with attributed(msg.receiver, f"the reply to {msg.kind!r}"):
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
            with attributed(link.peer, "a frame"):
                for frame in frames:
                    got = link.receive(frame)
                    if got is not None and not self._dispatch(link, *got):
                        break
            link.close("peer left")
        except ProtocolError as exc:  # the stream broke or the peer broke the protocol: named
            if not link.closed.is_set():  # said now, in this process's log, not only when the
                log.warning("cut the link to %r: %s", link.peer, exc)  # run next uses it
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

    def _refuse(self, context: Any, reason: str, config: bool = False) -> NoReturn:
        """Refuse a dial: PERMISSION_DENIED (a ``PrivacyError`` at the dialer), or, for a
        dialer that runs another config (``config``), FAILED_PRECONDITION (a ``ConfigError``:
        a mistake to correct, not an intrusion)."""
        log.warning("refused a connection from %s: %s", context.peer(), reason)
        self.refusals.append(reason)
        code = _grpc().StatusCode
        context.abort(code.FAILED_PRECONDITION if config else code.PERMISSION_DENIED, reason)
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

    def _count_stream(self, context: Any) -> str | None:
        """Count a new stream against its certificate's budget until it ends (refused, naming
        the certificate, past ``max_streams_per_peer``); the names of its certificate, for the
        refusals. Without TLS nobody is authenticated, so nothing is counted (``None``)."""
        if self.tls is None:
            return None
        names, _ = _certificate(context)
        who = ", ".join(sorted(names)) or "nobody"
        refused = self.budget.open_stream(who)
        if refused is not None:
            self._refuse(context, refused)
        if not context.add_callback(lambda: self.budget.close_stream(who)):
            self.budget.close_stream(who)  # the stream has ended already
        return who

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
        certified = self._count_stream(context)
        who = repr(certified) if certified else f"the unauthenticated peer at {context.peer()}"
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
        probe = _Link(certified or "?", self.options, checksum=self.tls is None)
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
            with attributed(peer, "the welcome"):
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
