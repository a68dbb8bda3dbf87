"""The gRPC transport alone: party ``a`` sends ``b`` messages of one array, ``b`` returns it.

    .venv/bin/python benchmarks/bench_link.py [--messages 150] [--mb 1.0] [--repeat 3] [--json PATH]

A hub and both parties (mutual TLS, end-to-end sealing on the relayed path) live in this
one process, so that its CPU time (all threads, gRPC's included) is the whole cost of
moving the bytes: framing, copies, checksums, TLS, HTTP/2, thread hand-offs. Prints, per
path, the wall time and the CPU milliseconds per message of ``--mb`` megabytes (each way
counts as one message), relayed (a -> hub -> b) and direct (b declares an endpoint).
On a shared machine compare the CPU column: the wall time follows the other load.
``--json PATH`` also writes a record (``benchmarks/_record.py``): per path, every run and the
median CPU milliseconds per message. Needs the ``grpc`` extra.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _args import parser, positive_float, positive_int, run_cli
from _record import json_option, write_record

from fedviews.deploy import free_port
from fedviews.federation import (
    Coordinator,
    Message,
    Party,
    PrivacyPolicy,
    TLSFiles,
    handles,
    init_ca,
    issue_certificate,
)

POLICY = PrivacyPolicy.of(
    "bench_link",
    {("party", "party"): ["x"]},
    kinds={("coordinator", "party"): ["go"], ("party", "party"): ["pass"]},
)


class Echo(Party):
    """``go``: send ``n`` messages of ``x`` to ``b``; ``pass``: return the array."""

    def __init__(self, name: str, x: np.ndarray) -> None:
        super().__init__(name)
        self.x = x

    @handles("go")
    def on_go(self, msg: Message) -> Message:
        for _ in range(int(msg.number("n"))):
            self.send("b", "pass", arrays={"x": self.x})
        return self.reply(msg)

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        return self.reply(msg, arrays={"x": msg.arrays["x"]})


def measure(certs: Path, direct: bool, n: int, x: np.ndarray) -> tuple[float, float]:
    """``(wall seconds, CPU seconds)`` of ``n`` round trips."""
    from fedviews.federation import GrpcHub, GrpcOptions, GrpcPartyTransport  # the grpc extra

    opts = GrpcOptions(timeout=60.0)
    hub = GrpcHub(
        POLICY,
        {"a": "party", "b": "party"},
        tls=TLSFiles.from_dir(certs, "coordinator"),
        options=opts,
        keep_entries=False,
    )
    hub.register(Coordinator())
    endpoints = {"b": f"127.0.0.1:{free_port()}"} if direct else {}
    try:
        for name in ("a", "b"):
            t = GrpcPartyTransport(
                POLICY,
                f"127.0.0.1:{hub.port}",
                tls=TLSFiles.from_dir(certs, name),
                options=opts,
                keep_entries=False,
                direct=endpoints,
            )
            t.register(Echo(name, x))
            t.connect()
            threading.Thread(target=t.serve, daemon=True).start()
        hub.wait_for_parties(30)
        coord = hub.local["coordinator"]
        coord.send("a", "go", meta={"n": 2})  # warm up (and dial the direct link)
        t0, c0 = time.perf_counter(), time.process_time()
        coord.send("a", "go", meta={"n": n})
        return time.perf_counter() - t0, time.process_time() - c0
    finally:
        hub.close()


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--messages", type=positive_int, default=150, help="round trips per measurement"
    )
    ap.add_argument("--mb", type=positive_float, default=1.0, help="megabytes per message")
    ap.add_argument("--repeat", type=positive_int, default=3, help="measurements per path")
    json_option(ap)
    args = ap.parse_args()
    x = np.random.default_rng(0).random(int(args.mb * 1e6) // 4).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        init_ca(certs)
        for name in ("coordinator", "a", "b"):
            issue_certificate(certs, name)
        print(f"{args.messages} round trips of {args.mb:g} MB, mutual TLS")
        runs: dict[str, list[tuple[float, float]]] = {"relayed": [], "direct": []}
        for _ in range(args.repeat):
            for path in runs:
                wall, cpu = measure(certs, path == "direct", args.messages, x)
                per = 1e3 * cpu / (2 * args.messages)
                runs[path].append((wall, per))
                print(f"{path:7s}  {wall:8.3f} s wall  {per:7.2f} CPU-ms per message")
    columns = ["path", "wall s (runs)", "CPU-ms per message (runs)", "CPU-ms per message (median)"]
    rows = [
        [
            path,
            ", ".join(f"{w:.3f}" for w, _ in r),
            ", ".join(f"{c:.2f}" for _, c in r),
            round(statistics.median(c for _, c in r), 2),
        ]
        for path, r in runs.items()
    ]
    title = f"{args.messages} round trips of {args.mb:g} MB messages, mutual TLS"
    write_record(args.json, title, [{"title": title, "columns": columns, "rows": rows}])


if __name__ == "__main__":
    run_cli(main)
