"""A Flower node's party, kept across Flower's per-message ClientApp processes.

Flower's deployment engine starts a fresh ``flwr-clientapp`` process for **every**
message, so no Python object survives. A node therefore keeps what it needs in its
``Context.state`` (which Flower hands from message to message, and which stays on
the node) and rebuilds its party from its data file when needed: the algorithm
party's state after its last round message (the deploy app's ``state_dict``: what a
round checkpoint holds, which ``--resume`` already relies on); every other request it answered (``deploy:setup``,
``deploy:build``, an algorithm's set-up or test-phase messages), replayed in order
around that state; and its message log. Where the process survives (the simulation
engine's Ray actors) a module-level cache keyed by ``(run_id, node_id)`` with a
generation counter skips the rebuild. This fits the coarse-round algorithms (MMVFL:
one ``update`` per party and round); an algorithm whose party keeps state between two
messages of a round that its ``state_dict`` does not hold would need it there.
What must not be drawn again is kept as it is, not replayed: the party's
secure-aggregation keys (:meth:`SecureSum.private_state`: a fresh key would no longer
pair with its peers', the masks would not cancel, and its record of what it masked
guards against masking one round twice) and its defense's private draw (``entropy``:
a second draw of randomized labels or noise would spend the privacy budget twice).
They stay in ``Context.state`` on the node; no message carries them.
Nor does the PSI run on a node: without end-to-end keys its chains cannot be sealed
(:func:`refuse_psi`), so the parties' files come pre-aligned (``alignment = "none"``).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, PrivacyError, ProtocolError, require

require("flwr", "flower")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict  # noqa: E402

from fedviews.deploy._config import DeployConfig, load_deploy_config  # noqa: E402
from fedviews.deploy._data import SUFFIXES, load_party_data  # noqa: E402
from fedviews.deploy._flower_transport import _GRPC_HINT  # noqa: E402
from fedviews.deploy._flower_wire import NODE_CONFIG_HINT  # noqa: E402
from fedviews.deploy._roles import DeployParty, session_policy  # noqa: E402
from fedviews.deploy._session import _print_to  # noqa: E402
from fedviews.federation import (  # noqa: E402
    SECAGG_KINDS,
    E2EKeys,
    LogEntry,
    Message,
    Party,
    PrivacyPolicy,
    SecureSum,
    SecureSumParty,
    TLSFiles,
    Transport,
    attributed,
    get_algorithm_spec,
)

#: why the PSI does not run on Flower
PSI_NEEDS_SEALED_CHAINS = (
    'federation.alignment = "psi" cannot run on Flower: its nodes have no end-to-end keys, '
    "so the PSI chains cannot be sealed and the ServerApp could have a node re-blind a "
    "dictionary of guessed IDs (and so learn which of them the party holds). Pre-align the "
    "files of every alignment group (its parties the same sample IDs; H-FedMV's and "
    "S-FedMV's clients, each a group of its own, need nothing) and set "
    'federation.alignment = "none" (an override: federation.alignment=none), or deploy '
    "with " + _GRPC_HINT + " and TLS, which seals the chains"
)

_STATE, _STATE_ALGO = "fedviews", "fedviews.algo"


def refuse_psi(cfg: DeployConfig) -> None:
    """A :class:`ConfigError` for a config that aligns by PSI (:data:`PSI_NEEDS_SEALED_CHAINS`):
    checked by the ServerApp and by every node on its own config, so that a node never
    serves as an oracle whatever the ServerApp sends."""
    if cfg.federation.alignment == "psi":
        raise ConfigError(PSI_NEEDS_SEALED_CHAINS)


def printer(line: str) -> None:
    """Where the ServerApp and the ClientApps print: Flower shows their stderr."""
    print(line, file=sys.stderr, flush=True)


def _text(config: Mapping[str, Any], key: str) -> str:
    return str(config.get(key, "") or "")


#: the module of a Flower app written by ``fedviews flower app`` (its components' home)
APP_MODULE = "fedviews_flower_app"


def run_config_path(rc: Mapping[str, Any], key: str) -> Path | None:
    """The path under ``key`` of a Flower run config; None where it is empty.

    A relative path is a file of the Flower app (e.g. its ``deploy.toml``): it is found
    next to the app's module :data:`APP_MODULE`, in the app's folder on this host.
    """
    if not (v := _text(rc, key)):
        return None
    path = Path(v)
    if path.is_absolute():
        return path
    # Flower put the app's folder on sys.path (and the simulation engine on its Ray
    # workers' PYTHONPATH, where the ClientApp arrives without its module imported)
    spec = importlib.util.find_spec(APP_MODULE)
    where = None if spec is None else spec.origin
    if where is None:
        raise ConfigError(
            f"run config {key}={v!r} is relative: it names a file of the Flower app, but "
            f"this app was not written by `fedviews flower app` (no module {APP_MODULE}); "
            "give an absolute path"
        )
    return Path(where).parent / path


def node_config_path(nc: Mapping[str, Any], key: str) -> Path | None:
    """The path under ``key`` of this node's own config (relative: to its working folder)."""
    return Path(v) if (v := _text(nc, key)) else None


def run_dir(rc: Mapping[str, Any], cfg: DeployConfig) -> Path:
    """The run folder: run config ``out-dir``, else ``<output_dir>/<name>-flower``."""
    return run_config_path(rc, "out-dir") or Path(cfg.output_dir) / f"{cfg.name}-flower"


#: the node config key by which a node takes the paths its node config leaves out from the
#: run config (``fedviews flower launch`` sets it for the nodes it starts)
RUN_CONFIG_PATHS = "run-config-paths"


class _RunPaths:
    """The run config's paths as a node may take them: only where its node config opts in
    (:data:`RUN_CONFIG_PATHS`) or it is a node of the simulation engine (``partition-id``:
    a virtual node of the SuperLink's host, without a node config of its own). Whoever
    submits the run writes the run config: a node that took its paths from it would read
    and write the files that the submitter picks."""

    def __init__(self, nc: Mapping[str, Any], rc: Mapping[str, Any]) -> None:
        self.rc = rc
        opt_in = nc.get(RUN_CONFIG_PATHS, False)
        if isinstance(opt_in, str) and opt_in.lower() in ("true", "false"):
            opt_in = opt_in.lower() == "true"
        if not isinstance(opt_in, bool):
            raise ConfigError(f"node config {RUN_CONFIG_PATHS}={opt_in!r}: give true or false")
        self.trusted = opt_in or "partition-id" in nc

    def text(self, key: str, own: str) -> str:
        """The run config's ``key`` for a node config without ``own=`` ("" where unset).

        Raises
        ------
        ConfigError
            Where the run config sets it and this node does not take the run config's paths.
        """
        value = _text(self.rc, key)
        if value and not self.trusted:
            raise ConfigError(
                f"this node's config has no {own}= and it takes no path from the run config "
                f"(its {key}={value!r} is chosen by whoever submits the run): add "
                f"{own}='PATH' to its --node-config, or {RUN_CONFIG_PATHS}=true to take the "
                "run config's"
            )
        return value

    def path(self, key: str, own: str) -> Path | None:
        """:meth:`text` as a path (:func:`run_config_path`); None where unset."""
        return run_config_path(self.rc, key) if self.text(key, own) else None


@dataclass(frozen=True)
class NodeSettings:
    cfg: DeployConfig
    party: str
    data: Path
    out_dir: Path
    resume: Path | None
    #: the folder of the node's fedviews certificate (``certs=`` of its node config, else the
    #: run config's ``certs-dir``): it signs the node's end-to-end and secure-aggregation keys
    certs: Path | None


def node_settings(context: Context) -> NodeSettings:
    """This node's party, data file and folders, from its node config (or, where it opts in
    or is a simulation node, the run config: :class:`_RunPaths`)."""
    nc, rc = context.node_config, context.run_config
    run = _RunPaths(nc, rc)
    cfg_path = node_config_path(nc, "config") or run.path("deploy-config", "config")
    if cfg_path is None:
        raise ConfigError(
            "no deployment config: set deploy-config in the run config or config=PATH "
            "in this node's --node-config"
        )
    cfg = load_deploy_config(cfg_path)
    refuse_psi(cfg)
    parties = list(cfg.federation.parties)
    party = _text(nc, "party")
    if not party and "partition-id" in nc:  # simulation engine: node k is party k
        k = int(nc["partition-id"])
        if not 0 <= k < len(parties):
            raise ConfigError(f"simulation node {k} has no party: the config has {parties}")
        party = parties[k]
    if not party:
        raise ConfigError(
            "this SuperNode does not say which party it is: start it with " + NODE_CONFIG_HINT
        )
    if party not in parties:
        raise ConfigError(f"party {party!r} (node config) is not one of {parties}")
    data = _text(nc, "data")
    if not data:
        data_dir = run.text("data-dir", "data")
        if not data_dir:
            raise ConfigError(
                f"no data file for party {party!r}: add data='PATH' to its --node-config"
            )
        found = [Path(data_dir) / f"{party}.{ext}" for ext in SUFFIXES]
        data = str(next((f for f in found if f.is_file()), found[0]))
    out = node_config_path(nc, "out")
    if out is None:
        run.text("out-dir", "out")  # (refused where it is set and this node takes no path)
        out = run_dir(rc, cfg) / party
    resume = node_config_path(nc, "resume")
    if resume is None and "out" not in nc and (killed := run.path("resume", "resume")):
        # the killed run's folder of this party, beside its coordinator's
        resume = killed.parent / party
    certs = _text(nc, "certs") or run.text("certs-dir", "certs")
    return NodeSettings(cfg, party, Path(data), out, resume, Path(certs) if certs else None)


def _arrays(values: Mapping[str, np.ndarray], party: str) -> ArrayRecord:
    """``values`` (a party's ``state_dict``) as Flower arrays, every shape and dtype kept.

    Flower's :class:`~flwr.app.Array` carries any array :func:`numpy.save` writes without
    pickle (0-d, empty, non-contiguous, strings, any numeric dtype); an array it cannot
    carry (objects) is a :class:`ProtocolError` naming it, never a silent change.
    """
    out = {}
    for k, v in values.items():
        a = np.asarray(v)
        if a.dtype.hasobject:
            raise ProtocolError(
                f"{party!r}: the state array {k!r} holds Python objects ({a.dtype}), which "
                "Flower's Context.state cannot keep without pickle"
            )
        out[k] = Array(a)
    return ArrayRecord(out)


def _numpy(record: ArrayRecord, party: str) -> dict[str, np.ndarray]:
    """The arrays :func:`_arrays` stored, each checked against its recorded shape and dtype."""
    out = {}
    for k, arr in record.items():
        a = arr.numpy()
        if a.shape != tuple(arr.shape) or str(a.dtype) != arr.dtype:
            raise ProtocolError(
                f"corrupt fedviews node state of {party!r}: {k!r} is {a.dtype}{list(a.shape)}, "
                f"recorded as {arr.dtype}{list(arr.shape)}"
            )
        out[k] = a
    return out


class _Node:
    """One node's party with its transport; saved to / rebuilt from ``Context.state``.

    The requests it replays (see the module docstring) come in order around the round
    state: the ones before the last round message, then the state, then the ones after.
    """

    def __init__(self, s: NodeSettings) -> None:
        self.settings = s
        self.quiet = False
        say = _print_to(s.party, printer)

        def echo(line: str) -> None:
            if not self.quiet:
                say(line)

        self.app = get_algorithm_spec(s.cfg.algorithm)
        self.transport = FlowerNodeTransport(
            session_policy(s.cfg),
            {**s.cfg.roles(), s.cfg.federation.coordinator: "coordinator"},
        )
        if s.certs is not None:  # its secure-aggregation keys are signed and checked
            self.transport.tls = TLSFiles.from_dir(s.certs, s.party)
        self.party = DeployParty(s.cfg, s.party, load_party_data(s.data), s.out_dir, echo, s.resume)
        self.transport.register(self.party)
        self.replay: list[bytes] = []  # requests replayed on a rebuild
        self.snapshot_at = 0  # replay[:snapshot_at] came before the last round message
        self.new_snapshot = False
        self.generation = 0

    def handle(self, data: bytes) -> bytes:
        with self.app.compute_limits():
            wire = self.transport.answer(data, self.settings.cfg.federation.coordinator)
        msg = Message.peek(data)  # answered, so readable; a peer's is sealed: the header only
        if self.app.peer_to_peer:  # never rebuilt (_flower_relay): nothing to replay
            return wire
        if msg.round > 0 and msg.kind == self.app.round_message(self.party.role):
            self.snapshot_at, self.new_snapshot = len(self.replay), True
        elif msg.kind not in SECAGG_KINDS:  # the keys are kept, not drawn again
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
            "entropy": "" if p.entropy is None else str(p.entropy),
            "secagg": "" if (sums := self._secure_sum()) is None else sums.private_state(),
        }
        for i, wire in enumerate(self.replay):
            meta[f"replay/{i}"] = wire
        state[_STATE] = ConfigRecord(meta)
        if self.new_snapshot:  # only at a round message: later requests are replayed on it
            state[_STATE_ALGO] = _arrays(p.algo.state_dict(), p.name)
            self.new_snapshot = False

    def restore(self, state: RecordDict) -> None:
        """Continue from :meth:`save`: replayed requests around the round state, log."""
        meta = state.config_records[_STATE]
        p = self.party
        if str(meta["party"]) != p.name:
            raise ConfigError(f"this node served party {meta['party']!r} and now claims {p.name!r}")
        wires = []
        for i in range(_int(meta["replay"])):
            wire = meta[f"replay/{i}"]
            assert isinstance(wire, bytes)
            wires.append(wire)
        self.snapshot_at = _int(meta["snapshot_at"])
        algo = state.array_records.get(_STATE_ALGO)
        entropy, secure = str(meta["entropy"]), str(meta["secagg"])
        p.entropy = int(entropy) if entropy else None  # deploy:setup keeps this draw
        self.quiet = True  # the replay repeats what this party already said
        try:
            for i, wire in enumerate(wires):
                if i == self.snapshot_at and algo is not None:
                    self._load(algo)
                secure = self._keep_keys(secure)
                with self.app.compute_limits():
                    p.handle(Message.decode(wire))
                self.replay.append(wire)
            if len(wires) == self.snapshot_at and algo is not None:
                self._load(algo)
            self._keep_keys(secure)
        finally:
            self.quiet = False
        p._shown = _int(meta["shown"])
        for rec in json.loads(str(meta["log"])):
            rec.update(arrays=tuple(rec["arrays"]), shapes=tuple(map(tuple, rec["shapes"])))
            rec["meta"] = tuple(rec.get("meta", ()))
            self.transport.log.record(LogEntry(**rec))
        seconds = meta["handler_seconds"]
        assert isinstance(seconds, float)
        self.transport.log.handler_seconds[p.name] = seconds
        self.generation = _int(meta["generation"])

    def _keep_keys(self, secure: str) -> str:
        """Give the algorithm party its kept secure-aggregation keys once ``deploy:build``
        has built it; what is still to give."""
        if secure and isinstance(self.party.algo, SecureSumParty):
            self.party.algo.secure_sum = SecureSum.from_private_state(
                self.party.name, secure, self.transport.tls
            )
            return ""
        return secure

    def _secure_sum(self) -> SecureSum | None:
        algo = self.party.algo
        return algo.secure_sum if isinstance(algo, SecureSumParty) else None

    def _load(self, algo: ArrayRecord) -> None:
        if self.party.algo is None:
            raise ProtocolError(f"{self.party.name!r}: round state saved before deploy:build")
        self.party.algo.load_state(_numpy(algo, self.party.name))


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ProtocolError(f"corrupt fedviews node state: expected an integer, got {v!r}")
    return v


_LIVE: dict[tuple[int, int], _Node] = {}
_LIVE_LOCK = threading.Lock()


def node_for(context: Context) -> _Node:
    """This node's party: the live object if this process holds the current one, else rebuilt."""
    key = (int(context.run_id), int(context.node_id))
    meta = context.state.config_records.get(_STATE)
    generation = 0 if meta is None else _int(meta["generation"])
    with _LIVE_LOCK:
        node = _LIVE.get(key)
    if node is not None and node.generation == generation:
        return node
    node = _Node(node_settings(context))
    if meta is not None:
        node.restore(context.state)
    with _LIVE_LOCK:
        _LIVE[key] = node
    return node


def forget(context: Context) -> None:
    """Drop this node's live party: the next message rebuilds it from ``Context.state``."""
    with _LIVE_LOCK:
        _LIVE.pop((int(context.run_id), int(context.node_id)), None)


class FlowerNodeTransport(Transport):
    """A node's transport: answers the ServerApp; with end-to-end keys (:attr:`e2e`) and a
    way to the ServerApp (:attr:`outbox`, set while a handler runs), a party's own messages
    go to other parties sealed, and the peers' messages relayed to it are opened here."""

    def __init__(self, policy: PrivacyPolicy, roles: Mapping[str, str]) -> None:
        super().__init__(policy)
        self._others = dict(roles)
        #: who is the coordinator (``roles`` names it with the role ``"coordinator"``)
        self.coordinator = next((p for p, r in roles.items() if r == "coordinator"), "")
        #: this party's end-to-end keys (per-batch algorithms; see :mod:`._flower_relay`)
        self.e2e: E2EKeys | None = None
        #: this party's fedviews certificate: with it, the party signs its secure-aggregation
        #: key and checks its peers' (:class:`~fedviews.federation.SecureSum`), as over gRPC
        self.tls: TLSFiles | None = None
        #: hands sealed requests to the ServerApp and returns their sealed replies
        self.outbox: Callable[[list[bytes]], list[bytes]] | None = None

    def register(self, party: Party) -> None:
        super().register(party)
        for name, role in self._others.items():
            self.roles.setdefault(name, role)

    def request(self, msg: Message) -> Message:
        return self.request_many([msg])[0]

    def request_many(self, msgs: list[Message]) -> list[Message]:
        """Seal every message for its receiver, have the ServerApp relay them, open and check
        the replies (sender, receiver, kind, round, policy) and log both legs."""
        if self.e2e is None or self.outbox is None:
            raise ProtocolError(
                f"{msgs[0].sender!r} tried to send {msgs[0].kind!r} to {msgs[0].receiver!r} "
                "outside a handler or without end-to-end keys: over Flower a party sends "
                "its own messages only while it answers one, sealed for the receiver"
            )
        wires = []
        for m in msgs:
            if m.receiver not in self.roles or m.receiver == self.coordinator:
                raise ProtocolError(
                    f"{m.sender!r} cannot send {m.kind!r} to {m.receiver!r} over Flower: "
                    "a party sends its own messages to the other parties only"
                )
            self.check_send(m)
            wire = bytes(self.e2e.seal(m))
            self._check_and_log(m, len(wire))
            wires.append(wire)
        got = self.outbox(wires)
        if len(got) != len(msgs):
            raise ProtocolError(
                f"the ServerApp brought {len(got)} replies to {len(msgs)} messages",
                party=self.coordinator,
            )
        replies = []
        for m, data in zip(msgs, got, strict=True):
            with attributed(m.receiver, f"the reply to {m.kind!r}"):  # as gRPC's relayed ones
                reply = self.e2e.open(data)  # PrivacyError if altered, forged or replayed
                self._check_reply(m, reply)
                self._check_and_log(reply, len(data))
            replies.append(reply)
        return replies

    def answer(self, data: bytes, coordinator: str) -> bytes:
        """Decode a request (open it, if a peer sealed it), let the party handle it, return
        the encoded reply (sealed for a peer). What cannot be read names the ServerApp
        (``coordinator``), which sent it; a peer's sealed message opens with the key of the
        sender it claims only (:meth:`E2EKeys.open`), and is then that sender's."""
        with attributed(coordinator, "a request"):
            head = Message.peek(data)
        peer = head.sender != coordinator
        if peer and self.e2e is None:
            raise PrivacyError(f"only the coordinator sends over Flower, not {head.sender!r}")
        if peer and self.e2e is not None:
            msg = self.e2e.open(data)
        else:
            with attributed(coordinator, "a request"):
                msg = Message.decode(data)
        with attributed(msg.sender, "a request"):
            party = self.local.get(msg.receiver)
            if party is None:
                raise ProtocolError(
                    f"a message for {msg.receiver!r} reached the node of {list(self.local)}"
                )
            self._check_request(msg)
            self._check_and_log(msg, len(data))
        reply = self._handle(party, msg)
        self.check_send(reply)
        wire = bytes(self.e2e.seal(reply)) if peer and self.e2e is not None else reply.encode()
        self._check_and_log(reply, len(wire))
        return wire
