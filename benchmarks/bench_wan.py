"""Seconds per round over emulated wide-area links, in network namespaces.

    sudo .venv/bin/python benchmarks/bench_wan.py [--algorithms multivfl apfed mmvfl]
        [--profiles lan fast slow] [--rounds 1] [--insecure] [--mtu 9000] [--set key=value ...]

Each process of a deployment gets a host of its own: a network namespace whose only
link (a TUN device) leads to a switch in one more namespace. This machine's kernel has
no ``tc netem`` (``tc`` offers ``htb``/``tbf`` here, nothing that delays packets), so the
switch is a user-space delay line (``_wanlink.py``): every host's uplink and downlink
is served at the profile's rate and any two hosts see the profile's round-trip time;
TCP runs end to end through it. Before each profile the harness measures what it
built: the median TCP round trip of one byte and the throughput of one bulk transfer
between two hosts (printed beside the results).

The coordinator's hub runs in host 0 (this script re-runs itself there, with
``ip netns exec``), each party in a host of its own (``fedviews party`` processes
holding only their data files). A message between two parties is relayed by the hub,
so it crosses the hub's link twice: that link is the bottleneck, as it would be for an
organisation hosting the coordinator.

Profiles (rate / RTT): ``lan`` 1 Gbit/s / 1 ms, ``fast`` 100 Mbit/s / 20 ms,
``slow`` 20 Mbit/s / 50 ms. Columns: in-process seconds per round (this machine, no
network), then seconds per round over each profile and the ratio to in-process.
Multi-VFL and APFed rounds are one local epoch (2,000 MNIST images); MMVFL rounds are
one consensus round on Handwritten (2,000 samples, 5 views).

Needs root (namespaces, TUN devices) and iproute2. It only creates namespaces named
``fvwan<pid>…`` and the 10.213.0.0/24 addresses inside them, never touches the
machine's own namespace, and deletes everything it made on exit (also on Ctrl-C /
SIGTERM); ``--cleanup`` removes what a killed run left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# one thread per numeric library in every process, the in-process baseline included (what
# `fedviews launch` gives 3-7 processes on 2 cores; left at the default, an in-process APFed
# epoch took 24.5 s instead of 2.6 s on this machine under load: OpenMP oversubscription)
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _args import parser, positive_int, run_cli  # noqa: E402
from bench_grpc import CONFIGS, run_grpc, run_in_process  # noqa: E402

from fedviews.deploy import load_deploy_config, make_certs, write_demo_data  # noqa: E402

#: rate, round-trip time in ms
PROFILES = {"lan": ("1gbit", 1.0), "fast": ("100mbit", 20.0), "slow": ("20mbit", 50.0)}
PREFIX = "fvwan"
SUBNET = "10.213.0"

CONFIGS = {
    **CONFIGS,
    "apfed": """algorithm = "apfed"
name = "bench_wan_apfed"
[federation]
parties = ["active", "passive"]
label_owner = "active"
alignment = "psi"
timeout = 120.0
[data]
dataset = "mnist"
n_per_class = 200
n_test = 0
[params]
epochs = {rounds}
batch_size = 64
evaluate = false
device = "cpu"
""",
}


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), check=check, text=True, capture_output=True)


class Topology:
    """Hosts ``h0`` (the hub) .. ``hN`` behind one user-space switch (``_wanlink.py``)."""

    def __init__(self, n_hosts: int, mtu: int) -> None:
        self.tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{self.tag}sw"
        self.hosts = [f"{self.tag}h{i}" for i in range(n_hosts)]
        self.mtu = mtu
        self.made: list[str] = []
        self.link: subprocess.Popen[str] | None = None

    def address(self, i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def up(self) -> None:
        for ns in (self.switch, *self.hosts):
            sh("ip", "netns", "add", ns)
            self.made.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        self.link = subprocess.Popen(
            ["ip", "netns", "exec", self.switch, sys.executable, str(HERE / "_wanlink.py")]
            + [SUBNET, str(self.mtu), *self.hosts],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.link.stdout is not None
        if self.link.stdout.readline().strip() != "READY":
            raise SystemExit("the user-space switch (_wanlink.py) did not start")

    def shape(self, rate: str, rtt_ms: float) -> None:
        """Every link: ``rate`` each way; any two hosts ``rtt_ms`` apart."""
        assert self.link is not None and self.link.stdin is not None
        self.link.stdin.write(f"{parse_rate(rate)} {rtt_ms}\n")
        self.link.stdin.flush()

    def _probe(self, server_code: str, client_code: str, *args: str) -> float:
        """Start ``server_code`` in host 0, run ``client_code`` in host 1; its printed float."""
        server = subprocess.Popen(
            ["ip", "netns", "exec", self.hosts[0], sys.executable, "-c", server_code]
            + [self.address(0)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None
        server.stdout.readline()  # listening
        out = sh(
            "ip", "netns", "exec", self.hosts[1], sys.executable, "-c", client_code,
            self.address(0), *args,
        ).stdout  # fmt: skip
        server.wait(60)
        return float(out)

    def rtt_ms(self) -> float:
        """Median round trip of one byte over TCP (no ``ping`` here) from host 1 to host 0."""
        return self._probe(ECHO, PROBE) * 1e3

    def throughput_mbps(self, nbytes: int) -> float:
        """One TCP transfer of ``nbytes`` from host 1 to host 0, as the application sees it."""
        return nbytes * 8 / self._probe(SINK, SOURCE, str(nbytes)) / 1e6

    def down(self) -> None:
        if self.link is not None:
            assert self.link.stdin is not None
            self.link.stdin.close()
            try:
                self.link.wait(5)
            except subprocess.TimeoutExpired:
                self.link.kill()
            self.link = None
        for ns in reversed(self.made):
            sh("ip", "netns", "del", ns, check=False)
        self.made.clear()


def parse_rate(rate: str) -> float:
    """``100mbit`` -> bits per second."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    return float(rate)


# a TCP sink on port 5999 that reads until EOF, then acknowledges; and its source (prints s)
SINK = """import socket, sys
s = socket.create_server((sys.argv[1], 5999)); print("up", flush=True)
c, _ = s.accept()
while c.recv(1 << 20): pass
c.sendall(b"k"); c.close()"""
ECHO = """import socket, sys
s = socket.create_server((sys.argv[1], 5998)); print("up", flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while b := c.recv(1): c.sendall(b)"""
PROBE = """import socket, statistics, sys, time
c = socket.create_connection((sys.argv[1], 5998))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
times = []
for _ in range(11):
    t0 = time.perf_counter(); c.sendall(b"x"); c.recv(1); times.append(time.perf_counter() - t0)
c.close(); print(statistics.median(times))"""
SOURCE = """import socket, sys, time
c = socket.create_connection((sys.argv[1], 5999)); n = int(sys.argv[2]); buf = bytes(1 << 20)
t0 = time.perf_counter()
while n > 0: c.sendall(buf[: min(n, len(buf))]); n -= len(buf)
c.shutdown(socket.SHUT_WR); c.recv(1)
print(time.perf_counter() - t0)"""


def cleanup_all() -> list[str]:
    """Delete every namespace a run of this script left behind (names ``fvwan<pid>…``)."""
    names = [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines() if line]
    gone = [n for n in names if n.startswith(PREFIX) and n[len(PREFIX) :][:1].isdigit()]
    for ns in gone:
        sh("ip", "netns", "del", ns, check=False)
    return gone


@contextmanager
def topology(n_hosts: int, mtu: int) -> Iterator[Topology]:
    topo = Topology(n_hosts, mtu)

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, stop)
    try:
        topo.up()
        yield topo
    finally:
        topo.down()
        signal.signal(signal.SIGTERM, old)


def worker(args: argparse.Namespace) -> None:
    """Inside the hub's namespace: one gRPC run, parties started in their namespaces."""
    spec = json.loads(args.worker)
    config, data = Path(spec["config"]), Path(spec["data"])
    cfg = load_deploy_config(config, spec["set"])
    certs = None if spec["certs"] is None else Path(spec["certs"])
    launchers = {p: ["ip", "netns", "exec", ns] for p, ns in spec["hosts"].items()}
    out = run_grpc(cfg, config, data, certs, host=spec["host"], launchers=launchers)
    print("RESULT " + json.dumps({k: v for k, v in out.items() if k != "lines"}))
    print("LAST " + out["lines"][-1])


def run_group(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a process group of its own; stopping this script (Ctrl-C, SIGTERM)
    stops it and every party process it started, wherever they wait."""
    proc = subprocess.Popen(
        cmd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        out, err = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


#: the algorithms whose parties talk to each other (direct links change something)
PEER_TO_PEER = {"multivfl", "apfed"}


def run_algorithm(
    algorithm: str, config: Path, topo: Topology, args: argparse.Namespace, profiles: list[str]
) -> dict[str, Any]:
    """Every profile (and mode) of the deployment ``config``, its files beside it."""
    text, tmp = config.read_text(), config.parent
    cfg = load_deploy_config(config, args.set)
    data = tmp / f"{algorithm}-data"
    write_demo_data(cfg, data)
    certs = None if args.insecure else make_certs(tmp / f"{algorithm}-certs", cfg)
    row: dict[str, Any] = {"in_process": run_in_process(cfg, data)["seconds"] / args.rounds}
    parties = list(cfg.federation.parties)
    modes = {"relayed": config}
    if algorithm in PEER_TO_PEER and not args.relayed_only:
        direct = tmp / f"{algorithm}-direct.toml"  # every party listens in its own host
        listen = "".join(f'{p} = "{topo.address(i + 1)}:7100"\n' for i, p in enumerate(parties))
        direct.write_text(f"{text}\n[federation.listen]\n{listen}")
        modes["direct"] = direct
    for name in profiles:
        rate, rtt = PROFILES[name]
        topo.shape(rate, rtt)
        measured_rtt = topo.rtt_ms()
        mbps = topo.throughput_mbps(int(parse_rate(rate) / 8 * 2))  # ~2 s of traffic
        row[f"{name}_rtt"], row[f"{name}_mbps"] = measured_rtt, mbps
        for mode, path in modes.items():
            spec = {
                "config": str(path),
                "data": str(data),
                "set": args.set,
                "certs": None if certs is None else str(certs),
                "host": topo.address(0),
                "hosts": {p: topo.hosts[i + 1] for i, p in enumerate(parties)},
            }
            proc = run_group(
                ["ip", "netns", "exec", topo.hosts[0], sys.executable, __file__]
                + ["--worker", json.dumps(spec)]
            )
            result = next(
                (
                    json.loads(line[7:])
                    for line in proc.stdout.splitlines()
                    if line.startswith("RESULT ")
                ),
                None,
            )
            if proc.returncode != 0 or result is None:
                raise SystemExit(
                    f"{algorithm} {mode} over {name} failed:\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}"
                )
            seconds = row[f"{name}/{mode}"] = result["seconds"] / args.rounds
            print(
                f"  {algorithm:9s} {name:5s} {mode:8s} ({rate}: measured {mbps:.0f} Mbit/s, "
                f"RTT {measured_rtt:.1f} ms): {seconds:.2f} s per round "
                f"({seconds / row['in_process']:.1f}x in-process)",
                flush=True,
            )
    return row


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--algorithms", nargs="*", default=["multivfl", "apfed", "mmvfl"], choices=sorted(CONFIGS)
    )
    ap.add_argument("--profiles", nargs="*", default=list(PROFILES), choices=list(PROFILES))
    ap.add_argument("--rounds", type=positive_int, default=1, help="rounds (epochs) per run")
    ap.add_argument("--insecure", action="store_true", help="plain-text gRPC instead of mutual TLS")
    ap.add_argument("--set", nargs="*", default=[], help="config overrides key=value")
    ap.add_argument("--relayed-only", action="store_true", help="skip the direct-link runs")
    ap.add_argument("--mtu", type=positive_int, default=9000, help="MTU of the emulated links")
    ap.add_argument("--cleanup", action="store_true", help="remove namespaces a killed run left")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.cleanup:
        print(f"removed {cleanup_all() or 'nothing'}")
        return
    if os.geteuid() != 0 or shutil.which("tc") is None or shutil.which("ip") is None:
        raise SystemExit("bench_wan needs root and iproute2 (ip, tc): network namespaces + netem")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp_:
        for algorithm in args.algorithms:
            config = Path(tmp_) / f"{algorithm}.toml"
            config.write_text(CONFIGS[algorithm].format(rounds=args.rounds))
            n_parties = len(load_deploy_config(config, args.set).federation.parties)
            with topology(n_parties + 1, args.mtu) as topo:
                rows[algorithm] = run_algorithm(algorithm, config, topo, args, args.profiles)
    print(
        "\nseconds per round (ratio to in-process); relayed = through the hub, direct = party to party"
    )
    print("| algorithm | in-process |" + "".join(f" {describe(p)} |" for p in args.profiles))
    print("|---|---:|" + "---:|" * len(args.profiles))
    for algorithm, row in rows.items():
        cells = ""
        for p in args.profiles:
            got = [
                f"{mode} {row[f'{p}/{mode}']:.2f} s ({row[f'{p}/{mode}'] / row['in_process']:.1f}x)"
                for mode in ("relayed", "direct")
                if f"{p}/{mode}" in row
            ]
            cells += " " + "<br>".join(got) + " |"
        print(f"| {algorithm} | {row['in_process']:.2f} s |{cells}")
    print(
        "\nmeasured links: "
        + "; ".join(
            f"{p}: {row[f'{p}_mbps']:.0f} Mbit/s, RTT {row[f'{p}_rtt']:.1f} ms"
            for p in args.profiles
            for row in list(rows.values())[:1]
        )
    )


def describe(profile: str) -> str:
    rate, rtt = PROFILES[profile]
    return (
        f"{profile} ({rate.replace('gbit', ' Gbit/s').replace('mbit', ' Mbit/s')}, {rtt:g} ms RTT)"
    )


if __name__ == "__main__":
    run_cli(main)
