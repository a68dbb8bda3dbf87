"""`fedviews launch`: the coordinator and every party as separate local processes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from fedviews._heap import heap_env
from fedviews.deploy._config import DeployConfig
from fedviews.deploy._data import party_files, write_demo_data
from fedviews.errors import (
    ConfigError,
    DataError,
    FedViewsError,
    PartyUnavailable,
    ProtocolError,
    RemoteError,
    Terminated,
    described,
)
from fedviews.federation import get_algorithm_spec, init_ca, issue_certificate

LAUNCH_INFO = "launch.json"
LAUNCH_CONFIG = "config.toml"
#: what a prediction session's run folder holds in place of ``launch.json``
PREDICT_INFO = "predict.json"
#: what a party prints once it has joined the run (the launcher watches for it)
CONNECTED = "connected to"
#: seconds a stopped run's processes get to write their results and exit on their own before
#: they are terminated: the wait ends when they exit, so only a hung process costs it. 10 s
#: left a machine 3-5x slower than usual little room (a coordinator terminated a second time,
#: still closing its server, may not have written results.json yet)
STOP_GRACE = 30.0


def make_certs(directory: Path, cfg: DeployConfig) -> Path:
    """A fresh CA plus one certificate for the coordinator and each party."""
    init_ca(directory)
    issue_certificate(directory, cfg.federation.coordinator, hosts=["localhost", "127.0.0.1"])
    for p in cfg.federation.parties:
        issue_certificate(directory, p)
    return directory


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now (for a local process to bind:
    a Flower SuperLink, or a party's endpoint for direct links in a local test)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: thread counts of the numeric libraries a process may load (OpenMP: torch; MKL; OpenBLAS)
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def process_env(n_processes: int) -> dict[str, str]:
    """The environment of ``n_processes`` processes started on this one machine.

    They share its cores, so each gets ``cores // n_processes`` threads (at least one)
    in every variable of :data:`THREAD_VARS` the user has not set. Left at the
    libraries' defaults, every process starts one OpenMP thread per core: a Multi-VFL
    epoch over loopback gRPC (7 processes on 2 cores) took 9.1 s instead of 4.1 s.
    Each also keeps freed memory in its heap (:func:`fedviews._heap.heap_env`).
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **heap_env()}
    per_process = str(max(1, (os.cpu_count() or 1) // max(1, n_processes)))
    for var in THREAD_VARS:
        env.setdefault(var, per_process)
    return env


class _Output:
    """What the launcher keeps of one process's output while echoing it: whether it said
    that it joined (:data:`CONNECTED`), and its last error line."""

    def __init__(self) -> None:
        self.joined = False
        self.error = ""


def _pump(
    proc: subprocess.Popen[str],
    echo: Callable[[str], None],
    lock: threading.Lock,
    seen: _Output,
    name: str = "",
) -> None:
    """Echo process ``name``'s output line by line, each line its own (a line the process did
    not mark as its own, e.g. its command's ``error:`` line, gets ``[name]``)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        if CONNECTED in line:
            seen.joined = True
        if line.startswith("error: "):
            seen.error = line.removeprefix("error: ")
        if name and line and not line.startswith("["):
            line = f"[{name}] {line}"
        with lock:  # one process's line never splits another's
            echo(line)


def launch(
    config: Path,
    cfg: DeployConfig,
    overrides: Sequence[str] = (),
    *,
    out_dir: Path | None = None,
    data_dir: Path | None = None,
    certs_dir: Path | None = None,
    insecure: bool = False,
    echo: Callable[[str], None] = print,
    party_wait: float = 30.0,
    resume: Path | None = None,
    model: Path | None = None,
) -> Path:
    """Run a whole deployment on this machine over loopback gRPC; return the run folder.

    Data files come from ``data_dir`` (``<party>.npz`` or ``.csv``) or, if not
    given, are written by :func:`split_dataset` from ``[data]`` of the config.
    Certificates come from ``certs_dir`` or are created in ``RUN_DIR/certs``.
    ``resume``: the folder of a killed launch; the run continues there, with its data
    files and certificates, after the last round every process checkpointed.
    ``model``: the run folder of a finished launch; instead of training, every process
    predicts with its part of that run's model (``fedviews predict``: the new rows in
    ``data_dir``, predictions in the label owner's folder).
    Raises :class:`PartyUnavailable` (naming the party that failed) or
    :class:`ProtocolError` when a process fails.
    """
    if model is not None:
        check_model_parts(model, cfg, data_dir, resume)
    if resume is not None:
        if not (resume / cfg.federation.coordinator).is_dir():
            raise ProtocolError(
                f"{resume} is not the folder of a launched run (no {cfg.federation.coordinator}/)"
            )
        if out_dir is not None and out_dir != resume:
            raise ProtocolError("--resume continues the run in its own folder; drop --out")
        results = resume / cfg.federation.coordinator / "results.json"
        if _read_results(results).get("status") == "ok":  # (resumed: past its end, overwritten)
            raise ConfigError(
                f"the run in {resume} finished (its {results} says status ok): nothing to "
                "resume; its results and models stay as they are"
            )
        out_dir = resume
        if data_dir is None and (resume / "data").is_dir():
            data_dir = resume / "data"
        if certs_dir is None and not insecure and (resume / "certs" / "ca.crt").is_file():
            certs_dir = resume / "certs"
    run_dir = out_dir or Path(cfg.output_dir) / f"{cfg.name}-{datetime.now():%Y%m%d-%H%M%S}"
    if resume is None:
        refuse_held(run_dir, cfg.federation.coordinator)
    run_dir.mkdir(parents=True, exist_ok=True)
    if resume is None:  # what `fedviews run --resume RUN_DIR` needs to continue this run
        shutil.copyfile(config, run_dir / LAUNCH_CONFIG)
        record: dict[str, Any] = {
            "config": LAUNCH_CONFIG,
            "overrides": list(overrides),
            "insecure": insecure,
        }
        for key, given in (("data_dir", data_dir), ("certs_dir", certs_dir)):
            if given is not None:  # (a resume takes them again: `fedviews run --resume`)
                record[key] = str(Path(given).resolve())
        if model is not None:  # a prediction session: nothing to resume, its model noted
            record["model"] = str(model)
        (run_dir / (LAUNCH_INFO if model is None else PREDICT_INFO)).write_text(json.dumps(record))
        config = run_dir / LAUNCH_CONFIG
    fed = cfg.federation
    if data_dir is None:
        data_dir = run_dir / "data"
        write_demo_data(cfg, data_dir)
    files = party_files(fed.parties, data_dir, DataError)
    security: list[str]
    if insecure:
        security = ["--insecure"]
    else:
        certs = certs_dir or make_certs(run_dir / "certs", cfg)
        security = ["--certs", str(certs)]
    base = [sys.executable, "-m", "fedviews"]
    env = process_env(len(fed.parties) + 1)
    port_file = run_dir / "coordinator.port"
    port_file.unlink(missing_ok=True)
    procs: dict[str, subprocess.Popen[str]] = {}
    seen: dict[str, _Output] = {}
    pumps: list[threading.Thread] = []
    lines = threading.Lock()

    def start(name: str, command: str, **options: str) -> None:
        """``fedviews COMMAND --OPTION VALUE ... --out RUN_DIR/NAME`` as process ``name``."""
        args = [x for k, v in options.items() for x in (f"--{k.replace('_', '-')}", v)]
        args += ["--out", str(run_dir / name)]
        if model is not None:
            args += ["--model", str(model / name)]
        if resume is not None:
            args += ["--resume", str(run_dir / name)]
        proc = subprocess.Popen(
            [*base, command, *args, str(config), *overrides, *security],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher only: it stops them
        )
        procs[name] = proc
        seen[name] = _Output()
        pumps.append(
            threading.Thread(target=_pump, args=(proc, echo, lines, seen[name], name), daemon=True)
        )
        pumps[-1].start()

    stop = terminate_as_interrupt()
    try:
        start(fed.coordinator, "coordinator", listen="127.0.0.1:0", port_file=str(port_file))
        deadline = time.monotonic() + 60
        while not port_file.is_file() or not port_file.read_text().strip():
            if procs[fed.coordinator].poll() is not None or time.monotonic() > deadline:
                raise ProtocolError("the coordinator process did not start (see its output above)")
            time.sleep(0.1)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        for p in fed.parties:
            start(p, "party", party=p, data=str(files[p]), coordinator=address)
        rc, unjoined = _wait_for_coordinator(procs, seen, fed.coordinator)
        if unjoined is not None:  # the coordinator would wait for it: stopped instead
            failure = seen[unjoined].error or "see its output above"
            exc = PartyUnavailable(
                unjoined,
                f"its process exited with status {procs[unjoined].returncode} before it "
                f"joined: {failure}",
            )
            for name, proc in procs.items():  # the others still dialing would retry a minute
                if not seen[name].joined and proc.poll() is None:
                    proc.terminate()
            _record_cause(run_dir / fed.coordinator / "results.json", exc)
            raise exc
        # after a clean run parties exit on their own (give them time on a busy machine);
        # after a failure they were told to stop, and the rest are killed below
        end = time.monotonic() + (party_wait if rc == 0 else min(party_wait, STOP_GRACE))
        failed = []
        for p in fed.parties:
            try:
                prc = procs[p].wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                prc = None
            if prc != 0:
                failed.append(f"{p} (exit status {prc})" if prc is not None else f"{p} (running)")
        if rc != 0:
            results = run_dir / fed.coordinator / "results.json"
            info = _read_results(results)
            hint = f"see {results}" + _resume_hint(run_dir, fed.coordinator, fed.parties)
            raise _failure(info, rc, hint, fed.coordinator)
        if failed:
            raise ProtocolError(f"party processes {failed} did not finish cleanly")
        return run_dir
    finally:
        coordinator = procs.get(fed.coordinator)
        if coordinator is not None and coordinator.poll() is None:
            # interrupted: stop the coordinator as Ctrl-C does, so that it writes its
            # results.json and tells the parties to stop. With SIGTERM, which its command
            # turns into that interrupt: a SIGINT may be ignored (a background job of a
            # non-interactive shell inherits SIGINT ignored, and Python then leaves it so)
            coordinator.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                coordinator.wait(STOP_GRACE)
        # the coordinator told the parties that the run stopped: let them say so and exit
        # on their own (a loaded machine may take seconds), then never leave one behind
        grace = time.monotonic() + STOP_GRACE
        for proc in procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, grace - time.monotonic()))
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for pump in pumps:  # every process has exited: echo the rest of its output first
            pump.join(5)
        stop()
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):  # Ctrl-C, or `kill` (SIGTERM)
            hint = _resume_hint(run_dir, fed.coordinator, fed.parties)
            echo(f"interrupted{hint or ': no checkpoint to resume from'}")


def _wait_for_coordinator(
    procs: dict[str, subprocess.Popen[str]], seen: dict[str, _Output], coordinator: str
) -> tuple[int, str | None]:
    """Wait for the coordinator's process to end; return its exit status and ``None``, or,
    as soon as a party's process fails before it joined the run (a bad data file, say; the
    coordinator would wait its whole join timeout for it), stop the coordinator as Ctrl-C
    does and return its status and that party. A party that joined and then failed is left
    to the coordinator, which names who broke the run."""
    main = procs[coordinator]
    left = {coordinator}  # the coordinator, and the parties that joined and then failed
    while (rc := main.poll()) is None:
        for name, proc in procs.items():
            if name in left or proc.poll() in (None, 0):
                continue
            left.add(name)
            deadline = time.monotonic() + 1.0  # its last lines may still be on their way
            while not seen[name].error and time.monotonic() < deadline:
                time.sleep(0.05)
            if not seen[name].joined:
                main.terminate()  # its command turns SIGTERM into an interrupt
                with contextlib.suppress(subprocess.TimeoutExpired):
                    main.wait(STOP_GRACE)
                return main.returncode if main.returncode is not None else -1, name
        time.sleep(0.1)
    return rc, None


#: the errors a coordinator's status names that a launch raises again as their kind
_OWN_KINDS: dict[str, type[FedViewsError]] = {
    c.__name__: c for c in (ConfigError, DataError, ProtocolError)
}


def _failure(info: dict[str, Any], rc: int, hint: str, coordinator: str) -> Exception:
    """The error of a launch whose coordinator exited with status ``rc`` and wrote ``info``
    (its results.json): naming the party that broke or stopped the run, the unavailable
    one, or the coordinator's own error."""
    status = str(info.get("status", f"the coordinator exited with status {rc}"))
    named = info.get("culprit") or info.get("reported_by")
    if "unavailable_party" not in info and named:  # a party broke or stopped the run
        kind, _, text = status.partition(": ")  # (not "ProtocolError: ProtocolError: ...")
        report = re.fullmatch(r"'(.*?)' reported (\w+): (.*)", text, re.S)
        if kind == "RemoteError" and report and report[1] == named:  # its report, as such
            return RemoteError(str(named), report[2], f"{report[3]}; {hint}")
        own = _OWN_KINDS.get(kind)
        err = (own or ProtocolError)(f"{text if own else status}; {hint}")  # (not "X: X: ...")
        err.party = str(named)
        return err
    if "unavailable_party" in info:  # its status reads "PartyUnavailable: party 'x' ..."
        status = re.split(r" (?:is|are) unavailable: ", status, maxsplit=1)[-1]
    else:  # the coordinator's own error (e.g. the files share no ID): as it is
        kind, _, text = status.partition(": ")
        own = _OWN_KINDS.get(kind)
        if own is not None and text:
            return own(f"{text}; {hint}")
        if text and kind not in ("KeyboardInterrupt", "Terminated", "SystemExit"):
            # its own code failed (e.g. an algorithm's coordinator that adds up replies
            # without reading them by shape): nothing is unavailable
            return ProtocolError(f"the coordinator failed: {status}; {hint}", party=coordinator)
    return PartyUnavailable(info.get("unavailable_party", coordinator), f"{status}; {hint}")


def _resume_hint(run_dir: Path, coordinator: str, parties: Sequence[str]) -> str:
    """What ``fedviews run --resume RUN_DIR`` would continue from: the last round that the
    coordinator and every party have a checkpoint of (as a resumed run looks for it), or
    which processes have none ("" where the coordinator has none: nothing to resume)."""
    from fedviews.deploy._checkpoint import Checkpoints

    have = {
        p: Checkpoints(run_dir / p / "checkpoints", "").rounds() for p in (coordinator, *parties)
    }
    if not have[coordinator]:
        return ""
    common = set(have[coordinator]).intersection(*map(set, have.values()))
    if common:
        return f"; checkpoint of round {max(common)} kept: `fedviews run --resume {run_dir}`"
    return (
        f"; no round is checkpointed by every process ({coordinator}: {have[coordinator]}; "
        + ", ".join(f"{p}: {have[p] or 'none'}" for p in parties)
        + "): a resumed run cannot continue it"
    )


def _read_results(results: Path) -> dict[str, Any]:
    """The coordinator's ``results.json`` as a table (``{}`` where it is missing, unreadable or
    not a table: a coordinator killed mid-write, or none started)."""
    try:
        info = json.loads(results.read_text()) if results.is_file() else {}
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _record_cause(results: Path, exc: PartyUnavailable) -> None:
    """Say in the coordinator's ``results.json`` why the launcher stopped it: a party that
    failed before it joined (the coordinator, interrupted, knows only that it was)."""
    info = _read_results(results)
    info["coordinator_status"] = info.get("status", "")
    info["status"] = described(exc)
    info["unavailable_party"] = exc.party
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(info, indent=2))


def training_overrides(model: Path) -> list[str]:
    """The overrides that the launch whose run folder is ``model`` trained with (its
    ``launch.json``): a prediction session applies them before its own, so that its config is
    the training one (``fedviews predict CONFIG --model RUN`` after ``fedviews launch CONFIG
    params.max_iter=5 --out RUN``); none where the folder has no such record.

    Raises
    ------
    DataError
        When the record is not readable or its overrides are not a list of strings.
    """
    path = model / LAUNCH_INFO
    if not path.is_file():
        return []
    try:
        said = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path} is not readable: {exc}") from None
    overrides = said.get("overrides", []) if isinstance(said, dict) else None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise DataError(f"{path}: its overrides are not a list of key=value strings")
    return overrides


def refuse_held(run_dir: Path, coordinator: str) -> None:
    """Refuse to start a launch in ``run_dir`` where another run's results and checkpoints
    are (a launch that started its coordinator, a prediction session, an experiment); the
    folder of a launch that failed before any process started (its config copy and its
    ``launch.json`` only) is taken again.

    Raises
    ------
    ConfigError
        Naming what to do instead: resume the run, or choose another ``--out``.
    """
    results = run_dir / coordinator / "results.json"
    if (run_dir / LAUNCH_INFO).exists() and _read_results(results).get("status") == "ok":
        raise ConfigError(f"{run_dir} holds a finished run ({results}): choose another --out")
    if (run_dir / "config.json").exists() and (run_dir / "metrics.json").exists():
        raise ConfigError(f"{run_dir} holds a finished experiment: choose another --out")
    if (run_dir / "config.json").exists() or (
        (run_dir / LAUNCH_INFO).exists() and (run_dir / coordinator).exists()
    ):
        raise ConfigError(
            f"{run_dir} holds a run already: continue it with `fedviews run --resume "
            f"{run_dir}`, or choose another --out"
        )
    if (run_dir / PREDICT_INFO).exists() and (run_dir / coordinator).exists():
        raise ConfigError(
            f"{run_dir} holds a prediction session already (its predictions stay): "
            "choose another --out"
        )


def check_model_parts(
    model: Path, cfg: DeployConfig, data_dir: Path | None, resume: Path | None
) -> None:
    """Before a prediction session starts any process: every member's model part is in
    ``model`` (the run folder of a finished launch) and belongs to this config, and the new
    rows are given (a :class:`~fedviews.errors.FedViewsError` naming what is missing)."""
    from fedviews.deploy._model import load_model_part

    if resume is not None:
        raise ConfigError("a prediction session is not resumed: run `fedviews predict` again")
    if data_dir is None:
        raise ConfigError(
            "pass --data-dir: the folder of every party's file of new rows (<party>.npz or "
            ".csv, the training formats without labels)"
        )
    get_algorithm_spec(cfg.algorithm).predict_groups(cfg)  # one that predicts alone says how
    fed = cfg.federation
    for member in (fed.coordinator, *fed.parties):
        load_model_part(model / member, cfg, member)


def terminate_as_interrupt() -> Callable[[], None]:
    """Until the returned function is called, SIGTERM raises :class:`Terminated` (a
    ``KeyboardInterrupt``, so handled as Ctrl-C):
    a launcher ended by ``kill`` stops its processes too instead of orphaning them, and a
    coordinator ended by ``kill`` (or by its launcher) writes its ``results.json``."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: object) -> None:
        raise Terminated

    old = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if old is None else old)

    return restore


@contextlib.contextmanager
def stop_signals_held() -> Iterator[list[int]]:
    """A block that SIGTERM and SIGINT do not interrupt (the main thread's handlers; another
    thread's block runs as it is): a process already stopping writes its results whole. A
    launcher whose coordinator is slow to stop (a loaded machine) terminates it a second time;
    that signal ended the writing, and the run lost its ``results.json``. The signals that
    came are in the list the block gets; the process is ending anyway, so they are not
    raised again."""
    came: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield came
        return

    def hold(signum: int, frame: object) -> None:
        came.append(signum)

    old = {sig: signal.signal(sig, hold) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield came
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def resume_launch(run_dir: Path, echo: Callable[[str], None] = print) -> Path:
    """Continue the launched run in ``run_dir`` (killed, or a party died) from its checkpoints.

    Uses the config copy and overrides the launch saved there, so the resumed run is
    the same run; every process goes on after the last round all of them checkpointed.
    """
    from fedviews.deploy._config import load_deploy_config

    info_path = run_dir / LAUNCH_INFO
    if not info_path.is_file():
        raise ProtocolError(
            f"{run_dir} is not the folder of a `fedviews launch`/`fedviews run` deployment "
            f"(no {LAUNCH_INFO}); for a coordinator or party started by hand, restart each "
            "process with --resume <its folder>"
        )
    info = json.loads(info_path.read_text())
    config = run_dir / str(info["config"])
    overrides = [str(o) for o in info.get("overrides", [])]
    cfg = load_deploy_config(config, overrides)
    given: dict[str, Any] = {}
    for key, flag in (("data_dir", "--data-dir"), ("certs_dir", "--certs")):
        if info.get(key):  # a folder the launch was given
            folder = Path(str(info[key]))
            if not folder.is_dir():
                raise ConfigError(
                    f"{run_dir} was launched with {flag} {folder}, which is gone: restore it, "
                    f"or continue with `fedviews launch {config} {flag} DIR --resume {run_dir}`"
                )
            given[key] = folder
    return launch(
        config,
        cfg,
        overrides,
        insecure=bool(info.get("insecure")),
        echo=echo,
        resume=run_dir,
        **given,
    )
