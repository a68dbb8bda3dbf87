"""Cost of end-to-end sealing (fedviews.federation._e2e) on one Multi-VFL activation batch.

Seals and opens a 64 x 32 x 7 x 28 float32 batch (1.6 MB, what a data owner sends a
label owner per batch) between two parties with real certificates, against plain
encode + decode of the same message, in the same process; also AES-256-GCM alone.
Needs the ``grpc`` extra (``cryptography``).

    python benchmarks/bench_e2e.py [--repeats 50] [--json PATH]

``--json PATH`` also writes the table as a record (``benchmarks/_record.py``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from _args import parser, positive_int, run_cli
from _clock import best
from _record import json_option, write_record

from fedviews.errors import require
from fedviews.federation import Message


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--repeats", type=positive_int, default=50, help="timings of each (best)")
    json_option(ap)
    args = ap.parse_args()
    require("cryptography", "grpc")
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from fedviews.federation import TLSFiles, init_ca, issue_certificate
    from fedviews.federation._e2e import E2EKeys

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        init_ca(d)
        keys = {}
        for name in ("a", "b"):
            issue_certificate(d, name)
            keys[name] = E2EKeys(name, TLSFiles.from_dir(d, name))
        peers = {
            n: {"cert": TLSFiles.from_dir(d, n).cert.read_text(), **k.bundle()}
            for n, k in keys.items()
        }
        session = os.urandom(16)  # what the hub hands out, the same for every party
        for k in keys.values():
            k.set_peers(peers, session)
        x = np.random.default_rng(0).random((64, 32, 7, 28), dtype=np.float32)
        msg = Message("forward", "a", "b", arrays={"activations": x}, meta={"batch": 1})
        plain = best(lambda: Message.decode(msg.encode_buffer()), args.repeats)
        sealed = best(lambda: keys["b"].open(keys["a"].seal(msg)), args.repeats)
        aead, data = AESGCM(os.urandom(32)), x.tobytes()
        nonce = os.urandom(12)
        enc = best(lambda: aead.encrypt(nonce, data, b""), args.repeats)
    mb = x.nbytes / 1e6
    title = f"end-to-end sealing of one {mb:.2f} MB activation batch, best of {args.repeats}"
    print(f"activation batch {mb:.2f} MB, best of {args.repeats}")
    print(f"encode + decode   {plain * 1e3:7.2f} ms")
    print(f"seal + open       {sealed * 1e3:7.2f} ms   ({sealed / plain:.1f}x)")
    print(f"AES-256-GCM alone {enc * 1e3:7.2f} ms   ({x.nbytes / enc / 1e9:.2f} GB/s)")
    rows = [
        ["encode + decode", round(plain * 1e3, 3), 1.0],
        ["seal + open", round(sealed * 1e3, 3), round(sealed / plain, 2)],
        ["AES-256-GCM alone", round(enc * 1e3, 3), round(enc / plain, 2)],
    ]
    table = {
        "title": title,
        "columns": ["operation", "ms (best)", "÷ encode + decode"],
        "rows": rows,
    }
    write_record(args.json, title, [table])


if __name__ == "__main__":
    run_cli(main)
