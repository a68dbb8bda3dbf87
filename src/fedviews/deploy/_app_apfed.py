"""APFed deployed: the active party, the passive parties, and a driver as the coordinator.

Parties: ``federation.parties`` lists the ``m`` clients in the order of their
image strips (top to bottom); ``federation.label_owner`` is the **active**
party (role ``"active"``: its own strip, all labels, ``f_A`` and ``g_T``); every
other party is **passive** (role ``"passive"``: its own strip and its decoder
(APFed-R) or encoder (APFed-C)). So the ``m-i`` setting is ``m = len(parties)``
and ``i`` = the active party's position (1-based).

The coordinator process holds no data and no model: it is a small *driver*
that asks the active party for one epoch at a time (``apfed.train``, round =
epoch), collects the scalars it reports (mean ``L_A``, test accuracy), tells the
passive parties the epoch is over (``apfed.epoch_done``, their checkpoint point)
and checkpoints at epoch boundaries. Within an epoch the active party talks to
the passive parties exactly as in-process (``h_A`` out, ``λ_p ∂L_p/∂h_A`` back),
relayed by the coordinator's hub; so the coordinator's message log shows every
array that crossed, and the policy lets only ``h_A`` and ``grad_h_A`` cross.

Alignment: one PSI of all parties on the training IDs. The test split is the
active party's alone (its strip of the test images and their labels): it
evaluates without any passive party after every epoch (``params.evaluate``), as
APFed infers (Eq. 11). Its ``result.npz`` holds its complete model (``net/*``,
``classes``, ``model_json``); :func:`export_apfed_model` turns it into an export
folder that ``fedviews apfed predict`` loads.

Data files (``fedviews launch`` writes them from ``[data]``): every party holds
``ids`` and ``X`` ``(n, h, W)`` (or ``(n, C, h, W)``), its strip of every image;
the active party also ``y`` and ``ids_test``, ``X_test``, ``y_test``. ``uint8``
pixels are scaled to ``[0, 1]`` (``X / 255``), other values are used as given.

Random streams: the same as :class:`fedviews.deep.APFed` with
``random_state = seed``: a launched run equals ``APFed(m=len(parties), i=...,
random_state=seed).fit(images, y)`` on the aligned images (rows in ascending ID
order, strips stacked top to bottom).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError, ProtocolError
from fedviews.federation import (
    Algorithm,
    Coordinator,
    Local,
    Party,
    PrivacyPolicy,
    Roster,
    RunSpec,
    register_algorithm_spec,
)

if TYPE_CHECKING:
    from fedviews.deep.apfed import ActiveClient

__all__ = ["APFedDeployParams", "APFedDriver", "export_apfed_model", "apfed_demo_data"]

#: the arrays the paper lets cross (Algorithm 1, steps 4 and 7); the coordinator sends none
_POLICY_RULES = {("active", "passive"): ["h_A"], ("passive", "active"): ["grad_h_A"]}


@dataclass(frozen=True)
class APFedDeployParams:
    """Hyper-parameters of :class:`fedviews.deep.APFed` (same names and defaults).

    ``m`` and ``i`` come from ``federation.parties`` and ``federation.label_owner``.
    ``lams``: one ``λ_p`` per passive party (in the order of ``federation.parties``);
    empty: ``lam`` for all. ``pad``: how ``fedviews launch`` cuts images whose
    height is not a multiple of ``m`` (zero rows at the bottom); the parties'
    files must then hold strips of equal size. ``evaluate``: the active party
    reports its test accuracy after every epoch (it needs a test split).
    ``torch_threads``: torch threads of every party process (0 = torch's default;
    these small networks gain little from threads on a busy machine).
    """

    variant: str = "R"
    lam: float = 1.0
    lams: tuple[float, ...] = ()
    tau: float = 0.5
    epochs: int = 10
    batch_size: int = 64
    lr: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 1e-4
    pad: bool = True
    arch: str = "auto"
    device: str = "auto"
    evaluate: bool = True
    torch_threads: int = 0

    def validate(self) -> None:
        if self.variant not in ("R", "C"):
            raise ConfigError(
                f"params.variant must be 'R' (reconstruction) or 'C' (contrastive), "
                f"got {self.variant!r}"
            )
        if self.epochs < 1 or self.batch_size < 2:
            raise ConfigError("params.epochs must be >= 1 and params.batch_size >= 2")
        if self.lr <= 0 or not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ConfigError("need params.lr > 0, 0 <= params.momentum < 1, weight_decay >= 0")
        if self.tau <= 0:
            raise ConfigError(f"params.tau must be positive, got {self.tau}")
        if any(not np.isfinite(v) or v < 0 for v in (self.lam, *self.lams)):
            raise ConfigError("params.lam / params.lams (λ of Eq. 8) must be finite and >= 0")
        if self.arch not in ("auto", "table3", "table4"):
            raise ConfigError("params.arch must be 'auto', 'table3' or 'table4'")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError("params.device must be 'auto', 'cpu' or 'cuda'")
        if self.torch_threads < 0:
            raise ConfigError("params.torch_threads must be >= 0 (0 = torch's default)")


def _active(cfg: RunSpec) -> str:
    return cfg.federation.owners()[0]


def _passives(cfg: RunSpec) -> list[str]:
    active = _active(cfg)
    return [p for p in cfg.federation.parties if p != active]


def _lams(cfg: RunSpec) -> list[float]:
    p: APFedDeployParams = cfg.params
    n = len(cfg.federation.parties) - 1
    if not p.lams:
        return [float(p.lam)] * n
    if len(p.lams) != n:
        raise ConfigError(f"params.lams has {len(p.lams)} values for {n} passive parties")
    return [float(v) for v in p.lams]


def _strips(X: np.ndarray) -> np.ndarray:
    """A party's strips as the estimator sees them: float32 ``(n, C, h, W)``."""
    if X.ndim == 3:
        X = X[:, None]
    if X.dtype == np.uint8:
        return np.asarray(X / 255.0, dtype=np.float32)  # as APFed.fit(images / 255.0)
    return np.asarray(X, dtype=np.float32)


class APFedDriver(Coordinator):
    """The coordinator of a deployed APFed run: asks the active party for each epoch.

    It holds no data and no model; it receives only the scalar metrics of each
    epoch (``history``) and tells the passive parties when an epoch is over.
    """

    def __init__(
        self, name: str, active: str, passives: list[str], epochs: int, evaluate: bool
    ) -> None:
        super().__init__(name)
        self.active, self.passives = active, list(passives)
        self.epochs, self.evaluate = epochs, evaluate
        self.history: list[dict[str, float]] = []

    def run(self, on_round_end: Any = None) -> list[dict[str, float]]:
        while len(self.history) < self.epochs:
            epoch = len(self.history) + 1
            t0 = time.perf_counter()
            reply = self.send(self.active, "apfed.train", round=epoch)
            if int(reply.meta.get("epoch", -1) or -1) != epoch:
                raise ProtocolError(
                    f"{self.active!r} reported epoch {reply.meta.get('epoch')!r}, expected {epoch}"
                )
            rec = {"epoch": float(epoch), "loss": float(reply.meta["loss"])}  # type: ignore[arg-type]
            if self.evaluate:
                rec["accuracy"] = float(reply.meta["accuracy"])  # type: ignore[arg-type]
            self.broadcast(self.passives, "apfed.epoch_done", round=epoch)
            rec["seconds"] = time.perf_counter() - t0
            self.history.append(rec)
            if on_round_end is not None:
                on_round_end(epoch)
        return self.history

    def state_dict(self) -> dict[str, np.ndarray]:
        keys = ("epoch", "loss", "accuracy", "seconds")
        return {
            k: np.asarray([rec.get(k, np.nan) for rec in self.history], dtype=np.float64)
            for k in keys
        }

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        n = len(state["epoch"])
        self.history = []
        for r in range(n):
            rec = {k: float(state[k][r]) for k in ("epoch", "loss", "seconds")}
            if self.evaluate:
                rec["accuracy"] = float(state["accuracy"][r])
            self.history.append(rec)


class APFedApp(Algorithm):
    name = "apfed"
    peer_to_peer = True
    Params = APFedDeployParams

    def policy(self, cfg: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return PrivacyPolicy.of("apfed", _POLICY_RULES)

    def role(self, cfg: RunSpec, party: str) -> str:
        return "active" if party == _active(cfg) else "passive"

    def check_federation(self, fed: Roster) -> None:
        if fed.label_owners or not fed.label_owner:
            raise ConfigError(
                "apfed has one active party: set federation.label_owner (not label_owners)"
            )
        if len(fed.parties) < 2:
            raise ConfigError("apfed needs the active party and at least one passive party")

    def check_data(self, cfg: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(cfg, party, data)
        _lams(cfg)  # one λ per passive party
        if data.features.ndim not in (3, 4):
            raise DataError(
                f"{party!r} must hold image strips (n, h, W) or (n, C, h, W), got X of shape "
                f"{data.features.shape}"
            )
        if party == _active(cfg) and cfg.params.evaluate and data.y_test is None:
            raise DataError(
                f"{party!r} is the active party: its file needs ids_test, X_test and y_test "
                "(or set params.evaluate = false)"
            )

    def party_info(self, cfg: RunSpec, party: str, local: Local) -> dict[str, Any]:
        C, h, w = _strips(local.data.features[:1]).shape[1:]
        info: dict[str, Any] = {"channels": int(C), "height": int(h), "width": int(w)}
        if party == _active(cfg):
            info["n_classes"] = int(len(np.unique(np.asarray(local.take("train")[2]))))
        return info

    def make_setup(self, cfg: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        shapes = {
            p: tuple(int(i[k]) for k in ("channels", "height", "width")) for p, i in infos.items()
        }
        if len(set(shapes.values())) != 1:
            raise DataError(
                f"APFed needs strips of equal size (C, h, W) at every party, got {shapes}; "
                "cut the images into equal strips (pad them, see params.pad)"
            )
        C, h, w = shapes[_active(cfg)]
        _lams(cfg)
        if int(infos[_active(cfg)]["n_classes"]) < 2:
            raise DataError("the active party's labels must contain at least two classes")
        return {
            "n_samples": int(infos[_active(cfg)]["n/train"]),
            "channels": C,
            "height": h,
            "width": w,
        }

    def build_party(
        self, cfg: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.deep._apfed_nets import get_arch
        from fedviews.deep._common import require_torch, resolve_device
        from fedviews.deep.apfed import ActiveClient, PassiveClient, _seeds

        p: APFedDeployParams = cfg.params
        if p.torch_threads:  # this process's own setting (results do not depend on it)
            require_torch().set_num_threads(p.torch_threads)
        parties = list(cfg.federation.parties)
        seeds = _seeds(int(cfg.seed or 0), len(parties))  # [0]: active, [1 + j]: j-th passive
        spec = get_arch(p.arch, int(setup["channels"]))
        dev = resolve_device(p.device)
        common: dict[str, Any] = {
            "lr": p.lr,
            "momentum": p.momentum,
            "weight_decay": p.weight_decay,
            "device": dev,
        }
        _, X, y = local.take("train")
        if party != _active(cfg):
            return PassiveClient(
                party,
                _strips(X),
                p.variant,
                spec,
                seed=seeds[1 + _passives(cfg).index(party)],
                tau=p.tau,
                **common,
            )
        classes, y_idx = np.unique(np.asarray(y), return_inverse=True)
        active = ActiveClient(
            _strips(X),
            y_idx.astype(np.int64),
            len(classes),
            spec,
            passives=_passives(cfg),
            lams=_lams(cfg),
            seed=seeds[0],
            epochs=p.epochs,
            batch_size=p.batch_size,
            name=party,
            **common,
        )
        active.classes = classes
        h, w = int(setup["height"]), int(setup["width"])
        m = len(parties)
        active.model_info = {  # model.json of an export (fedviews.deep._export)
            "method": f"APFed-{p.variant}",
            "arch": {
                "name": spec.name,
                "in_channels": spec.in_channels,
                "convs": [list(c) for c in spec.convs],
                "hidden": spec.hidden,
            },
            "m": m,
            "i": parties.index(party) + 1,
            "pad": False,  # full images given to the export must have m * h rows
            "image_shape": [spec.in_channels, m * h, w],
            "strip_hw": [h, w],
            "settings": {**asdict(p), "lams": _lams(cfg), "random_state": cfg.seed},
        }
        if p.evaluate:
            _, X_test, y_test = local.data.split("test")
            assert y_test is not None
            pos = np.clip(np.searchsorted(classes, y_test), 0, len(classes) - 1)
            y_test_idx = np.where(classes[pos] == y_test, pos, -1)  # unseen class: never right
            active.set_test(_strips(X_test), y_test_idx)
        return active

    def build_coordinator(
        self, cfg: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:
        p: APFedDeployParams = cfg.params
        return APFedDriver(
            cfg.federation.coordinator, _active(cfg), _passives(cfg), p.epochs, p.evaluate
        )

    def round_message(self, role: str) -> str:
        return "apfed.train" if role == "active" else "apfed.epoch_done"

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        driver: APFedDriver = coord  # type: ignore[assignment]
        return driver.run(on_round_end)

    def progress(self, coord: Coordinator) -> list[str]:
        driver: APFedDriver = coord  # type: ignore[assignment]
        lines = []
        for rec in list(driver.history):
            acc = f", test accuracy {rec['accuracy']:.4f}" if "accuracy" in rec else ""
            lines.append(
                f"epoch {int(rec['epoch'])}: loss {rec['loss']:.4f}{acc} ({rec['seconds']:.1f} s)"
            )
        return lines

    def write_party_results(self, party: Party, out_dir: Path) -> None:
        """``result.npz``; the active party also writes its export folder ``model/``."""
        super().write_party_results(party, out_dir)
        if party.role == "active":
            export_apfed_model(out_dir / "result.npz", out_dir / "model")

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        """The active party's complete model (it predicts alone); a passive party's network."""
        if party.role != "active":
            return {k: v for k, v in party.state_dict().items() if k.startswith("net/")}
        active: ActiveClient = party  # type: ignore[assignment]
        from fedviews.deep._export import FORMAT

        meta = {
            "format": FORMAT,
            **active.model_info,
            "classes": np.asarray(active.classes).tolist(),
        }
        net = {k: v for k, v in active.state_dict().items() if k.startswith("net/")}
        return {
            **net,
            "classes": np.asarray(active.classes),
            "history": np.asarray(active.history, dtype=np.float64),
            "model_json": np.asarray(json.dumps(meta)),
        }

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        driver: APFedDriver = coord  # type: ignore[assignment]
        keys = list(driver.history[0]) if driver.history else []
        history = {k: [rec[k] for rec in driver.history] for k in keys}
        metrics: dict[str, Any] = {"history": history, "epochs_done": len(driver.history)}
        if history.get("accuracy"):
            metrics["final_accuracy"] = history["accuracy"][-1]
        return metrics, {k: np.asarray(v) for k, v in history.items()}

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data from ``[data]`` (see :func:`apfed_demo_data`)."""
        return apfed_demo_data(cfg)


def apfed_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Cut an image dataset into the strips of the ``m`` parties (``m = len(parties)``).

    ``[data]``: ``dataset`` (``mnist`` or ``fashion_mnist``), ``n_per_class``
    (balanced training subsample, 0 = all), ``n_test`` (test images, 0 = all;
    MNIST: a stratified fifth of the images is the test set), ``overlap`` (each
    party keeps this random fraction of the training images). Images are cut
    into ``m`` equal strips top to bottom in the order of ``federation.parties``
    (``params.pad``: zero rows at the bottom when the height is not a multiple of
    ``m``), as :func:`fedviews.deep._apfed_nets.cut_strips`. The active party also
    gets the labels and its strip of the test images; every file lists its rows
    in its own random order.
    """
    from fedviews.data import balanced_subsample
    from fedviews.deep._apfed_nets import cut_strips
    from fedviews.experiments.multivfl import image_split

    spec, parties, active = cfg.data, list(cfg.federation.parties), _active(cfg)
    Xtr, ytr, ids, Xte, yte, ids_te = image_split(spec.dataset, {}, cfg.seed, 0.2)
    rng = np.random.default_rng(cfg.seed)
    if spec.n_per_class:
        keep = balanced_subsample(ytr, spec.n_per_class, random_state=cfg.seed)
        Xtr, ytr, ids = Xtr[keep], ytr[keep], ids[keep]
    if spec.n_test:
        keep = np.sort(rng.permutation(len(yte))[: spec.n_test])
        Xte, yte, ids_te = Xte[keep], yte[keep], ids_te[keep]
    pad = bool(cfg.params.pad)
    m = len(parties)

    def cut(X: np.ndarray) -> list[np.ndarray]:
        arr = np.asarray(X)
        strips = cut_strips(arr[:, None] if arr.ndim == 3 else arr, m, pad=pad)
        return [s[:, 0] if arr.ndim == 3 else s for s in strips]  # (n, h, W) for grey images

    strips, test_strips = cut(Xtr), cut(Xte)
    files: dict[str, PartyData] = {}
    n = len(ytr)
    for k, name in enumerate(parties):
        keep = rng.permutation(n)[: max(1, int(round(spec.overlap * n)))]
        extra: dict[str, Any] = {}
        if name == active:
            tperm = rng.permutation(len(yte))
            extra = {
                "y": ytr[keep],
                "ids_test": ids_te[tperm],
                "X_test": test_strips[k][tperm],
                "y_test": yte[tperm],
            }
        files[name] = PartyData(ids[keep], strips[k][keep], **extra)
    return files


def export_apfed_model(result: str | Path, folder: str | Path) -> Path:
    """Turn the active party's ``result.npz`` into an export folder (``fedviews apfed predict``).

    Load it with :func:`fedviews.deep._export.load_active_model`; it predicts from
    the active strip alone (or from full images of ``m`` equal strips).
    """
    from fedviews.deep._apfed_nets import ActiveNet, NetSpec
    from fedviews.deep._common import require_torch
    from fedviews.deep._export import export_active_model

    torch = require_torch()
    with np.load(result, allow_pickle=False) as z:
        if "model_json" not in z.files:
            raise DataError(f"{result} is not the result of a deployed APFed active party")
        meta = json.loads(str(z["model_json"]))
        state = {k[4:]: torch.as_tensor(z[k]) for k in z.files if k.startswith("net/")}
    a = meta["arch"]
    spec = NetSpec(
        a["name"],
        int(a["in_channels"]),
        tuple((int(c[0]), int(c[1]), int(c[2])) for c in a["convs"]),
        int(a["hidden"]),
    )
    strip_hw = (int(meta["strip_hw"][0]), int(meta["strip_hw"][1]))
    net = ActiveNet(spec, strip_hw, len(meta["classes"]))
    net.load_state_dict(state)
    return export_active_model(
        folder,
        net,
        spec=spec,
        strip_hw=strip_hw,
        image_shape=tuple(meta["image_shape"]),
        m=int(meta["m"]),
        i=int(meta["i"]),
        pad=bool(meta["pad"]),
        classes=np.asarray(meta["classes"]),
        method=str(meta["method"]),
        settings=meta.get("settings"),
    )


register_algorithm_spec(APFedApp())
