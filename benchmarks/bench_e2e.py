"""Cost of end-to-end sealing (fedviews.federation._e2e) on one Multi-VFL activation batch.

Seals and opens a 64 x 32 x 7 x 28 float32 batch (1.6 MB, what a data owner sends a
label owner per batch) between two parties with real certificates, against plain
encode + decode of the same message, in the same process; also AES-256-GCM alone.

    python benchmarks/bench_e2e.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
from _clock import best
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from fedviews.federation import Message, TLSFiles, init_ca, issue_certificate
from fedviews.federation._e2e import E2EKeys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
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
    print(f"activation batch {mb:.2f} MB, best of {args.repeats}")
    print(f"encode + decode   {plain * 1e3:7.2f} ms")
    print(f"seal + open       {sealed * 1e3:7.2f} ms   ({sealed / plain:.1f}x)")
    print(f"AES-256-GCM alone {enc * 1e3:7.2f} ms   ({x.nbytes / enc / 1e9:.2f} GB/s)")


if __name__ == "__main__":
    main()
