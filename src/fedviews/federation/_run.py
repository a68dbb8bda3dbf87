"""One run of an algorithm, as every member sees it: who takes part, with which params,
seed and defense (:class:`RunSpec`), the groups whose IDs are aligned together, and a
member's own data after alignment (:class:`Local`); the random streams derived from the
run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError
from fedviews.federation._defense import Defense


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

    def __post_init__(self) -> None:
        # a label owner outside the roster made another party's labels the error ("'a' is
        # not a label owner but its data holds labels"), naming no unknown one
        known = (*self.parties, self.coordinator)
        unknown = [o for o in self.owners() if o not in known]
        if unknown and self.parties:
            raise ConfigError(
                f"label owner {unknown[0]!r} is not one of the parties {list(self.parties)} "
                f"(nor the coordinator {self.coordinator!r})"
            )

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


def member_entropy(run: RunSpec, member: str, entropy: int | None = None) -> np.random.SeedSequence:
    """The random stream of ``member``'s defense: ``defense.seed`` if set, else ``entropy``
    (a deployed party's private draw), else derived from the run's seed (a simulation).

    Members are told apart by their place in the roster (the coordinator after the
    parties), not their names, so an estimator's run and a deployment of the same roster
    under other names draw the same streams."""
    d = run.defense
    if d.seed is not None:
        entropy = d.seed
    if entropy is None:
        entropy = int(run.seed or 0)
    parties = list(run.federation.parties)
    index = parties.index(member) if member in parties else len(parties)
    return np.random.SeedSequence([entropy, {"label_rr": 0x4C52}.get(d.kind, 0x4744), index])
