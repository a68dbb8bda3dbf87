"""An algorithm, defined once: its spec, and the runner that executes it in one process.

An :class:`Algorithm` declares everything about a federated algorithm that does
not depend on where it runs: its hyper-parameters (:attr:`Algorithm.Params`, a
frozen dataclass and the only declaration of them), the role of every party, the
groups of parties whose sample IDs are aligned together, the privacy policy of
*this* run (computed from the params and the setup: exact view counts, layer
names and shapes, nothing wider), how one party builds its party object from its
own local data, how the coordinator is built and driven, checkpoint state and
results. The runtime executes the same spec

* in one process (:func:`build_in_process`, used by every estimator's ``fit``),
* one process per party over gRPC, or on Flower (:mod:`fedviews.deploy`, which
  calls the same methods for the one party a process hosts),

so the protocol that tests run in-process is exactly the protocol users deploy.

The setup protocol, wherever it runs: every party aligns its IDs per
:class:`AlignGroup`, reports :meth:`Algorithm.party_info` (scalars, never data);
the coordinator merges them with :meth:`Algorithm.make_setup` and every process
builds its part from that setup.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from threadpoolctl import threadpool_limits

from fedviews._registry import Registry
from fedviews.data import PartyData, align, deal_views, read_npz, save_npz
from fedviews.errors import ConfigError, DataError, ProtocolError, require
from fedviews.federation._defense import GAUSSIAN, Defense, defend_local, privacy_ledger
from fedviews.federation._party import Coordinator, Party
from fedviews.federation._policy import PrivacyPolicy
from fedviews.federation._record import Observation, Recording
from fedviews.federation._secagg import SecureSumParty, check_secure_sum_members
from fedviews.federation._transport import InProcessTransport, Transport, federate


@dataclass(frozen=True)
class Roster:
    """Who takes part: the parties (their order is their index), the label owner(s), the coordinator."""

    parties: tuple[str, ...] = ()
    """The party names; their order is their index (seeds, strips, views)."""
    label_owner: str = ""
    """The one label owner (MMVFL, FedMV, APFed's active party); or give ``label_owners``."""
    label_owners: tuple[str, ...] = ()
    """Several label owners (Multi-VFL; the first also holds the test labels)."""
    coordinator: str = "coordinator"
    """The coordinator's name (its certificate's common name in a TLS deployment)."""

    def owners(self) -> tuple[str, ...]:
        """The label owners, in order."""
        return self.label_owners or ((self.label_owner,) if self.label_owner else ())


@dataclass(frozen=True)
class RunSpec:
    """One run of an algorithm: which, with which params, who takes part, the seed, and
    its :class:`~fedviews.federation.Defense` (default: none)."""

    algorithm: str
    """The registered algorithm (``mmvfl``, ``vfedmv``, ``hfedmv``, ``sfedmv``, ``multivfl``,
    ``apfed``, ``splitnn`` or one of your own).
    """
    params: Any = None
    """The algorithm's ``Params`` (the ``[params]`` table)."""
    federation: Roster = field(default_factory=Roster)
    seed: int | None = 0
    """The run's seed: every party's random streams derive from it."""
    defense: Defense = field(default_factory=Defense)
    """The run's defense (the ``[defense]`` table)."""


def estimator_params(Params: type, est: Any, *, skip: Sequence[str] = (), **fixed: Any) -> Any:
    """The ``Params`` of an estimator: its attributes of the same names (a list becomes the
    tuple a frozen dataclass holds), ``fixed`` values for names it lacks, the defaults for
    ``skip`` (e.g. deployment-only fields). The estimator and the deployment thus read the
    one declaration of the hyper-parameters."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(Params):
        if f.name in fixed:
            values[f.name] = fixed[f.name]
        elif f.name not in skip:
            v = getattr(est, f.name)
            values[f.name] = tuple(v) if isinstance(v, (list, tuple, np.ndarray)) else v
    return Params(**values)


def spawn_streams(seed: int | None, n: int) -> list[np.random.SeedSequence]:
    """The ``n`` independent random streams of a run (``SeedSequence(seed).spawn(n)``).

    Every algorithm draws its randomness from these, so a party built in its own
    process draws exactly what it draws in an in-process run of the same seed.
    """
    return np.random.SeedSequence(seed).spawn(n)


@dataclass(frozen=True)
class AlignGroup:
    """Parties whose sample IDs are aligned together (one PSI), on one of their splits.

    ``split`` names the ID list each member uses: ``"train"`` (its main arrays)
    or ``"test"`` (its held-out arrays, see :class:`~fedviews.data.PartyData`).
    """

    name: str
    parties: tuple[str, ...]
    split: str = "train"


@dataclass(frozen=True)
class Local:
    """One party's own data after alignment: its data and its rows in every group it is in.

    ``rows[group]`` are positions in the group's split of :attr:`data`, in
    ascending ID order (the same samples in the same order at every member).
    """

    data: PartyData
    rows: Mapping[str, np.ndarray]
    groups: Mapping[str, AlignGroup]

    def _rows(self, group: str) -> np.ndarray:
        if group not in self.rows:
            raise DataError(f"this party is not in the alignment group {group!r}")
        return self.rows[group]

    def take(self, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(ids, X, y)`` of this party's aligned samples of ``group``."""
        r = self._rows(group)
        ids, X, y = self.data.split(self.groups[group].split)
        return ids[r], X[r], None if y is None else y[r]

    def sequences(self, group: str) -> list[list[np.ndarray]]:
        """``views[k][i]``: the aligned samples of ``group`` as sequences, padding removed."""
        return self.data.sequences(self.groups[group].split, self._rows(group))


class Algorithm:
    """The one definition of a federated algorithm (see the module docstring).

    Subclasses set :attr:`name` and :attr:`Params` and implement :meth:`policy`,
    :meth:`build_party` and :meth:`build_coordinator`; the other methods have
    defaults that fit a linear algorithm with one label owner and one alignment
    group of all parties, and that ask the built objects themselves
    (:meth:`Coordinator.run`, :meth:`~Coordinator.progress`,
    :meth:`~Coordinator.summary`, a party's ``results()``). The coordinator's role
    is always ``"coordinator"``.
    """

    name: ClassVar[str]
    Params: ClassVar[type]
    #: whether parties send each other messages (per-batch split learning), rather than
    #: only talking to the coordinator in coarse rounds
    peer_to_peer: ClassVar[bool] = False
    #: BLAS threads of a process that runs a party or the coordinator (``None``: no
    #: limit). One by default: the algorithms do many small factorisations, where
    #: multi-threaded OpenBLAS was measured up to 100x slower on a busy 2-core machine.
    blas_threads: ClassVar[int | None] = 1
    #: the :class:`~fedviews.federation.Defense` kinds that apply to this algorithm
    defenses: ClassVar[frozenset[str]] = frozenset({"none", "label_rr"})
    #: who adds up a secure sum, in words (the members are :meth:`secure_sum_members`)
    secure_sum_of: ClassVar[str] = "parties"

    def dp_releases(self, run: RunSpec) -> int:
        """How many releases of a Gaussian ``grad_dp`` defense each sample's label enters in
        this run (its privacy ledger composes that many); only for algorithms that take it."""
        return 1

    def compute_limits(self) -> AbstractContextManager[Any]:
        """The thread limits under which a process runs its part of this algorithm."""
        if self.blas_threads is None:
            return nullcontext()
        return threadpool_limits(limits=self.blas_threads, user_api="blas")

    # -- who is who ------------------------------------------------------------
    def role(self, run: RunSpec, party: str) -> str:
        return "party"

    def roles(self, run: RunSpec) -> dict[str, str]:
        """``{party: role}`` of every party of the run."""
        return {p: self.role(run, p) for p in run.federation.parties}

    def check_federation(self, fed: Roster) -> None:
        """Raise :class:`ConfigError` when the roster does not fit the algorithm."""
        if len(fed.owners()) != 1:
            raise ConfigError(f"{self.name} has one label owner: set federation.label_owner")

    def check_params(self, params: Any, fed: Roster) -> None:
        """Raise :class:`ConfigError` when ``params`` do not fit this roster (e.g. per-party lists)."""
        if not isinstance(params, self.Params):
            raise ConfigError(
                f"{self.name} takes {self.Params.__name__} params, got {type(params).__name__}"
            )
        validate = getattr(params, "validate", None)
        if callable(validate):
            validate()

    def check_defense(self, defense: Defense, fed: Roster | None = None) -> None:
        """Raise :class:`ConfigError` when ``defense`` does not apply to this algorithm (or, with
        ``fed``, to this roster: a secure sum needs two members)."""
        defense.validate()
        if defense.kind not in self.defenses:
            raise ConfigError(
                f"defense {defense.kind!r} does not apply to {self.name}; it takes "
                f"{sorted(self.defenses)}"
            )
        if fed is not None and defense.kind == "secagg":
            check_secure_sum_members(self.secure_sum_members(fed), self.secure_sum_of)
        if defense.kind in GAUSSIAN:  # its noise and ledger need the accountant: say so now
            require("dp_accounting", "privacy")

    def groups(self, run: RunSpec) -> list[AlignGroup]:
        """Alignment groups (one PSI each); default: all parties, training IDs."""
        return [AlignGroup("train", tuple(run.federation.parties))]

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        """Raise :class:`DataError` when ``party``'s data cannot play its part."""
        owners = run.federation.owners()
        if party in owners and data.y is None:
            raise DataError(f"{party!r} is a label owner but its data holds no labels (y)")
        if party not in owners and data.y is not None:
            raise DataError(
                f"{party!r} is not a label owner but its data holds labels (y); "
                "remove them: labels must stay with their owner"
            )

    # -- setup -----------------------------------------------------------------
    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        """Scalars a party reports to the coordinator after alignment (no data)."""
        _, X, y = local.take(next(iter(local.rows)))
        info: dict[str, Any] = {"n_features": int(np.prod(X.shape[1:]))}
        if y is not None:
            info["n_classes"] = int(len(np.unique(y)))
        return info

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """What every process needs to build its part (sent to all of them)."""
        first = self.groups(run)[0].name
        name = run.federation.owners()[0]
        owner = infos[name]
        n_samples = int(owner[f"n/{first}"])
        counts = {
            k: v
            for k, v in owner.items()
            if k.startswith("n_") and k not in ("n_samples", "n_features")
        }
        # what the label owner reports sizes every party's allocations: it must be sane
        for k, v in counts.items():
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ProtocolError(f"label owner {name!r} reported {k}={v!r} (not a count)")
        if "n_classes" in counts and not 1 <= counts["n_classes"] <= max(n_samples, 1):
            raise ProtocolError(
                f"label owner {name!r} reported {counts['n_classes']} classes for "
                f"{n_samples} samples"
            )
        return {"n_samples": n_samples, **counts}

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        """The privacy policy of this run: which kinds and arrays may go from role to role."""
        raise NotImplementedError  # pragma: no cover - abstract

    # -- building --------------------------------------------------------------
    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:  # pragma: no cover - abstract
        raise NotImplementedError

    def secure_sum_members(self, fed: Roster) -> tuple[str, ...]:
        """Who adds up a secure sum under ``defense.kind = "secagg"`` (default: every party)."""
        return tuple(fed.parties)

    def make_party(self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]) -> Party:
        """:meth:`build_party`, told who the members of its secure sums are (a party refuses a
        key exchange that lists others: a coordinator that left out members could read what
        the remaining few mask)."""
        built = self.build_party(run, party, local, setup)
        if isinstance(built, SecureSumParty) and run.defense.kind == "secagg":
            built.secure_members = frozenset(self.secure_sum_members(run.federation))
        return built

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:  # pragma: no cover - abstract
        """The coordinator; ``local``: its own data where it holds some (e.g. the labels,
        when the roster names the coordinator as label owner: V-FedMV's server holds ``Y``)."""
        raise NotImplementedError

    # -- running ---------------------------------------------------------------
    def round_message(self, role: str) -> str:
        """A party of ``role`` checkpoints when it answers this kind of message (round r)."""
        return "update"

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        """Drive the protocol (default: ``coord.run(on_round_end)``)."""
        runner: Any = coord
        return runner.run(on_round_end)

    def progress(self, coord: Coordinator) -> list[str]:
        """One line per finished round (default: ``coord.progress()``)."""
        return coord.progress()

    # -- results ---------------------------------------------------------------
    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        """Arrays a party keeps at the end (default: ``party.results()`` where it has one)."""
        results = getattr(party, "results", None)
        return dict(results()) if callable(results) else {}

    def write_party_results(self, party: Party, out_dir: Path) -> None:
        """Write a party's results into its own folder (default: ``result.npz``)."""
        arrays: dict[str, Any] = dict(self.party_results(party))
        np.savez(out_dir / "result.npz", **arrays)

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics for results.json, arrays for result.npz)`` (default: ``coord.summary()``)."""
        return coord.summary()

    # -- leakage ---------------------------------------------------------------
    def audit_rounds(self, run: RunSpec) -> Collection[int] | None:
        """The rounds whose messages :meth:`observations` reads (``None``: all): an attacker's
        recording keeps only those, so an audit of a long run stays small."""
        return None

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """What ``recording`` (all that one party or the coordinator received) holds about
        other parties' labels or features, per sample, for the attacks of
        :mod:`fedviews.privacy.attacks`. Only the recording and public facts of the run
        (params, setup, roster) may be used. Default: nothing per-sample."""
        return []

    # -- demo data -------------------------------------------------------------
    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data dealt from a built-in dataset, for ``fedviews launch`` and
        ``fedviews split-data`` (``cfg.data``: the ``[data]`` table of a deployment config).

        Default: one view per party, in order (``data.views``, default the party
        names), labels with the first label owner (see :func:`fedviews.data.deal_views`).
        """
        fed, split = cfg.federation, cfg.data
        views = tuple(split.views or fed.parties)
        if len(views) != len(fed.parties):
            raise ConfigError(f"data.views lists {len(views)} views for {len(fed.parties)} parties")
        owner = views[fed.parties.index(fed.owners()[0])]
        dealt = deal_views(
            split.dataset,
            views=views,
            label_owner=owner,
            n_per_class=split.n_per_class,
            overlap=split.overlap,
            n_test=split.n_test,
            seed=cfg.seed or 0,
        )
        return dict(zip(fed.parties, dealt.values(), strict=True))


#: the algorithm specs by name (the built-in ones register on first lookup)
ALGORITHMS: Registry[Algorithm] = Registry(
    "algorithm",
    (
        "fedviews.linear",
        "fedviews.deep.sfedmv.spec",
        "fedviews.deep.multivfl.spec",
        "fedviews.deep.apfed.spec",
        "fedviews.deep.splitnn.spec",
    ),
)


def register_algorithm_spec(spec: Algorithm) -> Algorithm:
    """Make ``spec`` runnable (and deployable) under ``spec.name``; a second one is an error."""
    return ALGORITHMS.add(spec.name, spec)


def get_algorithm_spec(name: str) -> Algorithm:
    """The spec registered under ``name`` (a :class:`ConfigError` naming the closest otherwise)."""
    return ALGORITHMS.get(name)


def setup_info(algo: Algorithm, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
    """What a party reports at setup: its aligned sample count per group, then its own info."""
    return {
        **{f"n/{g}": len(r) for g, r in local.rows.items()},
        **algo.party_info(run, party, local),
    }


class SetupReport(Mapping[str, Any]):
    """What ``party`` reported at setup (:func:`setup_info`), as the coordinator reads it:
    checked once, here, before anything uses it.

    Every value is text where the algorithms report text (:attr:`TEXT`) and a whole
    number >= 0 everywhere else (no bool, no float: a NaN, an infinity or 10.5 samples
    are refused); a key that is read but was not reported is refused too. Either way a
    :class:`ProtocolError` names ``party``.
    """

    #: the keys whose values are text (a view layout, a list of checkpointed rounds)
    TEXT = ("view_dims", "checkpoints")

    def __init__(self, party: str, info: Mapping[str, Any]) -> None:
        self.party = party
        for k, v in info.items():
            text = k in self.TEXT
            if not (isinstance(v, str) if text else type(v) is int and v >= 0):
                raise ProtocolError(
                    f"{party!r} reported {k} = {v!r} at setup, expected "
                    + ("text" if text else "a whole number >= 0"),
                    party=party,
                )
        self._info = dict(info)

    def __getitem__(self, key: str) -> Any:
        if key not in self._info:
            raise ProtocolError(f"{self.party!r} reported no {key!r} at setup", party=self.party)
        return self._info[key]

    def __contains__(self, key: object) -> bool:
        return key in self._info

    def get(self, key: str, default: Any = None) -> Any:
        return self._info.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._info)

    def __len__(self) -> int:
        return len(self._info)


def check_group_sizes(
    groups: Sequence[AlignGroup], infos: Mapping[str, Mapping[str, Any]], hint: str = ""
) -> None:
    """Every member of a group must hold the same, non-zero number of aligned samples."""
    for g in groups:
        sizes = {p: int(infos[p][f"n/{g.name}"]) for p in g.parties}
        if len(set(sizes.values())) != 1:
            raise DataError(
                f"the parties of alignment group {g.name!r} hold different numbers of "
                f"aligned samples: {sizes}{hint}"
            )
        if not next(iter(sizes.values())):
            raise DataError(f"the parties of alignment group {g.name!r} share no sample ID")


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

    def save_state(self, path: Path) -> None:
        """Write every party's and the coordinator's ``state_dict`` to one ``.npz`` (atomically).

        Call it at a round boundary; :meth:`load_state` on a freshly built run of
        the same data and parameters then continues with the next round, as a
        deployment resumes from its per-process checkpoints. The file also holds
        :meth:`identity`, which :meth:`load_state` checks.
        """
        arrays = {
            f"{name}/{key}": np.asarray(value)
            for name, member in self._members()
            for key, value in member.state_dict().items()
        }
        arrays[_IDENTITY] = np.array(json.dumps(self.identity(), sort_keys=True))
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
        try:
            state = read_npz(path)
            saved = json.loads(str(state.pop(_IDENTITY)))
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


#: the key of :meth:`InProcessRun.identity` in a checkpoint (no member's key: those have a ``/``)
_IDENTITY = "run_identity"


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, np.generic):
        return obj.item()
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
    parties = list(run.federation.parties)
    missing = set(parties) - set(datas)
    if missing:
        raise DataError(f"no data for the parties {sorted(missing)}")
    coordinator = run.federation.coordinator
    members = parties + ([coordinator] if coordinator in datas else [])
    groups = algo.groups(run)
    rows: dict[str, dict[str, np.ndarray]] = {p: {} for p in members}
    for g in groups:
        pos = align(*[datas[p].split(g.split)[0] for p in g.parties])
        for p, at in zip(g.parties, pos, strict=True):
            rows[p][g.name] = at
    by_name = {g.name: g for g in groups}
    locals_ = {}
    for p in members:
        algo.check_data(run, p, datas[p])
        locals_[p] = Local(datas[p], rows[p], {g: by_name[g] for g in rows[p]})
    # what each member builds from: its own data under the run's defense (e.g. its
    # randomized labels); ``locals_`` keeps the true data (the experimenter's answer key)
    defended = {p: defend_local(run, p, loc) for p, loc in locals_.items()}
    infos = {p: setup_info(algo, run, p, loc) for p, loc in defended.items()}
    check_group_sizes(groups, infos)
    setup = algo.make_setup(run, infos)
    built = {p: algo.make_party(run, p, defended[p], setup) for p in parties}
    coord = algo.build_coordinator(run, setup, defended.get(coordinator))
    policy = algo.policy(run, setup)
    t = transport(policy) if transport is not None else None
    if t is None:
        t = InProcessTransport(policy, keep_entries=keep_entries)
    federate([coord, *built.values()], policy, t)
    holders = [p for p, loc in locals_.items() if loc.data.y is not None]
    ledger = privacy_ledger(run, holders, int(setup.get("n_classes", 0)), algo.dp_releases(run))
    return InProcessRun(algo, run, setup, coord, built, t, locals_, ledger)
