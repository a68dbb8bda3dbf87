"""Helpers of the deployment tests: launching a config as a user does, and the protocol
footprint of a run (which roles exchanged which kinds and array names)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

SESSION = ("deploy:", "psi:")


def mmvfl_inputs(data: Path, parties: Sequence[str], owner: int) -> tuple[list, object]:
    """``(Xs, y)`` of the MMVFL party files ``data/<party>.npz`` as one process holds them:
    plain alignment by ID, every view standardised by its own party, ``parties[owner]``'s
    labels."""
    import numpy as np

    from fedviews.data import align_views
    from fedviews.deploy import load_party_data

    datas = [load_party_data(data / f"{p}.npz") for p in parties]
    Xs, ids = align_views([d.X for d in datas], [d.ids for d in datas])
    Xs = [(X - X.mean(0)) / np.where(X.std(0) < 1e-12, 1.0, X.std(0)) for X in Xs]
    held = datas[owner]
    return Xs, held.y[np.argsort(held.ids)][np.searchsorted(np.sort(held.ids), ids)]


def mmvfl_reference(cfg: Any, Xs: list, y: object, owner: int) -> Any:
    """``MMVFL`` with the deployment config ``cfg``'s params and seed, fitted in one process
    on :func:`mmvfl_inputs`' ``(Xs, y)``."""
    from fedviews.linear import MMVFL

    p = cfg.params
    return MMVFL(
        beta=p.beta,
        zeta=p.zeta,
        eta=p.eta,
        label_owner=owner,
        max_iter=p.max_iter,
        tol=p.tol,
        inner_max_iter=p.inner_max_iter,
        inner_tol=p.inner_tol,
        random_state=cfg.seed,
    ).fit(Xs, y)


def tls_hub(policy: object, certs: Path, parties: Iterable[str], options: object) -> object:
    """A coordinator hub with mutual TLS (``certs``: the federation's folder) that expects
    ``parties`` (role ``"party"``), with a bare :class:`Coordinator` registered."""
    from fedviews.federation import Coordinator, GrpcHub, TLSFiles

    hub = GrpcHub(
        policy,  # type: ignore[arg-type]
        {p: "party" for p in parties},
        tls=TLSFiles.from_dir(certs, "coordinator"),
        options=options,  # type: ignore[arg-type]
    )
    hub.register(Coordinator())
    return hub


def inherited(
    cmd: Sequence[str], *, nofile: int | None = None, sigint_ignored: bool = False
) -> list[str]:
    """``cmd`` started by a shell that set what it inherits at exec: its descriptor limit,
    soft and hard, at ``nofile`` and SIGINT ignored (as a background job of a script is).

    Never a ``preexec_fn`` (nor ``os.fork``): that forks the test process with Python code to
    run before the exec, and once the process has run a gRPC server, gRPC's fork handlers
    restart its poller threads in the child; subprocess then closes the child's descriptors
    (close_fds), the poller's epoll descriptor among them, and a poller that polls again
    before the exec aborts the child ("Epoll1Poller ... encountered epoll_wait error: Bad
    file descriptor"). That was seen, now and then, for starts beside a running gRPC server on
    a loaded machine (the coordinator of test_a_non_member_holding_connections... once), and
    never for starts through the shell. A start without one is a vfork, which runs no fork
    handler."""
    steps = [f"ulimit -n {int(nofile)}"] if nofile is not None else []
    steps += ["trap '' INT"] if sigint_ignored else []
    if not steps:
        return list(cmd)
    return ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh", *cmd]


def fedviews_process(
    *args: str, nofile: int | None = None, sigint_ignored: bool = False, **kw: Any
) -> subprocess.Popen[str]:
    """``fedviews ARGS`` started as a user starts it (its output, stdout and stderr, in one
    pipe; unbuffered); ``nofile``, ``sigint_ignored``: see :func:`inherited`."""
    return subprocess.Popen(
        inherited(
            [sys.executable, "-m", "fedviews", *args], nofile=nofile, sigint_ignored=sigint_ignored
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )


def start_coordinator(
    config: Path, certs: Path, out: Path, *extra: str, **kw: Any
) -> tuple[subprocess.Popen[str], int]:
    """``fedviews coordinator CONFIG`` with mutual TLS (``certs``: the federation's folder) on
    127.0.0.1, writing to ``out``; once it listens: ``(the process, its port)``. ``kw``: for
    :func:`fedviews_process`."""
    port = out.with_name(out.name + ".port")
    proc = fedviews_process(
        "coordinator", str(config), "--certs", str(certs), "--listen", "127.0.0.1:0",
        "--port-file", str(port), "--out", str(out), *extra, **kw,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (port.is_file() and port.read_text()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the coordinator did not listen: {proc.communicate()[0]}")
        time.sleep(0.05)
    return proc, int(port.read_text())


def party_args(config: Path, fed: Path, name: str, address: str, out: Path) -> list[str]:
    """The arguments of ``fedviews party`` ``name`` of a federation folder ``fed`` (``data/NAME.npz``,
    ``certs/``) that dials ``address`` and writes to ``out/NAME``."""
    return [
        "party", str(config), "--party", name, "--data", str(fed / "data" / f"{name}.npz"),
        "--coordinator", address, "--certs", str(fed / "certs"), "--out", str(out / name),
    ]  # fmt: skip


class Output:
    """What a process prints, line by line, read by a thread of its own: a test waits for
    a line while the process runs."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, str]] = []  # (time.monotonic() when read, line)
        self._more = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._more:
                self.lines.append((time.monotonic(), line))
                self._more.notify_all()
        with self._more:
            self._more.notify_all()

    @property
    def text(self) -> str:
        with self._more:
            return "".join(line for _, line in self.lines)

    def wait_for(self, text: str, timeout: float) -> float:
        """When (``time.monotonic()``) the first line containing ``text`` was read."""
        deadline = time.monotonic() + timeout
        with self._more:
            while True:
                hit = next((t for t, line in self.lines if text in line), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(f"no {text!r} within {timeout:g} s: {self.text}")
                self._more.wait(min(left, 0.5))

    def finish(self, timeout: float) -> str:
        """Everything the process printed, once it has exited (killed past ``timeout``:
        ``subprocess.TimeoutExpired``)."""
        try:
            self.proc.wait(timeout)
        finally:
            self.stop()
        return self.text

    def stop(self) -> None:
        """Kill the process if it still runs; read the rest of its output."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(10)


def silent_streams(certs: Path, port: int, who: str, n: int, never: threading.Event) -> list:
    """``n`` streams to the hub at ``port`` with ``who``'s certificate (``certs``: the
    federation's folder) that never say hello, over a few channels as an attacker spreads
    them, until ``never`` is set."""
    import grpc

    from fedviews.federation import TLSFiles
    from fedviews.federation._grpc import _METHOD

    def silence() -> Iterator[bytes]:  # ends without a frame: never a (malformed) hello
        never.wait(60)
        yield from ()

    tls = TLSFiles.from_dir(certs, who)
    calls = []
    for i in range(n):
        if i % 10 == 0:
            channel = grpc.secure_channel(
                f"127.0.0.1:{port}",
                tls.channel_credentials(),
                options=[("grpc.ssl_target_name_override", "coordinator")],
            )
        calls.append(channel.stream_stream(_METHOD)(silence()))
    return calls


def memory_mib(pid: int) -> dict[str, float]:
    """``VmRSS`` (resident now) and ``VmHWM`` (its peak) of process ``pid``, in MiB
    (``/proc/PID/status``, Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB
    return fields


def launch_config(config: Path, out: Path, timeout: float = 240) -> str:
    """`fedviews launch CONFIG --out OUT` as a user runs it; its output (the exit code checked)."""
    proc = subprocess.run(
        [sys.executable, "-m", "fedviews", "launch", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


def footprint(
    exchanges: Iterable[Sequence[object]], roles: Mapping[str, str]
) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """``{(sender role, receiver role, kind, names)}`` of a message log, session kinds left out.

    ``exchanges``: ``MessageLog.exchanges()`` or the ``"exchanges"`` of a ``message_log.json``;
    ``roles``: party name -> role (the coordinator included).
    """
    out = set()
    for sender, receiver, kind, names in exchanges:
        base = str(kind).removesuffix(":reply")
        if base.startswith(SESSION):
            continue
        out.add((roles[str(sender)], roles[str(receiver)], str(kind), tuple(names)))  # type: ignore[arg-type]
    return out


def assert_tight(policy: object, seen: set[tuple[str, str, str, tuple[str, ...]]]) -> None:
    """The policy allows exactly what crossed: every allowed array name and request kind
    of every role pair was used (nothing wider), and nothing else crossed."""
    names: dict[tuple[str, str], set[str]] = {}
    kinds: dict[tuple[str, str], set[str]] = {}
    for s, r, kind, arrays in seen:
        names.setdefault((s, r), set()).update(arrays)
        if not kind.endswith(":reply"):
            kinds.setdefault((s, r), set()).add(kind)
    allowed = {k: set(v) for k, v in policy.allowed.items() if v}  # type: ignore[attr-defined]
    assert {k: v for k, v in names.items() if v} == allowed
    assert kinds == {k: set(v) for k, v in policy.kinds.items() if v}  # type: ignore[attr-defined]


def forged(msg: Any, specs: Mapping[str, Any]) -> Any:
    """``msg`` as a dishonest party sends it: its encoding (sealed or not) lies about every
    array's spec (``specs``: field -> value, e.g. ``{"shape": [3.0]}``; a ``size`` of 0
    drops the arrays' bytes)."""
    from fedviews.federation import Message

    class Forged(Message):
        def layout(self) -> tuple[dict[str, Any], list[Any]]:
            head, payloads = super().layout()
            for spec in head["arrays"]:
                spec.update(specs)
            return head, [] if specs.get("size") == 0 else payloads

    return Forged(msg.kind, msg.sender, msg.receiver, msg.round, msg.arrays, msg.meta)


def doc_section(page: Path, start: str, end: str) -> tuple[list[list[list[str]]], str]:
    """The part of ``page`` from the line ``start`` to the next ``end``: its ``bash`` blocks
    (the commands of each, one per line, ``\\`` continuing a line, comment lines left out)
    and its whole text (prose and comments, for what the commands leave to a person)."""
    import shlex

    section = page.read_text().split(f"\n{start}\n", 1)[1].split(end, 1)[0]
    blocks = []
    for block in section.split("```bash\n")[1:]:
        code = block.split("```", 1)[0].replace("\\\n", " ")
        lines = [shlex.split(line, comments=True) for line in code.splitlines()]
        blocks.append([c for c in lines if c])
    return blocks, section


def in_process_session(path: Path, data: Path, out: Path) -> tuple[Any, dict, Any]:
    """The deployed session of config ``path`` on the files ``data/<party>.npz``, run in one
    process (InProcessTransport, the PSI included where the config asks for it): its
    coordinator, results and transport; every party writes its outputs under ``out``."""
    from fedviews.deploy import load_deploy_config, load_party_data
    from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy
    from fedviews.federation import InProcessTransport

    cfg = load_deploy_config(path)
    transport = InProcessTransport(session_policy(cfg))
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")
    transport.register(coord)
    for p in cfg.federation.parties:
        party = DeployParty(cfg, p, load_party_data(data / f"{p}.npz"), out / p, lambda _: None)
        transport.register(party)
    return coord, coord.run(), transport
