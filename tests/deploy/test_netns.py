"""The separate hosts of ``_netns``: reachable by address only, and gone afterwards
(after a failure, a SIGTERM and a SIGKILL too)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _netns import ETC, hosts, namespaces

HERE = Path(__file__).resolve().parent
SERVER = """import socket
s = socket.create_server(("0.0.0.0", 7000))
print("up", flush=True)
while True:
    s.accept()[0].close()"""


def test_hosts_reach_each_other_by_address_only_and_vanish_after_a_failure():
    before = set(namespaces())
    with pytest.raises(RuntimeError, match="on purpose"), hosts(2, {"a.example": 0}) as net:
        made = set(namespaces()) - before
        assert made == {net.switch, *net.names}
        server = net.start(0, [sys.executable, "-c", SERVER], stdout=subprocess.PIPE)
        assert server.stdout is not None and server.stdout.readline() == "up\n"
        assert net.connects(1, "a.example:7000")  # by name, resolved to host 0's address
        assert net.connects(1, f"{net.address(0)}:7000")
        assert not net.connects(1, "127.0.0.1:7000")  # host 1's own loopback
        raise RuntimeError("on purpose")
    assert set(namespaces()) == before
    assert server.poll() is not None
    assert not any((ETC / ns).exists() for ns in made)


def _holder(tmp_path: Path) -> subprocess.Popen[str]:
    """A process that builds one host, says its namespace and waits."""
    script = tmp_path / "hold.py"
    script.write_text(
        f"import sys, time\nsys.path.insert(0, {str(HERE)!r})\nfrom _netns import hosts\n"
        "with hosts(1) as net:\n    print(net.names[0], flush=True)\n    time.sleep(120)\n"
    )
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_run_leaves_no_host_behind(tmp_path, sig):
    """SIGTERM: the holder removes its hosts; SIGKILL: the next :func:`hosts` does."""
    proc = _holder(tmp_path)
    assert proc.stdout is not None
    ns = proc.stdout.readline().strip()
    if not ns:
        proc.wait()
        pytest.skip("no network namespaces here")
    assert ns in namespaces()
    proc.send_signal(sig)
    proc.wait(30)
    if sig == signal.SIGKILL:
        assert ns in namespaces()
        with hosts(1):
            pass
    assert ns not in namespaces()
    assert not (ETC / ns).exists()
