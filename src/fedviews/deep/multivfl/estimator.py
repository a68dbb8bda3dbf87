"""The Multi-VFL estimator: arrays -> every party's own data -> the one runner -> fitted attributes.

``fit`` deals the images into the data owners' strips and the label owners' labels
(:class:`~fedviews.data.PartyData`, as a deployment's files hold them), builds every
party from its own data with :class:`~fedviews.deep.multivfl.spec.MultiVFLAlgorithm`
(:func:`fedviews.federation.build_in_process`, exactly as a deployed party process does),
runs that protocol in one process and reads the fitted parties back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from fedviews._classifier import Classifier, run_in_process

# at import, not in fit: importing rich draws from the global `random` (rich.style's id
# counter), and fit must leave the global random states as it found them
from fedviews._console import err_console
from fedviews._estimator import is_int, store_params
from fedviews._params import COUNT, check_value, factory_fields
from fedviews._persist import Persistent
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_classes, check_ids, check_numeric, split_strips
from fedviews.deep._common import (
    history_columns,
    load_saved_module,
    module_arrays,
    resolve_device,
    warn_raw_pixels,
)
from fedviews.deep._strips import party_features
from fedviews.deep.multivfl.parties import DataOwner, LabelOwner
from fedviews.deep.multivfl.protocol import partition_label_owners
from fedviews.deep.multivfl.server import Server
from fedviews.deep.multivfl.spec import MULTIVFL_SPEC, MultiVFLParams, scaled_strip
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    Defense,
    InProcessRun,
    Local,
    Party,
    Roster,
    RunSpec,
    Transport,
    build_in_process,
    estimator_params,
    federate,
)

__all__ = ["MultiVFL"]


def _as_strips(X: Any, n_data_owners: int, name: str) -> list[np.ndarray]:
    """Images ``(n, H, W)`` → D strips ``(n, h_d, W)``; or validate a list of D data owners'
    features (strips ``(n, h_d, W)``, table columns ``(n, k_d)``, any ``(n, ...)``)."""
    if not isinstance(X, (list, tuple)):
        X = check_numeric(X, name)
    if isinstance(X, np.ndarray) and X.ndim == 3:
        warn_raw_pixels(X, name)
        if X.shape[1] % n_data_owners:  # Multi-VFL gives every data owner an equal strip
            raise DataError(
                f"{name}: {X.shape[1]}-row images cannot be cut into {n_data_owners} equal "
                "strips; choose n_data_owners dividing the height, or pass the strips yourself "
                f"(a list of {n_data_owners} (n, rows, W) arrays)"
            )
        width = X.shape[2]
        strips = [s.reshape(len(X), -1, width) for s in split_strips(X, n_data_owners)]
    elif isinstance(X, (list, tuple)):
        strips = party_features(X, n_data_owners, name, "n_data_owners")
    else:
        raise DataError(
            f"{name} must be an (n, H, W) image array or a list of {n_data_owners} data "
            "owners' features ((n, rows, W) strips or (n, k) table columns)"
        )
    return [scaled_strip(s, name) for s in strips]


@register_estimator("multivfl")
class MultiVFL(Persistent, Classifier):
    """Multi-VFL: split learning with D data owners and K label owners.

    ``fit`` runs the one definition of the algorithm (:class:`MultiVFLAlgorithm`):
    every data owner and label owner is built from its own data only, exactly as a
    deployed party process (``fedviews launch`` with ``algorithm = "multivfl"``).

    The parameters shared with deployments are exactly the fields of
    :class:`MultiVFLParams`, with the same defaults.

    Parameters
    ----------
    n_data_owners : int
        ``D``: images are cut into ``D`` horizontal strips, one per data owner (or ``X``
        is a list of ``D`` data owners' features, e.g. a table's columns).
    n_label_owners : int
        ``K``: label owners, each with its own disjoint set of labelled samples.
    optimizer : {"fedavg", "fedadam", "fedyogi", "feddemonadam"}
        Server optimizer aggregating the label owners' top models.
    rounds : int
        Global rounds ``R``.
    local_epochs : int
        Epochs each label owner runs over its samples per round.
    batch_size : int
        Mini-batch size of the label owners' local epochs.
    lr : float
        Local learning rate ``η_k`` of the label owners and data owners. The default 0.1
        learns in a few rounds (MNIST, 2,000 images: 64 % after 3 rounds); the paper's
        1e-3 (set by ``configs/multivfl_*.toml``) stays at chance that long.
    local_optimizer : {"sgd", "adam"}
        Local step of label owners and data owners: ``"sgd"`` is Algorithm 1's
        ``W ← W − η_k ∇ℓ``; ``"adam"`` (not in the paper) is a fresh Adam every
        round, starting from the global model.
    server_lr, beta1, beta2, tau : float
        Server optimizer hyper-parameters (paper Table 2); ignored by ``fedavg``.
    scenario : str
        Label distribution among label owners: ``"iid"`` or ``"1niid"`` ... (paper Table 3).
    samples_per_owner : int, optional
        Samples per label owner (the paper uses 5000). Default: the largest count up to
        ``n // K`` that the scenario's class quotas fit in the data
        (:func:`~fedviews.deep.multivfl.protocol.fitting_samples_per_owner`).
    channels, top_channels, hidden : int
        Bottom output channels (32; on table columns: units), top convolution channels and
        hidden units of the default networks.
    init : {"xavier", "torch"}
        Initial weights of every bottom and top model: ``"xavier"`` (Algorithm 1's
        "Gaussian/Xavier initializer": Glorot-normal weights, zero biases) or ``"torch"``
        (PyTorch's default layers, fedviews before 2026-11).
    device : {"auto", "cpu", "cuda", "cuda:<index>", "mps"}
        Torch device of every party (``"auto"``: CUDA when available, else CPU).
    evaluate : bool, default=True
        Record the accuracy of the global model on ``eval_set`` after every round
        (no effect without ``eval_set``; with ``False`` the eval set is not used).
    defense : str, dict or Defense, optional
        The run's defense (:class:`~fedviews.federation.Defense`): ``"label_rr"``
        (randomized labels) or ``"grad_dp"`` (per-sample clipped, noised gradients at
        the label owners), e.g. ``{"kind": "grad_dp", "epsilon": 4, "clip": 1}``.
        Default: none. The budget spent is in ``privacy_``.
    wire_activations : {"none", "fp16", "bf16", "int8"}
        How data owners send their activations (:class:`~fedviews.federation.Codec`;
        anything but ``"none"``, exact float32, is lossy and changes the math).
    wire_gradients : {"none", "fp16", "bf16", "int8", "topk"}
        How label owners send the activation gradients back (``"topk"``: only the
        largest ``topk_ratio`` of each sample's entries).
    topk_ratio : float
        Fraction of entries per sample kept by ``"topk"``.
    bottom, top : callable or str
        Factories of the networks (``""``: the default ones; an import path
        ``"package.module:function"`` or the callable). ``bottom(input_shape, index)``
        returns data owner ``index``'s ``torch.nn.Module`` for per-sample inputs of
        ``input_shape`` (image strips ``(1, rows, width)``, table columns ``(k,)``);
        ``top(input_shape, n_classes)`` the top model on the data owners' activations joined
        (along the height for ``(C, h, W)`` maps, else the first axis), returning
        ``n_classes`` logits. Each is called under its own torch seed, then ``init``
        applies (``init="torch"`` keeps the factory's weights).
    random_state : int
    log_entries : bool
        Keep every message in ``transport_.log.entries`` (totals are always kept).
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per round with its train loss (test
        accuracy, seconds) (a line per round when stderr is no terminal); silent when False.
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).

    Attributes
    ----------
    classes_ : ndarray
    history_ : dict of str to list
        Per round: ``round``, ``accuracy`` (with ``eval_set``), ``train_loss``,
        ``seconds``, ``train_seconds``, ``train_bytes``, ``batches``.
    transport_ : Transport
        The federation used for training (message log, bytes per party).
    run_stats_ : dict
        ``transport_.log.summary()`` at the end of ``fit`` (rounds, messages,
        bytes per party, crossings) plus totals: ``seconds``, ``train_seconds``,
        ``batches_per_round``, bytes per round and per batch, raw activation
        sizes and ``device``.
    data_owners_, label_owners_ : list of Party
        The party objects (``data_owner_d``, ``label_owner_k``); in this in-process
        simulation the estimator reads their state, which never crosses.
    server_ : Server
        The coordinator (named ``server``): global top model and round history.
    label_owner_samples_ : list of ndarray
        Training-row indices given to each label owner.
    strip_shapes_ : list of tuple
        The per-sample shape of every data owner's features (``(rows, width)`` of a strip,
        ``(k,)`` of table columns); :meth:`predict` checks it.
    privacy_ : dict
        The privacy ledger of the run's defense per label owner (``epsilon``, ``delta``,
        accountant); empty without one.

    Notes
    -----
    ``fit`` draws the initial models from their own seeds (:func:`build_models`)
    and leaves the global torch, numpy and ``random`` states unchanged. As
    deployed, the top model has one output per class up to the largest class that
    a label owner holds labels of.
    """

    def __init__(
        self,
        n_data_owners: int = 4,
        n_label_owners: int = 5,
        optimizer: str = "fedavg",
        rounds: int = 10,
        local_epochs: int = 1,
        batch_size: int = 64,
        lr: float = 0.1,
        local_optimizer: str = "sgd",
        server_lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
        scenario: str = "iid",
        samples_per_owner: int | None = None,
        channels: int = 32,
        top_channels: int = 64,
        hidden: int = 128,
        init: str = "xavier",
        device: str = "auto",
        evaluate: bool = True,
        wire_activations: str = "none",
        wire_gradients: str = "none",
        topk_ratio: float = 0.1,
        bottom: Any = "",
        top: Any = "",
        defense: Any = None,
        random_state: int = 0,
        log_entries: bool = False,
        verbose: bool = False,
        transport: Any = None,
    ) -> None:
        store_params(self, locals())

    def _params(self) -> MultiVFLParams:
        """The run's :class:`MultiVFLParams` from this estimator's parameters (checked where
        the run is built), after its own ``n_data_owners`` and ``n_label_owners``."""
        for name in ("n_data_owners", "n_label_owners"):
            check_value(name, getattr(self, name), COUNT)
        return estimator_params(MultiVFLParams, self)

    def _label_owner_rows(
        self, y_enc: np.ndarray, ids_arr: np.ndarray, label_owner_ids: Sequence[Any] | None
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """``(ids, rows)`` of the samples each label owner holds labels for."""
        n = len(ids_arr)
        if label_owner_ids is None:
            rng = np.random.default_rng(self.random_state)
            parts = partition_label_owners(
                y_enc, self.scenario, self.n_label_owners, self.samples_per_owner, rng
            )
            owner_ids = [ids_arr[p] for p in parts]
        else:
            if len(label_owner_ids) != self.n_label_owners:
                raise DataError(
                    f"label_owner_ids has {len(label_owner_ids)} entries, n_label_owners={self.n_label_owners}"
                )
            owner_ids = [np.asarray(a) for a in label_owner_ids]
        order = np.argsort(ids_arr, kind="stable")
        owner_rows = []
        for k, oid in enumerate(owner_ids):
            if len(oid) == 0:
                raise DataError(
                    f"label owner {k} has no samples; give every label owner at least one labelled sample"
                )
            rows = order[np.clip(np.searchsorted(ids_arr[order], oid), 0, n - 1)]
            if not np.array_equal(ids_arr[rows], oid):
                raise DataError(f"label_owner_ids[{k}] names samples that are not in ids")
            owner_rows.append(rows)
        return owner_ids, owner_rows

    def _eval_split(self, eval_set: tuple[Any, Any]) -> tuple[list[np.ndarray], np.ndarray]:
        """The eval set as the data owners' test strips and the encoded test labels."""
        Xt, yt = eval_set
        t_strips = self._check_predict_strips(Xt)
        yt_arr = np.asarray(yt)
        if yt_arr.shape != (len(t_strips[0]),):
            raise DataError(
                f"eval_set labels have shape {yt_arr.shape}, expected ({len(t_strips[0])},)"
            )
        unknown = np.setdiff1d(yt_arr, self.classes_)
        if len(unknown):
            raise DataError(
                f"eval_set has labels {unknown[:5].tolist()} that are not in the training labels"
            )
        return t_strips, np.searchsorted(self.classes_, yt_arr)

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        ids: Any = None,
        label_owner_ids: Sequence[Any] | None = None,
        eval_set: tuple[Any, Any] | None = None,
        callback: Callable[[int, dict[str, float]], None] | None = None,
        checkpoint: str | Path | None = None,
        checkpoint_every: int = 10,
    ) -> MultiVFL:
        """Train Multi-VFL.

        Parameters
        ----------
        X : ndarray (n, H, W) or list of D arrays (n, h_d, W)
            Training images (cut into ``D`` strips) or the data owners' strips.
            uint8 pixels are scaled to ``[0, 1]``.
        y : array-like (n,)
            Training labels.
        ids : array-like (n,), optional
            Sample IDs of the rows of ``X`` (default ``0..n-1``).
        label_owner_ids : sequence of K ID arrays, optional
            The samples each label owner holds labels for; overrides ``scenario``
            and ``samples_per_owner``. The data owners are aligned with each
            label owner by :func:`fedviews.data.align`.
        eval_set : (X_test, y_test), optional
            Held-out set: data owners hold the strips, ``label_owner_0`` the labels;
            the global model's accuracy on it is recorded every round.
        callback : callable(round, record), optional
            Called after every round (progress bars).
        checkpoint : path, optional
            A ``.npz`` file of every party's and the server's state: written every
            ``checkpoint_every`` rounds and after the last one; if it exists when
            ``fit`` starts, training continues after the rounds it holds (the same
            data and parameters give the same model as an uninterrupted fit;
            ``run_stats_`` count every session's messages, bytes and seconds). A checkpoint of a fit
            with other parameters (``device`` aside), ``random_state``, ``defense``
            or data raises :class:`ConfigError` (:class:`DataError` if only the
            data differ), one that cannot be read :class:`DataError`.
        checkpoint_every : int
            Rounds between two checkpoints (>= 1).
        """
        params = self._params()
        if not is_int(checkpoint_every, 1):
            raise ConfigError(
                f"checkpoint_every must be a positive integer, got {checkpoint_every!r}"
            )
        run, datas = self._party_data(params, X, y, ids, label_owner_ids, eval_set)
        fed = build_in_process(run, datas, transport=self.transport, keep_entries=self.log_entries)
        fed.transport.log.keep_entries = self.log_entries
        seconds = self._run(fed, callback, checkpoint, checkpoint_every)
        self._read_fitted(fed, seconds)
        return self

    def _party_data(
        self,
        params: MultiVFLParams,
        X: Any,
        y: Any,
        ids: Any,
        label_owner_ids: Sequence[Any] | None,
        eval_set: tuple[Any, Any] | None,
    ) -> tuple[RunSpec, dict[str, PartyData]]:
        """The run and every party's own data, as its file would hold it in a deployment
        (sets ``classes_``, ``label_owner_samples_`` and ``strip_shapes_``)."""
        strips = _as_strips(X, self.n_data_owners, "X")
        n = len(strips[0])
        y_arr = check_classes(y, n)
        self.classes_, y_enc = np.unique(y_arr, return_inverse=True)
        if len(self.classes_) < 2:
            raise DataError("y must contain at least two classes")
        ids_arr = np.arange(n) if ids is None else check_ids(ids)
        if len(ids_arr) != n:
            raise DataError(f"ids has {len(ids_arr)} entries, X has {n} samples")
        owner_ids, owner_rows = self._label_owner_rows(y_enc, ids_arr, label_owner_ids)
        self.label_owner_samples_ = owner_rows
        self.strip_shapes_ = [s.shape[1:] for s in strips]
        evaluate = bool(params.evaluate) and eval_set is not None
        do_names = tuple(f"data_owner_{d}" for d in range(self.n_data_owners))
        lo_names = tuple(f"label_owner_{k}" for k in range(self.n_label_owners))
        test: list[dict[str, Any]] = [{} for _ in do_names]
        lo_test: dict[str, Any] = {}
        if eval_set is not None and evaluate:
            t_strips, yt_enc = self._eval_split(eval_set)
            t_ids = np.arange(len(yt_enc))
            test = [{"ids_test": t_ids, "X_test": s} for s in t_strips]
            lo_test = {"ids_test": t_ids, "y_test": yt_enc}
        datas = {name: PartyData(ids_arr, strips[d], **test[d]) for d, name in enumerate(do_names)}
        for k, name in enumerate(lo_names):
            extra = lo_test if k == 0 else {}
            datas[name] = PartyData(owner_ids[k], None, y_enc[owner_rows[k]], **extra)
        return self._run_spec(replace(params, evaluate=evaluate)), datas

    def _run_spec(self, params: MultiVFLParams) -> RunSpec:
        do_names = tuple(f"data_owner_{d}" for d in range(self.n_data_owners))
        lo_names = tuple(f"label_owner_{k}" for k in range(self.n_label_owners))
        return RunSpec(
            MULTIVFL_SPEC.name,
            params,
            Roster(do_names + lo_names, label_owners=lo_names, coordinator="server"),
            self.random_state,
            Defense.of(self.defense, validate=False),
        )

    #: saved as the members' models; loaded, they are built again by the spec
    _live = ("data_owners_", "label_owners_", "server_")
    _factories = factory_fields(MultiVFLParams)
    transport_: Transport

    def _live_state(self) -> dict[str, Any]:
        return {
            "setup": self._setup,
            "bottoms": [do.state_dict() for do in self.data_owners_],
            # each top with its structure, which loading checks (load_module)
            "tops": [module_arrays("top", lo.top) for lo in self.label_owners_],
            "server": self.server_.state_dict(),
        }

    def _restore_live(self, state: dict[str, Any]) -> None:
        """Every member built by the spec as a deployed process builds it, from no rows, with
        the fitted models; wired to an in-process transport that keeps the fitted log."""
        run = self._run_spec(replace(self._params(), evaluate=False))
        self._setup = setup = state["setup"]
        groups = MULTIVFL_SPEC.groups(run)
        none = np.zeros(0, np.int64)

        def build(party: str, features: np.ndarray | None, y: np.ndarray | None) -> Party:
            own = {g.name: g for g in groups if party in g.parties}
            local = Local(PartyData(none, features, y), {g: none for g in own}, own)
            return MULTIVFL_SPEC.build_party(run, party, local, setup)

        self.data_owners_ = [
            _as(DataOwner, build(f"data_owner_{d}", np.zeros((0, *hw), np.float32), None))
            for d, hw in enumerate(self.strip_shapes_)
        ]
        self.label_owners_ = [
            _as(LabelOwner, build(f"label_owner_{k}", None, none))
            for k in range(self.n_label_owners)
        ]
        self.server_ = _as(Server, MULTIVFL_SPEC.build_coordinator(run, setup))
        for do, bottom in zip(self.data_owners_, state["bottoms"], strict=True):
            do.load_state(bottom)
        for lo, top in zip(self.label_owners_, state["tops"], strict=True):
            load_saved_module("top", lo.top, top, lo.name)
        self.server_.load_state(state["server"])
        log = self.transport_.log
        members = [self.server_, *self.data_owners_, *self.label_owners_]
        self.transport_ = federate(members, self.transport_.policy)
        self.transport_.log = log

    def _run(
        self,
        fed: InProcessRun,
        callback: Callable[[int, dict[str, float]], None] | None,
        checkpoint: str | Path | None,
        checkpoint_every: int,
    ) -> float:
        """Run the built federation, resumed from and saved to ``checkpoint`` when given;
        the seconds its rounds took."""
        if checkpoint is not None and Path(checkpoint).is_file():
            fed.load_state(Path(checkpoint))

        def save(r: int) -> None:  # (t0: set below, before the first round)
            if checkpoint is not None and (r % checkpoint_every == 0 or r == self.rounds):
                fed.save_state(Path(checkpoint), seconds=time.perf_counter() - t0)

        _as(Server, fed.coordinator).callback = callback
        if self.verbose:
            sizes = sorted({len(r) for r in self.label_owner_samples_})
            err_console.print(
                f"Multi-VFL: {self.n_data_owners} data owners, {self.n_label_owners} label "
                f"owners ({'/'.join(map(str, sizes))} samples each), {self.rounds} rounds",
                highlight=False,
                soft_wrap=True,
            )
        t0 = time.perf_counter()
        run_in_process(fed, "Multi-VFL", self.rounds, self.verbose, then=save)
        return fed.seconds(time.perf_counter() - t0)  # (with the sessions' before it)

    def _read_fitted(self, fed: InProcessRun, seconds: float) -> None:
        """The fitted attributes, read from the parties and the transport's log of ``fed``."""
        self.transport_ = fed.transport
        self.data_owners_ = [
            _as(DataOwner, fed.parties[f"data_owner_{d}"]) for d in range(self.n_data_owners)
        ]
        self.label_owners_ = [
            _as(LabelOwner, fed.parties[f"label_owner_{k}"]) for k in range(self.n_label_owners)
        ]
        self.server_ = _as(Server, fed.coordinator)
        self._setup = dict(fed.setup)  # to build the members again when loaded
        self.privacy_ = fed.privacy
        self.history_ = history_columns(self.server_.history)
        self.history_["round"] = [int(r) for r in self.history_["round"]]
        n_batches = sum(self.history_["batches"])
        act = 4 * sum(  # float32 bytes per sample
            int(np.prod(shape)) for shape in self.label_owners_[0].activation_shapes.values()
        )
        summary = fed.log_summary()  # (a resumed fit's: every session's)
        self.run_stats_ = {
            **summary,
            "seconds": seconds,
            "train_seconds": float(sum(self.history_["train_seconds"])),
            "rounds": self.rounds,
            "batches_per_round": n_batches / self.rounds,
            "train_bytes_per_round": float(np.mean(self.history_["train_bytes"])),
            "train_bytes_per_batch": float(sum(self.history_["train_bytes"]) / n_batches),
            "raw_activation_bytes_per_sample": act,
            "total_bytes": summary["total_bytes"],
            "messages": summary["messages"],
            "device": str(resolve_device(self.device)),
        }

    def _check_predict_strips(self, X: Any) -> list[np.ndarray]:
        strips = _as_strips(X, self.n_data_owners, "X")
        shapes = [s.shape[1:] for s in strips]
        if shapes != self.strip_shapes_:
            raise DataError(
                f"strip shapes {shapes} differ from the training strips {self.strip_shapes_}"
            )
        return strips

    def predict(self, X: Any) -> np.ndarray:
        """Predict labels: the data owners compute activations, ``label_owner_0`` the classes."""
        check_fitted(self, "server_", "strip_shapes_")
        strips = self._check_predict_strips(X)
        for do, s in zip(self.data_owners_, strips, strict=True):
            do.set_split("predict", s)
        return np.asarray(
            self.classes_[self.label_owners_[0].predict_split("predict", len(strips[0]))]
        )


P = TypeVar("P", bound=Party)


def _as(cls: type[P], party: Party) -> P:
    assert isinstance(party, cls)
    return party
