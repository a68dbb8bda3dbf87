"""Deployment: real processes on loopback, mutual TLS, failures (PSI: tests/privacy)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("rbcl")  # the PSI

from _protocol import (  # noqa: E402
    assert_tight,
    footprint,
    launch_config,
    mmvfl_inputs,
    mmvfl_reference,
    tls_hub,
)
from _protocol import fedviews_process as _fedviews  # noqa: E402

from fedviews.deploy import load_deploy_config, split_dataset  # noqa: E402
from fedviews.errors import ConfigError, PartyUnavailable, PrivacyError, RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Coordinator,
    GrpcHub,
    GrpcOptions,
    GrpcPartyTransport,
    Party,
    PrivacyPolicy,
    handles,
)
from fedviews.federation._certs import (  # noqa: E402
    TLSFiles,
    init_ca,
    issue_certificate,
    revoke_certificate,
)  # noqa: E402
from fedviews.linear import MMVFL  # noqa: E402

PARTIES = ("pix", "fou", "zer")
CONFIG = """
algorithm = "mmvfl"
name = "deploy_test"
seed = 3
[federation]
parties = ["pix", "fou", "zer"]
label_owner = "fou"
timeout = {timeout}
heartbeat = {heartbeat}
[data]
dataset = "handwritten"
n_per_class = 15
overlap = 0.9
[params]
standardize = true
beta = 0.5
max_iter = {max_iter}
tol = {tol}
inner_max_iter = 10
"""


def _write_config(tmp: Path, *, timeout=20.0, heartbeat=2.0, max_iter=4, tol=1e-6) -> Path:
    path = tmp / "deploy.toml"
    path.write_text(CONFIG.format(timeout=timeout, heartbeat=heartbeat, max_iter=max_iter, tol=tol))
    return path


def test_launch_equals_in_process(tmp_path):
    """Coordinator + 3 party processes over loopback gRPC with mutual TLS == MMVFL.fit."""
    config = _write_config(tmp_path)
    run = tmp_path / "run"
    proc = _fedviews("launch", str(config), "--out", str(run))
    out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, out
    assert "[coordinator] round 4/4: objective" in out and "[fou] aligned" in out
    # no silent stretch between the PSI and round 1; each round of the planned max_iter with
    # its elapsed time; the results before the status line
    assert "[coordinator] setting up: every party aligns its rows" in out
    assert "[coordinator] setting up: every party builds its model" in out
    assert re.search(r"\[coordinator\] set up in [\d.]+ s; training\n", out)
    assert re.search(r"\[coordinator\] round 1/4: objective \S+; \d+ s elapsed\n", out)
    assert out.index("[coordinator] final objective") < out.index("[coordinator] ok; results in")
    # it ends as `fedviews run` of a deployment does: run folder, report, summary
    tail = out.strip().splitlines()[-5:]
    assert tail[0] == f"run folder: {run}" and tail[1].startswith("report: "), tail
    assert re.fullmatch(r"deploy_test: MMVFL deployment ok in [\d.]+ s", tail[2]), tail
    assert re.fullmatch(r"  final objective \S+", tail[3]), tail
    assert re.fullmatch(r"  \d+ messages, \S+ \S+ across the privacy barrier", tail[4]), tail
    cfg = load_deploy_config(config)
    # in-process reference on the same files: plain alignment, each party standardises its view
    Xs, y = mmvfl_inputs(run / "data", PARTIES, owner=1)
    ref = mmvfl_reference(cfg, Xs, y, owner=1)

    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    np.testing.assert_allclose(res["objective"], ref.objective_, rtol=1e-12)
    for k, name in enumerate(PARTIES):
        with np.load(run / name / "result.npz") as z:
            np.testing.assert_allclose(z["W"], ref.W_[k], rtol=1e-10, atol=1e-12)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    # PSI chains are sealed between parties: the coordinator relays psi_sealed, and only
    # the fully blinded psi_set of a chain's last step reaches it in the clear
    assert log["crossings"]["pix -> coordinator"] == ["Z_k", "psi_sealed", "psi_set"]
    assert log["crossings"]["coordinator -> pix"] == ["Z", "psi_positions", "psi_sealed"]
    # the deployed protocol is the in-process one: same (roles, kind, arrays) exchanges
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    deployed = footprint(log["exchanges"], roles)
    ref_roles = {f"party{k}": "party" for k in range(3)} | {"coordinator": "coordinator"}
    assert deployed == footprint(ref.transport_.log.exchanges(), ref_roles)
    assert deployed == {
        ("coordinator", "party", "update", ("Z",)),
        ("party", "coordinator", "update:reply", ("Z_k",)),
    }
    assert_tight(ref.transport_.policy, deployed)


def test_launch_with_secure_aggregation_equals_in_process(tmp_path):
    """MMVFL with ``[defense] kind = "secagg"`` over mutual TLS: the parties' keys are signed
    with their certificates, the coordinator receives only masked sums, and the run equals
    the in-process secure run (and the plain one, to fixed-point resolution)."""
    config = _write_config(tmp_path, max_iter=3)
    config.write_text(config.read_text() + '[defense]\nkind = "secagg"\n')
    run = tmp_path / "run"
    launch_config(config, run, timeout=150)
    cfg = load_deploy_config(config)
    assert cfg.defense.kind == "secagg"
    Xs, y = mmvfl_inputs(run / "data", PARTIES, owner=1)
    p = cfg.params
    kw = dict(beta=p.beta, label_owner=1, max_iter=3, inner_max_iter=10, random_state=cfg.seed)
    ref = MMVFL(defense="secagg", **kw).fit(Xs, y)
    plain = MMVFL(**kw).fit(Xs, y)

    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    np.testing.assert_allclose(res["objective"], ref.objective_, rtol=1e-10)
    np.testing.assert_allclose(res["objective"], plain.objective_, rtol=1e-8)
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    assert log["crossings"]["pix -> coordinator"] == [
        "masked_stats_Z_k", "masked_zeta_Z_k", "psi_sealed", "psi_set",
    ]  # fmt: skip
    roles = {**cfg.roles(), "coordinator": "coordinator"}
    deployed = footprint(log["exchanges"], roles)
    ref_roles = {f"party{k}": "party" for k in range(3)} | {"coordinator": "coordinator"}
    assert deployed == footprint(ref.transport_.log.exchanges(), ref_roles)
    assert ("party", "coordinator", "secagg:keys:reply", ()) in deployed
    assert_tight(ref.transport_.policy, deployed)


def test_launch_with_label_dp_draws_privately_and_reports_the_budget(tmp_path):
    """``[defense] kind = "label_rr"``: the label owner draws its randomized response from the
    OS and keeps the draw in its own folder only (private, for resumption); the coordinator
    reports the budget spent."""
    config = _write_config(tmp_path, max_iter=2)
    config.write_text(config.read_text() + '[defense]\nkind = "label_rr"\nepsilon = 1.5\n')
    run = tmp_path / "run"
    out = launch_config(config, run, timeout=150)
    import stat

    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["status"] == "ok"
    assert res["privacy"]["parties"]["fou"]["epsilon"] == pytest.approx(1.5, rel=1e-3)
    assert res["privacy"]["parties"]["fou"]["delta"] == 0.0
    draw = run / "fou" / "label_rr_entropy.txt"
    assert draw.is_file() and stat.S_IMODE(draw.stat().st_mode) == 0o600
    assert not any((run / p / draw.name).exists() for p in ("pix", "zer", "coordinator"))
    assert "defense.seed is set" not in out


class _Echo(Party):
    @handles("ping")
    def on_ping(self, msg):
        return self.reply(msg, arrays={"v": msg.arrays["v"] + 1})


_POLICY = PrivacyPolicy.of(
    "echo", {("party", "coordinator"): ["v"], ("coordinator", "party"): ["v"]}
)
_FAST = GrpcOptions(timeout=3.0, heartbeat=0.5, connect_timeout=5.0, connect_retries=2, backoff=0.1)


def _hub(certs: Path, parties=("a",)) -> GrpcHub:
    return tls_hub(_POLICY, certs, parties, _FAST)  # type: ignore[return-value]


def _dial(hub: GrpcHub, certs: Path, cert_name: str, party_name: str) -> GrpcPartyTransport:
    t = GrpcPartyTransport(
        _POLICY, f"127.0.0.1:{hub.port}", tls=TLSFiles.from_dir(certs, cert_name), options=_FAST
    )
    t.register(_Echo(party_name))
    t.connect()
    return t


@pytest.fixture()
def two_cas(tmp_path):
    good, evil = tmp_path / "ca", tmp_path / "evil"
    for d in (good, evil):
        init_ca(d)
        for n in ("coordinator", "a", "b"):
            issue_certificate(d, n)
    return good, evil


def test_a_certificate_of_another_name_is_refused_before_any_connection(two_cas, tmp_path):
    """A coordinator started with a party's certificate ran, and every party then said it
    was unreachable (gRPC: "Hostname Verification Check failed") and retried for a minute."""
    import shutil

    from fedviews.federation import Coordinator, GrpcHub

    good, _ = two_cas
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(good / "ca.crt", mixed)
    for ext in ("crt", "key"):
        shutil.copy(good / f"a.{ext}", mixed / f"coordinator.{ext}")
    with pytest.raises(ConfigError, match=r"coordinator\.crt is issued to 'a', not 'coordinator'"):
        TLSFiles.from_dir(mixed, "coordinator")
    # a server that presents it anyway (no fedviews coordinator) is refused at once
    tls = TLSFiles(mixed / "ca.crt", mixed / "coordinator.crt", mixed / "coordinator.key")
    hub = GrpcHub(_POLICY, {"a": "party"}, tls=tls, options=_FAST)
    hub.register(Coordinator())
    try:
        t0 = time.monotonic()
        with pytest.raises(PrivacyError, match="presented a certificate that is not issued to"):
            _dial(hub, good, "a", "a")
        assert time.monotonic() - t0 < 10  # not the minute of retries
    finally:
        hub.close()


def test_mutual_tls_round_trip_and_refusals(two_cas):
    good, evil = two_cas
    hub = _hub(good, parties=("a", "b"))
    try:
        party = _dial(hub, good, "a", "a")
        threading.Thread(target=party.serve, daemon=True).start()
        # a certificate from another CA fails the TLS handshake
        with pytest.raises(PartyUnavailable, match="coordinator"):
            _dial(hub, evil, "b", "b")
        # a valid certificate of `a` claiming to be `b` is refused and logged
        with pytest.raises(PrivacyError, match="claims to be party 'b'"):
            _dial(hub, good, "a", "b")
        assert any("claims to be party 'b'" in r for r in hub.refusals)
        with pytest.raises(PartyUnavailable, match="'b'"):
            hub.wait_for_parties(0.5)
        coord = hub.local["coordinator"]
        big = np.arange(700_000, dtype=np.float64)  # 5.6 MB: chunked over 3 frames
        reply = coord.send("a", "ping", arrays={"v": big})
        np.testing.assert_array_equal(reply.arrays["v"], big + 1)
    finally:
        hub.close()
    revoke_certificate(good, "a")  # a revoked certificate is refused from the next start
    hub = _hub(good)
    try:
        with pytest.raises(PrivacyError, match="revoked"):
            _dial(hub, good, "a", "a")
    finally:
        hub.close()


def test_a_launch_that_fails_on_the_coordinator_s_own_error_says_that_error(tmp_path):
    """Files that share no ID: the launch ended in "PartyUnavailable: party 'coordinator' is
    unavailable: DataError: ...", as though the coordinator had died; it says the DataError."""
    config = _write_config(tmp_path)
    data = tmp_path / "data"
    split_dataset("handwritten", data, views=PARTIES, label_owner="fou", n_per_class=5, seed=0)
    with np.load(data / "zer.npz") as z:
        moved = {k: z[k] for k in z.files}
    moved["ids"] = np.array([f"other-{i}" for i in moved["ids"]])
    np.savez(data / "zer.npz", **moved)
    proc = _fedviews("launch", str(config), "--data-dir", str(data), "--out", str(tmp_path / "r"))
    text, _ = proc.communicate(timeout=150)
    assert proc.returncode == 2, text
    last = text.strip().splitlines()[-1]
    assert last.startswith("error: DataError: the parties of alignment group 'train' share no"), (
        last
    )


def test_a_party_that_fails_before_joining_stops_the_launch_at_once(tmp_path):
    """`fedviews launch` whose party cannot load its file: the launch fails at once naming
    that party and its own error (the coordinator would wait its 60 s join timeout), and
    the folder of a launch that failed before any process started is taken again."""
    config = _write_config(tmp_path, timeout=60.0)
    data = tmp_path / "data"
    split_dataset("handwritten", data, views=PARTIES, label_owner="fou", n_per_class=15, seed=0)
    with np.load(data / "zer.npz") as z:
        broken = {k: z[k] for k in z.files}
    broken["X"] = broken["X"].copy()
    broken["X"][3, 2] = np.nan
    np.savez(data / "zer.npz", **broken)
    run = tmp_path / "run"
    missing = _fedviews(
        "launch", str(config), "--data-dir", str(tmp_path / "nowhere"), "--out", str(run)
    )
    text, _ = missing.communicate(timeout=60)
    assert missing.returncode == 2 and "nowhere" in text, text
    t0 = time.monotonic()
    proc = _fedviews("launch", str(config), "--data-dir", str(data), "--out", str(run))
    text, _ = proc.communicate(timeout=150)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, text
    last = text.strip().splitlines()[-1]
    assert last.startswith(
        "error: PartyUnavailable: party 'zer' is unavailable: its process "
        "exited with status 2 before it joined: DataError:"
    ), last
    assert "NaN" in last or "nan" in last, last
    assert elapsed < 45, elapsed  # not the coordinator's 60 s join timeout
    # the party's own error line says whose it is (it came unmarked among the others')
    assert any(line.startswith("[zer] error: DataError: ") for line in text.splitlines()), text
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["unavailable_party"] == "zer" and "DataError" in res["status"], res
    # what it saw: its launcher stopped it (it read "KeyboardInterrupt")
    assert res["coordinator_status"] == "Terminated: stopped by SIGTERM", res


def test_stopped_party_is_unavailable_and_run_shuts_down(tmp_path):
    """A party that stops answering (SIGSTOP: no heartbeats) -> PartyUnavailable naming it."""
    config = _write_config(tmp_path, timeout=3.0, heartbeat=0.5, max_iter=500, tol=0.0)
    data = tmp_path / "data"
    split_dataset("handwritten", data, views=PARTIES, label_owner="fou", n_per_class=15, seed=0)
    out = tmp_path / "run"
    port_file = out / "port"
    out.mkdir()
    common = [str(config), "--insecure"]
    coord = _fedviews(
        "coordinator",
        *common,
        "--listen",
        "127.0.0.1:0",
        "--port-file",
        str(port_file),
        "--out",
        str(out / "coordinator"),
    )
    parties = {}
    try:
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text()):
            assert time.monotonic() < deadline and coord.poll() is None
            time.sleep(0.1)
        address = f"127.0.0.1:{port_file.read_text()}"
        for p in PARTIES:
            parties[p] = _fedviews(
                "party",
                *common,
                "--party",
                p,
                "--data",
                str(data / f"{p}.npz"),
                "--coordinator",
                address,
                "--out",
                str(out / p),
            )
        victim = parties["zer"]
        assert victim.stdout is not None
        for line in victim.stdout:  # wait until training is under way
            if "round 2" in line:
                break
        os.kill(victim.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        text, _ = coord.communicate(timeout=120)  # a cap; the bound is the assert below
        elapsed = time.monotonic() - t0
        assert coord.returncode == 2, text
        assert "PartyUnavailable" in text and "'zer'" in text
        # detected by the 3 s heartbeat timeout (its reason), not by the 3600 s request
        # timeout; the cap only catches a hang (a loaded machine takes seconds to shut down)
        assert "no message or heartbeat for 3 s" in " ".join(text.split()), text
        assert elapsed < 60.0
        res = json.loads((out / "coordinator" / "results.json").read_text())
        assert "zer" in res["status"] and len(res["objective"]) >= 1  # results so far written
        for p in ("pix", "fou"):  # the others are told to stop and exit
            parties[p].communicate(timeout=120)  # drain the pipe: a full one blocks the exit
            assert parties[p].returncode == 2
            log = json.loads((out / p / "message_log.json").read_text())  # what crossed so far
            assert log["messages"] > 0
    finally:
        for proc in [coord, *parties.values()]:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


def test_session_kinds_from_a_party_are_refused_by_the_hub(two_cas):
    """A dishonest party skips its own policy check: the hub still refuses its
    ``deploy:finish`` to another party and names the sender, never the victim."""
    good, _ = two_cas
    policy = _POLICY.merged(
        PrivacyPolicy.of("session", {}, kinds={("coordinator", "party"): ["deploy:finish"]})
    )
    hub = GrpcHub(
        policy,
        {"a": "party", "b": "party"},
        tls=TLSFiles.from_dir(good, "coordinator"),
        options=_FAST,
    )
    hub.register(Coordinator())
    try:
        parties = {}
        for name in ("a", "b"):
            t = GrpcPartyTransport(
                policy, f"127.0.0.1:{hub.port}", tls=TLSFiles.from_dir(good, name), options=_FAST
            )
            t.register(_Echo(name))
            t.connect()
            threading.Thread(target=t.serve, daemon=True).start()
            parties[name] = t
        hub.wait_for_parties(30)  # a hang cap
        honest = parties["a"].local["a"]
        with pytest.raises(PrivacyError, match="'a' \\(party\\) from sending a 'deploy:finish'"):
            honest.send("b", "deploy:finish")  # the honest sender's own check
        parties["a"].check_send = lambda msg: None  # type: ignore[method-assign]
        parties["a"]._check_and_log = lambda msg, n: None  # type: ignore[method-assign]
        with pytest.raises(
            RemoteError, match="'coordinator' reported PrivacyError: .*'a' \\(party\\) from sending"
        ):
            honest.send("b", "deploy:finish")  # the hub's check, reported in its name
        assert not any(e.kind == "deploy:finish" for e in hub.log.entries)
    finally:
        hub.close()


def test_a_failed_party_process_leaves_although_a_thread_lingers(tmp_path):
    """The party command's error path ends its process at once (as its success path does):
    a thread still running (here a plain one, in a party a gRPC worker winding down) does
    not keep it alive after its error line."""
    config = _write_config(tmp_path)
    data = tmp_path / "data"
    split_dataset("handwritten", data, views=PARTIES, label_owner="fou", n_per_class=2, seed=0)
    args = ["party", str(config), "--insecure", "--party", "nobody", "--data"]
    args += [str(data / "pix.npz"), "--coordinator", "127.0.0.1:1", "--out", str(tmp_path / "o")]
    script = (
        "import sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(600,)).start()\n"
        f"sys.argv = ['fedviews', *{args!r}]\n"
        "from fedviews.cli import main\n"
        "main()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 2, proc.stderr
    assert "'nobody' is not a party of this federation" in proc.stderr


def test_an_unreachable_coordinator_is_one_retry_line_then_a_clear_error(caplog):
    """A refused connection: one warning (not one per attempt), then an error that says what
    to check; a host name that does not resolve fails at once (retrying cannot fix it)."""
    opts = GrpcOptions(connect_timeout=5.0, connect_retries=4, backoff=0.05)
    closed = GrpcPartyTransport(_POLICY, "127.0.0.1:1", options=opts)
    closed.register(_Echo("a"))
    with caplog.at_level("DEBUG", logger="fedviews"):
        with pytest.raises(PartyUnavailable, match="4 attempts") as err:
            closed.connect()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "waiting for the coordinator at 127.0.0.1:1 (unreachable: Connection refused), "
        "retrying for about 0.35 s"
    ]
    assert "Check that the coordinator is running" in str(err.value)
    assert "--listen address" in str(err.value)
    slow = GrpcOptions(connect_timeout=5.0, connect_retries=4, backoff=30.0)
    unknown = GrpcPartyTransport(_POLICY, "no-such-host.invalid:50051", options=slow)
    unknown.register(_Echo("a"))
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="cannot resolve the coordinator's host name"):
        unknown.connect()
    assert time.monotonic() - t0 < 30.0  # no retry pause
