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
Secure aggregation cannot be rebuilt this way: a party's fresh key would no longer pair
with the keys its peers hold, so the masks would not cancel. A node refuses it (and
``launch_flower`` refuses it with the deployment engine) instead of sending a wrong sum.
Nor does the PSI run on a node: without end-to-end keys its chains cannot be sealed
(:func:`refuse_psi`), so the parties' files come pre-aligned (``alignment = "none"``).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, ProtocolError, require

require("flwr", "flower")

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, RecordDict  # noqa: E402

from fedviews.deploy._config import DeployConfig, load_deploy_config  # noqa: E402
from fedviews.deploy._data import SUFFIXES, load_party_data  # noqa: E402
from fedviews.deploy._flower_transport import _GRPC_HINT, FlowerNodeTransport  # noqa: E402
from fedviews.deploy._roles import DeployParty, session_policy  # noqa: E402
from fedviews.deploy._session import _print_to  # noqa: E402
from fedviews.federation import SECAGG_KINDS, LogEntry, Message, get_algorithm_spec  # noqa: E402

#: why a party under secure aggregation cannot be rebuilt from its node state
SECAGG_NEEDS_A_LIVE_PARTY = (
    'secure aggregation ([defense] kind = "secagg") needs each party\'s process to live '
    "through the run (its key pairs with every peer's); Flower's deployment engine starts a "
    "new ClientApp process for every message: use the simulation engine or fedviews launch"
)

#: why the PSI does not run on Flower
PSI_NEEDS_SEALED_CHAINS = (
    'federation.alignment = "psi" cannot run on Flower: its nodes have no end-to-end keys, '
    "so the PSI chains cannot be sealed and the ServerApp could have a node re-blind a "
    "dictionary of guessed IDs (and so learn which of them the party holds). Pre-align the "
    "parties' files (every party the same sample IDs) and set federation.alignment = "
    '"none", or deploy with ' + _GRPC_HINT + " and TLS, which seals the chains"
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


def run_config_path(rc: Mapping[str, Any], key: str) -> Path | None:
    """The path under ``key`` of a Flower run (or node) config; None where it is empty."""
    return Path(v) if (v := _text(rc, key)) else None


def run_dir(rc: Mapping[str, Any], cfg: DeployConfig) -> Path:
    """The run folder: run config ``out-dir``, else ``<output_dir>/<name>-flower``."""
    return run_config_path(rc, "out-dir") or Path(cfg.output_dir) / f"{cfg.name}-flower"


@dataclass(frozen=True)
class NodeSettings:
    cfg: DeployConfig
    party: str
    data: Path
    out_dir: Path
    resume: Path | None


def node_settings(context: Context) -> NodeSettings:
    """This node's party, data file and folders, from its node config (or run config)."""
    nc, rc = context.node_config, context.run_config
    cfg_path = _text(nc, "config") or _text(rc, "deploy-config")
    if not cfg_path:
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
            "this SuperNode does not say which party it is: start it with "
            "--node-config \"party='NAME' data='PATH'\""
        )
    if party not in parties:
        raise ConfigError(f"party {party!r} (node config) is not one of {parties}")
    data = _text(nc, "data")
    if not data:
        data_dir = _text(rc, "data-dir")
        if not data_dir:
            raise ConfigError(
                f"no data file for party {party!r}: add data='PATH' to its --node-config"
            )
        found = [Path(data_dir) / f"{party}.{ext}" for ext in SUFFIXES]
        data = str(next((f for f in found if f.is_file()), found[0]))
    out = run_config_path(nc, "out") or run_dir(rc, cfg) / party
    return NodeSettings(cfg, party, Path(data), out, run_config_path(nc, "resume"))


def _arrays(values: Mapping[str, np.ndarray]) -> ArrayRecord:
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in values.items()})


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
        self.party = DeployParty(s.cfg, s.party, load_party_data(s.data), s.out_dir, echo, s.resume)
        self.transport.register(self.party)
        self.replay: list[bytes] = []  # requests replayed on a rebuild
        self.snapshot_at = 0  # replay[:snapshot_at] came before the last round message
        self.new_snapshot = False
        self.generation = 0

    def handle(self, data: bytes) -> bytes:
        msg = Message.peek(data)  # a peer's message is sealed: the header only
        with self.app.compute_limits():
            wire = self.transport.answer(data, self.settings.cfg.federation.coordinator)
        if self.app.peer_to_peer:  # never rebuilt (_flower_relay): nothing to replay
            return wire
        if msg.round > 0 and msg.kind == self.app.round_message(self.party.role):
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
        state[_STATE] = ConfigRecord(meta)
        if self.new_snapshot:  # only at a round message: later requests are replayed on it
            state[_STATE_ALGO] = _arrays(p.algo.state_dict())
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
            if Message.peek(wire).kind in SECAGG_KINDS:  # a new key: the masks would not cancel
                raise ConfigError(SECAGG_NEEDS_A_LIVE_PARTY)
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
            rec.update(arrays=tuple(rec["arrays"]), shapes=tuple(map(tuple, rec["shapes"])))
            rec["meta"] = tuple(rec.get("meta", ()))
            self.transport.log.record(LogEntry(**rec))
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
