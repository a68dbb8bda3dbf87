"""A party's side of the gRPC transport: dials out to the hub, and the direct links.

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
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fedviews import errors
from fedviews.errors import FedViewsError, PartyUnavailable, ProtocolError, described
from fedviews.federation._e2e import E2EKeys
from fedviews.federation._grpc import (
    _METHOD,
    _PEER_METHOD,
    PEERS,
    Buffer,
    _check_sender,
    _grpc,
    _Link,
    _tally,
    log,
)
from fedviews.federation._grpc_endpoint import _Endpoint
from fedviews.federation._grpc_options import GrpcOptions
from fedviews.federation._message import Message
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._transport import attributed

if TYPE_CHECKING:
    from fedviews.federation._certs import TLSFiles


def _unresolved(code: Any, details: str) -> bool:
    """Whether a failed dial failed at the name lookup (gRPC: "DNS resolution failed for
    HOST", newer releases "errors resolving HOST"), not at the connection."""
    return bool(code == _grpc().StatusCode.UNAVAILABLE and "resolv" in details.lower())


def _misnamed(details: str) -> bool:
    """Whether a failed dial failed at TLS's check of the coordinator's name (gRPC:
    "Hostname Verification Check failed"): its certificate is issued to another name."""
    return "hostname verification" in details.lower()


def _short(details: str) -> str:
    """The reason in gRPC's failure text, without its address list: "failed to connect to
    all addresses; last error: UNKNOWN: ipv4:10.0.0.5:50051: Connection refused" ->
    "Connection refused"."""
    return details.rsplit(": ", 1)[-1]


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
    run : str
        The run's fingerprint (this party's deployment config), said in its hello: a hub
        with another refuses it (``GrpcHub(run=...)``). Empty: not said.
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
        run: str = "",
    ) -> None:
        super().__init__(policy, options or GrpcOptions(), keep_entries)
        self.address = coordinator
        #: the run's fingerprint (this party's config), said in the hello: the hub compares
        self.run = run
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
        hello = self._hello(name)
        if self.run:
            hello["run"] = self.run
        if self.tls is not None and self.options.end_to_end:
            self.e2e = E2EKeys(name, self.tls, hub=self.server_name)
            hello["e2e"] = self.e2e.bundle()
        retries = self.options.connect_retries
        pause = self.options.backoff
        waited = pause * (2 ** (retries - 1) - 1)  # the pauses between the attempts
        last = ""
        for attempt in range(1, retries + 1):
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
                if code == grpc.StatusCode.FAILED_PRECONDITION:  # another config: a mistake
                    raise errors.ConfigError(
                        f"the coordinator refused {name!r}: {exc.details()}"
                    ) from None
                if _unresolved(code, str(exc.details())):  # a typo does not fix itself
                    raise errors.ConfigError(
                        f"cannot resolve the coordinator's host name in {self.address!r} "
                        f"({exc.details()}): check --coordinator HOST:PORT (spelling, DNS, "
                        "or use its IP address)"
                    ) from None
                if _misnamed(str(exc.details())):  # nor does a certificate of another name
                    raise errors.PrivacyError(
                        f"the server at {self.address} presented a certificate that is not "
                        f"issued to {self.server_name!r} ({_short(str(exc.details()))}): it is "
                        "not the federation's coordinator, or runs with another party's "
                        "certificate; not connecting"
                    ) from None
                if attempt == 1 and retries > 1:  # one line, however long it retries
                    log.warning(
                        "waiting for the coordinator at %s (unreachable: %s), retrying for "
                        "about %.3g s",
                        self.address,
                        _short(str(exc.details())),
                        waited,
                    )
                else:
                    log.debug("connection attempt %d to %s: %s", attempt, self.address, last)
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
            if attempt < retries:
                time.sleep(pause)
                pause *= 2
        tls = (
            f", and that this party's certificate and the coordinator's are signed by the same "
            f"CA (ca.crt) and the coordinator's is issued to {self.server_name!r} (a TLS "
            "handshake that fails reads 'Socket closed' here)"
            if self.tls
            else ""
        )
        raise PartyUnavailable(
            self.server_name,
            f"could not reach the coordinator at {self.address} ({retries} attempts over "
            f"{waited:.3g} s; last error: {last}). Check that the coordinator is running, that "
            f"{self.address} is its --listen address as this machine reaches it (host name, "
            f"port, firewall){tls}",
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
            with attributed(self.server_name, "a frame"):
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
            with attributed(
                self.server_name, "the key bundles"
            ):  # the hub checked each at its hello
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
                reason = described(exc)
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
