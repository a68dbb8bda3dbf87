"""The WAN emulation of benchmarks/bench_wan.py builds the links it claims and cleans up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None or not os.path.exists("/dev/net/tun"),
    reason="needs root, iproute2 and /dev/net/tun (network namespaces + TUN devices)",
)


@pytest.fixture
def bench_wan(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_wan

    return bench_wan


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_links_have_the_profile_rtt_and_rate_and_vanish_afterwards(bench_wan):
    before = namespaces()
    with bench_wan.topology(2, 9000) as topo:
        made = namespaces() - before
        assert made == {topo.switch, *topo.hosts}
        assert all(ns.startswith(f"fvwan{os.getpid()}") for ns in made)
        topo.shape("100mbit", 20.0)
        rtt = topo.rtt_ms()
        mbps = topo.throughput_mbps(2_500_000)  # 0.2 s at 100 Mbit/s
    assert 18.0 <= rtt <= 35.0, rtt  # 20 ms + the forwarder's scheduling
    assert 50.0 <= mbps <= 105.0, mbps  # never faster than the link
    assert namespaces() == before


def test_killed_harness_leaves_nothing_behind(tmp_path):
    """SIGTERM during a run removes the namespaces (the finally of `topology`)."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "import bench_wan\n"
        "with bench_wan.topology(2, 1500) as topo:\n"
        "    print(topo.tag, flush=True)\n"
        "    time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tag = proc.stdout.readline().strip()
    assert any(ns.startswith(tag) for ns in namespaces())
    proc.terminate()
    proc.wait(30)
    assert not any(ns.startswith(tag) for ns in namespaces())
