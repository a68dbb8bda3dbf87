"""Cost of tagging a Flower reply (fedviews.deploy._flower_wire.reply_tag).

Every reply a Flower node sends carries an HMAC-SHA256 over a digest of its content; the
node computes it and the ServerApp checks it. Times one tag of a Multi-VFL activation
batch as a Flower reply carries it (64 x 32 x 7 x 28 float32, 1.6 MB) and of a small
reply (64 x 10 float32 logits), against encoding + decoding the same fedviews message, in
the same process. Needs the ``flower`` extra.

    python benchmarks/bench_reply_tag.py [--repeats 50] [--json PATH]

``--json PATH`` also writes the table as a record (``benchmarks/_record.py``).
"""

from __future__ import annotations

import os
from functools import partial

import numpy as np
from _args import parser, positive_int, run_cli
from _clock import best
from _record import json_option, write_record

from fedviews.federation import Message


def round_trip(msg: Message) -> Message:
    """The message encoded and decoded, as the wire carries it."""
    return Message.decode(msg.encode_buffer())


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--repeats", type=positive_int, default=50, help="timings of each (best)")
    json_option(ap)
    args = ap.parse_args()
    from fedviews.deploy._flower_wire import pack, reply_tag  # the flower extra

    rng, key = np.random.default_rng(0), os.urandom(32)
    title = f"tagging a Flower reply, best of {args.repeats}"
    print(title)
    rows = []
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
        rows.append(
            [
                round(x.nbytes / 1e6, 3),
                round(plain * 1e6, 1),
                round(tag * 1e6, 1),
                round(tag / plain, 3),
            ]
        )
    columns = ["MB", "encode + decode µs", "tag µs", "÷ encode + decode"]
    write_record(args.json, title, [{"title": title, "columns": columns, "rows": rows}])


if __name__ == "__main__":
    run_cli(main)
