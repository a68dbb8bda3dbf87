"""Deploy apps: how one process builds *its own* party (or the coordinator) of an algorithm.

An app knows an algorithm's roles, privacy policy, alignment groups and
hyper-parameters, and builds exactly one party object from that party's aligned
data, with the same random streams as the in-process estimator, so that a
deployed run gives the in-process result. The session (:mod:`._session`) is the
same for every algorithm; an app overrides only what differs from the defaults
of :class:`DeployApp` (one label owner, one alignment group of all parties,
2-D features).

Apps of the built-in algorithms live in ``_app_<name>.py`` and are imported on
first use, so that the command line starts without torch.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedviews.errors import ConfigError, DataError
from fedviews.federation import Coordinator, Party, PrivacyPolicy

if TYPE_CHECKING:
    from fedviews.deploy._config import DeployConfig, FederationSpec
    from fedviews.deploy._data import PartyData

__all__ = ["AlignGroup", "DeployApp", "Local", "get_app", "register_app", "seeds"]

# algorithm name -> module that registers its app (imported on first use)
_BUILTIN = {
    "apfed": "fedviews.deploy._app_apfed",
    "mmvfl": "fedviews.deploy._app_mmvfl",
    "multivfl": "fedviews.deploy._app_multivfl",
    "vfedmv": "fedviews.deploy._app_fedmv",
    "hfedmv": "fedviews.deploy._app_fedmv",
    "sfedmv": "fedviews.deploy._app_sfedmv",
}


@dataclass(frozen=True)
class AlignGroup:
    """Parties whose sample IDs are aligned together (one PSI), on one of their splits.

    ``split`` names the ID list each member uses: ``"train"`` (its main arrays)
    or ``"test"`` (its held-out arrays, see :class:`~fedviews.deploy.PartyData`).
    """

    name: str
    parties: tuple[str, ...]
    split: str = "train"


@dataclass(frozen=True)
class Local:
    """One party's own data after alignment: its file and its rows in every group it is in.

    ``rows[group]`` are positions in the group's split of :attr:`data`, in
    ascending ID order (the same samples in the same order at every member).
    """

    data: PartyData
    rows: Mapping[str, np.ndarray]
    groups: Mapping[str, AlignGroup]

    def take(self, group: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(ids, X, y)`` of this party's aligned samples of ``group``."""
        if group not in self.rows:
            raise DataError(f"this party is not in the alignment group {group!r}")
        ids, X, y = self.data.split(self.groups[group].split)
        r = self.rows[group]
        return ids[r], X[r], None if y is None else y[r]


def seeds(cfg: DeployConfig) -> list[np.random.SeedSequence]:
    """The streams of the in-process linear estimators: ``ss[0]`` server, ``ss[1 + k]`` party k."""
    return np.random.SeedSequence(cfg.seed).spawn(len(cfg.federation.parties) + 1)


class DeployApp:
    """Base of the deploy apps: the defaults fit a linear algorithm with one label owner.

    Subclasses set :attr:`name`, :attr:`params_cls` (a frozen dataclass of the
    hyper-parameters, the ``[params]`` table of the config) and implement
    :meth:`policy`, :meth:`build_party`, :meth:`build_coordinator` and
    :meth:`run_coordinator`. Roles: a party's role is :meth:`role`; the
    coordinator's role is always ``"coordinator"``.
    """

    name: ClassVar[str]
    params_cls: ClassVar[type]

    @property
    def policy(self) -> PrivacyPolicy:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- who is who ------------------------------------------------------------
    def role(self, cfg: DeployConfig, party: str) -> str:
        return "party"

    def check_federation(self, fed: FederationSpec) -> None:
        """Raise :class:`ConfigError` when the ``[federation]`` table does not fit the algorithm."""
        if len(fed.owners()) != 1:
            raise ConfigError(f"{self.name} has one label owner: set federation.label_owner")

    def groups(self, cfg: DeployConfig) -> list[AlignGroup]:
        """Alignment groups (one PSI each); default: all parties, training IDs."""
        return [AlignGroup("train", tuple(cfg.federation.parties))]

    def check_data(self, cfg: DeployConfig, party: str, data: PartyData) -> None:
        """Raise :class:`DataError` when ``party``'s file cannot play its part."""
        owners = cfg.federation.owners()
        if party in owners and data.y is None:
            raise DataError(f"{party!r} is a label owner but its data file has no labels (y)")
        if party not in owners and data.y is not None:
            raise DataError(
                f"{party!r} is not a label owner but its data file holds labels (y); "
                "remove them: labels must stay with their owner"
            )

    # -- setup -----------------------------------------------------------------
    def party_info(self, cfg: DeployConfig, party: str, local: Local) -> dict[str, Any]:
        """Scalars a party reports to the coordinator after alignment (no data)."""
        _, X, y = local.take(next(iter(local.rows)))
        info: dict[str, Any] = {"n_features": int(np.prod(X.shape[1:]))}
        if y is not None:
            info.update(self.label_info(y))
        return info

    def label_info(self, y: np.ndarray) -> dict[str, Any]:
        return {"n_classes": int(len(np.unique(y)))}

    def make_setup(
        self, cfg: DeployConfig, infos: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """What every process needs to build its part (sent to all of them)."""
        first = self.groups(cfg)[0].name
        owner = infos[cfg.federation.owners()[0]]
        return {
            "n_samples": int(owner[f"n/{first}"]),
            **{
                k: v
                for k, v in owner.items()
                if k.startswith("n_") and k not in ("n_samples", "n_features")
            },
        }

    def write_data(self, cfg: DeployConfig, out_dir: Path) -> dict[str, Path]:
        """One data file per party from the config's ``[data]`` (``fedviews launch``)."""
        from fedviews.deploy._data import split_dataset

        fed = cfg.federation
        return split_dataset(
            cfg.data.dataset,
            out_dir,
            views=cfg.data.views or fed.parties,
            label_owner=fed.owners()[0],
            n_per_class=cfg.data.n_per_class,
            overlap=cfg.data.overlap,
            fmt=cfg.data.format,
            seed=cfg.seed,
        )

    # -- building --------------------------------------------------------------
    def build_party(
        self, cfg: DeployConfig, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:  # pragma: no cover - abstract
        raise NotImplementedError

    def build_coordinator(
        self, cfg: DeployConfig, setup: Mapping[str, Any]
    ) -> Coordinator:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- running ---------------------------------------------------------------
    def round_message(self, role: str) -> str:
        """A party of ``role`` checkpoints when it answers this kind of message (round r)."""
        return "update"

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Any
    ) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def progress(self, coord: Coordinator) -> list[str]:
        """One line per finished round (the coordinator prints the new ones)."""
        return []

    # -- state and results -------------------------------------------------------
    def party_state(self, party: Party) -> dict[str, np.ndarray]:
        return party.state_dict()  # type: ignore[attr-defined]

    def load_party_state(self, party: Party, state: dict[str, np.ndarray]) -> None:
        party.load_state(state)  # type: ignore[attr-defined]

    def coordinator_state(self, coord: Coordinator) -> dict[str, np.ndarray]:
        return coord.state_dict()  # type: ignore[attr-defined]

    def load_coordinator_state(self, coord: Coordinator, state: dict[str, np.ndarray]) -> None:
        coord.load_state(state)  # type: ignore[attr-defined]

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        """Arrays a party writes to its own folder at the end (they never leave it)."""
        return {}

    def write_party_results(self, party: Party, out_dir: Path) -> None:
        """Write a party's results into its own folder (default: ``result.npz``)."""
        arrays: dict[str, Any] = dict(self.party_results(party))
        np.savez(out_dir / "result.npz", **arrays)

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(metrics for results.json, arrays for result.npz)`` of the coordinator."""
        return {}, {}


_APPS: dict[str, DeployApp] = {}


def register_app(app: DeployApp) -> DeployApp:
    """Make ``app`` deployable under ``app.name`` (third-party algorithms too)."""
    _APPS[app.name] = app
    return app


def get_app(name: str) -> DeployApp:
    if name not in _APPS and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _APPS:
        known = sorted(set(_APPS) | set(_BUILTIN))
        match = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {match[0]!r}?" if match else f"deployable: {known}"
        raise ConfigError(f"algorithm {name!r} cannot be deployed; {hint}")
    return _APPS[name]


def standardized(X: np.ndarray) -> np.ndarray:
    """Columns scaled with this party's own mean and standard deviation (2-D features)."""
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return (X - X.mean(axis=0)) / sd
