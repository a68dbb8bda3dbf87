"""One deployed run, as its two roles play it: :class:`DeployCoordinator` and :class:`DeployParty`.

Session protocol (all through the transport, so policy-checked and logged):

1. PSI on the sample IDs (``federation.alignment = "psi"``), see :mod:`fedviews.privacy`;
2. ``deploy:setup`` — every party restricts its data to the common IDs (sorted) and
   reports ``n_samples``; the label owner also reports ``n_classes``. Without the PSI
   (``alignment = "none"``) each party sorts the rows it offers a group (its tagged rows,
   :attr:`~fedviews.data.PartyData.group`) and also reports a digest of their IDs, which
   the coordinator compares;
3. ``deploy:build`` — every party builds its algorithm party object from its own
   data with the in-process random streams; the coordinator builds the server.
   With ``--resume`` the coordinator announces ``resume_round`` (its last checkpoint)
   and everyone loads its own checkpoint of that round (:mod:`._checkpoint`);
4. the algorithm runs unchanged (``server.run()``), its messages go over gRPC;
   every process checkpoints its state at round boundaries (``checkpoint_every``);
5. ``deploy:finish`` — every party writes its own results (e.g. its ``W_k``) to its
   own folder; the coordinator writes ``results.json`` and the message log. Every
   process also keeps its part of the model (``model.json``, :mod:`._model`), tagged
   with the run ID the coordinator sends with ``deploy:finish``: ``fedviews predict``
   (:mod:`._predict`) runs a prediction session from these parts.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import PartyData
from fedviews.deploy._checkpoint import Checkpoints, fingerprint, split_log, with_log
from fedviews.deploy._config import DeployConfig
from fedviews.deploy._model import save_model_part
from fedviews.errors import ConfigError, PrivacyError, ProtocolError, described
from fedviews.federation import (
    AlignGroup,
    Coordinator,
    GrpcPartyTransport,
    Local,
    MemberSetup,
    Message,
    MetaValue,
    PrivacyPolicy,
    SetupReport,
    Transport,
    agree_setup,
    check_tags,
    get_algorithm_spec,
    handles,
    merge_summaries,
    of_planned,
    run_privacy,
)
from fedviews.privacy import PSIParty, run_psi

#: the kinds of the session; only the coordinator sends them
SESSION_KINDS = (
    "deploy:setup",
    "deploy:build",
    "deploy:finish",
    "psi:blind",
    "psi:reblind",
    "psi:result",
)

Printer = Callable[[str], None]


def session_policy(cfg: DeployConfig) -> PrivacyPolicy:
    """The session's own policy: the coordinator sends the session kinds, PSI arrays both ways.

    Until the setup is known nothing else may cross; then every process widens its
    transport's policy by exactly the algorithm's policy of this run
    (:func:`run_policy`).
    """
    rules: dict[tuple[str, str], set[str]] = {}
    kinds: dict[tuple[str, str], tuple[str, ...]] = {}
    for role in set(cfg.roles().values()):
        rules[(role, "coordinator")] = {"psi_set", "psi_sealed"}
        rules[("coordinator", role)] = {"psi_set", "psi_sealed", "psi_positions"}
        kinds[("coordinator", role)] = SESSION_KINDS
    return PrivacyPolicy.of("session", rules, kinds=kinds)


def run_policy(cfg: DeployConfig, algo: PrivacyPolicy) -> PrivacyPolicy:
    """The session's policy plus ``algo``, the algorithm's policy of this run and setup."""
    return session_policy(cfg).merged(algo, name=f"{algo.name}+session")


def _widen(transport: object, policy: PrivacyPolicy) -> None:
    """Set the policy of the transport a session member is attached to."""
    assert isinstance(transport, Transport), "attach the session to a transport first"
    transport.policy = policy


def run_identity(cfg: DeployConfig) -> dict[str, Any]:
    """What a resumed run must share with the killed one (timeouts, paths may change)."""
    f = cfg.federation
    return {
        "algorithm": cfg.algorithm,
        "seed": cfg.seed,
        "parties": list(f.parties),
        "label_owners": list(f.owners()),
        "params": cfg.params,
        "defense": cfg.defense,
    }


def run_fingerprint(cfg: DeployConfig) -> str:
    """A short hash of :func:`run_identity`: what every process of a run says in its hello
    (a party with another config is refused there) and what a model part is tagged with."""
    return fingerprint(run=run_identity(cfg))


def run_hello(cfg: DeployConfig) -> str:
    """What every process of a run says in its hello: a short hash of each part of
    :func:`run_identity` (each of ``params`` on its own), ``key=hash`` joined by ``;``, so
    that a process with another config is refused naming the keys that differ
    (:func:`fedviews.federation.run_differences`)."""
    ident = run_identity(cfg)
    params = ident.pop("params")  # the algorithm's Params dataclass (build_dataclass)
    parts = {**ident, **{f"params.{f.name}": getattr(params, f.name) for f in fields(params)}}
    return ";".join(f"{k}={fingerprint(v=v)[:12]}" for k, v in sorted(parts.items()))


def _all_sessions(transport: Any, prior: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of ``transport``'s message log, with ``prior`` (the log of the sessions
    before, kept in the checkpoint a resumed process started from) where there is one."""
    assert transport is not None
    now: dict[str, Any] = transport.log.summary()
    return merge_summaries(prior, now) if prior else now


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, default=str))


def align_groups(coord: Coordinator, groups: list[AlignGroup], echo: Printer) -> None:
    """The PSI of every alignment group, driven by ``coord``.

    One group after another, on purpose. Groups that share a party (data owners are in
    every Multi-VFL group) gain nothing together: a deployed party handles its messages
    one at a time, each blinding already on all its cores. Disjoint groups (H-FedMV's
    per client) were no faster concurrently on 2 shared cores, 3-5 % slower when idle
    (benchmarks/bench_psi.py --groups; docs/threat-model.md).
    """
    for g in groups:
        t0 = time.perf_counter()
        n = run_psi(coord, g.parties, group=g.name)
        echo(
            f"PSI {g.name} ({g.split} IDs of {len(g.parties)} parties): {n} common "
            f"sample IDs ({time.perf_counter() - t0:.1f} s)"
        )


def ids_digest(ids: np.ndarray) -> str:
    """A SHA-256 of sample IDs in their order (sorted, as a group's rows are), so that
    members who must hold the same IDs can compare them without showing them. The
    coordinator sees it: it can confirm a guess of a group's whole ID list, nothing less."""
    h = hashlib.sha256()
    for v in ids.tolist():
        b = str(v).encode()
        h.update(len(b).to_bytes(4, "little") + b)
    return h.hexdigest()


class SessionParty(PSIParty):
    """A party process of a session (training, :class:`DeployParty`, or prediction,
    :class:`~._predict.PredictParty`): its PSI on the IDs of its file, its algorithm party
    once built (:attr:`algo`), and its message log."""

    def __init__(
        self,
        cfg: DeployConfig,
        name: str,
        data: PartyData,
        out_dir: Path,
        echo: Printer,
        groups: list[AlignGroup],
    ) -> None:
        self.app = get_algorithm_spec(cfg.algorithm)
        self.groups = {g.name: g for g in groups if name in g.parties}
        check_tags(name, data, self.groups)
        # the PSI chains follow this party's own config, whatever the coordinator says
        chains = {g: group.parties for g, group in self.groups.items()}
        super().__init__(name, data.ids, role=self.app.role(cfg, name), chains=chains)
        self.cfg, self.data, self.out_dir, self.echo = cfg, data, out_dir, echo
        self.algo: Any = None
        self.checkpoints: Checkpoints | None = None
        self.finished = False
        #: this party's own failure while answering (its report goes to the requester only:
        #: the operator of this process would otherwise see just "the coordinator stopped")
        self.own_error: str | None = None
        #: the message log of the sessions before (from the checkpoint resumed from)
        self.prior_log: dict[str, Any] = {}

    def log_summary(self) -> dict[str, Any]:
        """What crossed to and from this party in this session, and in those before it."""
        return _all_sessions(self.transport, self.prior_log)

    def handle(self, msg: Message) -> Message:
        """:meth:`answer` ``msg``; a failure is also said here, on this party's console (its
        report goes to the requester, on another organisation's host)."""
        try:
            reply = self.answer(msg)
            if reply is not None and isinstance(self.transport, Transport):
                self.transport.check_send(reply)  # (its transport's check, said here too)
            return reply
        except Exception as exc:
            self.own_error = described(exc)
            self.echo(f"error answering {msg.kind!r} from {msg.sender!r}: {self.own_error}")
            raise

    def answer(self, msg: Message) -> Message:
        """The reply to ``msg`` (the session's own kinds here; subclasses add the algorithm's)."""
        return super().handle(msg)

    def _offered(self, group: str) -> np.ndarray:
        """Its positions in ``group``'s split of the rows it offers that group."""
        return self.data.offered(group, self.groups[group].split)

    def psi_ids(self, group: str) -> np.ndarray:
        if self.cfg.federation.alignment != "psi":
            raise PrivacyError(
                f"{self.name!r} runs no PSI: its config says federation.alignment = "
                f"{self.cfg.federation.alignment!r} (a coordinator asking for one is refused)"
            )
        if group not in self.groups:
            raise ProtocolError(f"{self.name!r} is not in the alignment group {group!r}")
        return self.data.split(self.groups[group].split)[0][self._offered(group)]

    def aligned_rows(self) -> dict[str, np.ndarray]:
        """This party's rows of every group it is in: the common IDs by PSI, or (alignment
        ``"none"``) all it offers the group, sorted by ID (the members hold the same IDs)."""
        rows: dict[str, np.ndarray] = {}
        for g, group in self.groups.items():
            offered = self._offered(g)
            if self.cfg.federation.alignment == "psi":
                if g not in self.psi_rows:
                    raise ProtocolError(f"deploy:setup before the PSI of group {g!r} finished")
                rows[g] = offered[self.psi_rows[g]]
            else:  # the members hold the same IDs: sorting aligns them
                ids = self.data.split(group.split)[0][offered]
                rows[g] = offered[np.argsort(ids, kind="stable")]
        return rows

    def id_digests(self, rows: Mapping[str, np.ndarray]) -> dict[str, str]:
        """Without the PSI (alignment ``"none"``), what it reports so that the coordinator
        can check that every member of a group holds the same IDs (:func:`ids_digest`):
        ``{"ids/<group>": digest}``; nothing after a PSI, whose rows agree by construction."""
        if self.cfg.federation.alignment == "psi":
            return {}
        return {
            f"ids/{g}": ids_digest(self.data.split(self.groups[g].split)[0][r])
            for g, r in rows.items()
        }

    def write_log(self) -> None:
        """``message_log.json``: what crossed to and from this party so far (and, over
        gRPC, what went direct and what the hub relayed)."""
        log = self.log_summary()
        if isinstance(self.transport, GrpcPartyTransport):
            log["links"] = self.transport.link_summary()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        _write_json(self.out_dir / "message_log.json", log)


class DeployParty(SessionParty):
    """A party process: runs the session steps, then hands messages to its algorithm party."""

    def __init__(
        self,
        cfg: DeployConfig,
        name: str,
        data: PartyData,
        out_dir: Path,
        echo: Printer,
        resume: Path | None = None,
    ) -> None:
        app = get_algorithm_spec(cfg.algorithm)
        super().__init__(cfg, name, data, out_dir, echo, app.groups(cfg))
        #: this party's steps of the set-up (its data is checked here, before it connects)
        self.member = MemberSetup(self.app, cfg, name, data)
        self.resume = resume
        self.local: Local | None = None
        self.entropy: int | None = None
        self.setup: dict[str, Any] = {}
        self.fingerprint = ""
        self._shown = 0

    def _private_entropy(self) -> int | None:
        """This party's private randomness where its defense draws (``Defense.draws``): from
        the OS once and kept in its own run folder (a resumed run reads it back: a second
        draw would spend the privacy budget twice); ``None`` where the defense needs none."""
        d = self.cfg.defense
        if not d.draws(self.data):
            return None
        if d.seed is not None:
            self.echo(
                f"warning: defense.seed is set: the {d.kind} draw is reproducible by "
                "anyone who has the config (for tests only; it voids the guarantee)"
            )
            return None
        name = f"{d.kind}_entropy.txt"
        if self.resume is not None and (self.resume / name).is_file():
            entropy = int((self.resume / name).read_text().strip())
        else:
            entropy = secrets.randbits(128)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.out_dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # also if the file was there before
        with os.fdopen(fd, "w") as f:  # never readable by others, not even for a moment
            f.write(f"{entropy}\n")
        return entropy

    def answer(self, msg: Message) -> Message:
        if msg.kind in self._handlers:
            return super().answer(msg)
        if self.algo is None:
            raise ProtocolError(f"{self.name!r} got {msg.kind!r} before deploy:build")
        # the training rounds, numbered as the coordinator numbers them: other messages
        # carry round numbers too (V-FedMV's testing phase counts on after the last round)
        training = msg.kind == self.app.round_message(self.role) and msg.round > 0
        if training and msg.round > self._shown:
            self._shown = msg.round
            self.echo(f"round {msg.round}")
        reply = self.algo.handle(msg)
        every = self.cfg.federation.checkpoint_every
        ckpt = self.checkpoints
        if ckpt is not None and training and msg.round % every == 0:
            # before the reply leaves: whatever round the coordinator completed, we have it
            ckpt.save(msg.round, with_log(self.algo.state_dict(), self.log_summary()))
        return reply

    @handles("deploy:setup")
    def on_setup(self, msg: Message) -> Message:
        rows = self.aligned_rows()
        if self.entropy is None:  # one draw per party (a rebuilt Flower party keeps its own)
            self.entropy = self._private_entropy()
        meta = {**self.member.report(rows, self.groups, self.entropy), **self.id_digests(rows)}
        self.local = self.member.defended
        assert self.local is not None
        digest = hashlib.sha256()
        for g in sorted(rows):
            _, X, _ = self.local.take(g)
            digest.update(np.ascontiguousarray(X).tobytes())
        self.fingerprint = fingerprint(
            run=run_identity(self.cfg), party=self.name, X=digest.hexdigest()
        )
        if self.resume is not None:  # the rounds this party could resume from
            have = self._resumable()
            meta["checkpoints"] = ",".join(map(str, have))
        sizes = ", ".join(f"{g}: {len(r)}" for g, r in rows.items())
        self.echo(f"aligned samples ({sizes}) of {len(self.ids)}")
        self._warn_few_shared(rows)
        return self.reply(msg, meta=meta)

    def _resumable(self) -> list[int]:
        """The rounds of its ``--resume`` folder written with this config and these data. Its
        own refusal where none is (a data file changed since: the coordinator's checkpoint,
        which the party setups fingerprint, was blamed, or the party's own at build)."""
        assert self.resume is not None
        source = Checkpoints(self.resume / "checkpoints", self.fingerprint)
        ours, other = source.written_by_this_run()
        if other and not ours:
            raise ConfigError(
                f"{self.name!r}'s checkpoints of rounds {other} in {source.directory} were "
                "written with another config or other data than it has now (its data file, "
                "its --data-dir, or the config's overrides changed since): resume with those "
                "of the killed run, or start the run anew"
            )
        return ours

    def _warn_few_shared(self, rows: Mapping[str, np.ndarray]) -> None:
        """Say so where under a tenth of this party's training rows are shared with the
        others (5 of 950 trained without a word): IDs that should match but do not."""
        train = [r for g, r in rows.items() if self.groups[g].split == "train"]
        n = len(self.data.split("train")[0])
        shared = len(np.unique(np.concatenate(train))) if train else 0
        if 0 < shared < 0.1 * n:
            self.echo(
                f"warning: only {shared} of this party's {n} training rows are shared with "
                "the other parties: check that their IDs match this file's (7 and '7', or "
                "'id7' and '7', differ)"
            )

    @handles("deploy:build")
    def on_build(self, msg: Message) -> Message:
        if self.local is None:
            raise ProtocolError("deploy:build before deploy:setup")
        setup = dict(msg.meta)
        resume_round = int(setup.pop("resume_round", 0) or 0)
        self.setup = setup
        _widen(self.transport, run_policy(self.cfg, self.app.policy(self.cfg, setup)))
        self.algo = self.member.build(setup)  # from its private draw, where it has one
        self.algo.transport = self.transport
        fp = self.fingerprint
        self.checkpoints = Checkpoints(self.out_dir / "checkpoints", fp)
        if resume_round > 0:
            if self.resume is None:
                raise ConfigError(
                    f"the coordinator resumes after round {resume_round} but {self.name!r} "
                    "was started without --resume (pass its run folder of the killed run)"
                )
            loaded = Checkpoints(self.resume / "checkpoints", fp).load(resume_round)
            state, self.prior_log = split_log(loaded)
            self.algo.load_state(state)
            self.checkpoints.save(resume_round, loaded)
            self._shown = resume_round
            self.echo(f"resumed from its checkpoint of round {resume_round}")
        return self.reply(msg)

    @handles("deploy:finish")
    def on_finish(self, msg: Message) -> Message:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.app.write_party_results(self.algo, self.out_dir)
        save_model_part(self.out_dir, self.cfg, self.name, str(msg.meta.get("run_id")), self.setup)
        self.write_log()
        rounds, every = msg.meta.get("rounds"), self.cfg.federation.checkpoint_every
        ckpt = self.checkpoints
        if ckpt is not None and isinstance(rounds, int) and rounds >= every and not ckpt.rounds():
            # an algorithm's author's trap: a resumed run would find no round of this party
            kind = self.app.round_message(self.role)
            self.echo(
                f"warning: {rounds} rounds ran but this party wrote no checkpoint: it answered "
                f"no {kind!r} message numbered 1 or more (the algorithm's round_message for "
                f"role {self.role!r}, sent with round=r), so the run cannot be resumed"
            )
        self.echo(f"finished; results in {self.out_dir}")
        self.finished = True
        return self.reply(msg)


class DeployCoordinator(Coordinator):
    """The coordinator process: drives the session and the algorithm's server.

    Writes its round checkpoints to ``out_dir/checkpoints`` (none if ``out_dir`` is
    None) and, with ``resume`` (the folder of a killed run), goes on after its last one.
    """

    def __init__(
        self,
        cfg: DeployConfig,
        echo: Printer,
        out_dir: Path | None = None,
        resume: Path | None = None,
    ) -> None:
        super().__init__(cfg.federation.coordinator)
        self.cfg, self.echo, self.out_dir, self.resume = cfg, echo, out_dir, resume
        self.checkpoints: Checkpoints | None = None
        self.resumed_from = 0
        self.app = get_algorithm_spec(cfg.algorithm)
        self.parties = list(cfg.federation.parties)
        self.server: Any = None
        self.setup: dict[str, Any] = {}
        self.train_seconds = 0.0
        #: rounds (or epochs, as the algorithm counts them) this run trained, resumed ones aside
        self.rounds_run = 0
        #: the message log of the sessions before (from the checkpoint resumed from)
        self.prior_log: dict[str, Any] = {}

    def log_summary(self) -> dict[str, Any]:
        """``message_log.json``: what crossed in this session, and in those before it."""
        return _all_sessions(self.transport, self.prior_log)

    def run(self) -> dict[str, Any]:
        fed = self.cfg.federation
        groups = self.app.groups(self.cfg)
        if fed.alignment == "psi":
            align_groups(self, groups, self.echo)
        t0 = time.perf_counter()
        self.echo("setting up: every party aligns its rows and reports its data's shapes")
        replies = self.broadcast(self.parties, "deploy:setup")
        infos = {p: SetupReport(p, r.meta) for p, r in replies.items()}
        self.setup, policy = agree_setup(
            self.app, self.cfg, infos, same_ids=fed.alignment == "none"
        )
        fp = fingerprint(run=run_identity(self.cfg), setup=self.setup)
        if self.out_dir is not None:
            self.checkpoints = Checkpoints(self.out_dir / "checkpoints", fp)
        state = None
        if self.resume is not None:
            source = Checkpoints(self.resume / "checkpoints", fp)
            self.resumed_from = self._resume_round(source.rounds(), infos)
            if self.resumed_from:
                state, self.prior_log = split_log(source.load(self.resumed_from))
            else:
                self.echo(f"no checkpoint in {source.directory}: starting from round 1")
        _widen(self.transport, run_policy(self.cfg, policy))
        self.echo("setting up: every party builds its model from the agreed setup")
        self.broadcast(
            self.parties, "deploy:build", meta={**self.setup, "resume_round": self.resumed_from}
        )
        self.server = self.app.build_coordinator(self.cfg, self.setup)
        self.server.transport = self.transport
        if state is not None:
            self.server.load_state(state)
            if self.checkpoints is not None:
                self.checkpoints.save(self.resumed_from, with_log(state, self.prior_log))
            self.echo(f"resuming after round {self.resumed_from}")
        self.echo(f"set up in {time.perf_counter() - t0:.1f} s; training")
        done = threading.Event()
        shown = len(self.app.progress(self.server))
        planned = self.app.planned_rounds(self.cfg, self.setup)
        t0 = time.perf_counter()
        progress = threading.Thread(
            target=self._progress, args=(done, shown, planned, t0), daemon=True
        )
        progress.start()
        try:
            self.app.run_coordinator(self.server, self._round_end)
        finally:
            self.train_seconds = time.perf_counter() - t0
            done.set()
            progress.join()
        run_id = secrets.token_hex(8)  # the model parts of this run say it (fedviews predict)
        meta: dict[str, MetaValue] = {"run_id": run_id, "rounds": self.rounds_run}
        self.broadcast(self.parties, "deploy:finish", meta=meta)
        if self.out_dir is not None:
            save_model_part(self.out_dir, self.cfg, self.name, run_id, self.setup)
        return self.results()

    def _resume_round(self, mine: list[int], infos: Mapping[str, SetupReport]) -> int:
        """The last round that the coordinator and every party have a checkpoint of."""
        have = {p: _rounds(info) for p, info in infos.items()}
        common = set(mine).intersection(*have.values())
        if common:
            return max(common)
        if mine:
            none = "none (started without --resume, or it answered no round message numbered 1+)"
            detail = ", ".join(f"{p}: {sorted(r) or none}" for p, r in have.items())
            raise ProtocolError(
                f"no round is checkpointed by every process (coordinator: {mine}; {detail}); "
                "resume every process from its folder of the same killed run"
            )
        return 0

    def _round_end(self, round: int) -> None:
        """After each round (or epoch): count it, write its checkpoint when one is due."""
        self.rounds_run += 1
        if self.checkpoints is not None and round % self.cfg.federation.checkpoint_every == 0:
            self.checkpoints.save(round, with_log(self.server.state_dict(), self.log_summary()))

    def _progress(
        self, done: threading.Event, shown: int, planned: int | None, start: float
    ) -> None:
        """Echo the algorithm's new progress lines (one per round), each round numbered
        ``k/planned`` (where the algorithm plans a number) and with the seconds since
        training started."""
        finished = False
        while not finished:
            finished = done.wait(0.5)
            lines = self.app.progress(self.server)
            elapsed = time.perf_counter() - start
            for line in lines[shown:]:
                self.echo(f"{of_planned(line, planned)}; {elapsed:.0f} s elapsed")
            shown = len(lines)

    def results(self) -> dict[str, Any]:
        if self.server is None:
            return {}
        metrics, _ = self.app.coordinator_results(self.server)
        last = self.checkpoints.latest() if self.checkpoints is not None else 0
        privacy = run_privacy(self.app, self.cfg, self.parties, self.setup)
        return {
            **metrics,
            **({"privacy": privacy} if privacy else {}),
            "train_seconds": round(self.train_seconds, 4),
            "resumed_from_round": self.resumed_from,
            "last_checkpoint_round": last,
        }


def _rounds(info: SetupReport) -> set[int]:
    """The checkpointed rounds a party reported at setup (``"3,6,9"``); a ProtocolError
    names it if that is not a list of round numbers."""
    text = info.get("checkpoints") or ""
    rounds = text.split(",") if text else []
    if not all(r.isascii() and r.isdigit() and len(r) <= 12 for r in rounds):
        raise ProtocolError(
            f"{info.party!r} reported checkpoints = {text[:80]!r} at setup, expected round "
            "numbers separated by commas",
            party=info.party,
        )
    return {int(r) for r in rounds}
