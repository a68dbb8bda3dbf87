"""Round checkpoints and resuming a killed deployment."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _protocol import fedviews_process, mmvfl_inputs

from fedviews.deploy import load_deploy_config
from fedviews.deploy._checkpoint import Checkpoints
from fedviews.deploy._data import write_demo_data
from fedviews.deploy._session import DeployCoordinator
from fedviews.errors import ConfigError, DataError, PartyUnavailable, ProtocolError
from fedviews.federation import SetupReport, federate
from fedviews.linear import MMVFL
from fedviews.linear.mmvfl import MMVFL_POLICY, MMVFLParty, MMVFLServer

PARTIES = ("pix", "fou", "zer")
ROUNDS = 200  # tol = 0: every round runs; a few ms each, so the kill lands well before the end
CONFIG = f"""
algorithm = "mmvfl"
name = "resume_test"
seed = 5
[federation]
parties = ["pix", "fou", "zer"]
label_owner = "fou"
alignment = "none"
[data]
dataset = "handwritten"
n_per_class = 10
[params]
standardize = true
beta = 0.5
max_iter = {ROUNDS}
tol = 0.0
inner_max_iter = 5
"""


def _mmvfl_objects(Xs, Y, rounds):
    ss = np.random.SeedSequence(1).spawn(len(Xs) + 1)
    parties = [
        MMVFLParty(
            f"p{k}",
            X,
            beta=0.5,
            zeta=1000.0,
            n_classes=Y.shape[1],
            seed=ss[1 + k],
            Y=Y if k == 0 else None,
            eta=1000.0 if k == 0 else 0.0,
        )
        for k, X in enumerate(Xs)
    ]
    server = MMVFLServer(
        [p.name for p in parties], [1000.0] * len(Xs), len(Y), Y.shape[1], ss[0],
        max_iter=rounds, tol=0.0,
    )  # fmt: skip
    federate([server, *parties], MMVFL_POLICY)
    return server, parties


def test_state_dicts_resume_in_process_bit_for_bit():
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(40, d)) for d in (6, 9)]
    y = np.arange(40) % 3
    Y = np.eye(3)[y]
    ref = MMVFL(beta=0.5, max_iter=9, tol=0.0, random_state=1).fit(Xs, y)
    server, parties = _mmvfl_objects(Xs, Y, rounds=9)
    saved = {}
    server.max_iter = 4  # "killed" after round 4
    server.run(on_round_end=lambda r: saved.update({r: server.state_dict()}))
    assert sorted(saved) == [1, 2, 3, 4]
    states = [p.state_dict() for p in parties]
    server, parties = _mmvfl_objects(Xs, Y, rounds=9)  # fresh processes
    server.load_state(saved[4])
    for p, s in zip(parties, states, strict=True):
        p.load_state(s)
    server.run()
    assert server.objective == ref.objective_
    for p, W in zip(parties, ref.W_, strict=True):
        np.testing.assert_array_equal(p.W, W)
    with pytest.raises(DataError, match="does not fit"):
        parties[0].load_state({**states[0], "W": np.zeros((2, 3))})


def test_checkpoints_atomic_pruned_and_fingerprinted(tmp_path):
    ck = Checkpoints(tmp_path / "ck", "abc", keep=2)
    for r in (1, 2, 3, 4):
        ck.save(r, {"a": np.full(3, r)})
    assert ck.rounds() == [3, 4] and ck.latest() == 4
    ck.save(3, {"a": np.full(3, 3)})  # a run rewound to round 3 drops the stale round 4
    assert ck.rounds() == [3]
    assert not list((tmp_path / "ck").glob("*.tmp"))
    np.testing.assert_array_equal(ck.load(3)["a"], [3, 3, 3])
    with pytest.raises(DataError, match="no checkpoint of round 9"):
        ck.load(9)
    with pytest.raises(ConfigError, match="another config"):
        Checkpoints(tmp_path / "ck", "xyz").load(3)
    # a torn or overwritten file (a disk error, a copy cut short): one clear error, not
    # zipfile.BadZipFile or numpy's ValueError from deep inside a resumed process
    path = ck.path(3)
    for damage in (path.read_bytes()[:300], b"\x93NUMPY garbage"):
        path.write_bytes(damage)
        with pytest.raises(DataError, match=r"round-00003\.npz is not a readable checkpoint"):
            ck.load(3)


def test_resume_round_is_the_last_one_everybody_has():
    cfg = load_deploy_config(
        {"algorithm": "mmvfl", "federation": {"parties": ["a", "b"], "label_owner": "a"}}
    )
    coord = DeployCoordinator(cfg, print)

    def replies(a: str, b: str) -> dict[str, SetupReport]:
        return {p: SetupReport(p, {"checkpoints": have}) for p, have in (("a", a), ("b", b))}

    assert coord._resume_round([6, 7], replies("6,7", "7,8")) == 7  # b is one round ahead
    assert coord._resume_round([6, 7], replies("5,6", "6,7")) == 6
    assert coord._resume_round([], replies("", "")) == 0  # killed before round 1: start over
    with pytest.raises(ProtocolError, match=r"b: none \(started without --resume, or it answered"):
        coord._resume_round([6, 7], replies("6,7", ""))


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _party_pid(launcher: int, party: str) -> int:
    for child in _children(launcher):
        args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"--party" in args and args[args.index(b"--party") + 1] == party.encode():
            return child
    raise AssertionError(f"no process of party {party!r}")


def _start_until(
    tmp_path: Path,
    text: str,
    mark: str,
    act: Callable[[int], object],
    *args: str,
    cmd="launch",
    sigint_ignored=False,
) -> tuple[subprocess.Popen, Path, str, float]:
    """``fedviews CMD`` of deployment config ``text``; when it prints the line ``mark``,
    ``act(pid)`` (its pid). Returns the finished process, its run folder, its output and
    the seconds it took to exit after ``act``. ``sigint_ignored``: started as a background
    job of a non-interactive shell (``make test &`` in a script) is, with SIGINT ignored
    (which its child processes inherit)."""
    config = tmp_path / "deploy.toml"
    config.write_text(text)
    run = tmp_path / "run"
    proc = fedviews_process(
        cmd, str(config), "--out", str(run), *args, sigint_ignored=sigint_ignored
    )
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == mark:
                act(proc.pid)
                break
        t0 = time.monotonic()
        rest, _ = proc.communicate(timeout=150)  # past the launcher's own STOP_GRACE waits
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, run, "".join(lines) + rest, time.monotonic() - t0


def _kill(party: str) -> Callable[[int], None]:
    """SIGKILL ``party``'s process (a child of the launcher)."""
    return lambda launcher: os.kill(_party_pid(launcher, party), signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_killed_party_then_resume_equals_uninterrupted(tmp_path):
    pytest.importorskip("grpc")
    # a deployment config launched (TLS) on data files of the user's; SIGKILL `zer` once it
    # works on round 5
    data = tmp_path / "files"
    (tmp_path / "deploy.toml").write_text(CONFIG)
    write_demo_data(load_deploy_config(tmp_path / "deploy.toml"), data)
    proc, run, out, seconds = _start_until(
        tmp_path, CONFIG, "[zer] round 5", _kill("zer"), "--data-dir", str(data)
    )
    assert proc.returncode == 2, out
    flat = " ".join(out.split())  # the error line may be wrapped
    assert "PartyUnavailable: party 'zer' is unavailable" in flat
    assert f"`fedviews run --resume {run}`" in out  # one line, ready to copy
    # detected at once (the stream breaks), not by the 20 s heartbeat timeout (its reason);
    # the cap only catches a hang (a loaded machine takes seconds to shut the run down)
    assert "no message or heartbeat" not in flat, out
    assert seconds < 120
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["unavailable_party"] == "zer" and "zer" in res["status"]
    done = res["last_checkpoint_round"]
    assert 4 <= done == len(res["objective"]) < ROUNDS  # results so far written
    assert Checkpoints(run / "coordinator" / "checkpoints", "").rounds()[-1] == done
    for p in PARTIES:  # every party holds (its own) checkpoint of that round
        assert done in Checkpoints(run / p / "checkpoints", "").rounds()
    # each checkpoint keeps the message log up to its round (a resumed run's log covered
    # only its last session: the privacy audit of a resumed run under-counted)
    with np.load(Checkpoints(run / "coordinator" / "checkpoints", "").path(done)) as z:
        before = json.loads(str(z["message_log_summary"]))
    assert before["rounds"] == done

    assert not (run / "data").exists()
    # zer's file changed since: its checkpoints are refused by zer, named (the coordinator's
    # checkpoint, which fingerprints the parties' setups, was blamed where shapes changed)
    original = (data / "zer.npz").read_bytes()
    with np.load(data / "zer.npz") as z:
        changed = {k: z[k] for k in z.files}
    changed["X"] = changed["X"] + 1.0
    np.savez(data / "zer.npz", **changed)
    refused = subprocess.run(
        [sys.executable, "-m", "fedviews", "run", "--resume", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 2, said
    assert "'zer''s checkpoints of rounds" in said and "other data than it has now" in said, said
    assert "error: RemoteError: 'zer' reported ConfigError: 'zer''s checkpoints" in said, said
    assert "Traceback" not in said and "ProtocolError: RemoteError" not in said, said
    (data / "zer.npz").write_bytes(original)
    proc = subprocess.Popen(  # the command the error message suggests: on the same files
        [sys.executable, "-m", "fedviews", "run", "--resume", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    killed = res
    res = json.loads((run / "coordinator" / "results.json").read_text())
    resumed = res["resumed_from_round"]
    assert res["status"] == "ok" and resumed == done
    # the killed session's results are kept beside (they were overwritten)
    assert json.loads((run / "coordinator" / "results.session-1.json").read_text()) == killed
    assert f"[zer] resumed from its checkpoint of round {resumed}" in out
    log = json.loads((run / "coordinator" / "message_log.json").read_text())
    assert log["sessions"] == 2 and log["rounds"] == ROUNDS
    assert log["messages"] > before["messages"] and log["total_bytes"] > before["total_bytes"]
    assert all(log["crossing_bytes"][k] > n for k, n in before["crossing_bytes"].items())
    for p in PARTIES:
        assert json.loads((run / p / "message_log.json").read_text())["sessions"] == 2

    cfg = load_deploy_config(tmp_path / "deploy.toml")
    assert not (run / "data").exists()  # (it dealt demo data and failed on them)
    Xs, y = mmvfl_inputs(data, PARTIES, owner=1)
    p = cfg.params
    ref = MMVFL(
        beta=p.beta,
        label_owner=1,
        max_iter=p.max_iter,
        tol=p.tol,
        inner_max_iter=p.inner_max_iter,
        random_state=cfg.seed,
    ).fit(Xs, y)
    assert res["objective"] == ref.objective_  # bit for bit
    for k, name in enumerate(PARTIES):
        with np.load(run / name / "result.npz") as z:
            np.testing.assert_array_equal(z["W"], ref.W_[k])

    # resumed once more, the finished run is refused: it trained one round past its end and
    # overwrote its results
    again = subprocess.run(
        [sys.executable, "-m", "fedviews", "run", "--resume", str(run)],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2, again.stdout + again.stderr
    assert "finished" in again.stdout + again.stderr and "nothing to resume" in again.stderr
    assert json.loads((run / "coordinator" / "results.json").read_text()) == res


APFED = """
algorithm = "apfed"
name = "resume_apfed_test"
seed = 4
[federation]
parties = ["top", "mid", "bot"]
label_owner = "mid"
[data]
dataset = "mnist"
n_per_class = 8
n_test = 20
[params]
variant = "R"
epochs = 30
batch_size = 32
device = "cpu"
pad = true
torch_threads = 1
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_a_terminated_party_keeps_its_message_log_and_says_where_its_checkpoint_is(tmp_path):
    """`kill PARTY` (SIGTERM) ended the process at once: no message_log.json, no word. Now
    it stops as on Ctrl-C: it writes what crossed so far and names its kept checkpoint; the
    coordinator names it unavailable as for a crash."""
    pytest.importorskip("grpc")
    term = lambda launcher: os.kill(_party_pid(launcher, "zer"), signal.SIGTERM)  # noqa: E731
    proc, run, out, _ = _start_until(tmp_path, CONFIG, "[zer] round 5", term)
    assert proc.returncode == 2, out
    flat = " ".join(out.split())
    said = re.search(rf"\[zer\] interrupted; message log in {re.escape(str(run / 'zer'))}, "
                     rf"checkpoint of round (\d+) kept \(--resume {re.escape(str(run / 'zer'))}\)",
                     flat)  # fmt: skip
    assert said is not None, out
    assert int(said.group(1)) in Checkpoints(run / "zer" / "checkpoints", "").rounds()
    log = json.loads((run / "zer" / "message_log.json").read_text())
    assert log["rounds"] >= 5 and log["messages"] > 0 and log["links"], log
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["unavailable_party"] == "zer", res


def test_a_party_killed_behind_the_relay_is_named_and_the_run_resumes(tmp_path):
    """APFed: the coordinator hears of a killed passive party only from the active party
    (its h_A request to it fails in the hub's relay). That report arrived as a bare
    ProtocolError: results.json named nobody and the launcher blamed the coordinator
    ("party 'coordinator' is unavailable"). The hub saw the stream close: it names it."""
    pytest.importorskip("torch")
    pytest.importorskip("grpc")
    proc, run, out, _ = _start_until(tmp_path, APFED, "[bot] round 2", _kill("bot"))
    assert proc.returncode == 2, out
    flat = " ".join(out.split())
    assert "error: PartyUnavailable: party 'bot' is unavailable" in flat, out
    res = json.loads((run / "coordinator" / "results.json").read_text())
    assert res["unavailable_party"] == "bot" and res["last_checkpoint_round"] >= 1

    proc = subprocess.run(
        [sys.executable, "-m", "fedviews", "run", "--resume", str(run)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = json.loads((run / "coordinator" / "results.json").read_text())
    assert done["status"] == "ok" and done["epochs_done"] == 30
    assert done["resumed_from_round"] == res["last_checkpoint_round"]
    assert done["history"]["loss"][: len(res["history"]["loss"])] == res["history"]["loss"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
def test_a_terminated_launch_keeps_its_results_and_leaves_no_process(tmp_path, sigint_ignored):
    """`kill LAUNCHER` (SIGTERM, or Ctrl-C to it alone): the launcher died at once and left
    its processes running, or SIGTERMed the coordinator, which then wrote no results.json.
    Now it stops the coordinator as Ctrl-C does: results.json records the interrupt and
    the last checkpoint, the parties exit non-zero saying that the run was stopped (they
    exited 0) and no process is left. A launch that inherited SIGINT ignored (a background
    job of a script: how a CI run once lost results.json) is stopped the same way: the
    launcher's SIGINT went unheard, and 10 s later its SIGTERM killed the coordinator."""
    pytest.importorskip("grpc")
    children: list[int] = []

    def terminate(launcher: int) -> None:
        children.extend(_children(launcher))
        os.kill(launcher, signal.SIGTERM)

    # params.max_iter: still running when the signal lands, however late
    proc, run, out, _ = _start_until(
        tmp_path, CONFIG, "[zer] round 5", terminate, "params.max_iter=100000",
        sigint_ignored=sigint_ignored,
    )  # fmt: skip
    assert proc.returncode == 143, out
    assert len(children) == 1 + len(PARTIES)
    for pid in children:  # reaped by the launcher: no /proc entry, not even a zombie
        assert not Path(f"/proc/{pid}").exists(), pid
    res = json.loads((run / "coordinator" / "results.json").read_text())
    # a party says "round 5" when round 5 starts: the coordinator has checkpointed round 4
    # (a launcher that stopped it later let it run on; now it stops within a round or two)
    assert res["status"] == "Terminated: stopped by SIGTERM"  # (it read "KeyboardInterrupt")
    assert res["last_checkpoint_round"] >= 4
    # the interrupt may land between a round's end and its checkpoint: that round is redone
    assert 0 <= len(res["objective"]) - res["last_checkpoint_round"] <= 1
    flat = " ".join(out.split())
    assert flat.count("error: ProtocolError: the coordinator stopped the run before") == 3
    for p in PARTIES:
        assert f"kept in {run / p}" in flat, out
    # and the launcher says how to go on (it did only for a party that died)
    assert f"interrupted; checkpoint of round {res['last_checkpoint_round']} kept: " in flat
    assert f"`fedviews run --resume {run}`" in flat


def test_a_second_stop_while_the_coordinator_writes_keeps_its_results(tmp_path, monkeypatch):
    """A launcher whose coordinator is slow to stop (a loaded machine) terminates it a second
    time, STOP_GRACE after the first: that SIGTERM landed while the coordinator wrote its
    outputs and ended the writing (test_a_terminated_launch_... once found no results.json).
    The coordinator writes them with the stop signals held. Here the second stop lands in
    the writing itself, in this (main) thread, as `fedviews coordinator` handles it."""
    from fedviews.deploy import _session
    from fedviews.deploy._launch import terminate_as_interrupt

    (tmp_path / "deploy.toml").write_text(CONFIG)
    cfg = load_deploy_config(tmp_path / "deploy.toml", ["federation.connect_timeout=0.2"])
    write = _session.write_coordinator_outputs

    def stopped_while_writing(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs here, before the next line
        time.sleep(0.2)
        write(*args, **kwargs)

    monkeypatch.setattr(_session, "write_coordinator_outputs", stopped_while_writing)
    restore = terminate_as_interrupt()  # SIGTERM -> KeyboardInterrupt, as the command has it
    ended: list[BaseException] = []
    try:
        _session.run_coordinator(cfg, "127.0.0.1:0", tmp_path / "coordinator", tls=None)
    except (PartyUnavailable, KeyboardInterrupt) as exc:  # caught: it would stop pytest
        ended.append(exc)
    finally:
        restore()
    assert [type(e) for e in ended] == [PartyUnavailable], ended  # nobody came; no interrupt
    res = json.loads((tmp_path / "coordinator" / "results.json").read_text())
    assert res["status"].startswith("PartyUnavailable") and "did not join" in res["status"]
