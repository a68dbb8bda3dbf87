"""Seconds per round of MMVFL, V-FedMV, split NN and Multi-VFL through Flower (flwr 1.42)
vs fedviews' own hub.

    .venv/bin/python benchmarks/bench_flower.py [--algorithms mmvfl vfedmv] [--rounds 10]
        [--deployment-rounds 3] [--engines simulation deployment]
        [--executors fedviews flower] [--pings 0] [--json docs/results/bench_flower.json]
        [--pings-json docs/results/bench_flower_pings.json]

Table 1, per algorithm on Handwritten (5 views x 2000 samples, ``alignment = "none"``:
the PSI is not part of a round; V-FedMV without its testing phase), every party
checkpointing each round. All runs are the same deployed session
(:class:`DeployCoordinator` and one :class:`DeployParty` per view); time = the
coordinator's training loop / rounds; "x hub" = that over fedviews' gRPC hub's.
``--algorithms splitnn multivfl`` (not run by default): per-batch split learning on
MNIST (200 training samples, batch 64; split NN: 2 parties, an epoch a round; Multi-VFL:
2 data owners and a label owner), whose every batch is relayed party to party; on the
deployment engine with fedviews' executor only (Flower's refuses them). "equal": the
training curve (objective, or loss per epoch / round) equals in-process; give the
deployment engine as many rounds as the others (``--deployment-rounds``) for the
per-batch ones.

* in-process: coordinator and parties in this process (``InProcessTransport``,
  every message still encoded, policy-checked and logged);
* fedviews gRPC hub: fedviews' own transport (what ``fedviews launch`` deploys), this
  process is the coordinator hub and every party a ``fedviews party --insecure``
  process (plain text: Flower runs ``--insecure`` too);
* Flower simulation: ``flower-superlink --simulation`` + ``flwr run``; the parties are
  ClientApps in Flower's simulation engine (Ray actors; needs ``flwr[simulation]``);
* Flower deployment: ``flower-superlink`` + one ``flower-supernode`` per party (node
  config ``party=... data=...``) + ``flwr run``, with either executor: ``flower``
  (the SuperNode's own SuperExec starts a new ClientApp process per message, which
  rebuilds its party from ``Context.state``) or ``fedviews`` (``--isolation process``
  and ``fedviews flower executor``: one long-lived ClientApp process per party).

"exchange s": median wall time of one round's Flower exchange (the ServerApp pushes
the round message of all parties, then pulls every reply). ``--json PATH`` writes the table
as a record (``benchmarks/_record.py``: a table per algorithm, with the command, date,
machine, flwr version and load) for ``docs/flower.md``. Needs the ``flower`` extra (and
``grpc``); without it, ``--help`` still works and a run says what to install.

Table 2 (``--pings N``), one request/reply round trip with an echo handler (no party
work), for 0 bytes and for one Multi-VFL activation batch each way (64 x 6272 float32 =
1.6 MB): in-process, fedviews' gRPC hub (plain text, party in a thread of this process),
and the two Flower engines (``ping`` run config: one node, then all 5 at once; the
deployment engine with each executor); ``--pings-json`` writes it (``benchmarks/_record.py``).
``--algorithms`` without names: only Table 2. From it,
the cost of per-batch split learning (Multi-VFL, MNIST, 4 data owners, 79 batches
per epoch) if every batch went through the transport: one exchange per batch (the label
owner's request carries the gradients of the batch before, the data owners' replies their
activations), one round trip on the transports where the label owner sends it itself
(in-process, fedviews' gRPC) and two in sequence on Flower, whose ServerApp relays it (the
data owners' round trip, then the label owner's).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from _args import nonnegative_int, parser, positive_int, run_cli
from _record import NA, json_option, write_record

from fedviews.deploy import load_deploy_config, load_party_data, write_demo_data
from fedviews.errors import require
from fedviews.federation import (
    Coordinator,
    InProcessTransport,
    Party,
    PrivacyPolicy,
    get_algorithm_spec,
    handles,
)

_HEAD = """algorithm = "{algorithm}"
name = "bench_flower_{algorithm}"
seed = 0
[federation]
parties = ["pix", "fou", "fac", "zer", "kar"]
label_owner = "pix"
alignment = "none"
connect_timeout = 120.0
[data]
dataset = "handwritten"
[params]
standardize = true
tol = 0.0
max_iter = {{rounds}}
"""
# per-batch split learning on MNIST
_MNIST_HEAD = """algorithm = "{algorithm}"
name = "bench_flower_{algorithm}"
seed = 0
[federation]
parties = {parties}
{owners}
alignment = "none"
connect_timeout = 120.0
[data]
dataset = "mnist"
n_per_class = 20
n_test = 100
"""
CONFIGS = {
    "mmvfl": _HEAD.format(algorithm="mmvfl"),
    "vfedmv": _HEAD.format(algorithm="vfedmv") + "beta = 4.0\nzeta = 8.0\neta = 16.0\n",
    # per-batch split learning: every batch is relayed party to party (by the ServerApp on
    # Flower, sealed end to end there; by the hub over gRPC, plain text as the other rows)
    "splitnn": _MNIST_HEAD.format(
        algorithm="splitnn", parties='["top", "bottom"]', owners='label_owner = "bottom"'
    )
    + '[params]\nepochs = {rounds}\nbatch_size = 64\nhidden = 32\ndevice = "cpu"\n',
    "multivfl": _MNIST_HEAD.format(
        algorithm="multivfl", parties='["top", "bottom", "bank"]', owners='label_owners = ["bank"]'
    )
    + 'scenario = "iid"\nsamples_per_owner = 200\noverlap = 1.0\n'
    + '[params]\nrounds = {rounds}\nbatch_size = 64\ndevice = "cpu"\n',
}
#: per algorithm: its training curve in a run's results, and the kinds of one round's
#: exchanges (a coarse round's update; a batch's activations and gradients)
CURVES = {
    "mmvfl": lambda res: res["objective"],
    "vfedmv": lambda res: res["objective"],
    "splitnn": lambda res: res["loss"],
    "multivfl": lambda res: res["history"]["train_loss"],
}
EXCHANGES = {
    "mmvfl": ("update",),
    "vfedmv": ("update",),
    "splitnn": ("splitnn.forward", "splitnn.backward"),
    "multivfl": ("forward", "backward"),
}
BATCH = 64 * 6272 * 4  # bytes of one data owner's activations of a Multi-VFL MNIST batch
BATCHES = 79  # per epoch (5000 samples, batch size 64)
ENGINES = ("simulation", "deployment")
EXECUTORS = ("flower", "fedviews")


def run_grpc(config: Path, data: Path, out: Path) -> dict[str, Any]:
    from fedviews.deploy._session import DeployCoordinator, options_of, session_policy
    from fedviews.federation import GrpcHub

    cfg = load_deploy_config(config)
    hub = GrpcHub(
        session_policy(cfg),
        cfg.roles(),
        options=options_of(cfg),
        keep_entries=False,
    )
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")
    hub.register(coord)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fedviews", "party", str(config), "--insecure", "--party", p]
            + ["--data", str(data / f"{p}.npz"), "--coordinator", f"127.0.0.1:{hub.port}"]
            + ["--out", str(out / p)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for p in cfg.federation.parties
    ]
    try:
        hub.wait_for_parties(120)
        with coord.app.compute_limits():
            res = coord.run()
    finally:
        hub.close()
        for proc in procs:
            proc.wait(60)
    return {**res, "seconds_per_round": res["train_seconds"] / coord.rounds_run}


def run_in_process(config: Path, data: Path, out: Path) -> dict[str, Any]:
    from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy

    cfg = load_deploy_config(config)
    transport = InProcessTransport(session_policy(cfg), keep_entries=False)
    coord = DeployCoordinator(cfg, lambda line: None, out / "coordinator")
    transport.register(coord)
    for p in cfg.federation.parties:
        transport.register(
            DeployParty(cfg, p, load_party_data(data / f"{p}.npz"), out / p, lambda line: None)
        )
    with coord.app.compute_limits():
        res = coord.run()
    return {**res, "seconds_per_round": res["train_seconds"] / coord.rounds_run}


class _Echo(Party):
    @handles("ping")
    def on_ping(self, msg):
        return self.reply(msg, arrays={"v": msg.arrays["v"]})


_ECHO = PrivacyPolicy.of("echo", {("party", "coordinator"): ["v"], ("coordinator", "party"): ["v"]})


def _time_requests(coord: Coordinator, nbytes: int, n: int) -> float:
    v = np.zeros(nbytes, dtype=np.uint8)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        coord.send("a", "ping", arrays={"v": v})
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def ping_in_process(nbytes: int, n: int) -> float:
    transport = InProcessTransport(_ECHO)
    coord = Coordinator()
    for obj in (coord, _Echo("a")):
        transport.register(obj)
    return _time_requests(coord, nbytes, n)


def ping_grpc(nbytes: int, n: int) -> float:
    from fedviews.federation import GrpcHub, GrpcOptions, GrpcPartyTransport

    opts = GrpcOptions(connect_timeout=10.0)
    hub = GrpcHub(_ECHO, {"a": "party"}, options=opts)
    coord = Coordinator()
    hub.register(coord)
    party = GrpcPartyTransport(_ECHO, f"127.0.0.1:{hub.port}", options=opts)
    party.register(_Echo("a"))
    party.connect()
    threading.Thread(target=party.serve, daemon=True).start()
    try:
        hub.wait_for_parties(10)
        return _time_requests(coord, nbytes, n)
    finally:
        hub.close()


def _median(res: dict[str, Any], kinds: tuple[str, ...]) -> float | None:
    """The median wall time of a Flower run's exchanges of ``kinds`` (None: not a Flower run)."""
    times = [s for k, _, s in res.get("exchanges", []) if k in kinds]
    return round(statistics.median(times), 3) if times else None


def _launch(
    config: Path, run: Path, data: Path, engine: str, executor: str | None
) -> dict[str, Any]:
    from fedviews.deploy import launch_flower

    quiet = lambda line: None  # noqa: E731
    t0 = time.perf_counter()
    res = launch_flower(  # plain text, as the gRPC processes
        config, run, engine=engine, data_dir=data, echo=quiet, executor=executor, insecure=True
    )
    res["wall"] = time.perf_counter() - t0
    if res["status"] != "ok":
        raise SystemExit(f"{run.name}: {res['status']}")
    return res


def bench_rounds(
    algorithm: str, args: argparse.Namespace, engines: list[str], tmp: Path
) -> dict[str, Any]:
    """Table 1 for one algorithm: every transport's seconds per round and its ratio to the hub."""
    work = tmp / algorithm
    work.mkdir()
    config = work / "bench.toml"
    config.write_text(CONFIGS[algorithm].format(rounds=args.rounds))
    cfg = load_deploy_config(config)
    data = work / "data"
    write_demo_data(cfg, data, aligned=True)  # Flower has no PSI
    runs: list[tuple[str, int, dict[str, Any]]] = [
        ("in-process", args.rounds, run_in_process(config, data, work / "inproc")),
        ("fedviews gRPC hub", args.rounds, run_grpc(config, data, work / "grpc")),
    ]
    for engine in engines:
        rounds = args.rounds if engine == "simulation" else args.deployment_rounds
        cfg_e = work / f"bench-{engine}.toml"
        cfg_e.write_text(CONFIGS[algorithm].format(rounds=rounds))
        executors = args.executors if engine == "deployment" else [None]
        if get_algorithm_spec(algorithm).peer_to_peer:  # a new process per message: refused
            executors = [e for e in executors if e != "flower"]
        for executor in executors:
            name = f"Flower {engine}" + (
                f" ({executor} executor)" if engine == "deployment" else ""
            )
            run = work / f"{engine}-{executor}"
            runs.append((name, rounds, _launch(cfg_e, run, data, engine, executor)))
    base, hub = runs[0][2], runs[1][2]
    rows = []
    curve = CURVES[algorithm]
    for name, rounds, res in runs:
        ref = curve(base)[: len(curve(res))]
        rows.append(
            {
                "transport": name,
                "rounds": rounds,
                "seconds_per_round": round(res["seconds_per_round"], 4),
                "x_hub": round(res["seconds_per_round"] / hub["seconds_per_round"], 1),
                "median_exchange_seconds": _median(res, EXCHANGES[algorithm]),
                "equal_to_in_process": bool(np.allclose(curve(res), ref, rtol=1e-10)),
            }
        )
    return {
        "samples": int(load_party_data(data / f"{cfg.federation.parties[0]}.npz").ids.size),
        "parties": len(cfg.federation.parties),
        "rows": rows,
    }


def print_rounds(algorithm: str, table: dict[str, Any]) -> None:
    print(
        f"{algorithm}, {table['samples']} samples x {table['parties']} parties "
        "(one Flower node each), loopback"
    )
    print(f"{'':40s}{'rounds':>7s}{'s/round':>10s}{'x hub':>8s}{'exchange s':>12s}{'equal':>7s}")
    for r in table["rows"]:
        print(
            f"{r['transport']:40s}{r['rounds']:7d}{r['seconds_per_round']:10.4f}"
            f"{r['x_hub']:8.1f}{r['median_exchange_seconds'] or float('nan'):12.3f}"
            f"{str(r['equal_to_in_process']):>7s}"
        )
    print()


def bench_pings(args: argparse.Namespace, engines: list[str], tmp: Path) -> dict[str, Any]:
    """Table 2: one echo round trip on every transport (and a Multi-VFL epoch's share), as
    printed and as a table for :func:`write_record`."""
    from fedviews.deploy import launch_flower

    config, data = tmp / "ping.toml", tmp / "ping-data"
    config.write_text(CONFIGS["mmvfl"].format(rounds=1))
    write_demo_data(load_deploy_config(config), data)
    pings: dict[str, dict[int, tuple[float, float]]] = {
        "in-process": {b: (ping_in_process(b, 50), float("nan")) for b in (0, BATCH)},
        "gRPC (fedviews)": {b: (ping_grpc(b, 50), float("nan")) for b in (0, BATCH)},
    }
    for engine in engines:
        for executor in args.executors if engine == "deployment" else [None]:
            name = f"Flower {engine}" + (f", {executor}" if executor else "")
            pings[name] = {}
            for b in (0, BATCH):
                res = launch_flower(
                    config,
                    tmp / f"ping-{engine}-{executor}-{b}",
                    engine=engine,
                    data_dir=data,
                    echo=lambda line: None,
                    insecure=True,
                    ping=args.pings,
                    ping_bytes=b,
                    executor=executor,
                )
                p = res["ping_seconds"]
                pings[name][b] = (
                    statistics.median(p["single"]),
                    statistics.median(p["broadcast"]),
                )
    title = "one round trip (echo), median seconds; Flower: one node | all 5 nodes at once"
    print(title)
    print(f"{'':30s}{'0 B':>18s}{f'{BATCH / 1e6:.1f} MB':>18s}{'Multi-VFL epoch s':>20s}")
    rows: list[list[Any]] = []
    for name, by in pings.items():
        cells = "".join(
            f"{s:18.4f}" if np.isnan(b) else f"{f'{s:.3f} | {b:.3f}':>18s}" for s, b in by.values()
        )
        batch_s, batch_b = by[BATCH]
        trips = 2 if name.startswith("Flower") else 1  # (the ServerApp relays each exchange)
        per_batch = trips * (batch_s if np.isnan(batch_b) else batch_b)
        print(f"{name:30s}{cells}{BATCHES * per_batch:20.1f}")
        seconds = [NA if np.isnan(t) else round(t, 4) for pair in by.values() for t in pair]
        rows.append([name, *seconds, round(BATCHES * per_batch, 1)])
    note = (
        f"Multi-VFL epoch s: {BATCHES} batches x one exchange of {BATCH / 1e6:.1f} MB each way "
        "per data owner (one round trip; on Flower two in sequence, the ServerApp relaying it): "
        "the transport's share of an epoch, without any computation"
    )
    print(f"({note})")
    mb = f"{BATCH / 1e6:.1f} MB"
    columns = ["transport", "0 B", "0 B, 5 nodes", mb, f"{mb}, 5 nodes", "Multi-VFL epoch s"]
    return {"title": title, "columns": columns, "rows": rows, "note": note}


def rounds_table(algorithm: str, table: dict[str, Any]) -> dict[str, Any]:
    """Table 1 of one algorithm (what :func:`print_rounds` prints) for :func:`write_record`."""
    columns = ["transport", "rounds", "s / round", "× fedviews hub", "median exchange s"]
    columns.append("equals in-process")
    rows = [
        [
            r["transport"],
            r["rounds"],
            r["seconds_per_round"],
            r["x_hub"],
            NA if r["median_exchange_seconds"] is None else r["median_exchange_seconds"],
            "yes" if r["equal_to_in_process"] else "no",
        ]
        for r in table["rows"]
    ]
    return {
        "title": f"{algorithm}, {table['samples']} samples × {table['parties']} parties "
        "(one Flower node each), loopback",
        "columns": columns,
        "rows": rows,
    }


def _flwr_version() -> str:
    import flwr

    return str(flwr.__version__)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--algorithms", nargs="*", default=["mmvfl", "vfedmv"], choices=list(CONFIGS))
    ap.add_argument(
        "--rounds", type=positive_int, default=10, help="in-process, gRPC and simulation"
    )
    ap.add_argument("--deployment-rounds", type=positive_int, default=3, help="deployment engine")
    ap.add_argument("--engines", nargs="*", default=list(ENGINES), choices=ENGINES)
    ap.add_argument("--executors", nargs="*", default=list(EXECUTORS), choices=EXECUTORS)
    ap.add_argument(
        "--pings", type=nonnegative_int, default=0, help="echo round trips per Flower engine"
    )
    json_option(ap)
    ap.add_argument("--pings-json", type=Path, metavar="PATH", help="write Table 2 here")
    args = ap.parse_args()
    require("flwr", "flower")  # before any run: the install hint, not a traceback
    require("grpc", "grpc")
    engines = list(args.engines)
    if "simulation" in engines and importlib.util.find_spec("ray") is None:
        print("simulation engine skipped: pip install 'flwr[simulation]' (Ray)")
        engines.remove("simulation")
    tables: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        for algorithm in args.algorithms:
            tables[algorithm] = bench_rounds(algorithm, args, engines, tmp)
            print_rounds(algorithm, tables[algorithm])
        if args.pings > 0:
            pings = bench_pings(args, engines, tmp)
            write_record(args.pings_json, "Flower round trips", [pings], flwr=_flwr_version())
    if tables:
        write_record(
            args.json,
            "Seconds per round through Flower vs fedviews' own hub",
            [rounds_table(a, t) for a, t in tables.items()],
            flwr=_flwr_version(),
        )


if __name__ == "__main__":
    run_cli(main)
