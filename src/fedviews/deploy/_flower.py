"""Flower (``flwr`` 1.41, 1.42) as a transport of the deployed session: the ServerApp and the ClientApp.

The session of :mod:`fedviews.deploy._session` (``deploy:setup``, ``deploy:build``,
the algorithm's rounds, ``deploy:finish``) runs unchanged; only the transport differs
from ``fedviews coordinator`` / ``fedviews party``. The PSI does not run on Flower: the
nodes have no end-to-end keys, so its chains cannot be sealed and a node would re-blind
whatever the ServerApp sends; the parties' files come pre-aligned (``alignment =
"none"``; :func:`~fedviews.deploy._flower_node.refuse_psi`).

* the **ServerApp** (:data:`server_app`) builds the :class:`DeployCoordinator` and
  gives it a :class:`FlowerGridTransport`, which sends every fedviews
  :class:`~fedviews.federation.Message` to the Flower node of its receiver through
  the ``Grid`` (Message API), after the same privacy-policy check and logging as
  in-process (:meth:`Transport._check_and_log`);
* the **ClientApp** (:data:`client_app`) runs on one SuperNode per party. The node
  says which party it is in its *node config*
  (``--node-config "party='pix' data='/data/pix.npz' out='/runs/pix'
  config='/configs/deploy.toml'"``); the
  ServerApp asks every node first (``query.fedviews_hello``) and maps parties to
  node IDs. A node's claim is bound to its SuperNode authentication key: a node whose
  key the SuperLink registered under another party's name (``flwr supernode register
  KEY.pub --name PARTY``) is refused, and with run config ``node-auth = true`` (the
  default) so is a node registered under no name. Every later Flower message carries
  one encoded fedviews message and is answered by that node's :class:`DeployParty`.
  Every reply is tagged under a key the ServerApp sent in the node's hello only
  (:func:`~fedviews.deploy._flower_wire.reply_tag`): Flower's SuperLink does not
  bind a reply to the node that pushes it, the tag does.

The pieces: :mod:`._flower_transport` (the transports), :mod:`._flower_wire` (the wire
format and the reply tags),
:mod:`._flower_node` (a node's party, kept in ``Context.state`` across Flower's
per-message ClientApp processes), :mod:`._flower_launch` (the app project that
``flwr run`` submits, :func:`write_flower_app`, and :func:`launch_flower`, a whole
Flower run on this machine; the command line is ``fedviews flower app|launch``).

Per-batch split learning (split NN, Multi-VFL, APFed), where a party sends its own
messages from inside a handler (activations to the label owner), runs with the
ServerApp as the relay: the node answers with its party's messages sealed end to end,
the ServerApp forwards them to their receivers' nodes and brings the sealed replies
back to the handler waiting in the node's live process (:mod:`._flower_relay`). That
needs the party to live through the run: the simulation engine with one Ray actor, or
the deployment engine with SuperNodes in ``--isolation process`` served by ``fedviews
flower executor`` (one ClientApp process per party, :mod:`._flower_exec`); with Flower's
own executor (a new ClientApp process per message) it is refused.

Run config of the Flower app (``flwr run APP CONNECTION -c "..."``):

``deploy-config``
    the deployment TOML (as for ``fedviews coordinator``); a relative path is a file of
    the app (``deploy.toml``, written by ``fedviews flower app``); also read by a node
    whose node config has no ``config=PATH`` of its own, where it opts in (below).
``node-auth``
    ``true`` (default): every node must be registered under the party name it declares
    (see above); ``false``: the node configs say who is who (simulation engine, tests).
``out-dir``
    run folder: the coordinator writes ``OUT/coordinator``; a node without
    ``out=`` in its node config writes ``OUT/<party>``
    (default ``<output_dir>/<name>-flower``).
``data-dir``
    simulation engine only (no per-node config): node ``partition-id=k`` is party
    ``k`` of the config and reads ``DATA_DIR/<party>.npz``.
``resume``
    coordinator folder of a killed run; a node resumes from ``resume=DIR`` in its node
    config, else (a node without ``out=``, e.g. every node of the simulation engine)
    from the folder of its party beside that coordinator folder.
``certs-dir``
    the folder of the nodes' fedviews certificates (``ca.crt``, ``<party>.crt``,
    ``<party>.key``; nodes: ``certs=DIR`` in the node config), which sign their end-to-end
    keys (per-batch algorithms; needed) and their secure-aggregation keys (``secagg``;
    without them those keys are neither signed nor checked). The ServerApp checks every
    node's end-to-end key bundle at its hello (:meth:`FlowerGridTransport._checked_bundle`),
    against ``DIR/ca.crt`` where that exists on its host (else all but the certificates'
    issuer, which every peer checks).
``ping``, ``ping-bytes``
    ``ping > 0``: only time that many echo round trips of ``ping-bytes`` bytes.

A node takes these paths (``deploy-config``, ``data-dir``, ``out-dir``, ``resume``,
``certs-dir``) for the ``config=``, ``data=``, ``out=``, ``certs=`` its node config leaves
out only where its node config says ``run-config-paths=true`` (``fedviews flower launch``'s
nodes) or it is a node of the simulation engine; otherwise a run config that names one is
a ``ConfigError`` naming both keys: whoever submits the run writes the run config, and
must not pick the files a node of another organisation reads and writes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, FedViewsError, PartyUnavailable, described, require

require("flwr", "flower")

from flwr.app import ConfigRecord, Context, RecordDict  # noqa: E402
from flwr.app import Message as FlowerMessage  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

from fedviews.deploy._config import DeployConfig, load_deploy_config  # noqa: E402
from fedviews.deploy._flower_node import (  # noqa: E402
    _Node,
    forget,
    node_for,
    node_settings,
    printer,
    refuse_psi,
    run_config_path,
    run_dir,
)
from fedviews.deploy._flower_relay import (  # noqa: E402
    content_of,
    forget_job,
    hello_keys,
    resume,
    start,
    take_peers,
)
from fedviews.deploy._flower_transport import (  # noqa: E402
    _GRPC_HINT,
    FlowerGridTransport,
    FlowerOptions,
)
from fedviews.deploy._flower_wire import (  # noqa: E402
    ACTION,
    HELLO,
    PEERS,
    PING,
    REPLY_KEY,
    REPLY_KEY_BYTES,
    RESUME,
    authenticated,
    error_content,
    pack,
    unpack,
)
from fedviews.deploy._roles import (  # noqa: E402
    DeployCoordinator,
    Printer,
    run_hello,
    session_policy,
)
from fedviews.deploy._session import _print_to, blame, write_coordinator_outputs  # noqa: E402
from fedviews.federation import Trust, attributed, get_algorithm_spec  # noqa: E402

log = logging.getLogger("fedviews.flower")

# -- ServerApp ----------------------------------------------------------------


def flower_options(cfg: DeployConfig, node_auth: bool = False) -> FlowerOptions:
    """How the ServerApp of ``cfg`` waits: ``federation.connect_timeout`` for the nodes to
    declare their parties, ``federation.request_timeout`` for one request (a party that never
    answers is unavailable then; it waited an hour whatever the config said). Flower has no
    heartbeat, so ``federation.timeout`` does not apply."""
    fed = cfg.federation
    return FlowerOptions(
        join_timeout=fed.connect_timeout, request_timeout=fed.request_timeout, node_auth=node_auth
    )


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
    trust: Trust | None = None,
) -> dict[str, Any]:
    """The ServerApp's work: map the nodes, run the session; write ``results.json`` always.

    Writes ``out_dir/results.json`` (status, objective, ``seconds_per_round``, the
    party-to-node map, every exchange's wall time), ``result.npz`` and
    ``message_log.json`` like :func:`fedviews.deploy.run_coordinator`. With
    ``ping > 0`` it only times ``ping`` echo round trips of ``ping_bytes`` bytes
    (:meth:`FlowerGridTransport.ping`) instead of running the session. ``trust``: the CA
    that the nodes' end-to-end keys must be certified by (per-batch algorithms; see
    :class:`FlowerGridTransport`).
    """
    say = _print_to(cfg.federation.coordinator, echo)
    opts = options or flower_options(cfg)
    check_flower_config(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    transport = FlowerGridTransport(
        session_policy(cfg), cfg.roles(), grid, options=opts, trust=trust
    )
    coord = DeployCoordinator(cfg, say, out_dir, resume)
    transport.register(coord)
    say(f"Flower ServerApp: waiting for nodes declaring {list(cfg.federation.parties)}")
    status = "ok"
    unavailable = None
    named: dict[str, str] = {}
    t0 = time.perf_counter()
    try:
        nodes = transport.connect(run_hello(cfg))
        say(f"nodes: {nodes}")
        if coord.app.peer_to_peer:  # the parties seal what they send each other
            transport.hand_out_keys()
        if ping > 0:
            pings = transport.ping(ping, ping_bytes)
            say(
                f"{ping} pings of {ping_bytes} bytes: median round trip "
                f"{np.median(pings['single']):.4f} s (one node), "
                f"{np.median(pings['broadcast']):.4f} s (all nodes at once)"
            )
        else:
            with coord.app.compute_limits():
                coord.run()
    except BaseException as exc:  # recorded in results.json, then raised: an interrupt is no "ok"
        status = described(exc)
        if isinstance(exc, PartyUnavailable):
            unavailable = exc.party
        named = blame(exc)
        raise
    finally:
        res = coord.results()
        rounds, train = coord.rounds_run, float(res.get("train_seconds") or 0.0)
        result = {
            "status": status,
            "seconds": round(time.perf_counter() - t0, 3),
            **res,
            **named,
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
        write_coordinator_outputs(out_dir, coord, result, unavailable, transport.log)
        say(f"{status}; results in {out_dir}")
    return result


def check_flower_config(cfg: DeployConfig) -> None:
    """Refuse, before anything starts, what a Flower deployment cannot do: direct links
    (``[federation.listen]``): Flower routes every message through its SuperLink, a
    ClientApp only answers the ServerApp; and the PSI, whose chains cannot be sealed
    there (:func:`refuse_psi`)."""
    get_algorithm_spec(cfg.algorithm)  # an unknown algorithm is refused here
    refuse_psi(cfg)
    if cfg.federation.listen:
        raise ConfigError(
            "federation.listen declares direct-link endpoints for "
            f"{', '.join(sorted(cfg.federation.listen))}, but Flower routes every message "
            "through its SuperLink (a ClientApp only answers the ServerApp), so there are no "
            "direct links: remove the federation.listen table to run this config on Flower, "
            "or deploy it with " + _GRPC_HINT + " to use direct links"
        )


server_app = ServerApp()


@server_app.main()
def _server_main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    path = run_config_path(rc, "deploy-config")
    if path is None:
        raise ConfigError(
            "the Flower run config needs deploy-config=PATH (a file of the app, or an "
            "absolute path: flwr run ... -c \"deploy-config='/abs/path/deploy.toml'\")"
        )
    cfg = load_deploy_config(path)
    node_auth = rc.get("node-auth", True)
    if not isinstance(node_auth, bool):
        raise ConfigError(f"the run config's node-auth must be true or false, not {node_auth!r}")
    run_flower_coordinator(
        cfg,
        grid,
        run_dir(rc, cfg) / "coordinator",
        echo=printer,
        resume=run_config_path(rc, "resume"),
        options=flower_options(cfg, node_auth=node_auth),
        ping=_count(rc, "ping"),
        ping_bytes=_count(rc, "ping-bytes"),
        trust=Trust.from_dir(certs) if (certs := str(rc.get("certs-dir", "") or "")) else None,
    )


def _count(rc: Mapping[str, Any], key: str) -> int:
    """The whole number >= 0 under ``key`` of the run config (an int, or its digits as a
    string, as ``fedviews flower launch`` writes it; empty: 0)."""
    v = rc.get(key, 0) or 0
    n = v if isinstance(v, int) and not isinstance(v, bool) else -1
    if isinstance(v, str) and v.strip().isdigit():
        n = int(v)
    if n < 0:
        raise ConfigError(f"the run config's {key} must be a whole number >= 0, not {v!r}")
    return n


# -- ClientApp ----------------------------------------------------------------

client_app = ClientApp()


_REPLY_KEY_STATE = "fedviews-reply-key"  # Context.state record of the node's reply-tag key


def _reply(msg: FlowerMessage, context: Context, content: RecordDict) -> FlowerMessage:
    """The node's reply to ``msg``, tagged under the key of its hello (a node that was
    given none answers without a tag, which the ServerApp refuses)."""
    record = context.state.config_records.get(_REPLY_KEY_STATE)
    key = record.get("key") if record is not None else None
    if isinstance(key, bytes):
        content = authenticated(content, key, msg)
    return FlowerMessage(content, reply_to=msg)


def _keep_reply_key(msg: FlowerMessage, context: Context) -> None:
    """Keep the key of this node's reply tags that the ServerApp sent in its hello (and
    forget any earlier run's, which Flower may keep in ``Context.state``)."""
    context.state.config_records.pop(_REPLY_KEY_STATE, None)
    record = msg.content.config_records.get("hello")
    key = record.get(REPLY_KEY) if record is not None else None
    if not isinstance(key, bytes) or len(key) != REPLY_KEY_BYTES:
        raise ConfigError(
            f"the ServerApp's hello carries no {REPLY_KEY_BYTES}-byte key for this node's "
            "replies: its fedviews is older than this node's; run one fedviews version "
            "on the ServerApp and every node"
        )
    context.state[_REPLY_KEY_STATE] = ConfigRecord({"key": key})


@client_app.query(HELLO)
def _on_hello(msg: FlowerMessage, context: Context) -> FlowerMessage:
    try:
        _keep_reply_key(msg, context)
        s = node_settings(context)
        hello = ConfigRecord({"party": s.party, "run": run_hello(s.cfg)})
        bundle = hello_keys(context, s)
        if bundle is not None:
            hello["e2e"] = bundle
        return _reply(msg, context, RecordDict({"hello": hello}))
    except Exception as exc:  # reported to the ServerApp, which raises it
        return _reply(msg, context, error_content(exc))


@client_app.query(PING)
def _on_ping(msg: FlowerMessage, context: Context) -> FlowerMessage:
    try:
        return _reply(msg, context, pack(unpack(msg.content)))
    except Exception as exc:  # reported to the ServerApp, which raises it
        return _reply(msg, context, error_content(exc))


@client_app.query(PEERS)
def _on_peers(msg: FlowerMessage, context: Context) -> FlowerMessage:
    try:
        take_peers(context, msg.content)
        return _reply(msg, context, RecordDict())
    except Exception as exc:  # reported to the ServerApp, which raises it
        return _reply(msg, context, error_content(exc))


@client_app.query(ACTION)
def _on_message(msg: FlowerMessage, context: Context) -> FlowerMessage:
    """A request (the coordinator's, or a peer's relayed): the reply, or the messages
    that the party sends while it handles it (relayed, then :func:`_on_resume`)."""
    return _answer(msg, context, lambda node: start(context, node, _request(node, msg)))


@client_app.query(RESUME)
def _on_resume(msg: FlowerMessage, context: Context) -> FlowerMessage:
    """The replies to the messages the party's waiting handler sent."""
    return _answer(msg, context, lambda node: resume(context, node, msg.content))


def _request(node: _Node, msg: FlowerMessage) -> bytes:
    """The fedviews bytes of a request the ServerApp sent ``node`` (what cannot be unpacked
    names the ServerApp)."""
    with attributed(node.transport.coordinator, "a request"):
        return unpack(msg.content)


def _answer(
    msg: FlowerMessage,
    context: Context,
    step: Callable[[Any], tuple[list[bytes], bytes | None]],
) -> FlowerMessage:
    try:
        node = node_for(context)
        sent, wire = step(node)
        if wire is not None:  # the handler finished
            if not node.app.peer_to_peer:  # keep its state (a per-batch party is never rebuilt)
                node.save(context.state)
            if getattr(node.party, "finished", False):
                forget(context)
        return _reply(msg, context, content_of(sent, wire))
    except Exception as exc:  # reported to the ServerApp, which raises it
        forget(context)  # the live party may be half-updated: rebuild from the state
        forget_job(context)
        if not isinstance(exc, FedViewsError):
            log.exception("fedviews ClientApp failed")
        return _reply(msg, context, error_content(exc))
