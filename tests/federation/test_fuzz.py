"""Fuzzing: random and mutated bytes into every receiver of what a peer sends.

Property-based (hypothesis, derandomized: the same examples every run, bounded in
number). Frames, message headers and payloads, error replies, setup reports, checkpoint
files and end-to-end key bundles are fed to the code that reads them where it runs:
the only outcomes are success or a :mod:`fedviews.errors` exception, and where a peer
sent it, one that names that peer (``party``; an error reply's reporter). Half-sent
messages never hold more than the link's budget.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from fedviews.deploy import _roles, load_deploy_config  # noqa: E402
from fedviews.deploy._checkpoint import Checkpoints  # noqa: E402
from fedviews.errors import DataError, FedViewsError, ProtocolError, RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Coordinator,
    GrpcHub,
    GrpcOptions,
    GrpcPartyTransport,
    Message,
    PrivacyPolicy,
    SetupReport,
    TLSFiles,
    check_group_sizes,
    get_algorithm_spec,
    init_ca,
    issue_certificate,
    raise_remote,
)
from fedviews.federation._e2e import E2EKeys, check_bundle  # noqa: E402
from fedviews.federation._grpc import (  # noqa: E402
    _HEADER,
    _MAGIC,
    ERROR,
    PEERS,
    REPLY,
    REQUEST,
    _Link,
)
from fedviews.federation._message import prefix  # noqa: E402
from fedviews.federation._reports import stamp_report  # noqa: E402

FUZZ = settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PEER = "fou"
HUB = "coordinator"
POLICY = PrivacyPolicy.of(
    "fuzz",
    {("party", "coordinator"): ["Z_k", "m"], ("coordinator", "party"): ["Z"]},
    kinds={("coordinator", "party"): ["update"]},
)
SMALL = GrpcOptions(chunk_size=256, max_message_bytes=4096, max_incomplete=4)
REQUEST_MSG = Message("update", HUB, PEER, 3, arrays={"Z": np.ones((3, 4))})
GOOD = Message(
    "update:reply",
    PEER,
    HUB,
    3,
    arrays={"Z_k": np.arange(12.0).reshape(3, 4), "m": np.arange(3, dtype=np.int32)},
    meta={"n": 3, "note": "x"},
).encode()

# -- strategies ------------------------------------------------------------------------
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
#: where a dishonest peer edits a header: (path into the JSON header, new value)
HEADER_FIELDS = [
    ("kind",),
    ("sender",),
    ("receiver",),
    ("round",),
    ("meta",),
    ("meta", "n"),
    ("arrays",),
    ("arrays", 0),
    ("arrays", 0, "name"),
    ("arrays", 0, "dtype"),
    ("arrays", 0, "shape"),
    ("arrays", 0, "shape", 0),
    ("arrays", 0, "size"),
    ("arrays", 1, "shape"),
    ("sealed",),
]
shapes = st.lists(
    st.integers(-4, 20) | st.floats(0, 20) | st.sampled_from([2**31, 2**32, 2**63, 2**64]),
    max_size=3,
) | st.sampled_from([[2**32, 2**32], [3.0, 4.0], [-3, -4], [4, 3], [12], [2**64, 0], [True, 12]])
edits = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(HEADER_FIELDS), json_values),
        *[st.tuples(st.sampled_from([("arrays", 0, "shape"), ("arrays", 1, "shape")]), shapes)] * 2,
        st.tuples(st.just(("arrays", 0, "size")), st.sampled_from([0, 8, 96, -96, 2**64, 96.0])),
        st.tuples(
            st.just(("arrays", 0, "dtype")),
            st.sampled_from(["<f8", "|O", "<U3", "f8", "<c16", "V8", "<M8", "<f2", "|b1"]),
        ),
    ),
    min_size=1,
    max_size=3,
)
byte_edits = st.lists(
    st.tuples(
        st.sampled_from(["flip", "cut", "insert", "drop"]),
        st.integers(0, 2**20),
        st.binary(min_size=1, max_size=6),
    ),
    min_size=1,
    max_size=4,
)


def _edit_header(data: bytes, changes: list[tuple[tuple[Any, ...], Any]], fit: bool) -> bytes:
    """``data`` (an encoded message) with its JSON header edited; its payload kept, or with
    ``fit``, cut or padded to the sizes the header claims (so that a lie gets past them)."""
    (hlen,) = struct.unpack("<I", data[4:8])
    head = json.loads(data[8 : 8 + hlen])
    for path, value in changes:
        node: Any = head
        for key in path[:-1]:
            try:
                node = node[key]
            except (KeyError, IndexError, TypeError):
                break
        else:
            try:
                node[path[-1]] = value
            except (IndexError, TypeError):
                pass
    payload = data[8 + hlen :]
    specs = head.get("arrays") if isinstance(head, dict) else None
    for spec in specs if fit and isinstance(specs, list) else []:
        if isinstance(spec, dict):  # the size a lie needs to get past an int64 product
            spec["size"] = _claimed_size(spec.get("dtype"), spec.get("shape"), spec.get("size"))
    sizes = [a.get("size") for a in specs or [] if isinstance(a, dict)]
    if fit and all(type(n) is int and n >= 0 for n in sizes) and sum(sizes) < 1 << 16:
        payload = (payload + bytes(sum(sizes)))[: sum(sizes)]
    return prefix(json.dumps(head).encode()) + payload


def _claimed_size(dtype: Any, shape: Any, size: Any) -> Any:
    """``itemsize * prod(shape)`` as 64-bit integers compute it (wrapping around), or
    ``size`` where that cannot be computed."""
    try:
        dims = [int(d) for d in shape]
        return (np.dtype(dtype).itemsize * math.prod(dims)) % 2**64
    except (TypeError, ValueError, OverflowError):
        return size


def _edit_bytes(data: bytes, changes: list[tuple[str, int, bytes]]) -> bytes:
    out = bytearray(data)
    for op, pos, blob in changes:
        at = pos % (len(out) + 1)
        if op == "flip" and out:
            out[at % len(out)] ^= blob[0] or 1
        elif op == "cut":
            del out[at:]
        elif op == "insert":
            out[at:at] = blob
        elif out:
            del out[at % len(out) : at % len(out) + len(blob)]
    return bytes(out)


messages = st.one_of(
    st.binary(max_size=64),
    *[edits.map(lambda c: _edit_header(GOOD, c, True))] * 3,  # lies that pass the sizes
    st.tuples(edits, st.booleans()).map(lambda c: _edit_header(GOOD, *c)),
    byte_edits.map(lambda c: _edit_bytes(GOOD, c)),
    st.tuples(edits, byte_edits).map(lambda c: _edit_bytes(_edit_header(GOOD, c[0], False), c[1])),
)


#: the lies the issue saw (float, wrapping and negative shapes, text where a number goes)
SEEN = [
    _edit_header(GOOD, [(("arrays", 0, "shape"), shape)], True)
    for shape in ([3.0, 4.0], [2**32, 2**32], [-3, -4], [True, 12], "12", [[3], 4])
] + [_edit_header(GOOD, [(("arrays", 0, "size"), 96.0)], True)]


def _seen(**more: Any) -> Any:
    """Run ``SEEN`` too, every time (with the other arguments ``more``)."""

    def deco(test: Any) -> Any:
        for data in SEEN:
            test = example(data=data, **more)(test)
        return test

    return deco


# -- the decoder -----------------------------------------------------------------------
@FUZZ
@given(data=messages)
@_seen()
def test_the_decoder_decodes_or_refuses(data: bytes) -> None:
    for read in (Message.decode, Message.peek):
        try:
            got = read(data)
        except ProtocolError:
            continue
        if isinstance(got, Message):  # no array claims more bytes than arrived
            assert got.nbytes <= len(data)
            assert all(type(d) is int and d >= 0 for a in got.arrays.values() for d in a.shape)


# -- the reply receivers (the hub's and a party's, with the hub's stamp) ----------------
@pytest.fixture(scope="module")
def hub() -> Iterator[GrpcHub]:
    h = GrpcHub(POLICY, {PEER: "party"}, options=SMALL)
    h.register(Coordinator(HUB))
    try:
        yield h
    finally:
        h.close(grace=0.1)


def _party() -> GrpcPartyTransport:
    t = GrpcPartyTransport(POLICY, "127.0.0.1:1", options=SMALL)
    t.roles.update({HUB: "coordinator", PEER: "party", "pix": "party"})
    t.link = _Link(HUB, SMALL)
    return t


reports = st.one_of(
    st.binary(max_size=40),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {"type": json_values, "message": json_values},
        optional={"by": st.sampled_from([PEER, HUB, "pix", ""]) | json_values},
    ).map(lambda d: json.dumps(d).encode()),
)


@FUZZ
@given(ftype=st.sampled_from([REPLY, ERROR]), data=messages | reports)
@_seen(ftype=REPLY)
def test_a_reply_is_taken_or_refused_naming_its_sender(
    hub: GrpcHub, ftype: int, data: bytes
) -> None:
    try:
        reply = hub._take_reply(_Link(PEER, SMALL), REQUEST_MSG, ftype, data)
    except RemoteError as exc:
        assert exc.reported_by == PEER and exc.party == PEER
    except FedViewsError as exc:
        assert exc.party == PEER, exc
    else:
        assert reply.sender == PEER


@FUZZ
@given(data=reports)
def test_an_error_reply_names_its_reporter_and_the_hub_s_stamp_cannot_be_forged(
    data: bytes,
) -> None:
    party = _party()
    ask = Message("pass", "pix", PEER)
    try:
        party._take_reply(party.link, ask, ERROR, data)  # straight from fou (as if direct)
    except RemoteError as exc:
        assert exc.reported_by in (PEER, HUB)  # the hub only where it stamped the report
    except ProtocolError as exc:
        assert exc.party == PEER
    # relayed, the hub stamps what fou wrote with fou's name, whatever fou claimed
    with pytest.raises(RemoteError) as caught:
        raise_remote(PEER, "pass", stamp_report(PEER, "pass", data), relay=HUB)
    assert caught.value.reported_by == PEER


# -- frames: reassembly, the reader thread, bounded memory ------------------------------
frame_plans = st.lists(
    st.tuples(
        st.integers(0, 9),  # frame type
        st.integers(0, 5),  # message id
        st.sampled_from([1, 2, 3, 16, 17, 2**31]),  # announced chunks
        st.integers(0, 20),  # chunks actually sent
        st.integers(0, SMALL.chunk_size + 8),  # chunk length
        st.booleans(),  # a bad magic
    ),
    max_size=12,
)


def _frames(plan: list[tuple[int, int, int, int, int, bool]]) -> Iterator[bytes]:
    for ftype, msg_id, n, sent, length, bad in plan:
        for i in range(min(sent, n)):
            magic = b"XXXX" if bad else _MAGIC
            yield _HEADER.pack(magic, ftype, msg_id, i, n, 0) + bytes([i % 251]) * length


@FUZZ
@given(plan=frame_plans)
def test_reassembly_holds_at_most_its_budget_and_names_the_sender(plan) -> None:
    link = _Link(PEER, SMALL, checksum=False)
    budget = SMALL.max_incomplete * SMALL.max_message_bytes
    tracemalloc.start()
    try:
        for frame in _frames(plan):
            try:
                link.receive(frame)
            except ProtocolError as exc:
                assert f"{PEER!r}" in str(exc)
                break
            held = sum(len(c) for parts in link.partial.values() for c in parts)
            assert len(link.partial) <= SMALL.max_incomplete and held <= budget
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * budget + 64 * 1024


@FUZZ
@given(plan=frame_plans, bodies=st.lists(messages | reports, max_size=3))
def test_the_reader_thread_never_dies_with_a_raw_exception(hub: GrpcHub, plan, bodies) -> None:
    link = _Link(PEER, SMALL, checksum=False)
    whole = [
        _HEADER.pack(_MAGIC, ftype, 7, 0, 1, 0) + body
        for ftype, body in zip([REQUEST, REPLY, ERROR, PEERS], bodies, strict=False)
        if len(body) <= SMALL.chunk_size
    ]
    hub._read(link, iter([*whole, *_frames(plan)]))  # returns; never raises
    assert link.closed.is_set()
    assert link.reason == "peer left" or f"{PEER!r}" in link.reason, link.reason


# -- setup reports and checkpoint lists ---------------------------------------------------
CFG = load_deploy_config(
    {"algorithm": "mmvfl", "federation": {"parties": ["pix", PEER, "zer"], "label_owner": "pix"}}
)
HONEST = {"n/train": 30, "n_features": 4}
setup_metas = st.dictionaries(
    st.sampled_from(["n/train", "n_features", "n_classes", "n_samples", "checkpoints", "width"])
    | st.text(max_size=5),
    scalars,
    max_size=5,
)


@FUZZ
@given(meta=setup_metas, liar=st.sampled_from(["pix", PEER]), drop=st.booleans())
@example(meta={"n/train": 30, "n_features": 4}, liar="pix", drop=True)  # no n_classes
def test_a_setup_report_is_used_or_refused_naming_its_sender(meta, liar, drop) -> None:
    infos_raw = {"pix": {**HONEST, "n_classes": 3}, PEER: dict(HONEST), "zer": dict(HONEST)}
    infos_raw[liar] = meta if drop else {**infos_raw[liar], **meta}
    spec = get_algorithm_spec("mmvfl")
    try:
        infos = {p: SetupReport(p, m) for p, m in infos_raw.items()}
        check_group_sizes(spec.groups(CFG), infos)
        setup = spec.make_setup(CFG, infos)
        rounds = {p: _roles._rounds(i) for p, i in infos.items()}
    except ProtocolError as exc:
        assert exc.party == liar, exc
    except FedViewsError as exc:  # e.g. the groups' sizes differ: a DataError naming them all
        assert exc.party in (None, liar), exc  # (the one that differs from the others)
    else:
        assert type(setup["n_samples"]) is int and all(isinstance(r, set) for r in rounds.values())


@FUZZ
@given(text=st.text(max_size=20) | st.sampled_from(["1,abc", "1,,2", "١,٢", "9" * 40, "-1", " 3"]))
def test_a_checkpoint_list_is_read_or_refused_naming_its_sender(text: str) -> None:
    try:
        got = _roles._rounds(SetupReport(PEER, {"checkpoints": text}))
    except ProtocolError as exc:
        assert exc.party == PEER
    else:
        assert all(type(r) is int and r >= 0 for r in got)


# -- checkpoint files -------------------------------------------------------------------
def _checkpoint_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = Checkpoints(Path(d), "fp").save(1, {"w": np.arange(6.0), "b": np.ones(2)})
        return path.read_bytes()


CHECKPOINT = _checkpoint_bytes()


@FUZZ
@given(changes=byte_edits)
def test_a_damaged_checkpoint_is_loaded_or_a_clear_error(changes) -> None:
    with tempfile.TemporaryDirectory() as d:
        ckpt = Checkpoints(Path(d), "fp")
        ckpt.directory.mkdir(exist_ok=True)
        ckpt.path(1).write_bytes(_edit_bytes(CHECKPOINT, changes))
        try:
            arrays = ckpt.load(1)
        except FedViewsError as exc:
            assert str(ckpt.path(1)) in str(exc) or "fingerprint" in str(exc)
        else:
            assert all(isinstance(a, np.ndarray) for a in arrays.values())


# -- end-to-end key bundles (at the hub's hello and from the hub) -------------------------
@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    init_ca(d)
    for name in (HUB, "pix", PEER):
        issue_certificate(d, name)
    return d


bundle_edits = st.dictionaries(
    st.sampled_from(["cert", "x25519", "sig", "extra"]),
    json_values | st.sampled_from(["", "AAAA", "A" * 44, "-----BEGIN CERTIFICATE-----\n"]),
    max_size=3,
)


@FUZZ
@given(
    changes=bundle_edits,
    drop=st.sets(st.sampled_from(["cert", "x25519", "sig"]), max_size=2),
    outer=st.integers(0, 3),
)
def test_key_bundles_are_accepted_or_refused_naming_who_sent_them(
    certs, changes, drop, outer
) -> None:
    fou = E2EKeys(PEER, TLSFiles.from_dir(certs, PEER))
    good = {**fou.bundle(), "cert": (certs / f"{PEER}.crt").read_text()}
    bundle = {k: v for k, v in {**good, **changes}.items() if k not in drop}
    try:  # the hub checks a hello's bundle
        check_bundle(TLSFiles.from_dir(certs, HUB), PEER, bundle)
    except FedViewsError:
        pass
    party = _party()
    party.e2e = E2EKeys("pix", TLSFiles.from_dir(certs, "pix"), hub=HUB)
    peers: Any = [{PEER: bundle}, {PEER: bundle, HUB: good}, [bundle], bundle][outer]
    frame = json.dumps({"session": "00" * 16, "peers": peers}).encode()
    try:  # a party takes the hub's PEERS frame
        assert party._dispatch(party.link, PEERS, 0, frame)
    except FedViewsError as exc:
        assert exc.party == HUB, exc


def test_a_party_whose_count_or_ids_differ_from_all_the_others_is_named() -> None:
    """'zer' reporting 99 aligned samples where both others report 100 named nobody."""
    groups = get_algorithm_spec("mmvfl").groups(CFG)
    infos = {p: SetupReport(p, {"n/train": 100, "ids/train": "d1"}) for p in ("pix", PEER)}
    infos["zer"] = SetupReport("zer", {"n/train": 99, "ids/train": "d1"})
    with pytest.raises(DataError, match="'zer' differs from all the others") as err:
        check_group_sizes(groups, infos)
    assert err.value.party == "zer"
    infos["zer"] = SetupReport("zer", {"n/train": 100, "ids/train": "d2"})
    with pytest.raises(DataError, match="not the same IDs.*'zer' differs from all") as err:
        check_group_sizes(groups, infos, same_ids=True)
    assert err.value.party == "zer"
    two = {p: infos[p] for p in ("pix", "zer")}  # one against one: nobody is named
    with pytest.raises(DataError) as err:
        check_group_sizes(
            [dataclasses.replace(groups[0], parties=("pix", "zer"))], two, same_ids=True
        )
    assert err.value.party is None
