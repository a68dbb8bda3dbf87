"""MMVFL on Handwritten: time and bytes per round, in-process vs loopback gRPC (mutual TLS).

    .venv/bin/python benchmarks/bench_grpc.py [--rounds 10] [--n-per-class 200] [--insecure]

In-process: the parties and the server of :class:`fedviews.linear.MMVFL` in this
process (every message still encoded and decoded). gRPC: this process is the
coordinator hub; each of the 5 parties is its own ``fedviews party`` process
holding only its view file. Time = ``server.run()`` only (both sides build their
Gram matrices before it). Bytes: raw array bytes of the round messages vs the
encoded messages vs the frames handed to gRPC vs what the coordinator process
sent over the loopback interface during the rounds (``/proc/net/dev``: TLS
records, HTTP/2 and TCP/IP headers, heartbeats included; other loopback traffic
on the machine would be counted too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedviews.deploy import load_deploy_config, make_certs, split_dataset
from fedviews.deploy._session import DeployCoordinator, options_of, session_policy
from fedviews.federation import federate
from fedviews.federation._certs import TLSFiles
from fedviews.federation._grpc import GrpcHub
from fedviews.linear._common import small_blas
from fedviews.linear._mmvfl import MMVFL_POLICY, MMVFLParty, MMVFLServer, _Solver

VIEWS = ("pix", "fou", "fac", "zer", "kar")


def _loopback_bytes() -> int:
    """Bytes sent over the loopback interface so far (Linux), TCP/IP headers included."""
    with open("/proc/net/dev") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])  # transmit bytes (= received, on loopback)
    return 0


def _config(tmp: Path, rounds: int) -> Path:
    path = tmp / "bench.toml"
    path.write_text(
        f"""algorithm = "mmvfl"
name = "bench_grpc"
seed = 0
[federation]
parties = {json.dumps(list(VIEWS))}
label_owner = "pix"
alignment = "none"
[params]
max_iter = {rounds}
tol = 0.0
standardize = true
"""
    )
    return path


def in_process(data: Path, cfg) -> dict:
    from fedviews.data._validation import one_hot
    from fedviews.deploy import load_party_data

    p = cfg.params
    datas = [load_party_data(data / f"{v}.npz") for v in VIEWS]
    Xs = []
    for d in datas:
        X = d.X[np.argsort(d.ids)]
        sd = X.std(0)
        sd[sd < 1e-12] = 1.0
        Xs.append((X - X.mean(0)) / sd)
    owner = datas[0]
    Y = one_hot(owner.y[np.argsort(owner.ids)])[0]
    K, (n, c) = len(Xs), Y.shape
    ss = np.random.SeedSequence(cfg.seed).spawn(K + 1)
    with small_blas():
        parties = [
            MMVFLParty(
                v,
                Xs[k],
                beta=p.beta,
                zeta=p.zeta,
                n_classes=c,
                seed=ss[1 + k],
                Y=Y if k == 0 else None,
                eta=p.eta if k == 0 else 0.0,
                solver=_Solver(p.inner_max_iter, p.inner_tol, p.eps),
            )
            for k, v in enumerate(VIEWS)
        ]
        server = MMVFLServer(list(VIEWS), [p.zeta] * K, n, c, ss[0], max_iter=p.max_iter, tol=p.tol)
        t = federate([server, *parties], MMVFL_POLICY)
        t0 = time.perf_counter()
        server.run()
        seconds = time.perf_counter() - t0
    entries = [e for e in t.log.entries if e.kind.startswith("update")]
    raw = 2 * K * n * c * 8 * len(server.objective)
    return {
        "seconds": seconds,
        "rounds": len(server.objective),
        "objective": server.objective[-1],
        "raw_bytes": raw,
        "message_bytes": sum(e.nbytes for e in entries),
    }


def over_grpc(config: Path, data: Path, certs: Path | None, cfg) -> dict:
    tls = None if certs is None else TLSFiles.from_dir(certs, "coordinator")
    hub = GrpcHub(
        session_policy_for(cfg), cfg.roles(), listen="127.0.0.1:0", tls=tls, options=options_of(cfg)
    )
    coord = DeployCoordinator(cfg, lambda line: None)
    hub.register(coord)
    sec = ["--insecure"] if certs is None else ["--certs", str(certs)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "fedviews", "party", str(config), *sec, "--party", v]
            + ["--data", str(data / f"{v}.npz"), "--coordinator", f"127.0.0.1:{hub.port}"]
            + ["--out", str(data.parent / v)],
            stdout=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        for v in VIEWS
    ]
    try:
        hub.wait_for_parties(120)
        io0, frames0 = _loopback_bytes(), hub.wire_bytes
        with small_blas():
            coord.run()
        io1, frames1 = _loopback_bytes(), hub.wire_bytes
    finally:
        hub.close()
        for p in procs:
            p.wait(30)
    entries = [e for e in hub.log.entries if e.kind.startswith("update")]
    K, rounds = len(VIEWS), len(coord.server.objective)
    n, c = coord.server.Z.shape
    return {
        "seconds": coord.train_seconds,
        "rounds": rounds,
        "objective": coord.server.objective[-1],
        "raw_bytes": 2 * K * n * c * 8 * rounds,
        "message_bytes": sum(e.nbytes for e in entries),
        "frame_bytes_session": frames1 - frames0,
        "socket_bytes_session": io1 - io0,
    }


def session_policy_for(cfg):
    from fedviews.deploy import get_app

    return session_policy(get_app(cfg.algorithm))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n-per-class", type=int, default=200)
    ap.add_argument("--insecure", action="store_true", help="plain-text gRPC instead of mutual TLS")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_:
        tmp = Path(tmp_)
        config = _config(tmp, args.rounds)
        cfg = load_deploy_config(config)
        data = tmp / "data"
        split_dataset("handwritten", data, views=VIEWS, n_per_class=args.n_per_class, seed=0)
        certs = None if args.insecure else make_certs(tmp / "certs", cfg)
        a = in_process(data, cfg)
        b = over_grpc(config, data, certs, cfg)
    r = a["rounds"]
    print(f"MMVFL, Handwritten {len(VIEWS)} views x {args.n_per_class * 10} samples, {r} rounds")
    print(f"{'':28s}{'in-process':>14s}{'loopback gRPC':>16s}{'ratio':>8s}")
    ta, tb = a["seconds"] / r, b["seconds"] / b["rounds"]
    print(f"{'seconds per round':28s}{ta:14.4f}{tb:16.4f}{tb / ta:8.2f}")
    for key, label in (
        ("raw_bytes", "raw array bytes/round"),
        ("message_bytes", "message bytes/round"),
    ):
        print(f"{label:28s}{a[key] / r:14.0f}{b[key] / r:16.0f}{b[key] / b['raw_bytes']:8.3f}")
    for key, label in (
        ("frame_bytes_session", "gRPC frame bytes/round"),
        ("socket_bytes_session", "loopback bytes/round"),
    ):
        print(f"{label:28s}{'':14s}{b[key] / r:16.0f}{b[key] / b['raw_bytes']:8.3f}")
    print(f"same final objective: {a['objective'] == b['objective']} ({a['objective']:.10g})")


if __name__ == "__main__":
    main()
