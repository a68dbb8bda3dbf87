"""End-to-end sealing of party-to-party messages: the hub relays what it cannot read or alter.

A party ``a`` sends ``b`` an array through the coordinator's hub (as a Multi-VFL
data owner sends activations to a label owner). The hub sees the header (the log
still shows the crossing) but not the payload; a payload it alters, replays or
forges is refused by ``b``; a hub whose certificate only matches the
coordinator's name case-insensitively is refused by the parties.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from _protocol import forged  # noqa: E402

from fedviews.errors import PrivacyError, ProtocolError, RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Coordinator,
    GrpcHub,
    GrpcOptions,
    GrpcPartyTransport,
    Message,
    Party,
    PrivacyPolicy,
    TLSFiles,
    handles,
    init_ca,
    issue_certificate,
)

POLICY = PrivacyPolicy.of(
    "relay",
    {("party", "party"): ["x", "y"]},
    kinds={("coordinator", "party"): ["go"], ("party", "party"): ["pass"]},
)
FAST = GrpcOptions(timeout=5.0, heartbeat=0.5, connect_timeout=5.0, connect_retries=2, backoff=0.1)
SECRET = np.arange(1000, 1064, dtype=np.float64) * 3.25  # bytes easy to look for


class Sender(Party):
    """``go`` from the coordinator makes it send ``SECRET`` to ``b`` and return b's answer."""

    @handles("go")
    def on_go(self, msg: Message) -> Message:
        reply = self.send("b", "pass", arrays={"x": SECRET}, meta={"note": 7})
        return self.reply(msg, meta={"sum": float(reply.arrays["y"].sum())})


class Receiver(Party):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.got: list[Message] = []

    @handles("pass")
    def on_pass(self, msg: Message) -> Message:
        self.got.append(msg)
        return self.reply(msg, arrays={"y": msg.arrays["x"] * 2})


def _serve(t: GrpcPartyTransport, errors: list[BaseException]) -> None:
    try:
        t.serve()
    except Exception as exc:  # noqa: BLE001 - recorded for the assertions
        errors.append(exc)


@pytest.fixture()
def relay(tmp_path) -> Iterator[dict[str, Any]]:
    init_ca(tmp_path)
    for name in ("coordinator", "a", "b"):
        issue_certificate(tmp_path, name)
    roles = {"a": "party", "b": "party"}
    hub = GrpcHub(POLICY, roles, tls=TLSFiles.from_dir(tmp_path, "coordinator"), options=FAST)
    hub.register(Coordinator())
    seen: list[bytes] = []  # what the hub relays, as it relays it
    real = hub._serve_request

    def spy(link: Any, msg_id: int, data: Any) -> None:
        seen.append(bytes(data))
        real(link, msg_id, data)

    hub._serve_request = spy  # type: ignore[method-assign]
    receiver, errors = Receiver("b"), []
    try:
        for name, party in (("a", Sender("a")), ("b", receiver)):
            t = GrpcPartyTransport(
                POLICY, f"127.0.0.1:{hub.port}", tls=TLSFiles.from_dir(tmp_path, name), options=FAST
            )
            t.register(party)
            t.connect()
            threading.Thread(target=_serve, args=(t, errors), daemon=True).start()
        hub.wait_for_parties(30)  # a hang cap
        yield {"hub": hub, "seen": seen, "b": receiver, "errors": errors, "real": real}
    finally:
        hub.close()


def test_the_hub_relays_a_payload_it_cannot_read(relay) -> None:
    hub = relay["hub"]
    reply = hub.local["coordinator"].send("a", "go")
    assert reply.meta["sum"] == pytest.approx(2 * SECRET.sum())
    got = relay["b"].got[0]
    np.testing.assert_array_equal(got.arrays["x"], SECRET)
    assert got.meta == {"note": 7}
    relayed = [d for d in relay["seen"] if Message.peek(d).kind == "pass"]
    assert len(relayed) == 1
    data = relayed[0]
    assert SECRET.tobytes() not in data and SECRET[:4].tobytes() not in data
    with pytest.raises(ProtocolError, match="sealed end to end"):
        Message.decode(data)  # what the coordinator would have to do to read it
    head = Message.peek(data)
    assert (head.sender, head.receiver, head.names, head.shapes) == ("a", "b", ("x",), ((64,),))
    assert b'"note"' not in data  # meta travels sealed too
    # the hub's log still shows what crossed (names, not contents), both ways
    crossings = hub.log.crossings()
    assert crossings["a -> b"] == ["x"] and crossings["b -> a"] == ["y"]
    assert "a -> b" not in hub.log.summary()["meta_keys"]  # sealed: not even the keys


def _relay_to_b(relay: dict[str, Any], data: bytes) -> Exception | None:
    """Let the hub push ``data`` to ``b`` as a relayed request and return b's error, if any."""
    hub = relay["hub"]
    link = hub.links["b"]
    rid, slot = hub.calls.new(link)
    from fedviews.federation._grpc import ERROR, REQUEST

    link.send(REQUEST, rid, data)
    ftype, rdata = hub._await(link, rid, slot, "pass")
    if ftype != ERROR:
        return None
    import json

    info = json.loads(bytes(rdata))
    return PrivacyError(info["message"]) if info["type"] == "PrivacyError" else None


@pytest.mark.parametrize(
    "specs", [{"shape": [64.0]}, {"shape": [2**32, 2**32], "size": 0}], ids=["float", "overflow"]
)
def test_a_sealed_reply_with_an_unreadable_shape_names_its_sender(relay, monkeypatch, specs):
    """b seals a reply whose (authenticated) header lies about its shape: the hub, the first
    to read the header, refuses it naming b, and a's report to the coordinator carries that
    (a raw TypeError/ValueError at a made a look like the party that failed)."""
    monkeypatch.setattr(
        Receiver, "on_pass", lambda self, msg: forged(self.reply(msg, arrays={"y": SECRET}), specs)
    )
    with pytest.raises(RemoteError) as caught:
        relay["hub"].local["coordinator"].send("a", "go")
    err = caught.value
    assert (err.reported_by, err.kind) == ("a", "RemoteError")
    assert err.text.startswith("'coordinator' reported ProtocolError: the reply to 'pass' from 'b'")
    assert "corrupt array spec" in err.text or "size does not match" in err.text
    assert relay["errors"] == []  # nobody's stream died


def test_a_sealed_reply_with_a_nan_is_refused_by_its_reader_naming_its_sender(
    relay, monkeypatch
) -> None:
    """Only ``a`` can read b's sealed reply: ``a`` refuses its NaN on arrival, naming b (its
    handler read ``reply.arrays`` as they came), and reports that to the coordinator."""
    poisoned = SECRET * np.where(np.arange(SECRET.size) == 5, np.nan, 1.0)
    monkeypatch.setattr(
        Receiver, "on_pass", lambda self, msg: self.reply(msg, arrays={"y": poisoned})
    )
    with pytest.raises(RemoteError) as caught:
        relay["hub"].local["coordinator"].send("a", "go")
    err = caught.value
    assert err.reported_by == "a"
    assert "'b' sent 'y' with NaN or infinite values in 'pass:reply'" in err.text
    assert relay["errors"] == []


def test_an_altered_replayed_or_forged_payload_is_refused(relay) -> None:
    hub = relay["hub"]
    hub.local["coordinator"].send("a", "go")
    data = next(d for d in relay["seen"] if Message.peek(d).kind == "pass")
    assert len(relay["b"].got) == 1

    # replay of the genuine message
    err = _relay_to_b(relay, data)
    assert err is not None and "replayed" in str(err)
    # one flipped payload bit
    flipped = bytearray(data)
    flipped[-20] ^= 1
    err = _relay_to_b(relay, bytes(flipped))
    assert err is not None and "failed authentication" in str(err)
    # a header the hub edits (the round) is authenticated as well
    edited = data.replace(b'"round": 0', b'"round": 5')
    assert edited != data
    err = _relay_to_b(relay, edited)
    assert err is not None and "failed authentication" in str(err)
    # a plain message the hub makes up in a's name
    forged = Message("pass", "a", "b", arrays={"x": np.zeros(64)}).encode()
    err = _relay_to_b(relay, forged)
    assert err is not None and "unsealed" in str(err)
    assert len(relay["b"].got) == 1  # none of them reached b's handler
    assert relay["errors"] == []


def test_key_bundles_handed_out_again_do_not_reopen_the_replay_window(relay) -> None:
    """The hub re-sends the peers' keys on every rejoin (and may at will): a party keeps the
    sequence numbers it has seen under an unchanged key, so an old message stays a replay."""
    hub = relay["hub"]
    hub.local["coordinator"].send("a", "go")
    data = next(d for d in relay["seen"] if Message.peek(d).kind == "pass")
    hub._hand_out_keys()  # the same bundles and session once more
    time.sleep(0.3)
    err = _relay_to_b(relay, data)
    assert err is not None and "replayed" in str(err)
    assert len(relay["b"].got) == 1
    reply = hub.local["coordinator"].send("a", "go")  # the honest traffic goes on
    assert reply.meta["sum"] == pytest.approx(2 * SECRET.sum())
    assert len(relay["b"].got) == 2 and relay["errors"] == []


def test_a_hub_cannot_hand_out_an_end_to_end_key_in_its_own_name(relay, tmp_path) -> None:
    """The hub holds a genuine certificate named "coordinator": a key it signs with it and hands
    out as a peer's would let it seal sets as a party, which a party then re-blinds (the PSI
    dictionary attack recovered all of a party's IDs this way). The parties refuse it."""
    import json

    from fedviews.federation._e2e import E2EKeys
    from fedviews.federation._grpc import PEERS

    hub = relay["hub"]
    tls = TLSFiles.from_dir(tmp_path, "coordinator")
    mine = E2EKeys("coordinator", tls)
    peers = {**hub.bundles, "coordinator": {"cert": tls.cert.read_text(), **mine.bundle()}}
    frame = json.dumps({"session": hub.session.hex(), "peers": peers}).encode()
    for link in hub.links.values():
        link.post(PEERS, 0, frame)
    deadline = time.monotonic() + 30  # a hang cap, generous for a loaded machine
    while len(relay["errors"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(relay["errors"]) == 2
    for err in relay["errors"]:
        assert isinstance(err, PrivacyError) and "in its own name 'coordinator'" in str(err)


def test_a_hub_named_coordinator_only_up_to_case_is_refused(tmp_path) -> None:
    init_ca(tmp_path)
    for name in ("Coordinator", "a"):
        issue_certificate(tmp_path, name)
    hub = GrpcHub(
        POLICY, {"a": "party"}, tls=TLSFiles.from_dir(tmp_path, "Coordinator"), options=FAST
    )
    hub.register(Coordinator())
    try:
        t = GrpcPartyTransport(
            POLICY,
            f"127.0.0.1:{hub.port}",
            tls=TLSFiles.from_dir(tmp_path, "a"),
            server_name="coordinator",
            options=FAST,
        )
        t.register(Receiver("a"))
        with pytest.raises(PrivacyError, match=r"\['Coordinator'\] was offered as 'coordinator'"):
            t.connect()
    finally:
        hub.close()
    time.sleep(0.1)


def test_a_coordinator_cannot_use_a_party_as_a_psi_oracle(tmp_path) -> None:
    """Sealed PSI chains: the intersection is right; the coordinator's own set is never
    re-blinded (dictionary attack), nor is a party's sealed set re-blinded twice."""
    from fedviews.privacy import PSI_POLICY, PSIParty, hash_ids, run_psi

    init_ca(tmp_path)
    for name in ("coordinator", "a", "b"):
        issue_certificate(tmp_path, name)
    hub = GrpcHub(
        PSI_POLICY,
        {"a": "party", "b": "party"},
        tls=TLSFiles.from_dir(tmp_path, "coordinator"),
        options=FAST,
    )
    coord = Coordinator()
    hub.register(coord)
    ids = {"a": np.arange(0, 300), "b": np.arange(200, 500)}
    errors: list[BaseException] = []
    parties = {}
    try:
        for name in ("a", "b"):
            t = GrpcPartyTransport(
                PSI_POLICY,
                f"127.0.0.1:{hub.port}",
                tls=TLSFiles.from_dir(tmp_path, name),
                options=FAST,
            )
            chains = {g: ["a", "b"] for g in ("g1", "g2", "g3")}
            parties[name] = PSIParty(name, ids[name], chains=chains)
            t.register(parties[name])
            t.connect()
            threading.Thread(target=_serve, args=(t, errors), daemon=True).start()
        hub.wait_for_parties(30)  # a hang cap
        assert run_psi(coord, ["a", "b"], "g1") == 100
        np.testing.assert_array_equal(ids["a"][parties["a"].psi_rows["g1"]], np.arange(200, 300))
        relayed = {e.kind: e.arrays for e in hub.log.entries}
        assert relayed["psi:reblind"] == ("psi_sealed",)  # the coordinator relays, cannot read

        # the dictionary attack: have "a" re-blind the coordinator's own candidates
        coord.send("a", "psi:blind", meta={"group": "g2", "next": "b"})
        candidates = hash_ids(np.arange(1000))
        with pytest.raises(
            RemoteError,
            match="'a' reported PrivacyError: .*" + "re-blinds only sets sealed by another party",
        ):
            coord.send("a", "psi:reblind", arrays={"psi_set": candidates}, meta={"group": "g2"})

        # a genuine sealed set of "b", re-blinded once; a second time is refused
        meta_g2 = {"group": "g2"}
        sealed = coord.send("b", "psi:blind", meta={"group": "g2", "next": "a"})
        blob = sealed.arrays["psi_sealed"]
        once = coord.send("a", "psi:reblind", arrays={"psi_sealed": blob}, meta={"group": "g2"})
        assert once.arrays["psi_set"].shape == (300, 32)
        with pytest.raises(RemoteError, match="'a' reported PrivacyError: .*" + "replayed"):
            coord.send("a", "psi:reblind", arrays={"psi_sealed": blob}, meta={"group": "g2"})
        with pytest.raises(
            RemoteError, match="'b' reported PrivacyError: .*" + "second psi:blind of group 'g2'"
        ):
            coord.send("b", "psi:blind", meta={"group": "g2", "next": "a"})
        chain = Message("psi:chain", "b", "a", arrays={"psi_set": candidates}, meta=meta_g2)
        again = np.frombuffer(parties["b"].transport.e2e.seal(chain), dtype=np.uint8)  # fresh
        with pytest.raises(
            RemoteError, match="'a' reported PrivacyError: .*" + "already re-blinded the set of 'b'"
        ):
            coord.send("a", "psi:reblind", arrays={"psi_sealed": again}, meta={"group": "g2"})

        # a sealed set of malformed elements: refused, naming the party that sealed it
        coord.send("a", "psi:blind", meta={"group": "g3", "next": "b"})
        short = np.zeros((3, 31), dtype=np.uint8)
        meta = {"group": "g3", "origin": "b"}
        chain = Message("psi:chain", "b", "a", arrays={"psi_set": short}, meta=meta)
        blob = np.frombuffer(parties["b"].transport.e2e.seal(chain), dtype=np.uint8)
        with pytest.raises(ProtocolError, match=r"'b' sent 'psi_set' of shape \(3, 31\)"):
            coord.send("a", "psi:reblind", arrays={"psi_sealed": blob}, meta={"group": "g3"})
    finally:
        hub.close()
    assert errors == []
