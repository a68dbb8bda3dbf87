"""Time and bytes per round, in-process vs loopback gRPC (mutual TLS), for any deployable algorithm.

    .venv/bin/python benchmarks/bench_grpc.py mmvfl    [--rounds 10] [--insecure]
    .venv/bin/python benchmarks/bench_grpc.py multivfl [--rounds 2]  [--insecure]
    .venv/bin/python benchmarks/bench_grpc.py multivfl --e2e-cost
    .venv/bin/python benchmarks/bench_grpc.py multivfl --direct [--per-process]

``--e2e-cost`` also runs gRPC with ``federation.end_to_end = false`` (mutual TLS,
party-to-party payloads not sealed) in the same process and prints what sealing
every relayed activation and gradient costs. ``--direct`` also runs gRPC with every
party declaring an endpoint (``[federation.listen]`` on 127.0.0.1): party-to-party
messages go over direct links (one hop, TLS between the two parties) instead of the
hub's relay (two hops, sealed end to end).

``mmvfl``: MMVFL on Handwritten (5 views x 2000 samples). ``multivfl``: Multi-VFL on
MNIST (4 data owners, 2 label owners, 2000 training images, one local epoch per
round, so a round is one epoch). Set ``--set key=value`` to change the config.

In-process: the deploy app's objects of every party in this process
(:func:`fedviews.federation.build_in_process`, every message still encoded and
decoded) — the same objects the processes build. gRPC: this process is the
coordinator hub; each party is its own ``fedviews party`` process holding only
its data file. Time = the coordinator's training loop only. Bytes: the raw array
bytes of all messages of the rounds; the encoded message bytes; the frame bytes
the hub sent + received (a party-to-party message, relayed by the hub, crosses
two links and is counted twice; a direct one is not seen by the hub); what crossed
the loopback interface during the rounds (``/proc/net/dev``: TLS records, HTTP/2 and
TCP/IP headers, heartbeats; other loopback traffic on the machine would be counted
too). CPU seconds: of every process of the run during the training loop
(``/proc/PID/stat``), which the load of a shared machine moves far less than the
wall-clock time. Needs the ``grpc`` extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _args import parser, positive_int, run_cli
from _record import NA, json_option, write_record

from fedviews._heap import keep_freed_memory
from fedviews.deploy import (
    free_port,
    load_deploy_config,
    load_party_data,
    make_certs,
    process_env,
    write_demo_data,
)
from fedviews.errors import require
from fedviews.federation import (
    Coordinator,
    InProcessTransport,
    Message,
    TLSFiles,
    build_in_process,
    get_algorithm_spec,
)

CONFIGS = {
    "mmvfl": """algorithm = "mmvfl"
name = "bench_grpc_mmvfl"
[federation]
parties = ["pix", "fou", "fac", "zer", "kar"]
label_owner = "pix"
alignment = "none"
[data]
dataset = "handwritten"
[params]
standardize = true
max_iter = {rounds}
tol = 0.0
""",
    "multivfl": """algorithm = "multivfl"
name = "bench_grpc_multivfl"
[federation]
parties = ["s0", "s1", "s2", "s3", "lo0", "lo1"]
label_owners = ["lo0", "lo1"]
alignment = "psi"  # label owners hold subsets: PSI (not timed)
timeout = 60.0
[data]
dataset = "mnist"
n_per_class = 200
n_test = 0
[params]
rounds = {rounds}
batch_size = 64
evaluate = false
device = "cpu"
""",
}

#: rounds of a run when --rounds is not given
ROUNDS = {"mmvfl": 10, "multivfl": 2}


def _loopback_bytes() -> int:
    """Bytes sent over the loopback interface so far (Linux), TCP/IP headers included."""
    with open("/proc/net/dev") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])  # transmit bytes (= received, on loopback)
    return 0


def _cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds that process ``pid`` has used so far (Linux), all its
    threads included."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds that the processes ``pids`` have used so far."""
    return sum(sum(_cpu_times(pid)) for pid in pids)


class _Counting(InProcessTransport):
    """Counts the raw array bytes of every request and reply."""

    raw = 0

    def request(self, msg: Message) -> Message:
        reply = super().request(msg)
        self.raw += msg.nbytes + reply.nbytes
        return reply


def direct_config(text: str, parties: tuple[str, ...]) -> str:
    """``text`` with every party listening for direct links on a free loopback port."""
    table = "".join(f'{p} = "127.0.0.1:{free_port()}"\n' for p in parties)
    return f"{text}\n[federation.listen]\n{table}"


def run_in_process(cfg: Any, data: Path) -> dict[str, Any]:
    files = {p: load_party_data(data / f"{p}.npz") for p in cfg.federation.parties}
    run = build_in_process(cfg, files, keep_entries=False)
    app, coord = run.algorithm, run.coordinator
    counting = _Counting(run.transport.policy, keep_entries=False)
    for obj in (coord, *run.parties.values()):
        counting.register(obj)
    with app.compute_limits():
        t0, c0 = time.perf_counter(), _cpu_seconds([os.getpid()])
        app.run_coordinator(coord, lambda r: None)
        seconds, cpu = time.perf_counter() - t0, _cpu_seconds([os.getpid()]) - c0
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "raw_bytes": counting.raw,
        "message_bytes": counting.log.total_bytes,
        "lines": app.progress(coord),
    }


def run_grpc(
    cfg: Any,
    config: Path,
    data: Path,
    certs: Path | None,
    *,
    host: str = "127.0.0.1",
    launchers: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """One gRPC run: this process is the hub on ``host``; each party a process, started with
    ``launchers[party]`` in front of its command (e.g. ``ip netns exec NS``)."""
    from fedviews.deploy._session import DeployCoordinator, options_of, session_policy
    from fedviews.federation import GrpcHub  # the grpc extra

    app = get_algorithm_spec(cfg.algorithm)
    tls = None if certs is None else TLSFiles.from_dir(certs, "coordinator")
    hub = GrpcHub(
        session_policy(cfg),
        cfg.roles(),
        listen=f"{host}:0",
        tls=tls,
        options=options_of(cfg),
        keep_entries=False,
    )
    coord = DeployCoordinator(cfg, lambda line: None)
    hub.register(coord)
    sec = ["--insecure"] if certs is None else ["--certs", str(certs)]
    procs = [
        subprocess.Popen(
            [*(launchers or {}).get(p, []), sys.executable, "-m", "fedviews", "party"]
            + [str(config), *sec, "--party", p]
            + ["--data", str(data / f"{p}.npz"), "--coordinator", f"{host}:{hub.port}"]
            + ["--out", str(data.parent / p)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=process_env(len(cfg.federation.parties) + 1),  # as `fedviews launch` does
        )
        for p in cfg.federation.parties
    ]
    marks: dict[str, float] = {}
    per0: dict[int, tuple[float, float]] = {}  # pid -> (user, system) CPU-s at the start
    per1: dict[int, tuple[float, float]] = {}
    pids = [os.getpid(), *(p.pid for p in procs)]
    original = app.run_coordinator

    def timed(  # bytes of the training loop only
        server: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        marks.update(io0=_loopback_bytes(), f0=hub.wire_bytes, m0=hub.log.total_bytes)
        marks.update(c0=_cpu_seconds(pids))
        per0.update({pid: _cpu_times(pid) for pid in pids})
        try:
            return original(server, on_round_end)
        finally:
            marks.update(io1=_loopback_bytes(), f1=hub.wire_bytes, m1=hub.log.total_bytes)
            marks.update(c1=_cpu_seconds(pids))
            per1.update({pid: _cpu_times(pid) for pid in pids})

    app.run_coordinator = timed  # type: ignore[method-assign, assignment]
    try:
        hub.wait_for_parties(120)
        with app.compute_limits():
            coord.run()
    finally:
        app.run_coordinator = original  # type: ignore[method-assign]
        hub.close()
        for p in procs:
            p.wait(60)
    return {
        "seconds": coord.train_seconds,
        "cpu_seconds": marks["c1"] - marks["c0"],
        "message_bytes": marks["m1"] - marks["m0"],
        "frame_bytes": marks["f1"] - marks["f0"],
        "socket_bytes": marks["io1"] - marks["io0"],
        "per_process": {  # (user, system) CPU-s of the training loop per process
            name: tuple(b - a for a, b in zip(per0[pid], per1[pid], strict=True))
            for name, pid in zip(["hub", *cfg.federation.parties], pids, strict=True)
        },
        "lines": app.progress(coord.server),
    }


def table_rows(
    a: dict[str, Any], runs: list[tuple[str, dict[str, Any]]], rounds: int
) -> list[list[Any]]:
    """The rows of the in-process run ``a`` against the gRPC ``runs``: per round, seconds,
    CPU seconds and bytes, each run's with its ratio to ``a`` (bytes: to the raw arrays)."""
    raw = a["raw_bytes"]
    rows: list[list[Any]] = []
    for key, label in (("seconds", "seconds"), ("cpu_seconds", "CPU seconds")):
        cells = [(round(r[key] / rounds, 4), round(r[key] / a[key], 3)) for _, r in runs]
        rows.append([label, round(a[key] / rounds, 4), *(v for c in cells for v in c)])
    rows.append(["raw array bytes", round(raw / rounds), *(NA for _ in runs for _ in "ab")])
    for key, label in (
        ("message_bytes", "hub message bytes"),
        ("frame_bytes", "hub frame bytes"),
        ("socket_bytes", "loopback bytes"),
    ):
        cells = [(round(r[key] / rounds), round(r[key] / raw, 3)) for _, r in runs]
        mine = round(a[key] / rounds) if key in a else NA
        rows.append([label, mine, *(v for c in cells for v in c)])
    rows.append(["same last round", NA, *(v for _, r in runs for v in (_same_last(a, r), NA))])
    return rows


def _same_last(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Whether run ``b``'s last round has the metrics of ``a``'s (its time left out)."""
    return "yes" if a["lines"][-1].split("(")[0] == b["lines"][-1].split("(")[0] else "no"


def per_process_table(runs: list[tuple[str, dict[str, Any]]], rounds: int) -> dict[str, Any]:
    """Each process's user and system CPU seconds per round of the training loop, a column
    pair per gRPC run of ``runs``."""
    who = list(runs[0][1]["per_process"])
    rows = [
        [name, *(round(t / rounds, 3) for _, r in runs for t in r["per_process"][name])]
        for name in who
    ]
    columns = ["process", *(f"{k} {part}" for k, _ in runs for part in ("user", "system"))]
    return {"title": "CPU seconds per round, by process", "columns": columns, "rows": rows}


def e2e_table(
    a: dict[str, Any], sealed: dict[str, Any], plain: dict[str, Any], rounds: int
) -> dict[str, Any]:
    """What sealing every relayed party-to-party message end to end costs: the relayed run
    ``sealed`` against ``plain`` (TLS only, ``federation.end_to_end = false``), per round;
    whether each ends as the in-process run ``a`` does."""
    rows = [
        [
            label,
            *(round(r[key] / rounds, digits) for r in (sealed, plain)),
            round(sealed[key] / plain[key], 3),
        ]
        for key, label, digits in (
            ("seconds", "seconds", 4),
            ("cpu_seconds", "CPU seconds", 4),
            ("message_bytes", "hub message bytes", None),
            ("frame_bytes", "hub frame bytes", None),
        )
    ]
    rows.append(["same last round", *(_same_last(a, r) for r in (sealed, plain)), NA])
    columns = ["per round, relayed", "sealed end to end", "TLS only", "ratio"]
    return {"title": "End-to-end sealing (mutual TLS either way)", "columns": columns, "rows": rows}


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("algorithm", choices=sorted(CONFIGS))
    ap.add_argument(
        "--rounds",
        type=positive_int,
        help=f"default: {', '.join(f'{r} ({a})' for a, r in ROUNDS.items())}",
    )
    ap.add_argument("--insecure", action="store_true", help="plain-text gRPC instead of mutual TLS")
    ap.add_argument("--set", nargs="*", default=[], help="config overrides key=value")
    ap.add_argument(
        "--e2e-cost", action="store_true", help="also run without end-to-end sealing (TLS only)"
    )
    ap.add_argument(
        "--direct", action="store_true", help="also run with direct party-to-party links"
    )
    ap.add_argument(
        "--per-process",
        action="store_true",
        help="also print each process's user and system CPU seconds per round",
    )
    json_option(ap)
    args = ap.parse_args()
    if args.e2e_cost and args.insecure:
        ap.error("--e2e-cost compares runs with mutual TLS: leave out --insecure")
    require("grpc", "grpc")  # before the in-process run: the install hint, not a traceback
    # the malloc settings of every fedviews command (fedviews._heap), here too: the
    # in-process baseline and the hub get what the party processes get
    keep_freed_memory()
    rounds = ROUNDS[args.algorithm] if args.rounds is None else args.rounds
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        config = tmp / "bench.toml"
        config.write_text(CONFIGS[args.algorithm].format(rounds=rounds))
        cfg = load_deploy_config(config, args.set)
        data = tmp / "data"
        files = write_demo_data(cfg, data)
        certs = None if args.insecure else make_certs(tmp / "certs", cfg)
        n = load_party_data(next(iter(files.values()))).ids.size
        a = run_in_process(cfg, data)
        b = run_grpc(cfg, config, data, certs)
        plain = direct = None
        text = CONFIGS[args.algorithm].format(rounds=rounds)
        if args.e2e_cost:
            config2 = tmp / "bench_no_e2e.toml"
            config2.write_text(text.replace("[federation]\n", "[federation]\nend_to_end = false\n"))
            plain = run_grpc(load_deploy_config(config2, args.set), config2, data, certs)
        if args.direct:
            config3 = tmp / "bench_direct.toml"
            config3.write_text(direct_config(text, cfg.federation.parties))
            direct = run_grpc(load_deploy_config(config3, args.set), config3, data, certs)
    mode = "plain text" if args.insecure else "mutual TLS"
    title = f"{args.algorithm}: {cfg.data.dataset}, {n} samples, {rounds} rounds, gRPC with {mode}"
    runs = [("relayed", b)] + ([("direct", direct)] if direct is not None else [])
    columns = ["per round", "in-process", *(c for k, _ in runs for c in (k, "ratio"))]
    rows = table_rows(a, runs, rounds)
    note = (
        "ratio: to the in-process run (times), to the raw array bytes (bytes); a run's "
        "'same last round' compares its last round's metrics with the in-process run's"
    )
    tables = [{"title": title, "columns": columns, "rows": rows, "note": note}]
    if args.per_process:
        tables.append(per_process_table(runs, rounds))
    if plain is not None:
        tables.append(e2e_table(a, b, plain, rounds))
    for table in tables:
        print(table["title"])
        for row in [table["columns"], *table["rows"]]:
            print(f"{row[0]!s:30s}" + "".join(f"{v!s:>20s}" for v in row[1:]))
    print(
        "last round: " + "; ".join(f"{k} {r['lines'][-1]}" for k, r in [("in-process", a), *runs])
    )
    write_record(args.json, title, tables, str(getattr(cfg.params, "device", "cpu")))


if __name__ == "__main__":
    run_cli(main)
