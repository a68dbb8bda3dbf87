"""Party-to-party messages over Flower: a node's side (per-batch split learning).

In split NN, Multi-VFL and APFed a party sends messages of its own from inside a
handler (a label owner asks the data owners for their activations every batch), but a
Flower ClientApp can only answer the ServerApp. So the handler runs in a thread of the
node's process (:class:`_Job`) and the ClientApp call answers with whatever comes first:

* the handler's **final reply** (the answer to the message the ServerApp sent), or
* the **messages it sends**, sealed for their receivers (:data:`SEND`): the handler
  waits in its thread; the ServerApp relays each sealed message to its receiver's node
  (whose handler may in turn send), and brings the sealed replies back in a
  ``query.fedviews_resume`` message (:func:`resume`), which wakes the handler up and
  again answers with what comes first.

The ServerApp reads only the clear headers (kind, sender, receiver, round, array names,
shapes and sizes: what its policy check and log need). The payloads are sealed end to
end exactly as on fedviews' gRPC hub (:class:`fedviews.federation.E2EKeys`): each node
makes a fresh X25519 key pair at the hello and signs it with its fedviews certificate
(``certs=DIR`` in its node config, or the run config's ``certs-dir``: ``DIR/ca.crt``,
``DIR/<party>.crt``, ``DIR/<party>.key``); the ServerApp checks every bundle as it
arrives (naming a node that sends a bad one) and hands them out
(``query.fedviews_peers``); a node accepts a peer's key only if the
certificate is the federation CA's, names exactly that party and signs the key, and
refuses an altered, forged or replayed message, naming its claimed sender.

The handler and the keys live in the node's process, so the party must live through
the run: Flower's simulation engine with **one** Ray actor (``launch_flower`` runs it
so), or the deployment engine with every SuperNode in ``--isolation process`` next to
``fedviews flower executor``, whose one process runs all its node's tasks
(:mod:`._flower_exec`; ``launch_flower`` runs it so). A node whose live party is gone
(another actor, or Flower's own executor, which starts a new ClientApp process for
every message) refuses to rebuild it (:data:`PEERS_NEED_A_LIVE_PARTY`) instead of
answering with a party that lost its per-batch state.
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Callable
from typing import Any

from fedviews.errors import ConfigError, PartyUnavailable, ProtocolError, require

require("flwr", "flower")

from flwr.app import Context, RecordDict  # noqa: E402

from fedviews.deploy._flower_node import NodeSettings, _Node, forget, node_settings  # noqa: E402
from fedviews.deploy._flower_transport import PEERS_NEED_A_LIVE_PARTY  # noqa: E402
from fedviews.deploy._flower_wire import REPLIES, SEND, pack, pack_all, unpack_all  # noqa: E402
from fedviews.federation import E2EKeys, TLSFiles, attributed, get_algorithm_spec  # noqa: E402

_KEYS: dict[tuple[int, int], E2EKeys] = {}
_JOBS: dict[tuple[int, int], _Job] = {}
_LOCK = threading.Lock()


def _key(context: Context) -> tuple[int, int]:
    return int(context.run_id), int(context.node_id)


def hello_keys(context: Context, s: NodeSettings) -> str | None:
    """At the hello of a per-batch algorithm: this node's fresh end-to-end key pair, kept in
    this process, and its bundle (certificate, X25519 key, signature) as JSON; None for
    an algorithm whose parties only answer the coordinator."""
    if not get_algorithm_spec(s.cfg.algorithm).peer_to_peer:
        return None
    if s.certs is None:
        raise ConfigError(
            f"{s.cfg.algorithm} sends messages between parties, sealed end to end over "
            f"Flower: party {s.party!r} needs its fedviews certificate (fedviews certs "
            "issue DIR NAME): add certs='DIR' to its --node-config, or certs-dir='DIR' to "
            "the run config"
        )
    tls = TLSFiles.from_dir(s.certs, s.party)
    keys = E2EKeys(s.party, tls, hub=s.cfg.federation.coordinator)
    forget(context)  # a new session's hello: no party of an earlier one is reused
    with _LOCK:
        _KEYS[_key(context)] = keys
        _JOBS.pop(_key(context), None)  # nothing waits any more
    return json.dumps({"cert": tls.cert.read_text(), **keys.bundle()})


def take_peers(context: Context, content: RecordDict) -> None:
    """``query.fedviews_peers``: check the peers' bundles (one for every other party of this
    node's config, no other), derive the pairwise keys; what is wrong with them names the
    ServerApp (the coordinator), which sent them."""
    with _LOCK:
        keys = _KEYS.get(_key(context))
    if keys is None:
        raise ConfigError(PEERS_NEED_A_LIVE_PARTY)
    with attributed(keys.hub, "the key table"):
        said = json.loads(str(content.config_records["peers"]["keys"]))
        peers, session = said["peers"], bytes.fromhex(said["session"])
        if not isinstance(peers, dict):
            raise ProtocolError(f"{keys.hub!r} sent peer keys that are no table")
    others = set(node_settings(context).cfg.federation.parties) - {keys.name}
    with attributed(keys.hub, "the key table"):  # the ServerApp checked each at its hello
        if set(peers) - {keys.name} != others:
            raise ProtocolError(
                f"{keys.hub!r} sent keys of {sorted(set(peers) - {keys.name})} to "
                f"{keys.name!r}, whose peers are {sorted(others)}"
            )
        keys.set_peers(peers, session)


class _Job:
    """One request handled in a thread of its own, so that it can wait for the ServerApp to
    relay its party's messages (:meth:`ask`) while the ClientApp call returns them."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.replies: queue.Queue[list[bytes]] = queue.Queue()

    def begin(self, run: Callable[[], bytes]) -> None:
        """Run the handler in a thread of its own (once the transport's outbox is this job's)."""
        threading.Thread(
            target=self._main, args=(run,), daemon=True, name="fedviews-flower-handler"
        ).start()

    def _main(self, run: Callable[[], bytes]) -> None:
        try:
            self.events.put(("done", run()))
        except BaseException as exc:  # handed to the ClientApp call, which reports it
            self.events.put(("error", exc))

    def ask(self, wires: list[bytes]) -> list[bytes]:
        """(In the handler's thread.) Hand sealed requests out, wait for their replies."""
        self.events.put(("send", wires))
        try:
            return self.replies.get(timeout=self.timeout)
        except queue.Empty:
            raise PartyUnavailable(
                "coordinator", f"brought no replies within {self.timeout:g} s"
            ) from None

    def next(self) -> tuple[str, Any]:
        """(In the ClientApp call.) What the handler does next: send, or finish."""
        return self.events.get()


def _outcome(key: tuple[int, int], job: _Job) -> tuple[list[bytes], bytes | None]:
    """``(messages to relay, None)``, or ``([], final reply)`` once the handler finished."""
    what, value = job.next()
    if what == "send":
        return value, None
    with _LOCK:
        _JOBS.pop(key, None)
    if what == "error":
        raise value
    return [], value


def start(context: Context, node: _Node, data: bytes) -> tuple[list[bytes], bytes | None]:
    """Handle ``data`` (a request from the ServerApp or a peer's, relayed): see
    :func:`_outcome`. The party may send while it handles it, with this node's keys; a
    per-batch party whose process did not live since its hello (no keys here) refuses."""
    key = _key(context)
    transport = node.transport
    with _LOCK:
        if node.app.peer_to_peer and key not in _KEYS:
            raise ConfigError(PEERS_NEED_A_LIVE_PARTY)
        if key in _JOBS:
            raise ProtocolError(
                f"{transport.coordinator!r} sent a new request to this node while its party's "
                "handler waits for the replies to its own messages",
                party=transport.coordinator,
            )
        transport.e2e = _KEYS.get(key)
        job = _Job(node.settings.cfg.federation.request_timeout)
        _JOBS[key] = job
    transport.outbox = job.ask
    job.begin(lambda: node.handle(data))
    return _outcome(key, job)


def resume(context: Context, node: _Node, content: RecordDict) -> tuple[list[bytes], bytes | None]:
    """``query.fedviews_resume``: the sealed replies the waiting handler asked for (what
    cannot be unpacked, or replies where no handler waits in a process that lived since its
    hello, names the ServerApp, which brought them)."""
    key = _key(context)
    with _LOCK:
        job, live = _JOBS.get(key), key in _KEYS
    if job is None and live:
        hub = node.transport.coordinator
        raise ProtocolError(
            f"{hub!r} brought replies to this node, whose party waits for none", party=hub
        )
    if job is None:
        raise ConfigError(PEERS_NEED_A_LIVE_PARTY)
    with attributed(node.transport.coordinator, "the replies to relay"):
        job.replies.put(unpack_all(content, REPLIES))
    return _outcome(key, job)


def forget_job(context: Context) -> None:
    """Drop this node's waiting handler (its request failed): the thread stays parked."""
    with _LOCK:
        _JOBS.pop(_key(context), None)


def content_of(sent: list[bytes], wire: bytes | None) -> RecordDict:
    """The ClientApp's answer: the final reply, or the party's messages to relay."""
    return pack(wire) if wire is not None else pack_all(sent, SEND)
