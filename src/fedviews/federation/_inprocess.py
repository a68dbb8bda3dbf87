"""Every member of a run in one process: :func:`build_in_process` and what it builds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import PartyData, read_npz, save_npz
from fedviews.errors import ConfigError, DataError
from fedviews.federation._algorithm import Algorithm, get_algorithm_spec
from fedviews.federation._log import merge_summaries
from fedviews.federation._party import Coordinator, Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._record import Recording
from fedviews.federation._run import Local, RunSpec
from fedviews.federation._setup import run_privacy, set_up_members
from fedviews.federation._transport import InProcessTransport, Transport, federate


@dataclass
class InProcessRun:
    """Every party of a run and its coordinator in one process, wired to one transport."""

    algorithm: Algorithm
    run: RunSpec
    setup: dict[str, Any]
    coordinator: Coordinator
    parties: dict[str, Party]
    transport: Transport
    #: every member's own data after alignment (the experimenter's, e.g. to score an attack)
    locals: dict[str, Local] = field(default_factory=dict)
    #: the privacy the run's defense spends, per party (:func:`privacy_ledger`)
    privacy: dict[str, Any] = field(default_factory=dict)
    #: the message log summary of the sessions before this one, and the seconds they ran
    #: (from the checkpoint :meth:`load_state` read: a resumed run counts every session)
    before: dict[str, Any] = field(default_factory=dict)

    def log_summary(self) -> dict[str, Any]:
        """What crossed in this run: this session's log with the sessions' before it."""
        now = self.transport.log.summary()
        return merge_summaries(self.before["log"], now) if self.before.get("log") else now

    def seconds(self, now: float) -> float:
        """The seconds of every session, with ``now`` this session's."""
        return float(self.before.get("seconds", 0.0)) + now

    def __call__(self, on_round_end: Callable[[int], None] | None = None) -> Any:
        """Run the protocol to the end; returns what the coordinator's run returns."""
        return self.algorithm.run_coordinator(self.coordinator, on_round_end)

    def _members(self) -> list[tuple[str, Party]]:
        return [*self.parties.items(), (self.coordinator.name, self.coordinator)]

    def record(
        self,
        attackers: Sequence[str],
        *,
        kinds: Collection[str] | None = None,
        rounds: Collection[int] | None = None,
    ) -> dict[str, Recording]:
        """Start recording what each of ``attackers`` (parties or the coordinator) receives."""
        members = dict(self._members())
        out = {}
        for name in attackers:
            if name not in members:
                raise ConfigError(
                    f"{name!r} takes no part in this {self.run.algorithm} run; "
                    f"its members are {sorted(members)}"
                )
            member = members[name]
            rec = Recording.of(name, member.role, self.run.algorithm, kinds=kinds, rounds=rounds)
            out[name] = member.record(rec)
        return out

    def identity(self) -> dict[str, str]:
        """What a checkpoint of this run belongs to, part by part (canonical JSON): the
        algorithm, seed, roster, defense, every parameter but ``device`` (a killed run may
        go on on another device) and a digest of every member's data after alignment."""
        r = self.run
        parts: dict[str, Any] = {
            "algorithm": r.algorithm,
            "seed": r.seed,
            "roster": r.federation,
            "defense": r.defense,
        }
        if dataclasses.is_dataclass(r.params) and not isinstance(r.params, type):
            for f in dataclasses.fields(r.params):
                if f.name != "device":
                    parts[f"params.{f.name}"] = getattr(r.params, f.name)
        else:
            parts["params"] = r.params
        out = {k: json.dumps(v, sort_keys=True, default=_plain) for k, v in parts.items()}
        for name, local in sorted(self.locals.items()):
            out[f"the data of {name}"] = _digest(local)
        return out

    def save_state(self, path: Path, seconds: float = 0.0) -> None:
        """Write every party's and the coordinator's ``state_dict`` to one ``.npz`` (atomically).

        Call it at a round boundary; :meth:`load_state` on a freshly built run of
        the same data and parameters then continues with the next round, as a
        deployment resumes from its per-process checkpoints. The file also holds
        :meth:`identity`, which :meth:`load_state` checks, and the log summary and seconds
        (``seconds``: this session's so far) of every session up to this round.
        """
        arrays = {
            f"{name}/{key}": np.asarray(value)
            for name, member in self._members()
            for key, value in member.state_dict().items()
        }
        arrays[_IDENTITY] = np.array(json.dumps(self.identity(), sort_keys=True))
        sessions = {"log": self.log_summary(), "seconds": self.seconds(seconds)}
        arrays[_SESSIONS] = np.array(json.dumps(sessions))
        save_npz(Path(path), **arrays)

    def load_state(self, path: Path) -> None:
        """Continue from :meth:`save_state` (each member checks what it is given).

        Raises
        ------
        DataError
            ``path`` is not a readable checkpoint of a run, or one of other data.
        ConfigError
            ``path`` is the checkpoint of a run with other parameters, seed, roster or defense.
        """
        path = Path(path)
        if not path.is_file():
            raise DataError(f"no checkpoint {path}: give the path save_state wrote")
        try:
            state = read_npz(path)
            saved = json.loads(str(state.pop(_IDENTITY)))
            before = json.loads(str(state.pop(_SESSIONS, "{}")))  # (none in older files)
            if not isinstance(saved, dict):
                raise ValueError(f"its run identity is {type(saved).__name__}, not a mapping")
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(
                f"cannot read the checkpoint {path} ({exc}); delete it to start afresh"
            ) from None
        except KeyError:
            raise DataError(
                f"{path} is not a checkpoint of this run (it holds no run identity); "
                "delete it or give another checkpoint path"
            ) from None
        mine = self.identity()
        differ = sorted(k for k in saved.keys() | mine.keys() if saved.get(k) != mine.get(k))
        if differ:
            shown = [
                k if k.startswith("the data") else f"{k} ({saved.get(k)} there, {mine.get(k)} here)"
                for k in differ
            ]
            kind = DataError if all(k.startswith("the data") for k in differ) else ConfigError
            raise kind(
                f"{path} is the checkpoint of another run: {'; '.join(shown)} differ; continue "
                "it with the same data and parameters, or give a new checkpoint path"
            )
        for name, member in self._members():
            prefix = f"{name}/"
            member.load_state(
                {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
            )
        self.before = before if isinstance(before, dict) else {}


#: the key of :meth:`InProcessRun.identity` in a checkpoint (no member's key: those have a ``/``)
_IDENTITY = "run_identity"
#: the key of the sessions' log summary and seconds in a checkpoint
_SESSIONS = "run_sessions"


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if callable(obj):  # a user's network factory: by name, the same in every process
        return f"{getattr(obj, '__module__', '')}:{getattr(obj, '__qualname__', '')}"
    return str(obj)


def _digest(local: Local) -> str:
    """A hash of a member's data (every array of its :class:`PartyData`) and aligned rows."""
    h = hashlib.sha256()
    named = [(f.name, getattr(local.data, f.name)) for f in dataclasses.fields(local.data)]
    named += [(f"rows/{g}", r) for g, r in sorted(local.rows.items())]
    for name, value in named:
        h.update(name.encode())
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype.str}{value.shape}".encode())
            a = np.ascontiguousarray(value)
            h.update(repr(a.tolist()).encode() if a.dtype.kind == "O" else a.tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()[:16]


def build_in_process(
    run: RunSpec,
    datas: Mapping[str, PartyData],
    *,
    transport: Callable[[PrivacyPolicy], Transport] | None = None,
    keep_entries: bool = True,
) -> InProcessRun:
    """Build a run in one process: every party from its own data, exactly as its process would.

    ``datas[party]`` is each party's data; ``datas[coordinator]``, if given, the
    coordinator's own (only algorithms whose coordinator may hold data use it).

    Alignment is done in the clear (same rows, same order as the PSI), each party
    builds its party object with :meth:`Algorithm.build_party` from its own
    :class:`Local` only, and all of them are federated by ``transport(policy)``
    (default: an :class:`InProcessTransport`; every message is still encoded,
    policy-checked at sender and receiver, and logged).
    """
    algo = get_algorithm_spec(run.algorithm)
    algo.check_federation(run.federation)
    algo.check_params(run.params, run.federation)
    algo.check_defense(run.defense, run.federation)
    done = set_up_members(algo, run, datas)
    coordinator = run.federation.coordinator
    own = done.members.get(coordinator)
    coord = algo.build_coordinator(run, done.setup, None if own is None else own.defended)
    t = transport(done.policy) if transport is not None else None
    if t is None:
        t = InProcessTransport(done.policy, keep_entries=keep_entries)
    federate([coord, *done.parties.values()], done.policy, t)
    locals_ = {p: m.local for p, m in done.members.items() if m.local is not None}
    privacy = run_privacy(algo, run, done.members, done.setup)
    return InProcessRun(algo, run, done.setup, coord, done.parties, t, locals_, privacy)
