"""Cost of tagging a Flower reply (fedviews.deploy._flower_wire.reply_tag).

Every reply a Flower node sends carries an HMAC-SHA256 over a digest of its content; the
node computes it and the ServerApp checks it. Times one tag of a Multi-VFL activation
batch as a Flower reply carries it (64 x 32 x 7 x 28 float32, 1.6 MB) and of a small
reply (64 x 10 float32 logits), against encoding + decoding the same fedviews message, in
the same process.

    python benchmarks/bench_reply_tag.py [--repeats 50]
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import numpy as np
from _clock import best

from fedviews.deploy._flower_wire import pack, reply_tag
from fedviews.federation import Message


def round_trip(msg: Message) -> Message:
    """The message encoded and decoded, as the wire carries it."""
    return Message.decode(msg.encode_buffer())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    rng, key = np.random.default_rng(0), os.urandom(32)
    print(f"best of {args.repeats}")
    for shape in ((64, 32, 7, 28), (64, 10)):
        x = rng.random(shape, dtype=np.float32)
        msg = Message("forward", "a", "b", arrays={"activations": x}, meta={"batch": 1})
        content = pack(msg.encode_buffer())
        plain = best(partial(round_trip, msg), args.repeats)
        tag = best(partial(reply_tag, key, "id", "query.fedviews", content), args.repeats)
        print(
            f"{x.nbytes / 1e6:6.3f} MB: encode + decode {plain * 1e6:8.1f} us, "
            f"tag {tag * 1e6:8.1f} us ({tag / plain:.2f}x)"
        )


if __name__ == "__main__":
    main()
