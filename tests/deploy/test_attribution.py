"""Attribution by construction, against a real coordinator process (mutual TLS, 127.0.0.1).

A dishonest party (``fou``, CA-signed, in this process) answers with error replies that
accuse another party, malformed error replies, misshapen arrays, lying setup reports or
a bad end-to-end key; a dishonest hub sends malformed key bundles to real party
processes. Every time the run names the one that misbehaved (``results.json``:
``reported_by``, ``culprit`` or ``unavailable_party``), never an honest party, and no
process ends with a traceback.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from _protocol import fedviews_process as _fedviews  # noqa: E402
from _protocol import forged, party_args, start_coordinator  # noqa: E402

from fedviews.deploy import _session, load_deploy_config, load_party_data, split_dataset  # noqa: E402
from fedviews.errors import PrivacyError, ProtocolError  # noqa: E402
from fedviews.federation import Coordinator, GrpcHub, Message, TLSFiles, _e2e, _grpc  # noqa: E402
from fedviews.federation._certs import init_ca, issue_certificate  # noqa: E402

PARTIES = ("pix", "fou", "zer")
ATTACKER = "fou"
CONFIG = """
algorithm = "mmvfl"
seed = 3
[federation]
parties = ["pix", "fou", "zer"]
label_owner = "pix"
alignment = "none"
connect_timeout = 8.0
timeout = 10.0
heartbeat = 0.5
[params]
standardize = true
max_iter = 3
inner_max_iter = 5
"""


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> Path:
    """A federation folder: config, party files (the same IDs) and certificates."""
    root = tmp_path_factory.mktemp("attribution")
    (root / "deploy.toml").write_text(CONFIG)
    split_dataset("handwritten", root / "data", views=PARTIES, label_owner="pix", n_per_class=4)
    init_ca(root / "certs")
    for name in ("coordinator", *PARTIES):
        issue_certificate(root / "certs", name)
    return root


def _in_process(fed: Path, address: str, out: Path) -> tuple[list[threading.Thread], dict]:
    """Every party served in this process (each as ``fedviews party`` does); what each
    ended with, by name."""
    cfg = load_deploy_config(fed / "deploy.toml")
    ended: dict[str, BaseException | None] = {}

    def serve(name: str) -> None:
        try:
            _session.run_party(
                cfg,
                name,
                load_party_data(fed / "data" / f"{name}.npz"),
                address,
                out / name,
                tls=TLSFiles.from_dir(fed / "certs", name),
                echo=lambda line: None,
            )
            ended[name] = None
        except BaseException as exc:  # noqa: BLE001 - what the party ended with, checked
            ended[name] = exc

    threads = [threading.Thread(target=serve, args=(p,), daemon=True) for p in PARTIES]
    for t in threads:
        t.start()
    return threads, ended


def _run(fed: Path, out: Path, *extra: str) -> tuple[int, str, dict[str, Any], dict]:
    """A real coordinator process and the parties in this process (``fou`` as patched):
    ``(coordinator exit status, its output, its results.json, how each party ended)``."""
    out.mkdir()
    coord, port = start_coordinator(fed / "deploy.toml", fed / "certs", out / "coordinator", *extra)
    try:
        threads, ended = _in_process(fed, f"127.0.0.1:{port}", out)
        text, _ = coord.communicate(timeout=90)
        for t in threads:
            t.join(30)
    finally:
        if coord.poll() is None:
            coord.kill()
            coord.wait()
    results = json.loads((out / "coordinator" / "results.json").read_text())
    return coord.returncode, text, results, ended


def _dishonest(monkeypatch, *, setup: Callable | None = None, update: Callable | None = None):
    """Make ``fou`` (only it) answer ``deploy:setup`` / the round message ``update`` with
    ``setup(reply)`` / ``update(msg, reply)``."""
    honest_setup, honest_handle = _session.DeployParty.on_setup, _session.DeployParty.handle

    def on_setup(self, msg: Message) -> Message:
        reply = honest_setup(self, msg)
        return setup(self, reply) if setup and self.name == ATTACKER else reply

    def handle(self, msg: Message) -> Message:
        reply = honest_handle(self, msg)
        if update and self.name == ATTACKER and msg.kind == "update":
            return update(self, msg, reply)
        return reply

    monkeypatch.setattr(_session.DeployParty, "on_setup", on_setup)
    monkeypatch.setattr(_session.DeployParty, "handle", handle)


def _no_traceback(text: str) -> None:
    assert "Traceback" not in text, text
    assert text.count("error:") >= 1, text


# -- the issue's item 1: an error reply that accuses another party ---------------------


def test_an_error_reply_is_its_sender_s_report_never_the_accused_party_s(
    fed, tmp_path, monkeypatch
):
    def accuse(self, msg: Message, reply: Message) -> Message:
        raise PrivacyError(
            "privacy policy 'mmvfl' forbids 'zer' (party) from sending ['Z_k'] to 'fou'"
        )

    _dishonest(monkeypatch, update=accuse)
    rc, text, res, _ = _run(fed, tmp_path / "run")
    assert rc != 0
    _no_traceback(text)
    assert res["reported_by"] == ATTACKER
    assert res["status"].startswith("RemoteError: 'fou' reported PrivacyError: "), res
    assert "culprit" not in res and res.get("unavailable_party") in (None, ATTACKER)


def test_a_party_whose_own_reply_breaks_the_policy_says_so_on_its_console(
    fed, tmp_path, monkeypatch
):
    """Its transport refused the reply (nothing left it) and reported that to the
    coordinator only: the party's console read "the coordinator stopped the run"."""
    answer = _session.DeployParty.answer

    def leaky(self, msg: Message) -> Message:
        reply = answer(self, msg)
        if self.name == ATTACKER and msg.kind == "update":
            return self.reply(msg, arrays={**reply.arrays, "X": np.zeros(3)})
        return reply

    monkeypatch.setattr(_session.DeployParty, "answer", leaky)
    rc, _, res, ended = _run(fed, tmp_path / "run")
    assert rc != 0 and res["reported_by"] == ATTACKER, res
    said = str(ended[ATTACKER])
    assert "after this party's own error (PrivacyError: privacy policy 'mmvfl+" in said, said
    assert "forbids 'fou' (party) from sending ['X']" in said, said


# -- item 11: malformed error replies, misshapen arrays, lying setup reports ----------


class _Garbage(Exception):
    """Raised by the attacker's handler: its transport answers with ``payload``."""


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe{not json", b'["PrivacyError", "zer did it"]'],
    ids=["not-json", "a-list"],
)
def test_a_malformed_error_reply_names_its_sender(fed, tmp_path, monkeypatch, payload):
    def fail(self, msg: Message, reply: Message) -> Message:
        raise _Garbage

    honest = _grpc.error_payload
    monkeypatch.setattr(
        _grpc,
        "error_payload",
        lambda exc, by="": payload if isinstance(exc, _Garbage) else honest(exc, by),
    )
    _dishonest(monkeypatch, update=fail)
    rc, text, res, _ = _run(fed, tmp_path / "run")
    assert rc != 0
    _no_traceback(text)
    assert res["culprit"] == ATTACKER and "malformed error reply" in res["status"], res


@pytest.mark.parametrize(
    "specs",
    [
        {"shape": [3.0, 10.0]},  # float dimensions
        {"shape": [2**32, 2**32], "size": 0},  # wraps around to 0 bytes in int64
    ],
    ids=["float", "overflow"],
)
def test_a_reply_with_a_shape_that_cannot_be_read_names_its_sender(
    fed, tmp_path, monkeypatch, specs
):
    def lie(self, msg: Message, reply: Message) -> Message:
        return forged(reply, specs)

    _dishonest(monkeypatch, update=lie)
    rc, text, res, _ = _run(fed, tmp_path / "run")
    assert rc != 0
    _no_traceback(text)
    assert res["culprit"] == ATTACKER, res
    assert "corrupt array spec" in res["status"] or "size does not match" in res["status"], res


@pytest.mark.parametrize("n", ["12", math.nan, None, "missing"], ids=repr)
def test_a_lying_setup_report_names_its_sender(fed, tmp_path, monkeypatch, n):
    def lie(self, reply: Message) -> Message:
        meta = {k: v for k, v in reply.meta.items() if k != "n/train"}
        return Message(
            reply.kind,
            reply.sender,
            reply.receiver,
            reply.round,
            {},
            (meta if n == "missing" else {**meta, "n/train": n}),
        )

    _dishonest(monkeypatch, setup=lie)
    rc, text, res, _ = _run(fed, tmp_path / "run")
    assert rc != 0
    _no_traceback(text)
    assert res["culprit"] == ATTACKER and "'fou' reported" in res["status"], res


def test_a_lying_checkpoint_list_names_its_sender(fed, tmp_path, monkeypatch):
    def lie(self, reply: Message) -> Message:
        meta = {**reply.meta, "checkpoints": "1,abc"}
        return Message(reply.kind, reply.sender, reply.receiver, reply.round, {}, meta)

    _dishonest(monkeypatch, setup=lie)
    killed = tmp_path / "killed"
    killed.mkdir()
    rc, text, res, _ = _run(fed, tmp_path / "run", "--resume", str(killed))
    assert rc != 0
    _no_traceback(text)
    assert res["culprit"] == ATTACKER and "checkpoints = '1,abc'" in res["status"], res


# -- item 2: a signed but invalid end-to-end key, or a bad signature ------------------


@pytest.mark.parametrize("attack", ["zero-key", "bad-signature"])
def test_a_bad_end_to_end_key_names_its_sender_and_no_honest_party_dies(
    fed, tmp_path, monkeypatch, attack
):
    honest = _e2e.E2EKeys.bundle

    def bundle(self) -> dict[str, str]:
        mine = honest(self)
        if self.name != ATTACKER:
            return mine
        if attack == "zero-key":  # correctly signed, but no shared secret comes of it
            zero = bytes(32)
            return {
                "x25519": _e2e._b64(zero),
                "sig": self._signer.sign(_e2e._INFO, self.name, zero),
            }
        return {**mine, "sig": self._signer.sign(_e2e._INFO, self.name, b"another key")}

    monkeypatch.setattr(_e2e.E2EKeys, "bundle", bundle)
    rc, text, res, ended = _run(fed, tmp_path / "run")
    assert rc != 0
    _no_traceback(text)
    assert res["unavailable_party"] == ATTACKER and "bad end-to-end key" in res["status"], res
    assert isinstance(ended[ATTACKER], PrivacyError) and "refused 'fou'" in str(ended[ATTACKER])
    for p in ("pix", "zer"):  # told to stop, not killed by fou's key
        assert isinstance(ended[p], ProtocolError) and "stopped the run" in str(ended[p]), ended


# -- item 12: a dishonest hub's malformed key bundles -----------------------------------


class _BadBundles(GrpcHub):
    def _hand_out_keys(self) -> None:
        if set(self.bundles) == set(self.expected):
            frame = json.dumps({"session": self.session.hex(), "peers": list(self.bundles)})
            for link in self.links.values():
                link.post(_grpc.PEERS, 0, frame.encode())


def test_malformed_key_bundles_from_the_hub_name_the_hub(fed, tmp_path):
    cfg = load_deploy_config(fed / "deploy.toml")
    hub = _BadBundles(
        _session.session_policy(cfg),
        cfg.roles(),
        tls=TLSFiles.from_dir(fed / "certs", "coordinator"),
        options=_session.options_of(cfg),
    )
    hub.register(Coordinator(cfg.federation.coordinator))
    address = f"127.0.0.1:{hub.port}"
    procs = [
        _fedviews(*party_args(fed / "deploy.toml", fed, p, address, tmp_path)) for p in PARTIES
    ]
    try:
        outputs = [proc.communicate(timeout=90)[0] for proc in procs]
    finally:
        hub.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for proc, text in zip(procs, outputs, strict=True):
        assert proc.returncode != 0
        _no_traceback(text)
        assert "'coordinator' sent key bundles that are no table" in text, text


def test_a_party_that_runs_another_config_is_refused_and_named_at_its_hello(fed, tmp_path):
    """The coordinator and a party given different configs (here one override, another
    params.beta) were accepted over gRPC and trained a different run (Flower compared them
    at the hello): now the party is refused at its hello, saying why, and the coordinator,
    which knows its certified name, stops at once naming it, not after its join timeout."""
    run = tmp_path / "coordinator"
    coord, port = start_coordinator(fed / "deploy.toml", fed / "certs", run)
    address = f"127.0.0.1:{port}"
    args = {p: party_args(fed / "deploy.toml", fed, p, address, tmp_path) for p in PARTIES}
    config = args["zer"].index(str(fed / "deploy.toml"))
    args["zer"].insert(config + 1, "params.beta=3.0")  # an override follows the config
    t0 = time.monotonic()
    procs = {p: _fedviews(*args[p]) for p in PARTIES}
    try:
        text, _ = coord.communicate(timeout=60)
        elapsed = time.monotonic() - t0
        zer, _ = procs["zer"].communicate(timeout=60)
    finally:  # a party that had not joined yet retries its dial for a minute: not waited for
        for proc in (coord, *procs.values()):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert coord.returncode == 2 and elapsed < 20, (elapsed, text)
    _no_traceback(text)
    res = json.loads((run / "results.json").read_text())
    assert res["culprit"] == "zer", res
    assert (
        "'zer' runs another deployment config than the coordinator (different: params.beta)"
        in (res["status"])
    ), res  # what differs, by config key
    assert procs["zer"].returncode == 2, zer
    _no_traceback(zer)
    assert (
        "error: ConfigError: the coordinator refused 'zer': party 'zer' runs another "
        "deployment config" in zer
    ), zer
