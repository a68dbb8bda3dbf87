"""Time per round of MMVFL on Handwritten: in-process vs through Flower (flwr 1.41) on loopback.

    .venv/bin/python benchmarks/bench_flower.py [--rounds 10] [--deployment-rounds 3]
                                                [--engines simulation deployment] [--pings 5]

Table 1, MMVFL, Handwritten (5 views x 2000 samples, ``alignment = "none"``: the
PSI is not part of a round), every party checkpointing each round. All runs are the
same deployed session (:class:`DeployCoordinator` and one :class:`DeployParty` per
view); time = the coordinator's training loop / rounds.

* in-process: coordinator and parties in this process (``InProcessTransport``,
  every message still encoded, policy-checked and logged);
* gRPC: fedviews' own transport, this process is the coordinator hub and every party
  a ``fedviews party --insecure`` process (plain text: Flower runs ``--insecure`` too);
* simulation: ``flower-superlink --simulation`` + ``flwr run``; the parties are
  ClientApps in Flower's simulation engine (Ray actors; needs ``flwr[simulation]``);
* deployment: ``flower-superlink`` + one ``flower-supernode`` per party (node config
  ``party=... data=...``) + ``flwr run``: every Flower message starts a new
  ClientApp process on its SuperNode, which rebuilds its party from ``Context.state``.

"exchange s": median wall time of one round's Flower exchange (the ServerApp pushes
the ``update`` of all parties, then pulls every reply).

Table 2, one request/reply round trip with an echo handler (no party work), for 0
bytes and for one Multi-VFL activation batch each way (64 x 6272 float32 = 1.6 MB):
in-process, fedviews' gRPC hub (plain text, party in a thread of this process), and
the two Flower engines (``ping`` run config: one node, then all 5 at once). From it,
the cost of per-batch split learning (Multi-VFL, MNIST, 4 data owners, 79 batches
per epoch) if every batch went through the transport: at least two sequential
exchanges per batch (activations up, gradients down).
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

from fedviews.deploy import launch_flower, load_deploy_config, load_party_data, write_demo_data
from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy
from fedviews.federation import (
    Coordinator,
    GrpcHub,
    GrpcOptions,
    GrpcPartyTransport,
    InProcessTransport,
    Party,
    PrivacyPolicy,
    handles,
)

CONFIG = """algorithm = "mmvfl"
name = "bench_flower"
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
max_iter = {rounds}
tol = 0.0
"""
BATCH = 64 * 6272 * 4  # bytes of one data owner's activations of a Multi-VFL MNIST batch
BATCHES = 79  # per epoch (5000 samples, batch size 64)


def run_grpc(config: Path, data: Path, out: Path) -> dict[str, Any]:
    from fedviews.deploy._session import options_of

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
    return {**res, "seconds_per_round": res["train_seconds"] / res["n_iter"]}


def run_in_process(config: Path, data: Path, out: Path) -> dict[str, Any]:
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
    return {**res, "seconds_per_round": res["train_seconds"] / res["n_iter"]}


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


def _median(res: dict[str, Any], kind: str) -> float:
    times = [s for k, _, s in res.get("exchanges", []) if k == kind]
    return statistics.median(times) if times else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10, help="in-process, gRPC and simulation")
    ap.add_argument("--deployment-rounds", type=int, default=3, help="deployment engine")
    ap.add_argument("--engines", nargs="*", default=["simulation", "deployment"])
    ap.add_argument("--pings", type=int, default=5, help="echo round trips per Flower engine")
    args = ap.parse_args()
    engines = list(args.engines)
    if "simulation" in engines and importlib.util.find_spec("ray") is None:
        print("simulation engine skipped: pip install 'flwr[simulation]' (Ray)")
        engines.remove("simulation")
    rows: list[tuple[str, int, dict[str, Any]]] = []
    pings: dict[str, dict[int, tuple[float, float]]] = {}
    quiet = lambda line: None  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        config = tmp / "bench.toml"
        config.write_text(CONFIG.format(rounds=args.rounds))
        cfg = load_deploy_config(config)
        data = tmp / "data"
        write_demo_data(cfg, data)
        n = load_party_data(data / "pix.npz").ids.size
        rows.append(("in-process", args.rounds, run_in_process(config, data, tmp / "inproc")))
        rows.append(("gRPC", args.rounds, run_grpc(config, data, tmp / "grpc")))
        for engine in engines:
            rounds = args.rounds if engine == "simulation" else args.deployment_rounds
            cfg_e = tmp / f"bench-{engine}.toml"
            cfg_e.write_text(CONFIG.format(rounds=rounds))
            t0 = time.perf_counter()
            res = launch_flower(  # plain text, as the gRPC processes above
                cfg_e, tmp / engine, engine=engine, data_dir=data, echo=quiet, insecure=True
            )
            res["wall"] = time.perf_counter() - t0
            if res["status"] != "ok":
                raise SystemExit(f"{engine}: {res['status']}")
            rows.append((engine, rounds, res))
        pings["in-process"] = {b: (ping_in_process(b, 50), float("nan")) for b in (0, BATCH)}
        pings["gRPC (fedviews)"] = {b: (ping_grpc(b, 50), float("nan")) for b in (0, BATCH)}
        for engine in engines:
            pings[f"Flower {engine}"] = {}
            for b in (0, BATCH):
                res = launch_flower(
                    config,
                    tmp / f"ping-{engine}-{b}",
                    engine=engine,
                    data_dir=data,
                    echo=quiet,
                    insecure=True,
                    ping=args.pings,
                    ping_bytes=b,
                )
                p = res["ping_seconds"]
                pings[f"Flower {engine}"][b] = (
                    statistics.median(p["single"]),
                    statistics.median(p["broadcast"]),
                )
    base = rows[0][2]
    parties = len(cfg.federation.parties)
    print(f"MMVFL, handwritten, {n} samples x {parties} parties (one Flower node each), loopback")
    print(
        f"{'':14s}{'rounds':>7s}{'s/round':>10s}{'ratio':>9s}{'exchange s':>12s}{'run wall s':>12s}"
    )
    for name, rounds, res in rows:
        ratio = res["seconds_per_round"] / base["seconds_per_round"]
        print(
            f"{name:14s}{rounds:7d}{res['seconds_per_round']:10.4f}{ratio:9.1f}"
            f"{_median(res, 'update'):12.4f}{res.get('wall', float('nan')):12.1f}"
        )
    for name, _, res in rows[1:]:
        same = np.allclose(res["objective"], base["objective"][: len(res["objective"])], rtol=1e-10)
        print(f"{name}: objective equals in-process (rtol 1e-10): {same}")
    print()
    print("one round trip (echo), median seconds; Flower: one node | all 5 nodes at once")
    print(f"{'':22s}{'0 B':>18s}{f'{BATCH / 1e6:.1f} MB':>18s}{'Multi-VFL epoch s':>20s}")
    for name, by in pings.items():
        cells = "".join(
            f"{s:18.4f}" if np.isnan(b) else f"{f'{s:.3f} | {b:.3f}':>18s}" for s, b in by.values()
        )
        batch_s, batch_b = by[BATCH]
        per_batch = 2 * (batch_s if np.isnan(batch_b) else batch_b)  # up and down, in sequence
        print(f"{name:22s}{cells}{BATCHES * per_batch:20.1f}")
    print(
        f"(Multi-VFL epoch s: {BATCHES} batches x 2 sequential exchanges of {BATCH / 1e6:.1f} MB "
        "per data owner: the transport's share of an epoch, without any computation)"
    )


if __name__ == "__main__":
    main()
