"""A hub's memory under the half-sent-message attack (issue #31, item 7).

    .venv/bin/python benchmarks/bench_halfsent.py [--ids 8] [--message-mb 64]

A coordinator hub (mutual TLS, parties ``a`` and ``b``) runs in a child process; the
dishonest member ``b`` joins, then announces ``--ids`` messages of ``--message-mb`` MiB
each (``federation.max_message_mb``) and sends every chunk of each but the last, so the
hub holds what arrived. Prints the hub's resident memory (``VmRSS``) before the attack,
its peak (``VmHWM``) and whether the hub cut ``b`` off. Without a budget per peer the hub
holds ``ids x message_mb``; with one, at most ``message_mb`` of ``b``'s half-sent bytes.
Run it with ``PYTHONPATH`` pointing at the code to measure (e.g. two checkouts). Needs the
``grpc`` extra.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _args import parser, positive_float, positive_int, run_cli

from fedviews.federation import Party, PrivacyPolicy, TLSFiles, init_ca, issue_certificate

POLICY = PrivacyPolicy.of("halfsent", {("party", "coordinator"): ["v"]})

HUB = """
import sys, time
from pathlib import Path
from fedviews.federation import Coordinator, GrpcHub, GrpcOptions, PrivacyPolicy, TLSFiles
certs, mb = Path(sys.argv[1]), float(sys.argv[2])
opts = GrpcOptions(max_message_bytes=int(mb * 2**20), timeout=60.0)
hub = GrpcHub(PrivacyPolicy.of("halfsent", {("party", "coordinator"): ["v"]}),
              {"a": "party", "b": "party"}, tls=TLSFiles.from_dir(certs, "coordinator"),
              options=opts)
hub.register(Coordinator())
print(hub.port, flush=True)
sys.stdin.read()  # until the parent closes it
link = hub.links.get("b")
print("cut off" if link is not None and link.closed.is_set() else "still connected", flush=True)
hub.close(0.1)
"""


def _status(pid: int, key: str) -> float:
    """``key`` (``VmRSS``, ``VmHWM``) of process ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--ids", type=positive_int, default=8, help="message ids left half-sent")
    ap.add_argument(
        "--message-mb", type=positive_float, default=64.0, help="federation.max_message_mb"
    )
    args = ap.parse_args()
    from fedviews.federation import GrpcOptions, GrpcPartyTransport  # the grpc extra
    from fedviews.federation._grpc import _HEADER, _MAGIC, REQUEST

    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        init_ca(certs)
        for name in ("coordinator", "a", "b"):
            issue_certificate(certs, name)
        hub = subprocess.Popen(
            [sys.executable, "-c", HUB, str(certs), str(args.message_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert hub.stdout is not None and hub.stdin is not None
        port = int(hub.stdout.readline())
        opts = GrpcOptions(max_message_bytes=int(args.message_mb * 2**20), timeout=60.0)
        b = GrpcPartyTransport(
            POLICY, f"127.0.0.1:{port}", tls=TLSFiles.from_dir(certs, "b"), options=opts
        )
        b.register(Party("b"))
        b.connect()
        time.sleep(1.0)
        before = _status(hub.pid, "VmRSS")
        n = opts.max_message_bytes // opts.chunk_size
        chunk = b"x" * opts.chunk_size
        assert b.link is not None
        t0 = time.perf_counter()
        for msg_id in range(1, args.ids + 1):
            for i in range(n - 1):
                b.link.out.put(_HEADER.pack(_MAGIC, REQUEST, msg_id, i, n, 0) + chunk)
        deadline = time.monotonic() + 120  # a hub that cut b off reads no more of it
        while not b.link.out.empty() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # the hub has read what it was sent
        after, peak = _status(hub.pid, "VmRSS"), _status(hub.pid, "VmHWM")
        hub.stdin.close()
        verdict = hub.stdout.readline().strip()
        b.close()
        hub.wait(30)
    sent = args.ids * (n - 1) * opts.chunk_size / 2**20
    print(
        f"{args.ids} ids x {n - 1} chunks of {opts.chunk_size / 2**20:g} MiB "
        f"({sent:.0f} MiB sent in {time.perf_counter() - t0:.1f} s): hub RSS "
        f"{before:.0f} MiB before, {after:.0f} MiB after, peak {peak:.0f} MiB; b {verdict}"
    )


if __name__ == "__main__":
    run_cli(main)
