"""Flower (``flwr`` 1.41) as a transport of the deployed session.

The session of :mod:`fedviews.deploy._session` (PSI, ``deploy:setup``,
``deploy:build``, the algorithm's rounds, ``deploy:finish``) runs unchanged; only
the transport differs from ``fedviews coordinator`` / ``fedviews party``:

* the **ServerApp** (:data:`server_app`) builds the :class:`DeployCoordinator` and
  gives it a :class:`FlowerGridTransport`, which sends every fedviews
  :class:`~fedviews.federation.Message` to the Flower node of its receiver through
  the ``Grid`` (Message API), after the same privacy-policy check and logging as
  in-process (:meth:`Transport._check_and_log`);
* the **ClientApp** (:data:`client_app`) runs on one SuperNode per party. The node
  says which party it is in its *node config*
  (``--node-config "party='pix' data='/data/pix.npz' out='/runs/pix'"``); the
  ServerApp asks every node first (``query.fedviews_hello``) and maps parties to
  node IDs. Every later Flower message carries one encoded fedviews message and
  is answered by that node's :class:`DeployParty`.

Wire: the :meth:`Message.encode` bytes (no pickle) ride in an ``ArrayRecord`` as one
``uint8`` :class:`flwr.app.Array` of serialisation type :data:`STYPE` (Flower
chunks large arrays); a handler failure comes back as a ``ConfigRecord``
``fedviews-error`` and is re-raised as the same :mod:`fedviews.errors` type.

Party state between messages: Flower's deployment engine starts a fresh
``flwr-clientapp`` process for **every** message, so no Python object survives.
A node therefore keeps what it needs in its ``Context.state`` (which Flower hands
from message to message, and which stays on the node) and rebuilds its party from
its data file when needed: the PSI secrets and rows (random, so stored); the
algorithm party's state after its last round message (the deploy app's
``state_dict``: what a round checkpoint holds, which ``--resume`` already relies
on); every other request it answered (``deploy:setup``, ``deploy:build``, an
algorithm's set-up or test-phase messages), replayed in order around that state;
and its message log. Where the process survives (the simulation engine's Ray
actors) a module-level cache keyed by ``(run_id, node_id)`` with a generation
counter skips the rebuild. This fits the coarse-round algorithms (MMVFL: one
``update`` per party and round); an algorithm whose party keeps state between two
messages of a round that its ``state_dict`` does not hold would need it there.

Per-batch split learning (Multi-VFL, APFed) is not supported: there a party sends
its own messages (activations to the label owner) from inside a handler, and a
ClientApp can only answer the ServerApp; besides, Flower's message round trip goes
through the SuperLink, a SuperNode poll and a new ClientApp process (seconds, see
``docs/flower.md``). Use fedviews' gRPC transport for those.

Run config of the Flower app (``flwr run APP CONNECTION -c "..."``):

``deploy-config``
    the deployment TOML (as for ``fedviews coordinator``); also read by a node
    whose node config has no ``config=PATH`` of its own.
``out-dir``
    run folder: the coordinator writes ``OUT/coordinator``; a node without
    ``out=`` in its node config writes ``OUT/<party>``
    (default ``<output_dir>/<name>-flower``).
``data-dir``
    simulation engine only (no per-node config): node ``partition-id=k`` is party
    ``k`` of the config and reads ``DATA_DIR/<party>.npz``.
``resume``
    coordinator folder of a killed run (nodes: ``resume=DIR`` in the node config).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import (
    ConfigError,
    DataError,
    FedViewsError,
    MissingDependency,
    PartyUnavailable,
    PrivacyError,
    ProtocolError,
    require,
)

require("flwr", "flower")

from flwr.app import (  # noqa: E402
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    RecordDict,
)
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedviews.deploy._checkpoint import fingerprint  # noqa: E402
from fedviews.deploy._config import DeployConfig, load_deploy_config  # noqa: E402
from fedviews.deploy._data import SUFFIXES, load_party_data, write_demo_data  # noqa: E402
from fedviews.deploy._session import (  # noqa: E402
    DeployCoordinator,
    DeployParty,
    _print_to,
    _write_json,
    run_identity,
    session_policy,
)
from fedviews.federation import (  # noqa: E402
    Algorithm,
    Message,
    Party,
    PrivacyPolicy,
    get_algorithm_spec,
)
from fedviews.federation._grpc import _error_payload, _raise_remote  # noqa: E402
from fedviews.federation._log import LogEntry  # noqa: E402
from fedviews.federation._transport import Transport  # noqa: E402

__all__ = [
    "FlowerGridTransport",
    "FlowerNodeTransport",
    "FlowerOptions",
    "client_app",
    "launch_flower",
    "run_flower_coordinator",
    "server_app",
    "write_flower_app",
]

log = logging.getLogger("fedviews.flower")

STYPE = "fedviews.message.v1"  # serialisation type of the Array that carries a Message
ACTION = "fedviews"  # Flower message type "query.fedviews": one fedviews Message
HELLO = "fedviews_hello"  # "query.fedviews_hello": which party is this node?
PING = "fedviews_ping"  # "query.fedviews_ping": echo, to time Flower's message round trip
_PAYLOAD, _BYTES, _ERROR = "fedviews", "message", "fedviews-error"
_STATE, _STATE_PSI, _STATE_ALGO = "fedviews", "fedviews.psi", "fedviews.algo"
Printer = Callable[[str], None]


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
    """

    poll_interval: float = 0.02
    request_timeout: float = 3600.0
    join_timeout: float = 60.0


# -- wire -------------------------------------------------------------------


def pack(wire: bytes | bytearray) -> RecordDict:
    """A fedviews wire message as Flower content (one uint8 Array, no pickle)."""
    data = bytes(wire)
    arr = Array(dtype="uint8", shape=(len(data),), stype=STYPE, data=data)
    return RecordDict({_PAYLOAD: ArrayRecord({_BYTES: arr})})


def unpack(content: RecordDict) -> bytes:
    """The fedviews wire bytes in Flower content made by :func:`pack`."""
    try:
        arr = content.array_records[_PAYLOAD][_BYTES]
    except KeyError:
        raise ProtocolError("the Flower message carries no fedviews message") from None
    if arr.stype != STYPE:
        raise ProtocolError(f"unexpected Flower array type {arr.stype!r} (want {STYPE!r})")
    return bytes(arr.data)


def _error_content(exc: BaseException) -> RecordDict:
    return RecordDict({_ERROR: ConfigRecord({"payload": _error_payload(exc)})})


def _node_error(party: str, kind: str, reply: FlowerMessage) -> None:
    """Raise what a node reported: a fedviews error, or Flower's own error."""
    if reply.has_error():
        err = reply.error
        raise PartyUnavailable(party, f"Flower error {err.code} on {kind!r}: {err.reason}")
    records = reply.content.config_records
    if _ERROR in records:
        payload = records[_ERROR]["payload"]
        assert isinstance(payload, bytes)
        _raise_remote(party, kind, payload)


# -- ServerApp side -----------------------------------------------------------


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
    """

    def __init__(
        self,
        policy: PrivacyPolicy,
        parties: Mapping[str, str],
        grid: Grid,
        *,
        options: FlowerOptions | None = None,
        keep_entries: bool = True,
    ) -> None:
        super().__init__(policy, keep_entries=keep_entries)
        self.expected = dict(parties)
        self.roles.update(self.expected)
        self.grid = grid
        self.options = options or FlowerOptions()
        self.nodes: dict[str, int] = {}
        self.local: dict[str, Party] = {}
        self.exchanges: list[tuple[str, int, float]] = []  # (kind, messages, seconds)
        self.pings: dict[str, list[float]] = {}
        self._grid_lock = threading.Lock()  # one grid call at a time (PSI chains are threads)

    def register(self, party: Party) -> None:
        super().register(party)
        self.local[party.name] = party

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
                new = sorted(set(self.grid.get_node_ids()) - asked)
            if new:
                asked.update(new)
                content = ConfigRecord({"coordinator": coordinator, "run": run_fingerprint})
                msgs = [
                    FlowerMessage(
                        RecordDict({"hello": content}),
                        dst_node_id=node,
                        message_type=f"query.{HELLO}",
                        ttl=max(deadline - time.monotonic(), 5.0),
                    )
                    for node in new
                ]
                left = max(deadline - time.monotonic(), 5.0)
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
                    "--node-config \"party='NAME' data='PATH'\"",
                )
            time.sleep(0.25)

    def _declare(self, node: int, reply: FlowerMessage | None, run_fingerprint: str) -> None:
        where = f"Flower node {node}"
        if reply is None:
            raise PartyUnavailable(where, "did not answer the hello")
        try:
            _node_error(where, "hello", reply)
        except PartyUnavailable:
            raise
        except (ConfigError, DataError, PrivacyError, ProtocolError) as exc:  # say which node
            raise type(exc)(f"{where}: {exc}") from None
        rec = reply.content.config_records.get("hello")
        if rec is None:
            raise ProtocolError(f"{where} answered the hello without a party name")
        party = str(rec["party"])
        if party not in self.expected:
            raise ConfigError(
                f"{where} declares party {party!r}, which is not one of this federation's "
                f"parties {sorted(self.expected)}"
            )
        if party in self.nodes:
            raise ConfigError(
                f"Flower nodes {self.nodes[party]} and {node} both declare party {party!r}; "
                "give every SuperNode its own --node-config party=..."
            )
        theirs = str(rec.get("run", ""))
        if run_fingerprint and theirs != run_fingerprint:
            raise ConfigError(
                f"party {party!r} ({where}) runs another deployment config "
                "(algorithm, seed, parties, label owner or params differ from the coordinator's)"
            )
        self.nodes[party] = node

    # -- messaging ------------------------------------------------------------
    def _exchange(
        self, msgs: list[FlowerMessage], timeout: float, what: str
    ) -> list[FlowerMessage | None]:
        """Push all messages, then pull until every reply is in (None: no reply in time)."""
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
                k = pending.pop(reply.metadata.reply_to_message_id, None)
                if k is not None:
                    out[k] = reply
            if pending:
                if time.monotonic() > deadline:
                    break
                time.sleep(self.options.poll_interval)
        return out

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
                    "sends; a party's own messages (per-batch split learning) need fedviews' "
                    "gRPC transport (fedviews launch / fedviews party)"
                )
            if m.receiver not in self.roles:
                raise PartyUnavailable(m.receiver, "no such party in this federation")
            node = self.nodes.get(m.receiver)
            if node is None:
                raise PartyUnavailable(m.receiver, "no Flower node declared this party")
            self._check_send(m)
            wire = m.encode()
            self._check_and_log(m, len(wire))
            out.append(
                FlowerMessage(
                    pack(wire),
                    dst_node_id=node,
                    message_type=f"query.{ACTION}",
                    group_id=str(m.round),
                    ttl=self.options.request_timeout,
                )
            )
        replies = self._exchange(out, self.options.request_timeout, msgs[0].kind)
        result: list[Message] = []
        for m, fr in zip(msgs, replies, strict=True):
            if fr is None:
                raise PartyUnavailable(
                    m.receiver, f"no reply to {m.kind!r} within {self.options.request_timeout:g} s"
                )
            _node_error(m.receiver, m.kind, fr)
            data = unpack(fr.content)
            reply = Message.decode(data)
            if reply.receiver != m.sender or reply.sender != m.receiver:
                raise ProtocolError(f"party {m.receiver!r} replied with a misaddressed message")
            self._check_and_log(reply, len(data))
            result.append(reply)
        self.exchanges.append((msgs[0].kind, len(msgs), time.perf_counter() - t0))
        return result

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
                msgs = [
                    FlowerMessage(
                        pack(bytes(nbytes)),
                        dst_node_id=node,
                        message_type=f"query.{PING}",
                        ttl=self.options.request_timeout,
                    )
                    for node in nodes
                ]
                t0 = time.perf_counter()
                replies = self._exchange(msgs, self.options.request_timeout, "ping")
                dt = time.perf_counter() - t0
                for node, r in zip(nodes, replies, strict=True):
                    if r is None:
                        raise PartyUnavailable(f"Flower node {node}", "no reply to a ping")
                    _node_error(f"Flower node {node}", "ping", r)
                    if len(unpack(r.content)) != nbytes:
                        raise ProtocolError(f"Flower node {node} echoed another payload")
                out[key].append(dt)
        self.pings = out
        return out

    def round_trip_seconds(self) -> float:
        """Median wall time of one exchange (push, the nodes' work, pull)."""
        if not self.exchanges:
            return float("nan")
        return float(np.median([s for _, _, s in self.exchanges]))


def run_flower_coordinator(
    cfg: DeployConfig,
    grid: Grid,
    out_dir: Path,
    *,
    echo: Printer | None = None,
    resume: Path | None = None,
    options: FlowerOptions | None = None,
    ping: int = 0,
    ping_bytes: int = 0,
) -> dict[str, Any]:
    """The ServerApp's work: map the nodes, run the session; write ``results.json`` always.

    Writes ``out_dir/results.json`` (status, objective, ``seconds_per_round``, the
    party-to-node map, every exchange's wall time), ``result.npz`` and
    ``message_log.json`` like :func:`fedviews.deploy.run_coordinator`. With
    ``ping > 0`` it only times ``ping`` echo round trips of ``ping_bytes`` bytes
    (:meth:`FlowerGridTransport.ping`) instead of running the session.
    """
    say = _print_to(cfg.federation.coordinator, echo)
    app = get_algorithm_spec(cfg.algorithm)
    opts = options or FlowerOptions(join_timeout=cfg.federation.connect_timeout)
    out_dir.mkdir(parents=True, exist_ok=True)
    _check_coarse_rounds(cfg, app)
    transport = FlowerGridTransport(session_policy(cfg), cfg.roles(), grid, options=opts)
    coord = DeployCoordinator(cfg, say, out_dir, resume)
    transport.register(coord)
    say(f"Flower ServerApp: waiting for nodes declaring {list(cfg.federation.parties)}")
    status = "ok"
    unavailable = None
    t0 = time.perf_counter()
    try:
        nodes = transport.connect(fingerprint(run=run_identity(cfg)))
        say(f"nodes: {nodes}")
        if ping > 0:
            pings = transport.ping(ping, ping_bytes)
            say(
                f"{ping} pings of {ping_bytes} bytes: median round trip "
                f"{np.median(pings['single']):.4f} s (one node), "
                f"{np.median(pings['broadcast']):.4f} s (all nodes at once)"
            )
        else:
            with app.compute_limits():
                coord.run()
        return _results(coord, transport, status, t0)
    except Exception as exc:  # recorded in results.json, then raised
        status = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, PartyUnavailable):
            unavailable = exc.party
        raise
    finally:
        result = _results(coord, transport, status, t0)
        if unavailable is not None:
            result["unavailable_party"] = unavailable
        _write_json(out_dir / "results.json", result)
        if coord.server is not None:
            final: dict[str, Any] = dict(app.coordinator_results(coord.server)[1])
            np.savez(out_dir / "result.npz", **final)
        _write_json(out_dir / "message_log.json", transport.log.summary())
        say(f"{status}; results in {out_dir}")


def _check_coarse_rounds(cfg: DeployConfig, app: Algorithm) -> None:
    """Refuse algorithms whose parties send each other messages (per-batch split learning)."""
    if app.peer_to_peer:
        raise ConfigError(
            f"{cfg.algorithm} sends messages between parties: per-batch "
            "split learning cannot run over Flower, where a ClientApp only answers the "
            "ServerApp and every message costs a SuperLink round trip; deploy it with "
            "fedviews' gRPC transport (fedviews launch / fedviews party)"
        )


def _results(
    coord: DeployCoordinator, transport: FlowerGridTransport, status: str, t0: float
) -> dict[str, Any]:
    res = coord.results()
    rounds = int(res.get("n_iter") or 0)
    train = float(res.get("train_seconds") or 0.0)
    return {
        "status": status,
        "seconds": round(time.perf_counter() - t0, 3),
        **res,
        "transport": "flower",
        "nodes": {p: str(n_id) for p, n_id in transport.nodes.items()},
        "seconds_per_round": round(train / rounds, 4) if rounds else None,
        "median_exchange_seconds": (
            round(transport.round_trip_seconds(), 4) if transport.exchanges else None
        ),
        # every Flower exchange of the run: [fedviews kind, messages sent at once, seconds]
        "exchanges": [[k, n, round(sec, 4)] for k, n, sec in transport.exchanges],
        **({"ping_seconds": transport.pings} if transport.pings else {}),
    }


def _run_config_path(rc: Mapping[str, Any], key: str) -> Path | None:
    v = str(rc.get(key, "") or "")
    return Path(v) if v else None


def _default_run_dir(cfg: DeployConfig) -> Path:
    return Path(cfg.output_dir) / f"{cfg.name}-flower"


server_app = ServerApp()


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    path = _run_config_path(rc, "deploy-config")
    if path is None:
        raise ConfigError(
            "the Flower run config needs deploy-config=PATH (flwr run ... -c "
            "\"deploy-config='/abs/path/deploy.toml'\")"
        )
    cfg = load_deploy_config(path)
    run_dir = _run_config_path(rc, "out-dir") or _default_run_dir(cfg)
    run_flower_coordinator(
        cfg,
        grid,
        run_dir / "coordinator",
        echo=_printer,
        resume=_run_config_path(rc, "resume"),
        ping=int(rc.get("ping", 0) or 0),
        ping_bytes=int(rc.get("ping-bytes", 0) or 0),
    )


# -- ClientApp side -----------------------------------------------------------


def _printer(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class FlowerNodeTransport(Transport):
    """A node's transport: answers the ServerApp; a party cannot send on its own."""

    def __init__(self, policy: PrivacyPolicy, roles: Mapping[str, str]) -> None:
        super().__init__(policy)
        self.local: dict[str, Party] = {}
        self._others = dict(roles)

    def register(self, party: Party) -> None:
        super().register(party)
        self.local[party.name] = party
        for name, role in self._others.items():
            self.roles.setdefault(name, role)

    def request(self, msg: Message) -> Message:
        raise ProtocolError(
            f"{msg.sender!r} tried to send {msg.kind!r} to {msg.receiver!r}: over Flower a "
            "party only answers the ServerApp, it cannot send its own messages (per-batch "
            "split learning such as Multi-VFL or APFed); deploy this algorithm with "
            "fedviews' gRPC transport (fedviews launch / fedviews party)"
        )

    def answer(self, data: bytes, coordinator: str) -> bytes:
        """Decode a request, let the party handle it, return the encoded reply."""
        msg = Message.decode(data)
        party = self.local.get(msg.receiver)
        if party is None:
            raise ProtocolError(
                f"a message for {msg.receiver!r} reached the node of {list(self.local)}"
            )
        if msg.sender != coordinator:
            raise PrivacyError(f"only the coordinator sends over Flower, not {msg.sender!r}")
        self._check_and_log(msg, len(data))
        t0 = time.perf_counter()
        try:
            reply = party.handle(msg)
        finally:
            self.log.handler_seconds[party.name] += time.perf_counter() - t0
        if reply.receiver != msg.sender or reply.sender != party.name:
            raise ProtocolError(f"party {party.name!r} replied with a misaddressed message")
        self._check_send(reply)
        wire = reply.encode()
        self._check_and_log(reply, len(wire))
        return wire


@dataclass(frozen=True)
class _NodeSettings:
    cfg: DeployConfig
    party: str
    data: Path
    out_dir: Path
    resume: Path | None


def _settings(context: Context) -> _NodeSettings:
    """This node's party, data file and folders, from its node config (or run config)."""
    nc, rc = context.node_config, context.run_config
    cfg_path = str(nc.get("config", "") or rc.get("deploy-config", "") or "")
    if not cfg_path:
        raise ConfigError(
            "no deployment config: set deploy-config in the run config or config=PATH "
            "in this node's --node-config"
        )
    cfg = load_deploy_config(cfg_path)
    parties = list(cfg.federation.parties)
    party = str(nc.get("party", "") or "")
    if not party and "partition-id" in nc:  # simulation engine: node k is party k
        k = int(nc["partition-id"])
        if not 0 <= k < len(parties):
            raise ConfigError(f"simulation node {k} has no party: the config has {parties}")
        party = parties[k]
    if not party:
        raise ConfigError(
            "this SuperNode does not say which party it is: start it with "
            "--node-config \"party='NAME' data='PATH'\""
        )
    if party not in parties:
        raise ConfigError(f"party {party!r} (node config) is not one of {parties}")
    run_dir = _run_config_path(rc, "out-dir") or _default_run_dir(cfg)
    data = str(nc.get("data", "") or "")
    if not data:
        data_dir = str(rc.get("data-dir", "") or "")
        if not data_dir:
            raise ConfigError(
                f"no data file for party {party!r}: add data='PATH' to its --node-config"
            )
        found = [Path(data_dir) / f"{party}.{ext}" for ext in SUFFIXES]
        data = str(next((f for f in found if f.is_file()), found[0]))
    out = str(nc.get("out", "") or "")
    resume = str(nc.get("resume", "") or "")
    return _NodeSettings(
        cfg,
        party,
        Path(data),
        Path(out) if out else run_dir / party,
        Path(resume) if resume else None,
    )


def _psi_snapshot(party: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The PSI state of a party: finished groups' rows, and the secrets of running ones."""
    meta: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for group, rows in party.psi_rows.items():
        arrays[f"rows/{group}"] = np.asarray(rows)
    for group, st in getattr(party, "_psi_state", {}).items():
        meta[f"psi/{group}"] = ",".join(f.name for f in dataclasses.fields(st))
        for f in dataclasses.fields(st):
            v = getattr(st, f.name)
            if isinstance(v, bytes):
                meta[f"psi/{group}/{f.name}"] = v
            else:
                arrays[f"psi/{group}/{f.name}"] = np.asarray(v)
    return meta, arrays


def _psi_restore(party: Any, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    from fedviews.privacy import _psi

    for name, v in arrays.items():
        if name.startswith("rows/"):
            party.psi_rows[name[len("rows/") :]] = v
    for name, fields in meta.items():
        if name.startswith("psi/") and name.count("/") == 1:
            group = name[len("psi/") :]
            values: dict[str, Any] = {
                f: meta[f"{name}/{f}"] if f"{name}/{f}" in meta else arrays[f"{name}/{f}"]
                for f in str(fields).split(",")
            }
            party._psi_state[group] = _psi._GroupState(**values)


class _Node:
    """One node's party with its transport; saved to / rebuilt from ``Context.state``.

    What a fresh process needs to continue as this party: the PSI state (its secrets
    are random, so it is stored, not replayed); the party's state after its last
    round message (the party's ``state_dict``, what a round checkpoint holds);
    and every other request it answered (``deploy:setup``, ``deploy:build``, an
    algorithm's set-up or test-phase messages), replayed in order around that state:
    the ones before the last round message, then the state, then the ones after it.
    """

    def __init__(self, s: _NodeSettings) -> None:
        self.settings = s
        self.quiet = False
        say = _print_to(s.party, _printer)

        def echo(line: str) -> None:
            if not self.quiet:
                say(line)

        self.app = get_algorithm_spec(s.cfg.algorithm)
        self.transport = FlowerNodeTransport(
            session_policy(s.cfg),
            {**s.cfg.roles(), s.cfg.federation.coordinator: "coordinator"},
        )
        self.party = DeployParty(s.cfg, s.party, load_party_data(s.data), s.out_dir, echo, s.resume)
        self.transport.register(self.party)
        self.replay: list[bytes] = []  # requests replayed on a rebuild
        self.snapshot_at = 0  # replay[:snapshot_at] came before the last round message
        self.new_snapshot = False
        self.generation = 0

    def handle(self, data: bytes) -> bytes:
        msg = Message.decode(data)
        with self.app.compute_limits():
            wire = self.transport.answer(data, self.settings.cfg.federation.coordinator)
        if msg.kind.startswith("psi:"):
            pass  # kept by _psi_snapshot
        elif msg.round > 0 and msg.kind == self.app.round_message(self.party.role):
            self.snapshot_at, self.new_snapshot = len(self.replay), True
        else:
            self.replay.append(data)
        return wire

    # -- Context.state -------------------------------------------------------
    def save(self, state: RecordDict) -> None:
        """Write everything a fresh process needs to continue as this party."""
        self.generation += 1
        p = self.party
        log_ = self.transport.log
        meta: dict[str, Any] = {
            "generation": self.generation,
            "party": p.name,
            "shown": int(getattr(p, "_shown", 0)),
            "log": json.dumps(log_.to_records()),
            "handler_seconds": float(log_.handler_seconds.get(p.name, 0.0)),
            "replay": len(self.replay),
            "snapshot_at": self.snapshot_at,
        }
        for i, wire in enumerate(self.replay):
            meta[f"replay/{i}"] = wire
        psi_meta, psi_arrays = _psi_snapshot(p)
        meta.update(psi_meta)
        state[_STATE] = ConfigRecord(meta)
        state[_STATE_PSI] = ArrayRecord(
            {k: Array(np.ascontiguousarray(v)) for k, v in psi_arrays.items()}
        )
        if self.new_snapshot:  # only at a round message: later requests are replayed on it
            algo = p.algo.state_dict()
            state[_STATE_ALGO] = ArrayRecord(
                {k: Array(np.ascontiguousarray(v)) for k, v in algo.items()}
            )
            self.new_snapshot = False

    def restore(self, state: RecordDict) -> None:
        """Continue from :meth:`save`: PSI state, replayed requests around the round state, log."""
        meta = state.config_records[_STATE]
        p = self.party
        if str(meta["party"]) != p.name:
            raise ConfigError(f"this node served party {meta['party']!r} and now claims {p.name!r}")
        psi = state.array_records.get(_STATE_PSI, ArrayRecord())
        _psi_restore(p, dict(meta), {k: a.numpy() for k, a in psi.items()})
        wires = []
        for i in range(_int(meta["replay"])):
            wire = meta[f"replay/{i}"]
            assert isinstance(wire, bytes)
            wires.append(wire)
        self.snapshot_at = _int(meta["snapshot_at"])
        algo = state.array_records.get(_STATE_ALGO)
        self.quiet = True  # the replay repeats what this party already said
        try:
            for i, wire in enumerate(wires):
                if i == self.snapshot_at and algo is not None:
                    self._load(algo)
                with self.app.compute_limits():
                    p.handle(Message.decode(wire))
                self.replay.append(wire)
            if len(wires) == self.snapshot_at and algo is not None:
                self._load(algo)
        finally:
            self.quiet = False
        p._shown = _int(meta["shown"])
        for rec in json.loads(str(meta["log"])):
            self.transport.log.record(
                LogEntry(
                    sender=rec["sender"],
                    receiver=rec["receiver"],
                    round=int(rec["round"]),
                    kind=rec["kind"],
                    arrays=tuple(rec["arrays"]),
                    shapes=tuple(tuple(s) for s in rec["shapes"]),
                    nbytes=int(rec["nbytes"]),
                )
            )
        seconds = meta["handler_seconds"]
        assert isinstance(seconds, float)
        self.transport.log.handler_seconds[p.name] = seconds
        self.generation = _int(meta["generation"])

    def _load(self, algo: ArrayRecord) -> None:
        if self.party.algo is None:
            raise ProtocolError(f"{self.party.name!r}: round state saved before deploy:build")
        self.party.algo.load_state({k: a.numpy() for k, a in algo.items()})


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"corrupt fedviews node state: expected an integer, got {v!r}")
    return v


_LIVE: dict[tuple[int, int], _Node] = {}
_LIVE_LOCK = threading.Lock()


def _node_for(context: Context) -> _Node:
    """This node's party: the live object if this process holds the current one, else rebuilt."""
    key = (int(context.run_id), int(context.node_id))
    meta = context.state.config_records.get(_STATE)
    generation = 0 if meta is None else _int(meta["generation"])
    with _LIVE_LOCK:
        node = _LIVE.get(key)
    if node is not None and node.generation == generation:
        return node
    node = _Node(_settings(context))
    if meta is not None:
        node.restore(context.state)
    with _LIVE_LOCK:
        _LIVE[key] = node
    return node


def _forget(context: Context) -> None:
    with _LIVE_LOCK:
        _LIVE.pop((int(context.run_id), int(context.node_id)), None)


client_app = ClientApp()


@client_app.query(HELLO)
def _on_hello(msg: FlowerMessage, context: Context) -> FlowerMessage:
    try:
        s = _settings(context)
        hello = ConfigRecord({"party": s.party, "run": fingerprint(run=run_identity(s.cfg))})
        return FlowerMessage(RecordDict({"hello": hello}), reply_to=msg)
    except Exception as exc:  # reported to the ServerApp, which raises it
        return FlowerMessage(_error_content(exc), reply_to=msg)


@client_app.query(PING)
def _on_ping(msg: FlowerMessage, context: Context) -> FlowerMessage:
    return FlowerMessage(pack(unpack(msg.content)), reply_to=msg)


@client_app.query(ACTION)
def _on_message(msg: FlowerMessage, context: Context) -> FlowerMessage:
    try:
        node = _node_for(context)
        wire = node.handle(unpack(msg.content))
        node.save(context.state)
        if getattr(node.party, "finished", False):
            _forget(context)
        return FlowerMessage(pack(wire), reply_to=msg)
    except Exception as exc:  # reported to the ServerApp, which raises it
        _forget(context)  # the live party may be half-updated: rebuild from the state
        if not isinstance(exc, FedViewsError):
            log.exception("fedviews ClientApp failed")
        return FlowerMessage(_error_content(exc), reply_to=msg)


# -- the Flower app project -----------------------------------------------------

_PYPROJECT = """\
# A Flower app whose ServerApp and ClientApp are fedviews' deployed session.
# fedviews (with the flower extra) must be installed where the SuperLink and the
# SuperNodes run: this app ships no code of its own.
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedviews-flower"
version = "1.0.0"
description = "fedviews deployed session (MMVFL, ...) as a Flower ServerApp and ClientApp"
license = "MIT"
dependencies = []

[tool.flwr.app]
publisher = "fedviews"

[tool.flwr.app.components]
serverapp = "fedviews.deploy._flower:server_app"
clientapp = "fedviews.deploy._flower:client_app"

[tool.flwr.app.config]
deploy-config = {deploy_config}
out-dir = {out_dir}
data-dir = {data_dir}
resume = ""
ping = 0        # > 0: only time this many echo round trips (no session)
ping-bytes = 0  # payload of each ping, each way
"""


def write_flower_app(
    directory: str | Path,
    *,
    deploy_config: str | Path = "",
    out_dir: str | Path = "",
    data_dir: str | Path = "",
) -> Path:
    """Write the Flower app project (a ``pyproject.toml``) that ``flwr run`` submits.

    The paths become the run config defaults (make them absolute: the ServerApp and
    ClientApps do not run in this folder); ``flwr run -c`` overrides them.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)

    def toml_str(v: str | Path) -> str:
        return json.dumps(str(Path(v).absolute()) if str(v) else "")

    (d / "pyproject.toml").write_text(
        _PYPROJECT.format(
            deploy_config=toml_str(deploy_config),
            out_dir=toml_str(out_dir),
            data_dir=toml_str(data_dir),
        )
    )
    return d


def _flwr_bin(name: str) -> str:
    """A Flower command of this environment (next to this Python), else from PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.is_file() else shutil.which(name)
    if found is None:
        raise MissingDependency(name, "flower")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1.0):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ProtocolError(
                    f"the Flower SuperLink did not start on port {port} (see its log)"
                ) from None
            time.sleep(0.2)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the process groups that :func:`launch_flower` started (SIGTERM, then SIGKILL)."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def launch_flower(
    config: str | Path,
    run_dir: str | Path,
    *,
    engine: str = "deployment",
    data_dir: str | Path | None = None,
    timeout: float = 900.0,
    echo: Printer | None = None,
    superexec_poll: float = 0.05,
    ping: int = 0,
    ping_bytes: int = 0,
) -> dict[str, Any]:
    """Run a deployment config through Flower on this machine and return ``results.json``.

    ``engine="deployment"``: a ``flower-superlink --insecure`` and one
    ``flower-supernode --insecure --node-config "party=... data=... out=..."`` per
    party; ``engine="simulation"``: a ``flower-superlink --simulation`` whose
    simulation engine (Ray, ``flwr[simulation]``) runs one virtual node per party
    (node ``k`` is party ``k``, data from ``data_dir``). Then ``flwr run`` submits the
    app (:func:`write_flower_app`) and streams its log. Everything lives in
    ``run_dir`` (``coordinator/``, one folder per party, ``logs/``, ``flwr-home/``);
    data files come from ``data_dir`` (``<party>.npz``/``.csv``) or are written from
    the config's ``[data]``. The processes are stopped at the end. ``ping``,
    ``ping_bytes``: time echo round trips instead of running the session (run config
    ``ping``, ``ping-bytes``).
    """
    if engine not in ("deployment", "simulation"):
        raise ConfigError(f"engine must be 'deployment' or 'simulation', not {engine!r}")
    config = Path(config).absolute()
    run_dir = Path(run_dir).absolute()
    cfg = load_deploy_config(config)
    say = echo or print
    run_dir.mkdir(parents=True, exist_ok=True)
    if data_dir is None:
        data_dir = run_dir / "data"
        write_demo_data(cfg, data_dir)
    data_dir = Path(data_dir).absolute()
    files = {}
    for p in cfg.federation.parties:
        found = [data_dir / f"{p}.{ext}" for ext in SUFFIXES]
        files[p] = next((f for f in found if f.is_file()), None)
        if files[p] is None:
            raise ConfigError(f"no data file {data_dir / p}.npz, .csv or .parquet for party {p!r}")
    app_dir = write_flower_app(
        run_dir / "flower-app", deploy_config=config, out_dir=run_dir, data_dir=data_dir
    )
    home, logs = run_dir / "flwr-home", run_dir / "logs"
    home.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    port = _free_port()
    connection = [
        "[superlink]",
        'default = "fedviews-loopback"',
        "[superlink.fedviews-loopback]",
        f'address = "127.0.0.1:{port}"',
        "insecure = true",
    ]
    if engine == "simulation":
        n = len(cfg.federation.parties)
        cpus = max(1, min(n, os.cpu_count() or 1))
        connection += [
            f"options.num-supernodes = {n}",
            "options.backend.client-resources.num-cpus = 1",
            f"options.backend.init-args.num-cpus = {cpus}",
        ]
    (home / "config.toml").write_text("\n".join(connection) + "\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": str(superexec_poll),
        "RAY_DISABLE_USAGE_STATS": "1",
        "RAY_DEDUP_LOGS": "0",
        "PYTHONUNBUFFERED": "1",
    }
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=run_dir,
                start_new_session=True,  # its own process group: stopped with its children
            )
        procs.append(proc)
        return proc

    link = [
        _flwr_bin("flower-superlink"),
        "--insecure",
        "--disable-runtime-dependency-installation",
    ]
    if engine == "simulation":
        link.append("--simulation")
    names = "|".join(map(re.escape, [cfg.federation.coordinator, *files]))
    mine = re.compile(rf"\[({names})\] ")
    try:
        superlink = start("superlink", [*link, "--host", "127.0.0.1", "--port", str(port)])
        _wait_http(port, superlink, 60.0)
        if engine == "deployment":
            for p, f in files.items():
                node = {"party": p, "data": str(f), "out": str(run_dir / p)}
                if any("'" in v for v in node.values()):
                    raise ConfigError(f"paths with a quote cannot go into a node config: {node}")
                start(
                    f"supernode-{p}",
                    [
                        _flwr_bin("flower-supernode"),
                        "--insecure",
                        "--superlink",
                        f"127.0.0.1:{port}",
                        "--port",
                        str(_free_port()),
                        "--node-config",
                        " ".join(f"{k}='{v}'" for k, v in node.items()),
                    ],
                )
        say(f"[flower] {engine} engine on 127.0.0.1:{port}; logs in {logs}")
        run = subprocess.Popen(
            [_flwr_bin("flwr"), "run", str(app_dir), "fedviews-loopback", "--stream"]
            + (["-c", f"ping={int(ping)} ping-bytes={int(ping_bytes)}"] if ping else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=run_dir,
            start_new_session=True,
        )
        procs.append(run)
        timer = threading.Timer(timeout, lambda: _stop([run]))
        timer.start()
        try:
            assert run.stdout is not None
            with (logs / "flwr-run.log").open("wb") as out:
                for raw in run.stdout:
                    out.write(raw)
                    line = raw.decode(errors="replace").rstrip()
                    hit = mine.search(line)
                    if hit is not None:
                        say(line[hit.start() :])
            run.wait()
        finally:
            timer.cancel()
    finally:
        _stop(procs)
    results = run_dir / cfg.federation.coordinator / "results.json"
    if not results.is_file():
        tail = (logs / "flwr-run.log").read_text(errors="replace")[-3000:]
        raise ProtocolError(f"the Flower run wrote no {results}; end of its log:\n{tail}")
    result: dict[str, Any] = json.loads(results.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m fedviews.deploy._flower {app,launch} ...`` (see ``--help``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m fedviews.deploy._flower")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("app", help="write the Flower app project for `flwr run`")
    w.add_argument("directory")
    w.add_argument("--config", default="", help="deployment TOML (run config deploy-config)")
    w.add_argument("--out", default="", help="run folder (run config out-dir)")
    w.add_argument("--data-dir", default="", help="simulation: <data-dir>/<party>.npz")
    lo = sub.add_parser("launch", help="run a deployment config through Flower on loopback")
    lo.add_argument("config")
    lo.add_argument("--out", required=True, help="run folder")
    lo.add_argument("--engine", choices=("deployment", "simulation"), default="deployment")
    lo.add_argument("--data-dir", default=None, help="<party>.npz files (default: from [data])")
    lo.add_argument("--ping", type=int, default=0, help="only time this many echo round trips")
    lo.add_argument("--ping-bytes", type=int, default=0, help="payload of each ping")
    args = ap.parse_args(argv)
    if args.cmd == "app":
        path = write_flower_app(
            args.directory, deploy_config=args.config, out_dir=args.out, data_dir=args.data_dir
        )
        print(f"wrote {path / 'pyproject.toml'}; run it with: flwr run {path} CONNECTION --stream")
        return 0
    try:
        res = launch_flower(
            args.config,
            args.out,
            engine=args.engine,
            data_dir=args.data_dir,
            ping=args.ping,
            ping_bytes=args.ping_bytes,
        )
    except FedViewsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in res.items() if k not in ("objective", "exchanges")}))
    return 0 if res.get("status") == "ok" else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
