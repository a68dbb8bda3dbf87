"""Separate hosts on this machine: Linux network namespaces on one switch.

:func:`hosts` builds ``n`` namespaces (``fvns<pid>h0`` ...), each with one interface
``eth0`` and its own address ``10.214.0.<i+1>/24``, all plugged into a bridge that
lives in one more namespace (``fvns<pid>sw``): the machine's own namespace is never
touched. A process started in host ``i`` (:meth:`Hosts.start`) reaches the others only
through their addresses (its ``127.0.0.1`` is its own loopback), and names given in
``names`` resolve to a host's address in every host (``/etc/netns/<ns>/hosts``, which
``ip netns exec`` mounts over ``/etc/hosts``), as DNS would across organisations.

Everything is removed on exit, also on a failure, on SIGTERM and after a killed run
(the namespaces of a process that no longer exists are deleted by the next run). A
test that cannot have namespaces (not root, no ``ip``, namespaces refused) is skipped
with the reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

PREFIX = "fvns"
SUBNET = "10.214.0"
ETC = Path("/etc/netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, text=True, capture_output=True)


def namespaces() -> list[str]:
    """The network namespaces of this machine (``ip netns list``)."""
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line]


def _pids(ns: str) -> list[int]:
    """The processes that run in namespace ``ns`` (started by this helper's hosts)."""
    return [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]


def _signal(ns: str, sig: int) -> None:
    for pid in _pids(ns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _remove(ns: str) -> None:
    """Kill what still runs in ``ns``, delete it and its ``/etc/netns`` folder."""
    _signal(ns, signal.SIGKILL)
    _ip("netns", "del", ns, check=False)
    shutil.rmtree(ETC / ns, ignore_errors=True)


def _remove_stale() -> None:
    """Delete the namespaces of earlier runs whose process is gone (a SIGKILLed test)."""
    for ns in namespaces():
        owner = re.match(rf"{PREFIX}(\d+)", ns)
        if owner is not None and not Path(f"/proc/{owner.group(1)}").exists():
            _remove(ns)


class Hosts:
    """``n`` hosts on one switch; host ``i`` is namespace :attr:`names` ``[i]`` at
    :meth:`address` ``(i)``."""

    def __init__(self, n: int) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}sw"
        self.names = [f"{self.tag}h{i}" for i in range(n)]
        self.made: list[str] = []
        self.procs: list[subprocess.Popen[str]] = []

    @staticmethod
    def address(i: int) -> str:
        """Host ``i``'s IPv4 address."""
        return f"{SUBNET}.{i + 1}"

    def up(self, names: Mapping[str, int]) -> None:
        """Build the switch and the hosts; ``names``: host name -> host index, resolved in
        every host."""
        for ns in (self.switch, *self.names):
            _ip("netns", "add", ns)
            self.made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        table = "127.0.0.1 localhost\n"
        table += "".join(f"{self.address(i)} {name}\n" for name, i in names.items())
        for i, ns in enumerate(self.names):
            _ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p{i}",
                "netns", self.switch)  # fmt: skip
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            (ETC / ns).mkdir(parents=True, exist_ok=True)
            (ETC / ns / "hosts").write_text(table)

    def start(self, i: int, argv: Sequence[str], **kw: Any) -> subprocess.Popen[str]:
        """``argv`` in host ``i`` (``ip netns exec``), its own process group; stopped at
        the end. ``kw``: for :class:`subprocess.Popen` (text mode)."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.names[i], *argv],
            text=True,
            start_new_session=True,
            **kw,
        )
        self.procs.append(proc)
        return proc

    def run(self, i: int, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        """``argv`` in host ``i`` to its end; its output (stdout and stderr) captured."""
        return subprocess.run(
            ["ip", "netns", "exec", self.names[i], *argv],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **kw,
        )

    def commands(self, i: int) -> list[str]:
        """The command lines of the processes that run in host ``i`` now."""
        found = []
        for pid in _pids(self.names[i]):
            with contextlib.suppress(OSError):
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" "))
        return [c.decode(errors="replace") for c in found]

    def connects(self, i: int, address: str) -> bool:
        """Whether host ``i`` opens a TCP connection to ``address`` (``HOST:PORT``)."""
        host, port = address.rsplit(":", 1)
        code = f"import socket; socket.create_connection(({host!r}, {port}), timeout=2).close()"
        return self.run(i, [sys.executable, "-c", code]).returncode == 0

    def down(self) -> None:
        """Stop every process of the hosts (SIGTERM, SIGKILL after 10 s; also those that
        left their parent, such as Ray's daemons), delete the hosts."""
        for ns in self.made:
            _signal(ns, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(map(_pids, self.made)):
            for proc in self.procs:
                proc.poll()  # reaped once it exits
            time.sleep(0.2)
        for ns in reversed(self.made):
            _remove(ns)
        for proc in self.procs:
            proc.wait()
        self.made.clear()


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "separate hosts need root (network namespaces)"
    if shutil.which("ip") is None:
        return "separate hosts need iproute2's `ip`"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"network namespaces refused here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@contextlib.contextmanager
def hosts(n: int, names: Mapping[str, int] | None = None) -> Iterator[Hosts]:
    """``n`` hosts on one switch, removed on exit (see the module); skips the test where
    namespaces cannot be had."""
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    _remove_stale()
    net = Hosts(n)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGTERM, stop) if main else None
    try:
        net.up(names or {})
        yield net
    finally:
        net.down()
        if main:
            signal.signal(signal.SIGTERM, old)
