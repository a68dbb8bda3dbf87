"""The coordinator's side of the gRPC transport: a hub that parties dial out to.

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
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from fedviews.errors import ConfigError, FedViewsError, PartyUnavailable
from fedviews.federation._e2e import check_bundle
from fedviews.federation._grpc import (
    BYE,
    ERROR,
    PEERS,
    REPLY,
    REQUEST,
    Buffer,
    _check_sender,
    _Link,
    _report,
    log,
)
from fedviews.federation._grpc_endpoint import _Endpoint
from fedviews.federation._grpc_options import GrpcOptions
from fedviews.federation._message import Message
from fedviews.federation._meta import run_differences
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._reports import stamp_report
from fedviews.federation._transport import attributed

if TYPE_CHECKING:
    from fedviews.federation._certs import TLSFiles


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
    run : str
        The run's fingerprint (a deployment's config); a party whose hello says another is
        refused, and with TLS the run stops naming it (:meth:`wait_for_parties`). Empty:
        not compared.
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
        run: str = "",
    ) -> None:
        super().__init__(policy, options or GrpcOptions(), keep_entries)
        self.expected = dict(parties)
        #: the run's fingerprint (its config); a party whose hello says another is refused
        self.run = run
        #: certified parties refused for running another config: the run stops, naming them
        self.misconfigured: dict[str, str] = {}
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
        if differ := run_differences(self.run, said.get("run")):
            reason = (
                f"party {claimed!r} runs another deployment config than the coordinator "
                f"(different: {differ}); give every process the same config file and overrides"
            )
            if self.tls is not None:  # its certificate proves who it is: stop the run now
                with self._joined:
                    self.misconfigured[claimed] = reason
                    self._joined.notify_all()
            self._refuse(context, reason, config=True)
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
        return [p for p, link in list(self.links.items()) if link.closed.is_set()]

    def wait_for_parties(self, timeout: float | None = None) -> None:
        """Block until every expected party has joined; else raise PartyUnavailable, or a
        ConfigError naming a certified party that runs another config (:attr:`run`)."""
        limit = self.options.connect_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._joined:
            while True:
                for party, reason in self.misconfigured.items():
                    exc = ConfigError(reason)
                    exc.party = party  # certified: named for it
                    raise exc
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
            with attributed(target.peer, f"the reply to {head.kind!r}"):
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
        return int(sum(lk.bytes_out + lk.bytes_in for lk in self._links()))

    def close(self, grace: float = 2.0) -> None:
        """Say goodbye to every party and stop the server.

        It goes through a copy of the links: a party may still be joining (another thread
        adds its link), and iterating the live table then raised ``dictionary changed size``,
        which left the server running and the coordinator's process hung after its error
        (a party refused at its hello while the others joined)."""
        links = self._links()
        for link in links:
            link.post(BYE)
        deadline = time.monotonic() + grace
        for link in links:  # a closed link (a party gone) sends nothing more
            while not link.closed.is_set() and not link.out.empty() and time.monotonic() < deadline:
                time.sleep(0.02)
        self._stop.set()
        for link in self._links():  # with one that joined meanwhile
            link.close("coordinator shut down")
        self.server.stop(grace).wait(grace + 1.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_fanout()
