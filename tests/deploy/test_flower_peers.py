"""Per-batch split learning over Flower: the ServerApp relays the parties' own messages,
sealed end to end with the keys and checks of fedviews' gRPC hub.

The real ``server_app`` / ``client_app`` behind :class:`test_flower.LoopbackGrid` with
live parties (``fresh=False``: the simulation engine's surviving process), against the
same deployed session in one process (:class:`InProcessTransport`): models, losses,
footprint and policy equal; the bytes the ServerApp relays hold no activation or
gradient in the clear; a payload it alters is caught by its receiver.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")
pytest.importorskip("cryptography")

from _protocol import footprint  # noqa: E402
from test_flower import (  # noqa: E402
    LoopbackGrid,
    _task_identity,  # noqa: F401 - an autouse fixture
    deployment_engine,
    in_process_session,
    launch_deployment,
    tagged_by_its_node,
)
from test_group_tags import CONFIG as TAGS_CONFIG  # noqa: E402

from fedviews.deploy import (  # noqa: E402
    _flower,
    _flower_relay,
    _flower_transport,
    _flower_wire,
    launch_flower,
    load_deploy_config,
    load_party_data,
    write_demo_data,
)
from fedviews.deploy._launch import make_certs  # noqa: E402
from fedviews.errors import ConfigError, ProtocolError, RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    E2EKeys,
    InProcessTransport,
    Message,
    Party,
    TLSFiles,
    Trust,
    get_algorithm_spec,
    to_host,
)

CONFIGS = {
    "splitnn": """
algorithm = "splitnn"
name = "flower_splitnn_test"
seed = 2
[federation]
parties = ["top", "bottom"]
label_owner = "bottom"
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
[params]
epochs = 2
batch_size = 16
hidden = 8
device = "cpu"
""",
    "multivfl": """
algorithm = "multivfl"
name = "flower_multivfl_test"
seed = 2
[federation]
parties = ["top", "bottom", "bank"]
label_owners = ["bank"]
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
scenario = "iid"
samples_per_owner = 12
overlap = 1.0
[params]
rounds = 2
batch_size = 8
channels = 4
top_channels = 4
hidden = 8
device = "cpu"
""",
    # two label owners, the data owners' rows tagged with their label owner's group: the
    # config of the row-tag tests, without the PSI
    "multivfl_two_label_owners": TAGS_CONFIG.format(alignment="none"),
    "apfed": """
algorithm = "apfed"
name = "flower_apfed_test"
seed = 4
[federation]
parties = ["top", "bot"]
label_owner = "bot"
alignment = "none"
[data]
dataset = "mnist"
n_per_class = 4
n_test = 20
overlap = 1.0
[params]
variant = "R"
epochs = 2
batch_size = 16
device = "cpu"
""",
}


def _federation(root: Path, name: str) -> tuple[Path, Path, Path]:
    """A config of ``CONFIGS``, its pre-aligned party files and the nodes' certificates."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / "deploy.toml"
    path.write_text(CONFIGS[name])
    cfg = load_deploy_config(path)
    write_demo_data(cfg, root / "data", aligned=True)
    return path, root / "data", make_certs(root / "certs", cfg)


@pytest.fixture(scope="module")
def splitnn(tmp_path_factory):
    return _federation(tmp_path_factory.mktemp("flower-peers"), "splitnn")


def test_flower_demo_files_are_aligned(tmp_path):
    """The demo files that ``fedviews flower launch`` writes (no PSI on Flower): Multi-VFL's
    label owner holds 12 of the data owners' 60 samples, in another order; aligned, every
    party holds those 12 in the label owner's order, each row its own features and
    labels, and the data owners keep their test strips."""
    path = tmp_path / "deploy.toml"
    path.write_text(CONFIGS["multivfl"])
    cfg = load_deploy_config(path)
    raw = get_algorithm_spec("multivfl").demo_data(cfg)
    got = {p: load_party_data(f) for p, f in write_demo_data(cfg, tmp_path, aligned=True).items()}
    ids = raw["bank"].ids
    assert [len(d.ids) for d in raw.values()] == [60, 60, 12]
    for p, d in got.items():
        np.testing.assert_array_equal(d.ids, ids)
        rows = [raw[p].ids.tolist().index(v) for v in ids.tolist()]
        np.testing.assert_array_equal(d.X, raw[p].X[rows])
        np.testing.assert_array_equal(d.X_test, raw[p].X_test)
    np.testing.assert_array_equal(got["bank"].y, raw["bank"].y)


def _in_process(path: Path, data: Path, out: Path) -> tuple[dict, InProcessTransport]:
    _, res, transport = in_process_session(path, data, out)
    return res, transport


def _on_flower(
    path: Path,
    data: Path,
    certs: Path,
    run: Path,
    grid_type=LoopbackGrid,
    *,
    fresh_nodes=False,
    **kw,
):
    cfg = load_deploy_config(path)
    rc = {"deploy-config": str(path), "out-dir": str(run), "certs-dir": str(certs)}
    nodes = [
        {"party": p, "data": str(data / f"{p}.npz"), "out": str(run / p)}
        for p in cfg.federation.parties
    ]
    grid = grid_type(nodes, rc, fresh=fresh_nodes, **kw)
    trust = Trust.from_dir(certs)  # as the ServerApp reads run config certs-dir
    try:
        return _flower.run_flower_coordinator(cfg, grid, run / "coordinator", trust=trust), grid
    finally:
        grid.close()


def _results(run: Path, parties) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for p in parties:
        with np.load(run / p / "result.npz") as z:
            out[p] = {k: z[k] for k in z.files}
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_on_flower_equals_in_process(name, tmp_path):
    """The ServerApp relays the per-batch messages: every party's model, the coordinator's
    history and the footprint (who sent which arrays to whom, by kind) are the in-process
    session's; the ServerApp logged the party-to-party messages by their headers."""
    path, data, certs = _federation(tmp_path, name)
    ref, transport = _in_process(path, data, tmp_path / "ref")
    res, _ = _on_flower(path, data, certs, tmp_path / "run")
    _check_equal(path, tmp_path / "run", res, tmp_path / "ref", ref, transport)


def test_the_shipped_multivfl_config_runs_on_flower(tmp_path):
    """``configs/deploy_multivfl_flower.toml`` (two label owners, the data owners' rows tagged
    with their group) on fewer images and one round: the ServerApp's run equals the
    in-process session."""
    shipped = Path(__file__).resolve().parents[2] / "configs" / "deploy_multivfl_flower.toml"
    text = shipped.read_text()
    for old, new in (("n_per_class = 100", "n_per_class = 6"), ("rounds = 3", "rounds = 2")):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "deploy.toml"
    path.write_text(text.replace("n_test = 500", "n_test = 20"))
    cfg = load_deploy_config(path)
    write_demo_data(cfg, tmp_path / "data", aligned=True)
    certs = make_certs(tmp_path / "certs", cfg)
    strip = load_party_data(tmp_path / "data" / "strip0.npz")
    assert strip.group is not None and set(strip.group.tolist()) == {"bank", "clinic"}
    ref, transport = _in_process(path, tmp_path / "data", tmp_path / "ref")
    res, _ = _on_flower(path, tmp_path / "data", certs, tmp_path / "run")
    _check_equal(path, tmp_path / "run", res, tmp_path / "ref", ref, transport)


def _check_equal(
    path: Path, run: Path, res: dict, ref_dir: Path, ref: dict, transport: InProcessTransport
) -> None:
    """A Flower run of config ``path`` (folder ``run``, results ``res``) equals the in-process
    one (folder ``ref_dir``): results, every party's outputs, footprint, every node's log;
    its ``seconds_per_round`` is its training time over the 2 rounds every config trains
    (split NN, APFed: epochs; Multi-VFL: rounds)."""
    cfg = load_deploy_config(path)
    assert res["status"] == "ok", res["status"]
    _same_results(res, ref)
    assert res["seconds_per_round"] == pytest.approx(res["train_seconds"] / 2, abs=1e-4)
    assert res["seconds_per_round"] > 0
    # the run's total (the split NN's per-epoch seconds took the key)
    assert isinstance(res["seconds"], float) and res["seconds"] >= res["train_seconds"]
    parties = cfg.federation.parties
    got, want = _results(run, parties), _results(ref_dir, parties)
    for p in parties:
        assert sorted(got[p]) == sorted(want[p])
        for k, v in want[p].items():
            np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p}: {k}")
    roles = {**cfg.roles(), cfg.federation.coordinator: "coordinator"}
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    seen = footprint(log["exchanges"], roles)
    assert seen == footprint(transport.log.exchanges(), roles)
    peers = [k for k in log["crossings"] if cfg.federation.coordinator not in k]
    assert peers  # the party-to-party messages crossed the ServerApp, headers logged
    for p in parties:  # every node's own log: its side of the same exchanges
        mine = json.loads((run / p / "message_log.json").read_text())
        assert {k: v for k, v in mine["crossings"].items() if k in log["crossings"]} == {
            k: log["crossings"][k] for k in mine["crossings"]
        }


def _same_results(got: dict, want: dict) -> None:
    """The coordinator's results (history included) equal, wall times aside; bytes more by
    the sealing (nonce, tag, the header's seal table)."""
    for k, v in want.items():
        if isinstance(v, dict):
            _same_results(got[k], v)
        elif k.endswith("bytes"):
            assert all(g > w for g, w in zip(got[k], v, strict=True)), k
        elif "seconds" not in k:
            assert got[k] == v, k


class RecordingGrid(LoopbackGrid):
    """A loopback grid that keeps every byte the ServerApp pushes and pulls."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen: list[bytes] = []

    def _keep(self, messages) -> None:
        for m in messages:
            if not m.has_error():
                for rec in m.content.array_records.values():
                    self.seen.extend(bytes(a.data) for a in rec.values())

    def push_messages(self, messages):
        messages = list(messages)
        self._keep(messages)
        return super().push_messages(messages)

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        self._keep(got)
        return got


def test_the_serverapp_sees_headers_only(splitnn, tmp_path, monkeypatch):
    """No activation or gradient that one party sealed for another appears in the clear in
    anything the ServerApp relayed; what it relayed is sealed (it cannot decode it), and it
    logged the headers (kinds, array names and shapes)."""
    path, data, certs = splitnn
    sealed: list[Message] = []
    seal = E2EKeys.seal
    monkeypatch.setattr(E2EKeys, "seal", lambda self, msg: sealed.append(msg) or seal(self, msg))
    relayed: list[bytes] = []
    relay = _flower_transport.FlowerGridTransport._relay

    def spy(self, sender, wires):
        relayed.extend(wires)
        answers = relay(self, sender, wires)
        relayed.extend(answers)
        return answers

    monkeypatch.setattr(_flower_transport.FlowerGridTransport, "_relay", spy)
    res, grid = _on_flower(path, data, certs, tmp_path / "run", RecordingGrid)
    assert res["status"] == "ok"
    arrays = [to_host(v) for m in sealed for v in m.arrays.values()]
    names = {n for m in sealed for n in m.arrays}
    assert names == {"logits", "grad_logits"} and len(arrays) > 10
    blob = b"\0".join(grid.seen)
    assert not [a for a in arrays if a.nbytes >= 16 and a.tobytes() in blob]
    assert len(relayed) == len(sealed)  # every sealed request and reply, nothing else
    for wire in relayed:
        with pytest.raises(ProtocolError, match="sealed end to end"):
            Message.decode(wire)
    log = json.loads((tmp_path / "run" / "coordinator" / "message_log.json").read_text())
    assert log["crossings"] == {"top -> bottom": ["logits"], "bottom -> top": ["grad_logits"]}


class TamperGrid(LoopbackGrid):
    """A dishonest ServerApp: flips one byte of the first sealed payload of ``kind`` it relays
    (``query.fedviews``: a party's request; ``query.fedviews_resume``: the replies to it)."""

    def __init__(self, *args, kind: str, **kw):
        super().__init__(*args, **kw)
        self.kind, self.done = kind, False

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            if self.done or m.metadata.message_type != self.kind:
                continue
            content = m.content
            key = "fedviews" if self.kind == "query.fedviews" else "fedviews-replies"
            rec = content.array_records[key]
            name = next(iter(rec.keys()))
            wire = bytearray(rec[name].data)
            if Message.peek(wire).sender == "coordinator":
                continue
            wire[-1] ^= 1  # the last byte of the AES-GCM tag's ciphertext
            rec[name] = _flower_wire.pack(bytes(wire))["fedviews"]["message"]
            self.done = True
        return super().push_messages(messages)


@pytest.mark.parametrize(
    ("kind", "victim"), [("query.fedviews", "top"), ("query.fedviews_resume", "bottom")]
)
def test_an_altered_payload_is_caught_by_its_receiver(splitnn, tmp_path, kind, victim):
    path, data, certs = splitnn
    with pytest.raises(
        RemoteError, match=f"'{victim}' reported PrivacyError: .*failed authentication"
    ):
        _on_flower(path, data, certs, tmp_path / "run", TamperGrid, kind=kind)


class LyingRelayGrid(LoopbackGrid):
    """A dishonest node: the first answer of node ``liar`` that ``pick`` selects (a Flower
    message's content) becomes what ``lie`` makes of it."""

    def __init__(self, *args, liar: int, pick, lie, **kw):
        super().__init__(*args, **kw)
        self.liar, self.pick, self.lie, self.done = liar, pick, lie, False

    def pull_messages(self, message_ids):
        got = super().pull_messages(message_ids)
        for r in got:
            if not self.done and r.metadata.src_node_id == self.liar and self.pick(r.content):
                self.lie(r.content)
                tagged_by_its_node(self, r)  # the dishonest node tags its lie
                self.done = True
        return got


def _asks_to_relay(content) -> bool:
    return _flower_wire.SEND in content.array_records


def _a_peers_reply(content) -> bool:
    if "fedviews" not in content.array_records:
        return False
    return Message.peek(_flower_wire.unpack(content)).receiver != "coordinator"


def _to_nobody(content) -> None:
    """bottom asks the ServerApp to relay a message to a party it made up."""
    rec = content.array_records[_flower_wire.SEND]
    head = Message.peek(bytes(rec["0"].data))
    wire = Message(head.kind, "bottom", "mallory", head.round).encode()
    rec["0"] = _flower_wire.pack_all([wire], "x")["x"]["0"]


def _unnumbered(content) -> None:
    rec = content.array_records[_flower_wire.SEND]
    rec["7"] = rec.pop("0")


def _garbage(content) -> None:
    content.array_records["fedviews"]["message"] = _flower_wire.pack(b"garbage" * 3)["fedviews"][
        "message"
    ]


#: how a node lies while the ServerApp relays per-batch messages, and what the ServerApp says
RELAY_LIES = {
    "to-a-made-up-party": (
        1001,
        _asks_to_relay,
        _to_nobody,
        "bottom",
        "'bottom' sent 'splitnn.epoch' to 'mallory', a party of no Flower node",
    ),
    "unnumbered-messages": (
        1001,
        _asks_to_relay,
        _unnumbered,
        "bottom",
        "the messages to relay from 'bottom': the 'fedviews-send' record is not numbered 0..0",
    ),
    "a-reply-that-is-no-message": (
        1000,
        _a_peers_reply,
        _garbage,
        "top",
        "the reply to 'splitnn.epoch' from 'top': not a fedviews message (bad magic)",
    ),
}


@pytest.mark.parametrize("lie", sorted(RELAY_LIES))
def test_what_a_node_asks_to_relay_or_answers_names_that_node(splitnn, tmp_path, lie):
    """A party's message to relay that goes to a party it made up, a malformed batch of
    them, and a relayed reply that cannot be read are refused by the ServerApp naming the
    party of the node they came from (``party``, ``culprit``), never the made-up receiver
    nor the honest party."""
    path, data, certs = splitnn
    liar, pick, make, who, why = RELAY_LIES[lie]
    with pytest.raises(ProtocolError) as caught:
        _on_flower(
            path, data, certs, tmp_path / "run", LyingRelayGrid, liar=liar, pick=pick, lie=make
        )
    assert not isinstance(caught.value, RemoteError)
    assert caught.value.party == who and str(caught.value) == why
    res = json.loads((tmp_path / "run" / "coordinator" / "results.json").read_text())
    assert res["culprit"] == who and "unavailable_party" not in res


def _error_text(reply) -> str:
    """The text of a node's error report (``fedviews-error``)."""
    return json.loads(reply.content.config_records["fedviews-error"]["payload"])["message"]


def test_what_reaches_a_node_names_the_one_that_sent_it(splitnn, tmp_path):
    """On a node, what the ServerApp sent that cannot be read (a request, the key table, the
    relayed replies) names the ServerApp (the coordinator); a peer's reply that the
    ServerApp brought back and that does not open names that peer, as on gRPC."""
    from types import SimpleNamespace

    from flwr.app import ConfigRecord, Context, RecordDict
    from flwr.app import Message as FlowerMessage

    from fedviews.deploy._flower_node import FlowerNodeTransport
    from fedviews.federation import PrivacyPolicy

    path, data, certs = splitnn
    cfg = load_deploy_config(path)
    garbage = b"garbage" * 3
    tls = {p: TLSFiles.from_dir(certs, p) for p in ("top", "bottom")}
    keys = {p: E2EKeys(p, tls[p], hub="coordinator") for p in tls}
    bundles = {p: {"cert": tls[p].cert.read_text(), **keys[p].bundle()} for p in tls}
    for k in keys.values():
        k.set_peers(bundles, bytes(16))
    transport = FlowerNodeTransport(
        PrivacyPolicy.of("any kind", {}), {**cfg.roles(), "coordinator": "coordinator"}
    )
    transport.register(Party("bottom", cfg.roles()["bottom"]))
    transport.e2e, transport.outbox = keys["bottom"], lambda wires: [garbage]
    found = {}
    for what, call in {
        "request": lambda: transport.answer(garbage, "coordinator"),
        "reply": lambda: transport.request(Message("splitnn.epoch", "bottom", "top", 1)),
    }.items():
        with pytest.raises(ProtocolError) as caught:
            call()
        found[what] = (caught.value.party, str(caught.value))
    context = Context(7, 8, {}, RecordDict(), {})
    waiting = SimpleNamespace(transport=transport, app=SimpleNamespace(peer_to_peer=True))
    with _flower_relay._LOCK:
        _flower_relay._KEYS[(7, 8)] = keys["top"]
        _flower_relay._JOBS[(7, 8)] = _flower_relay._Job(1.0)
    try:
        for what, call in {
            "keys": lambda: _flower_relay.take_peers(
                context, RecordDict({"peers": ConfigRecord({"keys": "{not json"})})
            ),
            "replies": lambda: _flower_relay.resume(
                context, SimpleNamespace(transport=transport), RecordDict()
            ),
            "a request while the handler waits": lambda: _flower_relay.start(
                context, waiting, b"never read"
            ),
            "replies no handler waits for": lambda: (
                _flower_relay.forget_job(context),
                _flower_relay.resume(context, waiting, RecordDict()),
            ),
        }.items():
            with pytest.raises(ProtocolError) as caught:
                call()
            found[what] = (caught.value.party, str(caught.value))
    finally:
        with _flower_relay._LOCK:
            _flower_relay._KEYS.pop((7, 8), None)
            _flower_relay._JOBS.pop((7, 8), None)
    assert found == {
        "request": (
            "coordinator",
            "a request from 'coordinator': not a fedviews message (bad magic)",
        ),
        "reply": (
            "top",
            "the reply to 'splitnn.epoch' from 'top': not a fedviews message (bad magic)",
        ),
        "keys": (
            "coordinator",
            "the key table from 'coordinator' is malformed: JSONDecodeError: Expecting "
            "property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        "replies": (
            "coordinator",
            "the replies to relay from 'coordinator': the Flower message carries no "
            "'fedviews-replies' record",
        ),
        "a request while the handler waits": (
            "coordinator",
            "'coordinator' sent a new request to this node while its party's handler waits "
            "for the replies to its own messages",
        ),
        "replies no handler waits for": (
            "coordinator",
            "'coordinator' brought replies to this node, whose party waits for none",
        ),
    }
    # the ClientApp's answer to a request without a fedviews message: its report says so
    node = {"party": "top", "data": str(data / "top.npz"), "out": str(tmp_path / "top")}
    node["config"], node["certs"] = str(path), str(certs)  # its own: a node takes no run paths
    rc = {"deploy-config": str(path), "certs-dir": str(certs)}
    msg = FlowerMessage(RecordDict(), dst_node_id=9, message_type="query.fedviews", ttl=60.0)
    msg.metadata.__dict__["_message_id"] = "m1"
    reply = _flower.client_app(msg, Context(7, 9, node, RecordDict(), rc))
    assert _error_text(reply) == (
        "a request from 'coordinator': the Flower message carries no fedviews message"
    )


def test_a_key_of_the_serverapps_is_refused(splitnn, tmp_path, monkeypatch):
    """The ServerApp cannot hand out a key of its own in a party's name: the key must be
    signed by that party's certificate."""
    path, data, certs = splitnn
    hand_out = _flower_transport.FlowerGridTransport.hand_out_keys

    def swapped(self):
        mine = E2EKeys("top", TLSFiles.from_dir(certs, "bottom")).bundle()
        self.bundles["top"] = {**self.bundles["top"], "x25519": mine["x25519"]}
        hand_out(self)

    monkeypatch.setattr(_flower_transport.FlowerGridTransport, "hand_out_keys", swapped)
    with pytest.raises(RemoteError, match="'bottom' reported PrivacyError: .*'top'.*not verify"):
        _on_flower(path, data, certs, tmp_path / "run")


def _bundle(certs: Path, name: str, public: bytes | None = None, signer: str = "") -> dict:
    """``name``'s hello bundle with certificate and key of ``signer`` (default: ``name``) of
    the CA in ``certs``: over ``public`` (default: a fresh X25519 key), signed by that key."""
    from fedviews.federation._e2e import _INFO, _b64, _Signer

    tls = TLSFiles.from_dir(certs, signer or name)
    if public is None:
        return {"cert": tls.cert.read_text(), **E2EKeys(signer or name, tls).bundle()}
    sig = _Signer(tls).sign(_INFO, name, public)
    return {"cert": tls.cert.read_text(), "x25519": _b64(public), "sig": sig}


#: bad hello bundles of 'top' (from the certificates of the federation, and of another
#: CA) and what the ServerApp says of each
BAD_BUNDLES = {
    "no-json": (lambda certs, other: "{not json", "malformed end-to-end key bundle"),
    "no-signature": (
        lambda certs, other: json.dumps({**_bundle(certs, "top"), "sig": None}),
        "malformed end-to-end key bundle",
    ),
    "short-key": (  # signed, but 16 bytes are no X25519 key
        lambda certs, other: json.dumps(_bundle(certs, "top", bytes(range(16)))),
        "X25519 key is invalid",
    ),
    "others-certificate": (
        lambda certs, other: json.dumps(_bundle(certs, "top", signer="bottom")),
        r"a certificate of \['bottom'\] was offered as 'top''s",
    ),
    "altered-signature": (
        lambda certs, other: json.dumps(
            {**_bundle(certs, "top"), "sig": _bundle(certs, "top")["sig"]}
        ),
        "signature claimed to be 'top''s does not verify",
    ),
    "another-ca": (
        lambda certs, other: json.dumps(_bundle(other, "top")),
        "not signed by the CA",
    ),
}


@pytest.mark.parametrize("bad", sorted(BAD_BUNDLES))
def test_a_bad_key_bundle_is_pinned_on_its_sender_at_the_hello(splitnn, tmp_path, monkeypatch, bad):
    """The ServerApp checks every node's end-to-end key bundle at its hello, as every peer
    will (fields, the certificate named after the party and issued by the federation CA,
    the X25519 key, the signature over it), and refuses a bad one naming the node that
    sent it (top's, node 1000) before any key is handed out; the honest node is not
    blamed."""
    path, data, certs = splitnn
    make, match = BAD_BUNDLES[bad]
    other = make_certs(tmp_path / "other-ca", load_deploy_config(path))
    hello = _flower.hello_keys

    def lying(context, s):
        honest = hello(context, s)
        return make(certs, other) if s.party == "top" else honest

    monkeypatch.setattr(_flower, "hello_keys", lying)
    handed = []
    monkeypatch.setattr(
        _flower_transport.FlowerGridTransport, "hand_out_keys", lambda self: handed.append(1)
    )
    with pytest.raises(ProtocolError, match=f"Flower node 1000 \\('top'\\) sent .*{match}") as e:
        _on_flower(path, data, certs, tmp_path / "run")
    assert not isinstance(e.value, RemoteError)  # the ServerApp's own finding, no node's report
    assert e.value.party == "Flower node 1000" and handed == []


def test_a_serverapp_without_the_ca_still_checks_the_bundles(splitnn, tmp_path):
    """Without ``ca.crt`` on its host the ServerApp checks all but who issued a certificate:
    an honest bundle passes; another party's certificate, and a certificate whose key is
    no elliptic-curve key (an Ed25519 one, self-issued as 'top'), are refused with a
    fedviews error, never a raw one."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    from fedviews.errors import PrivacyError
    from fedviews.federation import check_bundle

    _, _, certs = splitnn
    nothing = Trust.from_dir(tmp_path)
    assert nothing.ca is None
    check_bundle(nothing, "top", _bundle(certs, "top"))
    with pytest.raises(PrivacyError, match=r"a certificate of \['bottom'\]"):
        check_bundle(nothing, "top", _bundle(certs, "top", signer="bottom"))
    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "top")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, None)
    )
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    bundle = {**_bundle(certs, "top"), "cert": pem}
    with pytest.raises(PrivacyError, match="holds no elliptic-curve key"):
        check_bundle(nothing, "top", bundle)


class KeyTableGrid(LoopbackGrid):
    """A dishonest ServerApp: the key table it hands to node 1000 ('top') becomes what
    ``edit`` makes of its peers."""

    def __init__(self, *args, edit, **kw):
        super().__init__(*args, **kw)
        self.edit = edit

    def push_messages(self, messages):
        messages = list(messages)
        for m in messages:
            if m.metadata.message_type == "query.fedviews_peers" and m.metadata.dst_node_id == 1000:
                rec = m.content.config_records["peers"]
                table = json.loads(str(rec["keys"]))
                self.edit(table["peers"])
                rec["keys"] = json.dumps(table)
        return super().push_messages(messages)


def _without_bottom(peers: dict) -> None:
    del peers["bottom"]


def _with_mallory(peers: dict) -> None:
    peers["mallory"] = peers["bottom"]


@pytest.mark.parametrize(
    ("edit", "sent"), [(_without_bottom, "[]"), (_with_mallory, "['bottom', 'mallory']")]
)
def test_a_key_table_of_other_parties_is_refused(splitnn, tmp_path, edit, sent):
    """A node takes the key table only if it holds a key for every other party of its
    config and for no one else: one without a peer's key (the node could send it nothing)
    or with a key of a stranger is refused naming the ServerApp, before any training."""
    path, data, certs = splitnn
    why = f"'coordinator' sent keys of {sent} to 'top', whose peers are ['bottom']"
    with pytest.raises(RemoteError) as caught:
        _on_flower(path, data, certs, tmp_path / "run", KeyTableGrid, edit=edit)
    assert caught.value.reported_by == "top"
    assert str(caught.value) == f"'top' reported ProtocolError: {why}"
    res = json.loads((tmp_path / "run" / "coordinator" / "results.json").read_text())
    assert res["status"] == f"RemoteError: {caught.value}" and res["reported_by"] == "top"


class NewProcessGrid(LoopbackGrid):
    """Every message in a new ClientApp process, as in the deployment engine: the node's live
    party, its keys and its waiting handler are gone."""

    def _deliver(self, m):
        key = (self.run_id, m.metadata.dst_node_id)
        with _flower_relay._LOCK:
            _flower_relay._KEYS.pop(key, None)
            _flower_relay._JOBS.pop(key, None)
        super()._deliver(m)


def test_per_batch_needs_a_live_party(splitnn, tmp_path):
    """A party rebuilt for every message (the deployment engine with Flower's own executor)
    has lost its waiting handler and its keys: the node refuses, naming the fix (fedviews'
    executor), as does launch_flower with Flower's executor before anything starts."""
    path, data, certs = splitnn
    fix = "live through the run.*--isolation process next to `fedviews flower executor"
    with pytest.raises(RemoteError, match=f"ConfigError: per-batch .*{fix}"):
        _on_flower(path, data, certs, tmp_path / "run", NewProcessGrid, fresh_nodes=True)
    with pytest.raises(ConfigError, match=fix):
        launch_flower(
            path, tmp_path / "launched", engine="deployment", data_dir=data, executor="flower"
        )
    assert not (tmp_path / "launched").exists()


def test_nodes_need_their_certificates(splitnn, tmp_path):
    path, data, _ = splitnn
    cfg = load_deploy_config(path)
    nodes = [{"party": p, "data": str(data / f"{p}.npz")} for p in cfg.federation.parties]
    grid = LoopbackGrid(nodes, {"deploy-config": str(path)}, fresh=False)
    try:
        with pytest.raises(RemoteError, match="needs its fedviews certificate"):
            _flower.run_flower_coordinator(cfg, grid, tmp_path / "c")
    finally:
        grid.close()


@pytest.mark.slow
@deployment_engine
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_on_the_deployment_engine_equals_in_process(name, tmp_path):
    """flower-superlink + one flower-supernode per party in --isolation process, each with
    fedviews' executor (one live ClientApp process per party, where a handler waits for
    its relayed messages), over TLS with SuperNode authentication + flwr run == in-process."""
    path, data, _ = _federation(tmp_path, name)
    ref, transport = _in_process(path, data, tmp_path / "ref")
    run = tmp_path / "run"
    res = launch_deployment(path, run, data, "fedviews")
    assert res["executor"] == "fedviews"
    _check_equal(path, run, res, tmp_path / "ref", ref, transport)


@pytest.mark.slow
def test_split_nn_on_the_simulation_engine_equals_in_process(splitnn, tmp_path):
    """flower-superlink --simulation (one Ray actor) + flwr run on loopback == in-process."""
    pytest.importorskip("ray")
    path, data, _ = splitnn
    _, _ = _in_process(path, data, tmp_path / "ref")
    res = launch_flower(path, tmp_path / "run", engine="simulation", data_dir=data, timeout=300)
    assert res["status"] == "ok", res["status"]
    got = _results(tmp_path / "run", ("top", "bottom"))
    for p, arrays in _results(tmp_path / "ref", ("top", "bottom")).items():
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p}: {k}")
