"""Deployment configs: which algorithm, which parties, timeouts, hyper-parameters.

A deployment TOML file (``configs/deploy_*.toml``)::

    algorithm = "mmvfl"
    name = "deploy_mmvfl_handwritten"
    seed = 0
    # modules = ["fedridge"]  # optional: imported first, to find an algorithm of your own

    [federation]
    parties = ["pix", "fou", "fac", "zer", "kar"]   # order = party index (seeds)
    label_owner = "pix"
    timeout = 20.0          # seconds of silence before a party is declared unavailable
    heartbeat = 2.0
    request_timeout = 600.0 # the longest one request may take (a party that heartbeats
                            # but never answers is named after this)
    max_message_mb = 1024   # the largest message a process accepts (MiB)
    end_to_end = true       # with TLS, seal party-to-party payloads: the hub relays them
                            # but cannot read or alter them (every process must agree)
    checkpoint_every = 1    # rounds between checkpoints (continue: --resume RUN_DIR)
    direct_timeout = 5.0    # seconds per attempt (two) to dial a [federation.listen] peer

    [federation.listen]     # optional: parties that accept direct links from their peers
    fou = "10.0.0.7:7101"   # HOST:PORT the peers dial (fou binds it, or `party --listen`);
                            # party-to-party messages to fou skip the hub's relay. Parties
                            # behind firewalls are not listed and only dial out.

    [data]                  # what `fedviews launch` / `split-data` generate
    dataset = "handwritten"
    n_per_class = 40
    overlap = 0.9

    [params]                # the algorithm's hyper-parameters (see its deploy app)
    max_iter = 20

    [defense]               # optional (see fedviews.federation.Defense)
    kind = "secagg"         # e.g. secure aggregation of the Z_k (MMVFL, V-FedMV)
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedviews._tables import (
    MODULES_HINT,
    build_dataclass,
    import_modules,
    merge_tables,
    parse_overrides,
    read_toml,
)
from fedviews.errors import ConfigError
from fedviews.federation import Defense, Roster, RunSpec, check_name, get_algorithm_spec


@dataclass(frozen=True)
class FederationSpec(Roster):
    """Who takes part (a :class:`~fedviews.federation.Roster`) and how failures are detected."""

    timeout: float = 20.0
    """Seconds of silence after which a party is declared unavailable (``PartyUnavailable``)."""
    heartbeat: float = 2.0
    """Seconds between two heartbeats of every process."""
    connect_timeout: float = 60.0
    """Seconds to wait for each connection attempt (and for all parties to join)."""
    request_timeout: float = 600.0  # one request's deadline (its handler's whole computation)
    max_message_mb: float = 1024.0  # the largest message a process reassembles
    max_incomplete: int = 64  # messages a peer may have half-sent at once
    max_buffered_mb: float = 2048.0
    """MiB of half-sent messages a process holds from all its peers together (each peer may
    hold ``max_message_mb``); past it the peer holding the most is cut off, named."""
    max_streams_per_peer: int = 4
    """Streams one certificate may have open to the hub or a direct-link listener at once,
    hello-less ones included; more are refused at once, naming it."""
    max_connections: int = 256
    """Connections the hub or a direct-link listener accepts at once (at most half the
    process's descriptor limit, so the run can always write its results); a connection that
    starts no call within ``hello_timeout`` is closed."""
    max_log_entries: int = 1_000_000
    """Messages of one sender that the message log keeps one by one; beyond, they are only
    counted (``message_log.json`` → ``dropped_entries``)."""
    hello_timeout: float = 10.0  # seconds a new connection may take to say hello
    direct_timeout: float = 5.0
    """Seconds one attempt to open a direct link to a peer's ``federation.listen`` endpoint
    may take (two attempts; then that peer's messages go through the hub for the run)."""
    end_to_end: bool = True  # seal party-to-party payloads so the hub cannot read them (TLS)
    alignment: str = "psi"  # or "none": every party holds the same IDs (rows sorted by ID)
    checkpoint_every: int = 1  # every process checkpoints its state every this many rounds
    #: ``{party: "HOST:PORT"}``: where a party listens for direct links from its peers
    listen: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """(The roster's check waits: :meth:`validate` names the config keys.)"""

    def validate(self) -> None:
        if len(self.parties) < 1 or len(set(self.parties)) != len(self.parties):
            raise ConfigError("federation.parties must list unique party names")
        for name in (*self.parties, self.coordinator):
            check_name(name, why=" (names become folder and file names)")
        lowered = [n.lower() for n in (*self.parties, self.coordinator)]
        if len(set(lowered)) != len(lowered):
            raise ConfigError(
                "party and coordinator names must differ in more than letter case "
                "(certificate names compare case-insensitively in TLS)"
            )
        if self.coordinator in self.parties:
            raise ConfigError(
                f"a party may not be named like the coordinator ({self.coordinator!r})"
            )
        if bool(self.label_owner) == bool(self.label_owners):
            raise ConfigError(
                "give federation.label_owner (one label owner) or federation.label_owners "
                "(several), not both and not neither"
            )
        for owner in self.owners():
            if owner == self.coordinator:
                raise ConfigError(
                    f"federation.label_owner(s): the coordinator {owner!r} holds no data in a "
                    "deployment; name the party whose file holds the labels (V-FedMV's label "
                    "owner sends the server its one-hot labels once, as the paper's server "
                    "holds them, and `fedviews predict` writes the predictions there)"
                )
            if owner not in self.parties:
                raise ConfigError(
                    f"federation.label_owner(s): {owner!r} is not one of federation.parties={list(self.parties)}"
                )
        if len(set(self.label_owners)) != len(self.label_owners):
            raise ConfigError("federation.label_owners lists a party twice")
        if not 0 < self.heartbeat < self.timeout:
            raise ConfigError("need 0 < federation.heartbeat < federation.timeout")
        if not self.request_timeout > 0:
            raise ConfigError("federation.request_timeout must be > 0 (seconds)")
        if not self.hello_timeout > 0:
            raise ConfigError("federation.hello_timeout must be > 0 (seconds)")
        if not 0 < self.direct_timeout < math.inf:
            raise ConfigError(
                f"federation.direct_timeout = {self.direct_timeout!r}: it must be a positive "
                "number of seconds (one attempt to dial a peer's direct-link endpoint)"
            )
        if not self.max_message_mb > 0 or self.max_incomplete < 1:
            raise ConfigError("need federation.max_message_mb > 0 and max_incomplete >= 1")
        if not self.max_message_mb <= self.max_buffered_mb < math.inf:
            raise ConfigError(
                f"federation.max_buffered_mb = {self.max_buffered_mb!r}: it must be at least "
                f"max_message_mb = {self.max_message_mb!r} (one whole message of a peer)"
            )
        counts = ("max_streams_per_peer", "max_connections", "max_log_entries")
        for key in counts:
            if getattr(self, key) < 1:
                raise ConfigError(f"federation.{key} must be >= 1")
        if self.alignment not in ("psi", "none"):
            raise ConfigError("federation.alignment must be 'psi' or 'none'")
        if self.checkpoint_every < 1:
            raise ConfigError("federation.checkpoint_every must be >= 1 (rounds)")
        for party, address in self.listen.items():
            if party not in self.parties:
                raise ConfigError(
                    f"federation.listen: {party!r} is not one of federation.parties="
                    f"{list(self.parties)} (the coordinator's address is given to each party)"
                )
            check_address(address, f"federation.listen.{party}")


def check_address(address: object, where: str, *, any_port: bool = False) -> str:
    """``address`` if it is ``HOST:PORT`` with a port peers can dial (1-65535; ``any_port``:
    also 0, a port the system picks, for a listener that reports it), else ConfigError; an
    IPv6 host goes in brackets (``[::1]:7101``). (gRPC took ``localhost`` as port 443 and
    99999 as 34463.)"""
    host, sep, port = str(address).rpartition(":")
    low = 0 if any_port else 1
    ok = isinstance(address, str) and sep and host and port.isdigit() and low <= int(port) < 65536
    if ok and host.startswith("["):
        try:
            ok = host.endswith("]") and bool(ipaddress.IPv6Address(host[1:-1]))
        except ValueError:
            ok = False
    elif ok:
        ok = ":" not in host and " " not in host
    if not ok:
        raise ConfigError(
            f"{where} = {address!r}: expected HOST:PORT with a port from 1 to 65535 "
            "(e.g. '10.0.0.7:7101' or '[::1]:7101')"
        )
    return str(address)


@dataclass(frozen=True)
class SplitSpec:
    """How `fedviews split-data` turns a built-in dataset into one file per party."""

    dataset: str = "handwritten"
    """The built-in dataset the demo party files are cut from."""
    views: tuple[str, ...] = ()
    """The views dealt to the parties (default: one per party, in order)."""
    n_per_class: int = 0
    """Balanced subsample: samples per class (0 = all)."""
    overlap: float = 1.0
    """Each party keeps this random fraction of the training samples (so the IDs must be aligned)."""
    format: str = "npz"
    """Party file format: ``npz``, ``csv`` or ``parquet``."""
    scenario: str = "iid"
    """Multi-VFL: how training labels are dealt to the label owners (``iid`` or ``<m>niid``)."""
    samples_per_owner: int = 0
    """Multi-VFL: training samples per label owner (0 = ``n // K``)."""
    n_test: int = 0
    """A stratified held-out split every party holds as its test split (Multi-VFL: 0 = all test images)."""

    def validate(self) -> None:
        if not 0 < self.overlap <= 1:
            raise ConfigError("data.overlap must be in (0, 1]")
        if self.format not in ("npz", "csv", "parquet"):
            raise ConfigError("data.format must be 'npz', 'csv' or 'parquet'")


@dataclass(frozen=True)
class DeployConfig(RunSpec):
    """A deployment: the run (algorithm, params, roster, seed) plus timeouts, data and output.

    ``modules``: the modules the config imported before looking the algorithm up.
    """

    federation: FederationSpec = field(default_factory=FederationSpec)
    name: str = ""
    """The run's name (folder names; default: the config file's stem)."""
    data: SplitSpec = field(default_factory=SplitSpec)
    output_dir: str = "runs"
    """Where ``fedviews launch`` creates the run folder."""
    modules: tuple[str, ...] = ()

    def roles(self) -> dict[str, str]:
        return get_algorithm_spec(self.algorithm).roles(self)


_TOP_KEYS = tuple("algorithm name seed federation data params defense output_dir modules".split())


def load_deploy_config(
    source: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
) -> DeployConfig:
    """Load a deployment TOML (or dict), apply ``key=value`` overrides, validate every key.

    ``modules = [...]`` (optional) are imported before the algorithm is looked up, so
    that an algorithm registered outside fedviews is found
    (:func:`~fedviews._tables.import_modules`). Every process of a
    deployment loads its config through this function, so each imports them too.
    """
    raw = dict(source) if isinstance(source, Mapping) else read_toml(Path(source))
    raw = merge_tables(raw, parse_overrides(overrides))
    unknown = set(raw) - set(_TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown top-level keys {sorted(unknown)} in the deployment config; "
            f"valid keys: {list(_TOP_KEYS)}"
        )
    if "algorithm" not in raw:
        raise ConfigError('the deployment config needs `algorithm = ...` (e.g. "mmvfl")')
    modules = import_modules(raw.get("modules", []))
    try:
        app = get_algorithm_spec(str(raw["algorithm"]), own_hint="")
    except ConfigError as exc:  # "unknown algorithm 'x'; did you mean ...?"
        hint = str(exc).split("; ", 1)[-1]
        raise ConfigError(
            f"algorithm {raw['algorithm']!r} cannot be deployed; {hint}{MODULES_HINT}"
        ) from None
    fed = build_dataclass(FederationSpec, raw.get("federation", {}), "federation")
    app.check_federation(fed)
    split = build_dataclass(SplitSpec, raw.get("data", {}), "data")
    params: Any = build_dataclass(app.Params, raw.get("params", {}), "params", validate=False)
    try:
        app.check_params(params, fed)  # once, with the roster (per-party lists)
    except ConfigError as exc:  # "rounds must be ...": the key as the config spells it
        first = str(exc).split(" ", 1)[0]
        if dataclasses.is_dataclass(params) and first in {
            f.name for f in dataclasses.fields(params)
        }:
            raise ConfigError(f"params.{exc}") from None
        raise
    defense = Defense.of(raw.get("defense"), validate=False)  # (check_defense validates)
    app.check_defense(defense, fed)
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    name = str(raw.get("name", raw["algorithm"]))
    check_name(name, "name", " (it names the run's folder)")
    return DeployConfig(
        algorithm=str(raw["algorithm"]),
        name=name,
        seed=seed,
        federation=fed,
        data=split,
        params=params,
        defense=defense,
        output_dir=str(raw.get("output_dir", "runs")),
        modules=modules,
    )
