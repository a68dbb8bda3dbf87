import dataclasses
import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedviews.errors import ProtocolError
from fedviews.federation import Message

dtypes = st.sampled_from(["<f8", "<f4", "<i8", "<i4", "|u1", "|b1", ">f8", "<f2", "<u2"])
arrays = dtypes.flatmap(  # (finite: a NaN or an infinity is refused by decoding, tested below)
    lambda dt: hnp.arrays(
        np.dtype(dt),
        hnp.array_shapes(min_dims=0, max_dims=4, max_side=5),
        elements={"allow_nan": False, "allow_infinity": False} if "f" in dt else None,
    )
)
meta_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=20),
    st.floats(allow_nan=False),
)


@settings(max_examples=200, deadline=None)
@given(
    arrs=st.dictionaries(st.text(min_size=1, max_size=10), arrays, max_size=4),
    meta=st.dictionaries(st.text(max_size=8), meta_values, max_size=4),
    kind=st.text(max_size=12),
    rnd=st.integers(0, 10**6),
)
def test_roundtrip_exact(arrs, meta, kind, rnd):
    msg = Message(kind=kind, sender="a", receiver="b", round=rnd, arrays=arrs, meta=meta)
    back = Message.decode(msg.encode())
    assert (back.kind, back.sender, back.receiver, back.round) == (kind, "a", "b", rnd)
    assert dict(back.meta) == dict(meta)
    assert list(back.arrays) == list(arrs)
    for name, a in arrs.items():
        b = back.arrays[name]
        assert b.shape == a.shape
        assert b.dtype.newbyteorder("=") == a.dtype.newbyteorder("=")
        np.testing.assert_array_equal(b, a)
    zero_copy = Message.decode(msg.encode_buffer())
    for name, a in arrs.items():
        np.testing.assert_array_equal(zero_copy.arrays[name], a)
        assert zero_copy.arrays[name].flags.writeable


def test_no_pickle_object_arrays_rejected():
    with pytest.raises(ProtocolError, match="only bool, integer and float"):
        Message("x", arrays={"o": np.array([object()], dtype=object)})
    with pytest.raises(ProtocolError, match="meta"):
        Message("x", meta={"bad": [1, 2]})  # type: ignore[dict-item]


def test_corrupt_bytes():
    wire = Message("x", arrays={"a": np.arange(4.0)}).encode()
    with pytest.raises(ProtocolError, match="magic"):
        Message.decode(b"XXXX" + wire[4:])
    with pytest.raises(ProtocolError, match="truncated"):
        Message.decode(wire[:-3])
    with pytest.raises(ProtocolError, match="trailing"):
        Message.decode(wire + b"\0")
    tampered = wire.replace(b"<f8", b"|O8")
    with pytest.raises(ProtocolError):
        Message.decode(tampered)


def test_peek_reads_the_header_without_the_arrays_and_rejects_corrupt_specs():
    import json as _json
    import struct as _struct

    msg = Message("fwd", "a", "b", 3, arrays={"x": np.zeros((2, 5), np.float32)}, meta={"k": 1})
    wire = msg.encode()
    head = Message.peek(memoryview(wire))
    assert head == msg.header()
    assert (head.names, head.shapes, head.round) == (("x",), ((2, 5),), 3)
    hlen = _struct.unpack("<I", wire[4:8])[0]
    header = _json.loads(wire[8 : 8 + hlen])
    header["arrays"][0]["shape"] = [2, 6]  # claims more data than the size says
    forged = _json.dumps(header).encode()
    bad = wire[:4] + _struct.pack("<I", len(forged)) + forged + wire[8 + hlen :]
    with pytest.raises(ProtocolError, match="size does not match"):
        Message.peek(bad)
    with pytest.raises(ProtocolError, match="truncated"):
        Message.peek(wire[:-1])


def test_a_malformed_header_is_a_protocol_error_not_a_crash():
    """Deep nesting or a header that is not an object must give an error reply, never a
    RecursionError/TypeError that kills the receiving thread (and leaves the sender hanging)."""
    import struct

    def frame(header: bytes) -> bytes:
        return b"FVM1" + struct.pack("<I", len(header)) + header

    for header, match in (
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply|corrupt"),
        (b"[1, 2]", "not a JSON object"),
        (b"17", "not a JSON object"),
        (
            b'{"kind": "x", "sender": "a", "receiver": "b", "round": 0, "meta": [], "arrays": []}',
            "'meta' an object",
        ),
        (
            b'{"kind": "x", "sender": "a", "receiver": "b", "round": 0, "meta": {}, "arrays": 3}',
            "'arrays' must be a list",
        ),
        # field types: a raw ValueError/TypeError from int(), or a list as the kind, before
        (
            b'{"kind": "x", "sender": "a", "receiver": "b", "round": "x", "meta": {}, "arrays": []}',
            "'round' an integer",
        ),
        (
            b'{"kind": "x", "sender": "a", "receiver": "b", "round": 1.5, "meta": {}, "arrays": []}',
            "'round' an integer",
        ),
        (
            b'{"kind": ["x"], "sender": {}, "receiver": "b", "round": 0, "meta": {}, "arrays": []}',
            "must be strings",
        ),
    ):
        with pytest.raises(ProtocolError, match=match):
            Message.peek(frame(header))
        with pytest.raises(ProtocolError):
            Message.decode(frame(header))


def test_a_receiver_refuses_nan_or_infinite_arrays_and_numbers():
    """Message.array returned NaN and infinite float arrays as sent and Message.number NaN and
    infinite meta values (JSON carries them): one poisoned every model it entered."""
    msg = Message(
        "fwd",
        "mallory",
        "b",
        arrays={"x": np.array([1.0, np.nan]), "i": np.arange(2), "f": np.ones(2, np.float32)},
        meta={"nan": float("nan"), "inf": float("-inf"), "ok": 2},
    )
    with pytest.raises(ProtocolError, match="'mallory' sent 'x' with NaN or infinite values"):
        Message.decode(msg.encode())  # by every receiver of a wire, on arrival
    with pytest.raises(ProtocolError, match="'mallory' sent 'x' with NaN or infinite values"):
        msg.array("x", (2,))
    for key in ("nan", "inf"):
        with pytest.raises(ProtocolError, match=f"'mallory' sent meta\\['{key}'\\]"):
            msg.number(key)
    assert msg.number("ok") == 2.0
    np.testing.assert_array_equal(msg.array("i", (2,)), [0, 1])  # no dtype asked: as sent
    with pytest.raises(ProtocolError, match="'mallory' sent 'i' as int64 .* expected floating"):
        msg.array("i", (2,), np.float32)
    assert msg.array("f", (2,), np.float64).dtype == np.float64


@pytest.mark.parametrize("key", [(1, 2), frozenset([1]), 1, 1.5, True, None])
def test_a_meta_key_json_cannot_carry_as_it_is_is_refused_naming_the_message(key):
    """A tuple key made encoding (and the in-process hand-over) raise a raw TypeError; a
    number or None arrived renamed ("1", "null"). The sender's message is refused."""
    with pytest.raises(
        ProtocolError, match="'a' sent 'fwd' with the meta key .* meta keys are str"
    ):
        Message("fwd", "a", "b", meta={key: 1})


@pytest.mark.parametrize(
    "value",
    [np.int64(3), np.float32(1.0), {1}, 2**64, -(2**63) - 1, 10**5000],
    ids=["int64", "float32", "set", "2**64", "-2**63-1", "10**5000"],
)
def test_a_meta_value_json_cannot_carry_as_it_is_is_refused_naming_the_message(value):
    """Numpy's scalars but float64, sets, and integers beyond 64 bits (one of more than 4,300
    digits made encoding raise a raw ValueError) are refused where the message is made."""
    with pytest.raises(ProtocolError, match="'a' sent 'fwd' with meta\\['x'\\] = .*: meta values"):
        Message("fwd", "a", "b", meta={"x": value})
    edges = {"lo": -(2**63), "hi": 2**64 - 1, "f": np.float64(0.5), "b": True, "n": None}
    assert Message.decode(Message("fwd", "a", "b", meta=edges).encode()).meta == edges


def test_a_meta_table_changed_after_the_message_was_made_is_refused_by_its_encoding():
    """The caller's table is not the message's; the message's own, changed in place, is
    refused by encoding and by the in-process hand-over as making it would have been."""
    from fedviews.federation._handover import FiniteChecks, hand_over

    table: dict = {"k": 1}
    msg = Message("fwd", "a", "b", meta=table)
    table[(1, 2)] = 3
    assert msg.meta == {"k": 1}
    for key, value in (((1, 2), 3), ("big", 10**5000), ("s", {1})):
        msg = Message("fwd", "a", "b", meta={"k": 1})
        msg.meta[key] = value  # type: ignore[index]
        for deliver in (msg.encode, lambda m=msg: hand_over(m, FiniteChecks())):
            with pytest.raises(ProtocolError, match="'a' sent 'fwd' with the meta key|meta\\["):
                deliver()
    with pytest.raises(ProtocolError, match="kind, sender and receiver are strings"):
        Message(("fwd",), "a", "b")  # type: ignore[arg-type]


def _crafted(edit) -> bytes:
    """An encoded message of 'mallory' with its JSON header text edited by ``edit``."""
    import struct

    wire = Message("fwd", "mallory", "b", arrays={"x": np.zeros(0)}, meta={"k": 1}).encode()
    hlen = struct.unpack("<I", wire[4:8])[0]
    header = edit(wire[8 : 8 + hlen].decode()).encode()
    return b"FVM1" + struct.pack("<I", len(header)) + header + wire[8 + hlen :]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            lambda h: h.replace('"k": 1', '"k": [1, {"y": [[[2]]]}]'),
            "'mallory' sent 'fwd' with meta",
        ),
        (lambda h: h.replace('"k": 1', '"k": ' + "[" * 900 + "]" * 900), "'mallory' sent 'fwd'"),
        (lambda h: h.replace('"k": 1', '"k": ' + "9" * 5000), "corrupt message header"),
        (lambda h: h.replace('"round": 0', '"round": ' + "9" * 5000), "corrupt message header"),
        (lambda h: h.replace('"k": 1', '"k": 18446744073709551616'), "'mallory' sent 'fwd'"),
        (
            lambda h: h.replace('"shape": [0]', f'"shape": [{2**64}, 0]'),
            "array 'x': no array has the shape",
        ),
        (
            lambda h: h.replace('"shape": [0]', f'"shape": [{2**63 - 1}, 0]'),
            "array 'x': no array has",
        ),
        (
            lambda h: h.replace(
                '"name": "x", "dtype": "<f8"', '"name": "' + "x" * 10**6 + '", "dtype": 8, "a": 0'
            ),
            "corrupt array spec",
        ),
        (
            lambda h: h.replace('"<f8"', '"' + "x" * 10**6 + '"'),
            "corrupt .* not a numpy dtype",
        ),
        (
            lambda h: h.replace('"meta": {"k": 1}', '"meta": [1]'),
            "'mallory' sent a corrupt message",
        ),
    ],
    ids=[
        "nested",
        "deep",
        "long-meta",
        "long-round",
        "2**64",
        "2**64-shape",
        "int64-shape",
        "1MB-name",
        "1MB-dtype",
        "meta-list",
    ],
)
def test_a_crafted_header_is_refused_by_a_short_protocol_error(edit, match):
    """Odd JSON in a peer's header (nested or too long meta values, numbers of thousands of
    digits, a shape numpy cannot make) was a raw ValueError, or an error of megabytes (the
    transport names the peer it came from, as for any refusal of the decoder)."""
    data = _crafted(edit)
    with pytest.raises(ProtocolError, match=match) as err:
        Message.decode(data)
    assert len(str(err.value)) < 1000


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        (("fwd", "a", "b", 1, {"x": np.array(["s"])}, {}), "only bool, integer and float"),
        ((("fwd",), "a", "b", 1, {}, {}), "kind, sender and receiver are strings"),
        (("fwd", "a", "b", True, {}, {}), "its round an integer"),
        (("fwd", "a", "b", 1, {}, {(1, 2): 3}), "the meta key"),
        (("fwd", "a", "b", 1, {}, {"k": 10**30}), "an int beyond 64 bits"),
        (("fwd", "a", "b", 1, {}, {"k" * 300: 1}), "a key of 300 characters"),
    ],
)
def test_a_message_made_by_a_party_is_checked_as_one_made_by_hand(fields, match) -> None:
    """Message.made (what Party.send, scatter and reply make, without the dataclass's set-up)
    refuses what Message(...) refuses, and makes the same message of what it accepts: arrays
    as it carries them, a meta table of its own."""
    for make in (Message, Message.made):
        with pytest.raises(ProtocolError, match=match):
            make(*fields)
    table = {"k": 1}
    made = Message.made("fwd", "a", "b", np.int64(2), {3: [1.0, 2.0]}, table)
    table["k"] = 2
    assert made.header() == Message("fwd", "a", "b", 2, {"3": np.zeros(2)}, {"k": 1}).header()
    assert isinstance(made.arrays["3"], np.ndarray) and made.meta == {"k": 1}
    assert made.encode() == Message("fwd", "a", "b", 2, {"3": [1.0, 2.0]}, {"k": 1}).encode()


def test_a_headers_fields_are_its_own_not_the_log_entry_it_caches():
    """A header keeps the log entry it made last (one per header and size), but that cache is
    not one of its fields: what iterates them (``dataclasses.fields``, ``asdict``, equality)
    sees the message's header only."""
    msg = Message("grad", "a", "b", 3, {"x": np.zeros((2, 3))}, {"k": 1})
    head, other = msg.header(), msg.header()
    entry = head.entry(100)
    assert head.entry(100) is entry and head.entry(101) is not entry
    names = ["kind", "sender", "receiver", "round", "names", "shapes", "meta"]
    assert [f.name for f in dataclasses.fields(head)] == names
    assert list(dataclasses.asdict(head)) == names
    assert head == other and hash(head) == hash(other)


def test_a_vector_of_another_length_is_named_with_its_expected_shape():
    """``expected (40)`` lacked the tuple's comma: the expected shape reads as Python's."""
    from fedviews.errors import ProtocolError

    msg = Message("update", sender="c", arrays={"g": np.zeros(39)})
    with pytest.raises(
        ProtocolError, match=r"'c' sent 'g' of shape \(39,\) in 'update', expected \(40,\)$"
    ):
        msg.array("g", (40,))


def test_the_summaries_of_two_sessions_add_up():
    """A resumed deployment's message log is the killed session's (kept in its checkpoint)
    and the resumed one's together."""
    from fedviews.federation import merge_summaries

    before = {
        "rounds": 4,
        "messages": 10,
        "total_bytes": 100,
        "per_party": {"a": {"bytes_sent": 60, "bytes_received": 40, "wall_seconds": 1.5}},
        "crossings": {"a -> c": ["Z_k"]},
        "crossing_bytes": {"a -> c": 60, "c -> a": 40},
        "meta_keys": {},
        "exchanges": [["a", "c", "update:reply", ["Z_k"]]],
    }
    now = {
        "rounds": 9,
        "messages": 7,
        "total_bytes": 50,
        "per_party": {
            "a": {"bytes_sent": 30, "bytes_received": 10, "wall_seconds": 0.25},
            "b": {"bytes_sent": 10, "bytes_received": 0, "wall_seconds": 0.0},
        },
        "crossings": {"a -> c": ["Z_k", "psi_set"], "b -> c": ["x"]},
        "crossing_bytes": {"a -> c": 30, "b -> c": 10, "c -> a": 10},
        "meta_keys": {"a -> c": ["n"]},
        "exchanges": [["b", "c", "x:reply", ["x"]]],
    }
    merged = merge_summaries(before, now)
    assert merged == {
        "rounds": 9,
        "messages": 17,
        "total_bytes": 150,
        "per_party": {
            "a": {"bytes_sent": 90, "bytes_received": 50, "wall_seconds": 1.75},
            "b": {"bytes_sent": 10, "bytes_received": 0, "wall_seconds": 0.0},
        },
        "crossings": {"a -> c": ["Z_k", "psi_set"], "b -> c": ["x"]},
        "crossing_bytes": {"a -> c": 90, "b -> c": 10, "c -> a": 50},
        "meta_keys": {"a -> c": ["n"]},
        "exchanges": [["a", "c", "update:reply", ["Z_k"]], ["b", "c", "x:reply", ["x"]]],
        "sessions": 2,
    }
    assert merge_summaries(merged, now)["sessions"] == 3


def test_a_header_naming_an_array_twice_or_a_huge_number_is_refused_plainly() -> None:
    """A second ``x`` silently replaced the first; a number of 5000 digits quoted Python's
    advice to raise an interpreter limit."""
    buf = bytes(Message("k", "a", "b", 0, arrays={"x": np.ones(1), "y": np.ones(1)}).encode())
    (hlen,) = struct.unpack("<I", buf[4:8])
    head = json.loads(buf[8 : 8 + hlen])

    def encoded(text: bytes) -> bytes:
        return buf[:4] + struct.pack("<I", len(text)) + text + buf[8 + hlen :]

    head["arrays"][1]["name"] = "x"
    with pytest.raises(ProtocolError, match="^array 'x' appears twice in the header$"):
        Message.decode(encoded(json.dumps(head).encode()))
    huge = json.dumps(head).encode().replace(b'"round": 0', b'"round": ' + b"9" * 5000)
    with pytest.raises(ProtocolError, match="^corrupt message header: a number of thousands of"):
        Message.decode(encoded(huge))


def test_a_message_of_text_or_a_numpy_bool_in_meta_is_refused_naming_its_sender() -> None:
    with pytest.raises(ProtocolError, match="^'a' cannot send 'k': array 's' has dtype <U1") as err:
        Message("k", "a", "b", 0, arrays={"s": np.array(["t"])})
    assert err.value.party == "a"
    # (it read "of type bool: meta values are str, int (64 bits), float, bool or None")
    with pytest.raises(ProtocolError, match=r"= np.True_, of type numpy.bool: meta values"):
        Message("k", "a", "b", 0, meta={"x": np.bool_(True)})
