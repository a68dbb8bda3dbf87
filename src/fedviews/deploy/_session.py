"""One deployed run, process by process: the coordinator's (:func:`run_coordinator`) and a
party's (:func:`run_party`), each serving its role (:mod:`._roles`) over gRPC until the run
ends, and what each leaves in its folder."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import PartyData
from fedviews.deploy._config import DeployConfig
from fedviews.deploy._launch import CONNECTED, stop_signals_held
from fedviews.deploy._model import load_model_part
from fedviews.deploy._predict import PredictCoordinator, PredictParty
from fedviews.deploy._roles import (
    DeployCoordinator,
    DeployParty,
    Printer,
    _write_json,
    run_hello,
    session_policy,
)
from fedviews.errors import (
    ConfigError,
    DataError,
    FedViewsError,
    PartyUnavailable,
    ProtocolError,
    RemoteError,
    described,
)
from fedviews.federation import GrpcHub, GrpcOptions, GrpcPartyTransport, MessageLog, TLSFiles
from fedviews.report import to_jsonable, write_report

#: descriptors the coordinator holds from its start and frees to write its outputs
#: (results.json, result.npz, message_log.json, config.json, report.html and what they open)
RESERVED_FDS = 16


def options_of(cfg: DeployConfig) -> GrpcOptions:
    f = cfg.federation
    return GrpcOptions(
        timeout=f.timeout,
        heartbeat=f.heartbeat,
        connect_timeout=f.connect_timeout,
        request_timeout=f.request_timeout,
        max_message_bytes=int(f.max_message_mb * 1024 * 1024),
        max_incomplete=f.max_incomplete,
        max_buffered_bytes=int(f.max_buffered_mb * 1024 * 1024),
        max_streams_per_peer=f.max_streams_per_peer,
        max_connections=f.max_connections,
        max_log_entries=f.max_log_entries,
        hello_timeout=f.hello_timeout,
        end_to_end=f.end_to_end,
        direct_timeout=f.direct_timeout,
    )


def _print_to(prefix: str, echo: Printer | None) -> Printer:
    def out(line: str) -> None:
        (echo or print)(f"[{prefix}] {line}")

    return out


def run_coordinator(
    cfg: DeployConfig,
    listen: str,
    out_dir: Path,
    *,
    tls: TLSFiles | None,
    port_file: Path | None = None,
    echo: Printer | None = None,
    resume: Path | None = None,
    model: Path | None = None,
) -> dict[str, Any]:
    """Serve the federation until the run ends; write ``results.json`` even when it fails.

    ``resume``: the coordinator folder of a killed run; the run goes on after the last
    round of which it has a checkpoint (the parties must be started with ``--resume``).
    ``model``: the coordinator folder of a finished training run; instead of training,
    the parties predict their new rows with their parts of its model (:mod:`._predict`).
    """
    say = _print_to(cfg.federation.coordinator, echo)
    coord: DeployCoordinator | PredictCoordinator
    if model is None:
        coord = DeployCoordinator(cfg, say, out_dir, resume)
    else:
        coord = PredictCoordinator(
            cfg, say, load_model_part(model, cfg, cfg.federation.coordinator)
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    if resume is not None:
        keep_earlier_results(out_dir)
    hub = GrpcHub(
        session_policy(cfg),
        cfg.roles(),
        listen=listen,
        tls=tls,
        options=options_of(cfg),
        run=run_hello(cfg),
    )
    # results.json is always written: its descriptors are taken before anyone is told the port
    reserve = [os.open(os.devnull, os.O_RDONLY) for _ in range(RESERVED_FDS)]
    hub.register(coord)
    if port_file is not None:  # atomically: a launcher polls for it
        tmp = port_file.with_name(port_file.name + ".tmp")
        tmp.write_text(str(hub.port))
        tmp.replace(port_file)
    say(
        f"listening on port {hub.port} ({'mutual TLS' if tls else 'INSECURE plain text'}); "
        f"waiting for {list(cfg.federation.parties)}"
    )
    status = "ok"
    unavailable = None
    named: dict[str, str] = {}
    t0 = time.perf_counter()
    try:
        hub.wait_for_parties()
        say("all parties joined")
        with coord.app.compute_limits():
            coord.run()
        return coord.results()
    except BaseException as exc:  # also a bug or an interrupt: never recorded as "ok"
        status = described(exc)
        if isinstance(exc, PartyUnavailable):
            unavailable = exc.party
        elif gone := hub.departed():  # e.g. a peer's request to it failed in the relay
            unavailable = ", ".join(gone)
        named = blame(exc)
        raise
    finally:
        # a second stop (its launcher's, after a grace) no longer ends the writing
        with stop_signals_held():
            result = {
                "status": status,
                "seconds": round(time.perf_counter() - t0, 3),
                **coord.results(),
                **named,
            }
            try:  # the server stops first: its connections hold no descriptor the files need
                hub.close()
            finally:
                for fd in reserve:
                    os.close(fd)
                write_coordinator_outputs(out_dir, coord, result, unavailable, hub.log)
        if status == "ok" and result.get("objective"):  # the results, then the status
            say(f"final objective {result['objective'][-1]:.10g}")
        say(f"{status}; results in {out_dir}")
        if status != "ok" and result.get("last_checkpoint_round"):
            say(
                f"checkpoint of round {result['last_checkpoint_round']} kept: continue with "
                f"--resume {out_dir} (and --resume <its folder> for every party)"
            )


def keep_earlier_results(out_dir: Path) -> Path | None:
    """Before a resumed session writes ``results.json``, keep the one there (the killed
    session's, or a failed resume's: each was overwritten) as ``results.session-K.json``,
    K counting the sessions; the path kept, or ``None``."""
    done = out_dir / "results.json"
    if not done.is_file():
        return None
    k = 1
    while (kept := out_dir / f"results.session-{k}.json").exists():
        k += 1
    shutil.copyfile(done, kept)
    return kept


def blame(exc: BaseException) -> dict[str, str]:
    """Who ``results.json`` names for the failure ``exc``: ``reported_by``, the party whose
    error reply ended the run (a :class:`RemoteError`: its report, which proves nothing
    about the parties its text names), or ``culprit``, the party whose message the
    coordinator refused (the ``party`` of a fedviews error); nothing for a local failure."""
    if isinstance(exc, RemoteError):
        return {"reported_by": exc.reported_by}
    if isinstance(exc, PartyUnavailable):  # unavailable_party names it
        return {}
    party = exc.party if isinstance(exc, FedViewsError) else None
    return {"culprit": party} if party is not None else {}


def write_coordinator_outputs(
    out_dir: Path,
    coord: DeployCoordinator | PredictCoordinator,
    result: dict[str, Any],
    unavailable: str | None,
    log: MessageLog,
) -> None:
    """The coordinator's folder at the end of a run, whatever its status: ``results.json``
    (naming the party that became unavailable), the final arrays in ``result.npz`` (once the
    server was built), ``message_log.json`` and ``config.json``; and, after a successful
    run, ``report.html`` (a prediction session: ``results.json``, the message log and the
    config only)."""
    if unavailable is not None:
        result["unavailable_party"] = unavailable
    _write_json(out_dir / "results.json", result)
    training = isinstance(coord, DeployCoordinator)
    if training and coord.server is not None:
        final: dict[str, Any] = dict(coord.app.coordinator_results(coord.server)[1])
        np.savez(out_dir / "result.npz", **final)
    summary = coord.log_summary() if isinstance(coord, DeployCoordinator) else log.summary()
    _write_json(out_dir / "message_log.json", summary)
    _write_json(out_dir / "config.json", to_jsonable(coord.cfg))
    if training and result.get("status") == "ok":  # a failed run shuts down at once
        write_report(out_dir)


def check_member(cfg: DeployConfig, name: str) -> None:
    """Raise DataError unless ``name`` is a party of ``cfg``'s federation (``fedviews party
    --party`` checks it first: a misspelt name is not a missing certificate)."""
    if name not in cfg.federation.parties:
        raise DataError(
            f"{name!r} is not a party of this federation: {list(cfg.federation.parties)}"
        )


def run_party(
    cfg: DeployConfig,
    name: str,
    data: PartyData,
    coordinator: str,
    out_dir: Path,
    *,
    tls: TLSFiles | None,
    echo: Printer | None = None,
    resume: Path | None = None,
    listen: str | None = None,
    model: Path | None = None,
) -> None:
    """Dial the coordinator and serve this party's part of the run until it ends.

    ``resume``: this party's folder of a killed run; its checkpoint of the round the
    coordinator resumes from is loaded there. Where ``federation.listen`` declares an
    endpoint for this party, it listens there (or on ``listen``) for direct links from
    its peers; messages to a peer with an endpoint go to it directly.
    ``model``: this party's folder of a finished training run; instead of training, it
    predicts the rows of ``data`` with its part of that run's model (:mod:`._predict`).
    """
    say = _print_to(name, echo)
    check_member(cfg, name)
    if listen is not None and name not in cfg.federation.listen:
        raise ConfigError(
            f"--listen binds {name!r}'s endpoint for direct links, but the config declares "
            f'none: add federation.listen.{name} = "HOST:PORT" (the address peers dial)'
        )
    party: DeployParty | PredictParty
    if model is None:
        party = DeployParty(cfg, name, data, out_dir, say, resume)
    else:
        party = PredictParty(cfg, name, data, load_model_part(model, cfg, name), out_dir, say)
    transport = GrpcPartyTransport(
        session_policy(cfg),
        coordinator,
        tls=tls,
        server_name=cfg.federation.coordinator,
        options=options_of(cfg),
        direct=cfg.federation.listen,
        listen=listen,
        run=run_hello(cfg),
    )
    transport.register(party)
    transport.connect()
    if transport.server is not None:
        say(f"listening for direct links on port {transport.port}")
    say(f"{CONNECTED} {coordinator}")
    outcome: list[BaseException] = []

    def serve() -> None:
        with party.app.compute_limits():
            try:
                transport.serve()
            except BaseException as exc:  # handed to the main thread below
                outcome.append(exc)

    worker = threading.Thread(target=serve, name=f"serve-{name}", daemon=True)
    worker.start()
    finished_at: float | None = None
    try:
        while worker.is_alive():
            worker.join(0.5)
            if getattr(party, "finished", False):
                finished_at = finished_at or time.monotonic()
                if time.monotonic() - finished_at > 10.0:
                    break  # results written; the coordinator's goodbye never arrived
    except KeyboardInterrupt:  # Ctrl-C, or `kill` (SIGTERM): keep what this party knows
        if not getattr(party, "finished", False):
            party.write_log()
            kept = party.checkpoints.latest() if party.checkpoints is not None else 0
            say(
                f"interrupted; message log in {out_dir}"
                + (f", checkpoint of round {kept} kept (--resume {out_dir})" if kept else "")
            )
        raise
    finished = getattr(party, "finished", False)
    if not finished:  # what crossed so far, whatever ended the run
        party.write_log()
    if outcome and not (finished and isinstance(outcome[0], PartyUnavailable)):
        # once this party has written its results, a closed stream ends the session
        raise outcome[0]
    if not finished:  # the coordinator said goodbye before the end
        kept = party.checkpoints.latest() if party.checkpoints is not None else 0
        why = (
            f"after this party's own error ({party.own_error})"
            if party.own_error
            else "(its results.json says why)"
        )
        raise ProtocolError(
            f"the coordinator stopped the run before it finished {why}; "
            + (f"checkpoint of round {kept} kept in {out_dir}" if kept else "no results written")
        )
    # `fedviews report` builds its local report
    _write_json(out_dir / "config.json", to_jsonable(cfg))
