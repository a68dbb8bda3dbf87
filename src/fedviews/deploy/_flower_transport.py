"""The Flower transports of the deployed session.

:class:`FlowerGridTransport` is the ServerApp's: it sends every fedviews
:class:`~fedviews.federation.Message` to the Flower node of its receiver through the
``Grid`` (Message API), after the same privacy-policy check and logging as
in-process (:meth:`Transport._check_and_log`). A ClientApp's transport
(:class:`~fedviews.deploy._flower_node.FlowerNodeTransport`) answers the ServerApp, and (per-batch split learning) sends a party's
own messages to other parties through it, sealed end to end: a node answers "send
these" (:data:`SEND`), the ServerApp relays each sealed message to its receiver's node,
reading only its header, and hands the sealed replies back (``query.fedviews_resume``)
to the handler that waits for them in its live process (:mod:`._flower_relay`).

The wire format and the tags that bind a node's reply to that node are in
:mod:`._flower_wire`.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from fedviews.errors import (
    ConfigError,
    FedViewsError,
    PartyUnavailable,
    ProtocolError,
    require,
)

require("flwr", "flower")

from flwr.app import ConfigRecord, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.common.constant import SUPERLINK_NODE_ID  # noqa: E402
from flwr.serverapp import Grid  # noqa: E402

from fedviews.deploy._flower_wire import (  # noqa: E402
    ACTION,
    AUTH,
    HELLO,
    NODE_CONFIG_HINT,
    PEERS,
    PING,
    REPLIES,
    REPLY_KEY,
    REPLY_KEY_BYTES,
    RESUME,
    SEND,
    asks_to_relay,
    is_tagged,
    node_error,
    pack,
    pack_all,
    unpack,
    unpack_all,
)
from fedviews.federation import (  # noqa: E402
    Header,
    Message,
    PrivacyPolicy,
    Transport,
    Trust,
    attributed,
    check_bundle,
    run_differences,
)

_GRPC_HINT = "fedviews' gRPC transport (fedviews launch / fedviews party)"

#: why a per-batch algorithm needs its parties' processes to live through a Flower run
PEERS_NEED_A_LIVE_PARTY = (
    "per-batch split learning (a party's handler sends its own messages, relayed by the "
    "ServerApp) needs each party's process to live through the run: its handler waits in it "
    "for the replies, with its end-to-end keys. Flower's own executor (a SuperNode in its "
    "default --isolation subprocess) starts a new ClientApp process for every message, and "
    "a simulation with several Ray actors hands a node's messages to any of them: start "
    "every SuperNode with --isolation process next to `fedviews flower executor "
    "--runtime-api HOST:PORT` (one live ClientApp process per party; fedviews flower launch "
    "--engine deployment does so with flwr 1.42), use the simulation engine "
    "with one actor (fedviews flower launch --engine simulation does) or " + _GRPC_HINT
)


@dataclass(frozen=True)
class FlowerOptions:
    """How the ServerApp waits for the nodes.

    Parameters
    ----------
    poll_interval : float
        Seconds between two pulls of pending replies from the SuperLink.
    request_timeout : float
        Deadline of one request in seconds (also the Flower message TTL).
    join_timeout : float
        Seconds to wait until a node has declared every party of the federation.
    node_auth : bool
        Every node must be registered with the SuperLink under the name of the party it
        declares (``flwr supernode register KEY.pub --name PARTY`` of a SuperLink run with
        ``--enable-supernode-auth``): the party a node claims is then the one its
        authentication key was registered for. False: a node's own node config says which
        party it is (the simulation engine's virtual nodes, ``--insecure`` local tests).
    """

    poll_interval: float = 0.02
    request_timeout: float = 3600.0
    join_timeout: float = 60.0
    node_auth: bool = False


def _named(exc: FedViewsError, node: str) -> FedViewsError:
    """``exc`` (its type kept) attributed to ``node``: ``culprit`` in ``results.json``."""
    exc.party = node
    return exc


class FlowerGridTransport(Transport):
    """The coordinator's transport: every message goes to its receiver's Flower node.

    Parameters
    ----------
    policy : PrivacyPolicy
        Enforced on every message before it is encoded, and on every reply.
    parties : mapping of str to str
        The parties of the federation, ``{name: role}``.
    grid : flwr.serverapp.Grid
        The ServerApp's grid (deployment or simulation engine).
    options : FlowerOptions
        Poll interval and timeouts.
    trust : Trust, optional
        The federation CA (and revocation list) that the parties' certificates must come
        from (per-batch algorithms); None: the bundles are checked for all but their
        certificates' issuer, which every peer checks.
    """

    def __init__(
        self,
        policy: PrivacyPolicy,
        parties: Mapping[str, str],
        grid: Grid,
        *,
        options: FlowerOptions | None = None,
        keep_entries: bool = True,
        trust: Trust | None = None,
    ) -> None:
        super().__init__(policy, keep_entries=keep_entries)
        #: what the parties' end-to-end key bundles are checked against at their hellos
        self.trust = trust or Trust(None)
        self.expected = dict(parties)
        self.roles.update(self.expected)
        self.grid = grid
        self.options = options or FlowerOptions()
        self.nodes: dict[str, int] = {}
        self.registered: dict[int, str] = {}  # node ID -> the name its key was registered under
        #: node ID -> the key of its reply tags, drawn here and sent in its hello only
        self.reply_keys: dict[int, bytes] = {}
        self.exchanges: list[tuple[str, int, float]] = []  # (kind, messages, seconds)
        self.pings: dict[str, list[float]] = {}
        #: the parties' signed end-to-end keys from their hellos (per-batch algorithms)
        self.bundles: dict[str, dict[str, str]] = {}
        self._grid_lock = threading.Lock()  # one grid call at a time (PSI chains are threads)

    # -- joining -------------------------------------------------------------
    def connect(self, run_fingerprint: str = "") -> dict[str, int]:
        """Ask every node which party it is until all parties are mapped; return the map.

        Raises ConfigError for a node without a party, a party not of this federation,
        two nodes claiming one party or a node whose deployment config differs from the
        coordinator's (``run_fingerprint``), and PartyUnavailable for a party that no
        node declared within ``join_timeout``.
        """
        limit = self.options.join_timeout
        deadline = time.monotonic() + limit
        asked: set[int] = set()
        coordinator = next(iter(self.local), "coordinator")
        while True:
            with self._grid_lock:
                for info in self.grid.get_nodes():
                    self.registered[int(info.node_id)] = str(getattr(info, "name", "") or "")
            new = sorted(set(self.registered) - asked)
            if new:
                asked.update(new)
                left = max(deadline - time.monotonic(), 5.0)
                msgs = []
                for n in new:
                    key = self.reply_keys[n] = secrets.token_bytes(REPLY_KEY_BYTES)
                    said = ConfigRecord(
                        {"coordinator": coordinator, "run": run_fingerprint, REPLY_KEY: key}
                    )
                    msgs.append(self._query(RecordDict({"hello": said}), n, HELLO, left))
                for node, reply in zip(new, self._exchange(msgs, left, "hello"), strict=True):
                    self._declare(node, reply, run_fingerprint)
            missing = [p for p in self.expected if p not in self.nodes]
            if not missing:
                return dict(self.nodes)
            if time.monotonic() > deadline:
                raise PartyUnavailable(
                    ", ".join(missing),
                    f"no Flower node declared it within {limit:g} s (nodes: "
                    f"{self.nodes or 'none'}); start one SuperNode per party with "
                    + NODE_CONFIG_HINT,
                )
            time.sleep(0.25)

    def _declare(self, node: int, reply: FlowerMessage | None, run_fingerprint: str) -> None:
        where = f"Flower node {node}"
        if reply is None:
            raise PartyUnavailable(where, "did not answer the hello")
        node_error(where, "hello", reply)  # its report names it
        with attributed(where, "the hello"):
            rec = reply.content.config_records.get("hello")
            if rec is None or "party" not in rec:
                raise ProtocolError("no party name")
            party = rec["party"]
            if not isinstance(party, str):
                raise ProtocolError(f"a party name of type {type(party).__name__}, not str")
        if party not in self.expected:
            raise _named(
                ConfigError(
                    f"{where} declares party {party!r}, which is not one of this federation's "
                    f"parties {sorted(self.expected)}"
                ),
                where,
            )
        self._check_identity(node, party)
        if party in self.nodes:
            raise ConfigError(
                f"Flower nodes {self.nodes[party]} and {node} both declare party {party!r}; "
                "give every SuperNode its own --node-config party=..."
            )
        if differ := run_differences(run_fingerprint, rec.get("run")):
            why = f"party {party!r} ({where}) runs another deployment config than the coordinator"
            fix = "give every node the config the app runs, with its overrides (its deploy.toml)"
            raise _named(ConfigError(f"{why} (different: {differ}; {fix})"), where)
        if "e2e" in rec:
            self.bundles[party] = self._checked_bundle(where, party, rec["e2e"])
        self.nodes[party] = node

    def _checked_bundle(self, where: str, party: str, said: object) -> dict[str, str]:
        """``party``'s end-to-end key bundle from its hello, checked as every peer will check
        it (:func:`~fedviews.federation.check_bundle`: its fields, the certificate named
        ``party`` and, with :attr:`trust`'s CA, issued by it, the X25519 key, the signature),
        so that a bad bundle is pinned on its sender now instead of failing the peers that
        refuse it later."""
        try:
            bundle = json.loads(str(said))
        except (ValueError, RecursionError):  # (RecursionError: a "JSON bomb")
            bundle = None
        if (
            not isinstance(bundle, dict)
            or set(bundle) != {"cert", "x25519", "sig"}
            or not all(isinstance(v, str) for v in bundle.values())
        ):
            raise ProtocolError(
                f"{where} ({party!r}) sent a malformed end-to-end key bundle (want a JSON "
                "table of the strings cert, x25519, sig)",
                party=where,
            )
        try:
            check_bundle(self.trust, party, bundle)
        except FedViewsError as exc:
            raise ProtocolError(
                f"{where} ({party!r}) sent a bad end-to-end key: {exc}", party=where
            ) from None
        return bundle

    def _check_identity(self, node: int, party: str) -> None:
        """Refuse a node whose authentication key was registered for another party (it
        claims a name that is not its own) or, with ``node_auth``, for no party at all."""
        registered = self.registered.get(node, "")
        where = f"Flower node {node}"
        if registered and registered != party:
            raise ProtocolError(
                f"{where} declares party {party!r} but its SuperNode key is registered as "
                f"{registered!r}: refused (a node cannot claim another party's name; "
                f"{party!r} is not blamed)",
                party=where,
            )
        if self.options.node_auth and not registered:
            raise ConfigError(
                f"{where} declares party {party!r} but its key is registered under no name, "
                "so nothing binds it to that party: run the SuperLink with "
                "--enable-supernode-auth and register each party's SuperNode key with "
                "`flwr supernode register KEY.pub CONNECTION --name PARTY` (or set the run "
                "config node-auth=false to trust the node configs: local tests only)"
            )

    def hand_out_keys(self) -> None:
        """Give every node the others' signed end-to-end keys and this run's session, as the
        gRPC hub does once all parties have joined: each node checks every key against its
        certificate (signed by the federation's CA, named after its party), so the ServerApp
        cannot slip in a key of its own and read or forge what it relays."""
        missing = [p for p in self.expected if p not in self.bundles]
        if missing:
            raise ConfigError(
                f"{', '.join(missing)} sent no end-to-end key in its hello: every node of a "
                "per-batch algorithm needs its fedviews certificate (certs=DIR in its node "
                "config, or certs-dir=DIR in the run config)"
            )
        keys = json.dumps({"session": secrets.token_hex(16), "peers": self.bundles})
        parties = list(self.expected)
        msgs = [
            self._query(RecordDict({"peers": ConfigRecord({"keys": keys})}), self.nodes[p], PEERS)
            for p in parties
        ]
        replies = self._exchange(msgs, self.options.request_timeout, PEERS)
        for p, reply in zip(parties, replies, strict=True):
            if reply is None:
                raise PartyUnavailable(p, "did not take the peers' end-to-end keys")
            node_error(p, PEERS, reply)

    # -- messaging ------------------------------------------------------------
    def _query(
        self, content: RecordDict, node: int, action: str, ttl: float | None = None, group: str = ""
    ) -> FlowerMessage:
        """A ``query.<action>`` message to ``node`` (TTL: the request timeout)."""
        ttl = self.options.request_timeout if ttl is None else ttl
        kind = f"query.{action}"
        return FlowerMessage(content, dst_node_id=node, message_type=kind, ttl=ttl, group_id=group)

    def _exchange(
        self, msgs: list[FlowerMessage], timeout: float, what: str, *, probe: bool = True
    ) -> list[FlowerMessage | None]:
        """Push all messages, then pull until every reply is in (None: no reply in time);
        a reply is taken only from its message's node, with its tag, of its type
        (:meth:`_check_origin`); once all are in, a node's Flower error reply only if the
        node does not answer a ping either (``probe``, :meth:`_check_flower_error`)."""
        with self._grid_lock:
            ids = list(self.grid.push_messages(msgs))
        if len(ids) != len(msgs) or any(not i for i in ids):
            raise ProtocolError(f"the SuperLink refused {what} message(s) (too large or malformed)")
        pending = {str(i): k for k, i in enumerate(ids)}
        out: list[FlowerMessage | None] = [None] * len(msgs)
        deadline = time.monotonic() + timeout
        while pending:
            with self._grid_lock:
                got = list(self.grid.pull_messages(list(pending)))
            for reply in got:
                k = pending.get(reply.metadata.reply_to_message_id)
                if k is not None:
                    self._check_origin(msgs[k], reply)
                    del pending[reply.metadata.reply_to_message_id]
                    out[k] = reply
            if pending:
                if time.monotonic() > deadline:
                    break
                time.sleep(self.options.poll_interval)
        for sent, answer in zip(msgs, out, strict=True):
            if probe and answer is not None and answer.has_error():
                self._check_flower_error(sent, answer)
        return out

    def _check_origin(self, sent: FlowerMessage, reply: FlowerMessage) -> None:
        """Refuse a reply to ``sent`` that does not carry its node's tag for that message
        (:func:`is_tagged`; another node may have pushed it in that node's name, or altered or
        replayed it), naming no one; one that another node sent and tagged (a dishonest node
        answering in its place), or that is of another message type, naming the node that
        tagged it, never the one whose reply it imitates. The SuperLink's own error reply
        (a message that expired, a node that went away) comes from the SuperLink's node ID
        and is taken as it is (:func:`node_error` raises it), a node's Flower error reply
        (no content, so no tag) by :meth:`_check_flower_error`."""
        src, dst = reply.metadata.src_node_id, sent.metadata.dst_node_id
        kind, got = sent.metadata.message_type, reply.metadata.message_type
        if src == SUPERLINK_NODE_ID and reply.has_error():
            return
        tagged = is_tagged(reply, self.reply_keys)
        if src != dst:
            if tagged:
                raise ProtocolError(
                    f"{self._described(src)} answered the {kind!r} message sent to "
                    f"{self._described(dst)}: refused (a node answers only what was sent to "
                    f"it; {self._node_name(dst)!r} is not blamed)",
                    party=self._node_name(src),
                )
            raise ProtocolError(
                f"a reply to the {kind!r} message sent to {self._described(dst)} came in the "
                f"name of {self._described(src)} without that node's tag: refused, naming no "
                f"one (its pusher is unknown; {self._node_name(dst)!r} is not blamed)"
            )
        if reply.has_error():
            return
        if not tagged:
            record = reply.content.config_records.get(AUTH)
            why = "carries no tag" if record is None else "carries a tag that is not its node's"
            raise ProtocolError(
                f"the reply to the {kind!r} message sent to {self._described(src)} {why} "
                "for that message: refused, naming no one (another node may have answered in "
                "its name, which Flower's SuperLink lets through, or the reply was altered on "
                "its way, or that node runs a fedviews older than the ServerApp's; "
                f"{self._node_name(src)!r} is not blamed)"
            )
        if got != kind:
            raise ProtocolError(
                f"{self._described(src)} answered a {kind!r} message with a {got!r} one",
                party=self._node_name(src),
            )

    def _check_flower_error(self, sent: FlowerMessage, reply: FlowerMessage) -> None:
        """A node's Flower error reply (an error code, no content, so no tag) is taken (its
        party is then unavailable: :func:`node_error` says so) only if the node does not
        answer a ping until the request's deadline either, or the SuperLink answers for it
        (a node that went away). Any answer in the node's name, a tagged echo or another
        Flower error, leaves the pusher unknown: refused naming no one."""
        node = reply.metadata.src_node_id
        if node == SUPERLINK_NODE_ID:
            return
        limit = self.options.request_timeout  # the node may still work on another message
        ping = self._query(pack(b""), node, PING, ttl=limit)
        (echo,) = self._exchange([ping], limit, "ping", probe=False)
        if echo is None or echo.metadata.src_node_id == SUPERLINK_NODE_ID:
            return
        err, kind = reply.error, sent.metadata.message_type
        answers = (
            "answers a ping"
            if not echo.has_error()
            else "answers a ping with a Flower error too (its ClientApp may fail to start)"
        )
        raise ProtocolError(
            f"a Flower error reply (code {err.code}: {err.reason}) came to the {kind!r} "
            f"message sent to {self._described(node)}, whose node {answers}: refused, "
            "naming no one (a Flower error reply carries no tag, so another node may have "
            f"pushed it in that node's name; {self._node_name(node)!r} is not blamed)"
        )

    def _node_name(self, node: int) -> str:
        """Who Flower node ``node`` is: the party it declared at its hello, ``Flower node N``
        before it did, ``the SuperLink``, or ``unknown Flower node N`` for an ID that the
        SuperLink never listed."""
        party = next((p for p, n in self.nodes.items() if n == node), None)
        if party is not None:
            return party
        if node == SUPERLINK_NODE_ID:
            return "the SuperLink"
        return f"Flower node {node}" if node in self.registered else f"unknown Flower node {node}"

    def _described(self, node: int) -> str:
        """:meth:`_node_name` for an error text: a party with its node ID."""
        name = self._node_name(node)
        return f"{name!r} (Flower node {node})" if name in self.nodes else name

    def _answer(self, party: str, kind: str, reply: FlowerMessage | None) -> bytes:
        """The fedviews bytes of a node's reply; raise what went wrong instead, naming
        ``party`` (the node the reply came from)."""
        if reply is None:
            timeout = self.options.request_timeout
            raise PartyUnavailable(party, f"no reply to {kind!r} within {timeout:g} s")
        node_error(party, kind, reply)
        with attributed(party, f"the reply to {kind!r}"):
            return unpack(reply.content)

    def request(self, msg: Message) -> Message:
        return self.request_many([msg])[0]

    def request_many(self, msgs: list[Message]) -> list[Message]:
        """Send every message, then collect every reply: the nodes compute concurrently."""
        if not msgs:
            return []
        t0 = time.perf_counter()
        out: list[FlowerMessage] = []
        for m in msgs:
            if m.sender not in self.local:
                raise ProtocolError(
                    f"{m.sender!r} cannot send {m.kind!r} over Flower: only the ServerApp "
                    "sends; a party's own messages (per-batch split learning) need " + _GRPC_HINT
                )
            if m.receiver not in self.roles:
                raise PartyUnavailable(m.receiver, "no such party in this federation")
            node = self.nodes.get(m.receiver)
            if node is None:
                raise PartyUnavailable(m.receiver, "no Flower node declared this party")
            self.check_send(m)
            wire = m.encode()
            self._check_and_log(m, len(wire))
            out.append(self._query(pack(wire), node, ACTION, group=str(m.round)))
        result: list[Message] = []
        for m, data in zip(msgs, self._round_trip(msgs, out), strict=True):
            with attributed(m.receiver, f"the reply to {m.kind!r}"):  # its node's, whatever
                reply = Message.decode(data)  # its header claims
                self._check_reply(m, reply)
                self._check_and_log(reply, len(data))
            result.append(reply)
        self.exchanges.append((msgs[0].kind, len(msgs), time.perf_counter() - t0))
        return result

    def _round_trip(
        self, sent: Sequence[Message | Header], out: list[FlowerMessage]
    ) -> list[bytes]:
        """Push ``out`` (the Flower messages of ``sent``), relay what their receivers' parties
        send meanwhile, and return the fedviews bytes of every final reply, in order."""
        replies = self._exchange(out, self.options.request_timeout, sent[0].kind)
        replies = self._settled([m.receiver for m in sent], replies)
        return [self._answer(m.receiver, m.kind, r) for m, r in zip(sent, replies, strict=True)]

    # -- party-to-party messages -----------------------------------------------------
    def _settled(
        self, parties: list[str], replies: list[FlowerMessage | None]
    ) -> list[FlowerMessage | None]:
        """The final replies of the nodes of ``parties``: where a node asks for its party's
        own messages to be relayed (:data:`SEND`), relay them and bring back the replies
        until it answers; several nodes concurrently (each waits in its own handler)."""
        asking = [k for k, r in enumerate(replies) if r is not None and asks_to_relay(r)]
        out = list(replies)
        if len(asking) == 1:
            out[asking[0]] = self._serve(parties[asking[0]], replies[asking[0]])
        elif asking:
            with ThreadPoolExecutor(len(asking), thread_name_prefix="fedviews-relay") as pool:
                done = pool.map(lambda k: self._serve(parties[k], replies[k]), asking)
                for k, r in zip(asking, done, strict=True):
                    out[k] = r
        return out

    def _serve(self, party: str, reply: FlowerMessage | None) -> FlowerMessage | None:
        """Relay what ``party``'s handler sends until its node gives its final reply."""
        while reply is not None and asks_to_relay(reply):
            with attributed(party, "the messages to relay"):
                wires = unpack_all(reply.content, SEND)
            answers = self._relay(party, wires)
            resume = self._query(pack_all(answers, REPLIES), self.nodes[party], RESUME)
            (reply,) = self._exchange([resume], self.options.request_timeout, RESUME)
        return reply

    def _relay(self, sender: str, wires: list[bytes]) -> list[bytes]:
        """Deliver ``sender``'s sealed messages to their receivers' nodes and return their
        sealed replies, in order. Only the clear headers are read: the sender must be the
        party of the node they came from, the receiver another party, the kinds requests and
        their replies, the arrays as the policy allows; each is logged with its size."""
        if not wires:
            raise ProtocolError(f"{sender!r} asked to send nothing", party=sender)
        heads, out = [], []
        for data in wires:
            with attributed(sender, "a message to relay"):
                head = Message.peek(data)
                if head.sender != sender:
                    raise ProtocolError(f"{sender!r} sent a message in the name of {head.sender!r}")
                if head.receiver in self.local or head.receiver == sender:
                    raise ProtocolError(
                        f"{sender!r} sent {head.kind!r} to {head.receiver!r}: over Flower a "
                        "party sends its own messages to other parties only"
                    )
                node = self.nodes.get(head.receiver)
                if node is None:  # every party has its node since connect(): made up
                    raise ProtocolError(
                        f"{sender!r} sent {head.kind!r} to {head.receiver!r}, a party of no "
                        "Flower node"
                    )
                self._check_request(head)
                self._admit(head, len(data))
            heads.append(head)
            out.append(self._query(pack(data), node, ACTION, group=str(head.round)))
        t0 = time.perf_counter()
        answers = []
        for head, rdata in zip(heads, self._round_trip(heads, out), strict=True):
            with attributed(head.receiver, f"the reply to {head.kind!r}"):
                rhead = Message.peek(rdata)
                self._check_reply(head, rhead)
                self._admit(rhead, len(rdata))
            answers.append(rdata)
        self.exchanges.append((heads[0].kind, len(heads), time.perf_counter() - t0))
        return answers

    def ping(self, n: int, nbytes: int = 0) -> dict[str, list[float]]:
        """Wall times of ``n`` echo round trips (no party work, ``nbytes`` each way).

        ``single``: one message to the first party's node; ``broadcast``: one message
        to every node at once (what a round of a coarse-round algorithm sends).
        """
        out: dict[str, list[float]] = {"single": [], "broadcast": []}
        for key, nodes in (
            ("single", [self.nodes[next(iter(self.expected))]]),
            ("broadcast", list(self.nodes.values())),
        ):
            for _ in range(n):
                msgs = [self._query(pack(bytes(nbytes)), node, PING) for node in nodes]
                t0 = time.perf_counter()
                replies = self._exchange(msgs, self.options.request_timeout, "ping")
                dt = time.perf_counter() - t0
                for node, r in zip(nodes, replies, strict=True):
                    where = f"Flower node {node}"
                    if len(self._answer(where, "ping", r)) != nbytes:
                        raise ProtocolError(f"{where} echoed another payload", party=where)
                out[key].append(dt)
        self.pings = out
        return out

    def round_trip_seconds(self) -> float:
        """Median wall time of one exchange (push, the nodes' work, pull)."""
        if not self.exchanges:
            return float("nan")
        return float(np.median([s for _, _, s in self.exchanges]))
