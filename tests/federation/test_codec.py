"""The opt-in wire encodings: exact round trips where they must be, bounded error otherwise,
and a receiver that refuses what does not decode."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.errors import ConfigError, ProtocolError
from fedviews.federation import Message
from fedviews.federation._codec import Codec


def _through(codec: Codec, x: np.ndarray) -> np.ndarray:
    """Pack, encode to bytes, decode, unpack: what the receiver computes with."""
    wire = Message("k", "a", "b", arrays=codec.pack("g", x)).encode()
    return codec.unpack(Message.decode(wire), "g", x.shape)


X = np.random.default_rng(0).normal(size=(5, 3, 4)).astype(np.float32)


def test_none_is_exact_and_the_lossy_ones_are_within_their_precision():
    np.testing.assert_array_equal(_through(Codec("none"), X), X)
    np.testing.assert_allclose(_through(Codec("fp16"), X), X, rtol=2**-11, atol=1e-7)
    np.testing.assert_allclose(_through(Codec("bf16"), X), X, rtol=2**-8, atol=0)
    got = _through(Codec("int8"), X)
    per_row_max = np.abs(X.reshape(5, -1)).max(1)
    err = np.abs(got - X).reshape(5, -1).max(1)
    assert (err <= per_row_max / 127 / 2 + 1e-7).all()
    # bf16 rounds to nearest even: 1 + 2^-8 (a tie) goes down, 1 + 3*2^-8 goes up
    ties = np.array([[1 + 2**-8, 1 + 3 * 2**-8]], dtype=np.float32)
    np.testing.assert_array_equal(_through(Codec("bf16"), ties), [[1.0, 1 + 4 * 2**-8]])


def test_topk_keeps_the_largest_entries_of_each_row():
    codec = Codec("topk", ratio=0.25)  # 3 of 12 per row
    got = _through(codec, X).reshape(5, -1)
    flat = X.reshape(5, -1)
    for i in range(5):
        keep = np.argsort(-np.abs(flat[i]))[:3]
        np.testing.assert_array_equal(got[i, keep], flat[i, keep])
        assert np.count_nonzero(got[i]) == 3
    assert codec.names("g") == ["g", "g.idx"] and Codec("int8").names("g") == ["g", "g.scale"]


def test_bytes_on_the_wire_shrink():
    big = np.random.default_rng(1).normal(size=(64, 1000)).astype(np.float32)
    sizes = {
        k: len(Message("k", "a", "b", arrays=Codec(k, 0.1).pack("g", big)).encode())
        for k in ("none", "fp16", "bf16", "int8", "topk")
    }
    assert sizes["fp16"] < sizes["none"] and sizes["bf16"] == sizes["fp16"]
    assert sizes["int8"] < 0.3 * sizes["none"] and sizes["topk"] < 0.25 * sizes["none"]


def test_a_receiver_refuses_what_does_not_decode():
    bad_idx = {"g": np.zeros((5, 2), np.float32), "g.idx": np.full((5, 2), 99, np.int32)}
    with pytest.raises(ProtocolError, match="out of range"):
        Codec("topk", 0.1).unpack(Message("k", "mallory", "b", arrays=bad_idx), "g", (5, 12))
    with pytest.raises(ProtocolError, match="expected"):
        Codec("fp16").unpack(Message("k", "mallory", "b", arrays={"g": X}), "g", X.shape)
    with pytest.raises(ProtocolError, match="float16 range"):
        Codec("fp16").pack("g", np.array([[1e6]], dtype=np.float32))
    with pytest.raises(ConfigError, match="must be one of"):
        Codec("zip").validate()
    with pytest.raises(ConfigError, match="0 < ratio <= 1"):
        Codec("topk", 0.0).validate()


@pytest.mark.parametrize(
    ("codec", "arrays"),
    [
        ("none", {"g": np.full((5, 12), np.nan, np.float32)}),
        ("none", {"g": np.full((5, 12), 1e300)}),  # finite as float64, inf as float32
        ("none", {"g": np.ones((5, 12), np.int64)}),  # not floating point
        ("fp16", {"g": np.full((5, 12), np.inf, np.float16)}),
        ("bf16", {"g": np.full((5, 12), 0x7FC0, np.uint16)}),  # the bits of a NaN
        ("int8", {"g": np.full((5, 12), 127, np.int8), "g.scale": np.full(5, 1e38, np.float32)}),
        ("topk", {"g": np.full((5, 2), np.nan, np.float32), "g.idx": np.zeros((5, 2), np.int32)}),
    ],
)
def test_a_receiver_refuses_what_decodes_to_nan_or_infinity(codec, arrays):
    """Every encoding decoded NaN or infinite values as sent (a bf16 NaN, an int8 scale whose
    product overflows float32, a float64 beyond float32's range): one such gradient or
    activation made the receiver's model NaN without an error; now a ProtocolError names the
    sender (a NaN or an infinity sent as it is: already its decoding)."""
    with pytest.raises(ProtocolError, match="'mallory' sent"):
        msg = Message.decode(Message("k", "mallory", "b", arrays=arrays).encode())
        Codec(codec, 0.1).unpack(msg, "g", (5, 12))
