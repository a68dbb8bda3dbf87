"""The split NN estimator: arrays -> every party's own features -> the one runner -> its model parts.

``fit`` deals the features to the parties (image strips cut top to bottom, or the
arrays given, one per party: strips or table columns) as a deployment's files hold them
(:class:`~fedviews.data.PartyData`), builds every party from its own data with
:class:`~fedviews.deep.splitnn.spec.SplitNNAlgorithm`
(:func:`fedviews.federation.build_in_process`, exactly as a deployed party process does),
runs that protocol in one process and keeps each party's model part (what a deployed party
keeps in its run folder). ``predict`` runs the prediction session of ``fedviews predict``
in one process: every party built from its model part and its new rows by the spec, the
passive parties' bottom outputs sent to the label owner.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import softmax

from fedviews._classifier import Classifier, run_in_process
from fedviews._estimator import store_params
from fedviews._params import COUNT, check_value, factory_fields
from fedviews._persist import Persistent
from fedviews._registry import register_estimator
from fedviews.data import PartyData, check_classes, check_numeric
from fedviews.deep._common import history_columns, warn_raw_pixels
from fedviews.deep._strips import EpochDriver, cut_images, party_features
from fedviews.deep.splitnn.parties import SplitNNActive
from fedviews.deep.splitnn.spec import SPLITNN_SPEC, SplitNNParams
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import (
    AlignGroup,
    Defense,
    Local,
    Roster,
    RunSpec,
    build_in_process,
    estimator_params,
    federate,
)

__all__ = ["SplitNN"]


@register_estimator("splitnn")
class SplitNN(Persistent, Classifier):
    """A plain split neural network: a bottom model at every party, the label owner's top.

    ``fit`` runs the one definition of the algorithm (:class:`SplitNNAlgorithm`, VFLAIR's
    setting): every party is built from its own features only, exactly as a deployed party
    process (``fedviews launch`` with ``algorithm = "splitnn"``). Per batch, every passive
    party sends the output of its bottom model (``logits``) to the label owner, which joins
    them with its own (their sum, or its ``top`` model on them side by side, its own first),
    takes the cross-entropy and sends each passive party the gradient of the loss w.r.t. its
    output (``grad_logits``); nothing else crosses. Every party trains its part with its own
    SGD.

    The hyper-parameters shared with deployments are the fields of :class:`SplitNNParams`
    with the same defaults, less ``evaluate`` (the estimator fits without a test split).
    ``set_params`` of ``n_parties``, ``label_owner`` or ``pad`` after ``fit`` waits for the
    next fit; :meth:`predict` builds the parties' networks with the current factories (the
    same networks: a callable may be replaced by its import path before :meth:`save`) on the
    current ``device``, and loads the fitted parts into them.

    Parameters
    ----------
    n_parties : int, default=2
        Parties: images are cut into ``n_parties`` horizontal strips, one each, top to bottom
        (or ``X`` is a list of ``n_parties`` arrays, e.g. a table's columns).
    label_owner : int, default=0
        The party (0-based, in the order of the strips) that holds the labels and the top.
    epochs, batch_size : int
        Training epochs and mini-batch size.
    lr, momentum, weight_decay : float
        The SGD settings of every party.
    hidden : int
        Hidden units of the default bottom MLPs.
    pad : bool
        Zero-pad images at the bottom when their height is not a multiple of ``n_parties``.
    bottom, top : callable or str, default=""
        Your own networks (docs/your-own-model.md), as callables or import paths
        ``"package.module:function"``. ``bottom(input_shape, n_classes)`` builds a party's
        bottom for per-sample inputs of ``input_shape`` (a strip's ``(C, rows, width)``, a
        table's ``(k,)``); ``""``: the MLP of ``hidden`` units returning ``n_classes``
        logits. ``top(input_shape, n_classes)`` builds the label owner's top on every
        party's bottom output side by side (``(sum e_p,)``), returning ``n_classes`` logits;
        ``""``: the bottoms' logits are summed (nothing trained at the top).
    device : {"auto", "cpu", "cuda", "cuda:<index>", "mps"}
        Torch device of every party.
    random_state : int
        The run's seed: every network's initialisation and every epoch's batch order.
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per epoch with its mean loss (a line
        per epoch when stderr is no terminal); silent when False.
    transport : callable, optional
        ``transport(policy) -> Transport`` of the training run (default: in-process).
    defense : str or dict, optional
        The run's defense (:class:`~fedviews.federation.Defense`): ``"label_rr"`` with an
        ``epsilon`` (``{"kind": "label_rr", "epsilon": 2.0}``: the label owner trains on
        randomized-response labels, ε-label-DP); ``None``: none.

    Attributes
    ----------
    classes_ : ndarray
    privacy_ : dict
        The privacy ledger of the run's defense (``epsilon``, ``delta``, accountant); empty
        without one.
    parties_ : tuple of str
        ``party_0`` ... the party names, in the order of the strips (or of ``X``).
    label_owner_ : str
        The name of the party that holds the labels.
    pad_ : bool
        ``pad`` of the fit: how :meth:`predict` cuts images.
    input_shapes_ : list of tuple
        Every party's per-sample feature shape; :meth:`predict` checks it.
    models_ : dict of str to dict of str to ndarray
        Every party's model part, as a deployed party keeps it (``net/...``, the label
        owner's ``top/...``).
    setup_ : dict
        The run's setup (``n_classes``, every party's ``input/<party>`` shape).
    history_ : dict of str to list
        Per epoch: ``epoch``, ``loss`` (the label owner's mean training loss), ``seconds``.
    transport_ : Transport
        The federation used for training (message log, bytes per party); its ``log`` also
        lists the messages of every prediction session after the fit's (``splitnn.infer``
        and its replies: only the passive parties' ``logits`` cross).
    run_stats_, message_log_ : dict
        ``transport_.log.summary()`` at the end of ``fit``.

    Examples
    --------
    >>> model = SplitNN(n_parties=2, epochs=3).fit(images, y)     # doctest: +SKIP
    >>> model.predict(new_images)                                  # doctest: +SKIP
    """

    _factories = factory_fields(SplitNNParams)

    def __init__(
        self,
        n_parties: int = 2,
        label_owner: int = 0,
        epochs: int = 5,
        batch_size: int = 64,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        hidden: int = 128,
        pad: bool = False,
        bottom: Any = "",
        top: Any = "",
        device: str = "auto",
        random_state: int = 0,
        verbose: bool = False,
        transport: Any = None,
        defense: Any = None,
    ) -> None:
        store_params(self, locals())

    def _roster(self) -> tuple[tuple[str, ...], str]:
        """``party_0`` ... and the label owner's name, from ``n_parties`` and ``label_owner``."""
        check_value("n_parties", self.n_parties, COUNT)
        if self.n_parties < 2:
            raise ConfigError(f"n_parties must be at least 2, got {self.n_parties}")
        lo = self.label_owner
        if not isinstance(lo, (int, np.integer)) or isinstance(lo, bool):
            raise ConfigError(f"label_owner must be a party index, got {lo!r}")
        if not 0 <= lo < self.n_parties:
            raise ConfigError(f"label_owner={lo} is not a party: 0 <= label_owner < n_parties")
        parties = tuple(f"party_{k}" for k in range(self.n_parties))
        return parties, parties[lo]

    def _run_spec(self, parties: tuple[str, ...], label_owner: str) -> RunSpec:
        """The run of ``parties``: :class:`SplitNNParams` from this estimator's parameters
        (checked where the run is built)."""
        params = estimator_params(SplitNNParams, self, evaluate=False)
        roster = Roster(parties, label_owner=label_owner)
        defense = Defense.of(self.defense, validate=False)  # (checked as the run is built)
        return RunSpec(SPLITNN_SPEC.name, params, roster, self.random_state, defense)

    @staticmethod
    def _views(X: Any, n_parties: int, pad: bool) -> list[np.ndarray]:
        """Every party's features: images ``(n, H, W)`` or ``(n, C, H, W)`` cut into
        ``n_parties`` strips as the demo data cuts them, or a list of one array per party;
        finite."""
        if isinstance(X, (list, tuple)):
            views = party_features(X, n_parties, "X", "n_parties")
        else:
            images = check_numeric(X, "X")
            if images.ndim not in (3, 4) or 0 in images.shape:
                raise DataError(
                    f"X must be images (n, H, W) or (n, C, H, W), or a list of {n_parties} "
                    f"parties' features (strips or table columns), got shape {images.shape}"
                )
            if images.dtype.kind == "f" and not np.isfinite(images).all():
                raise DataError("X contains NaN or infinite values")
            warn_raw_pixels(images, "X")
            views = cut_images(images, n_parties, bool(pad))
        return views

    def fit(self, X: Any, y: Any) -> SplitNN:
        """Train the parties' bottoms (and the label owner's top) together.

        Parameters
        ----------
        X : ndarray (n, H, W) or (n, C, H, W), or list of ``n_parties`` arrays (n, ...)
            Images, cut into one strip per party, or every party's own features (image
            strips, table columns), aligned by row. uint8 pixels are scaled to ``[0, 1]``.
        y : array-like (n,)
            Labels, held by the label owner only.
        """
        parties, active = self._roster()
        run = self._run_spec(parties, active)
        views = self._views(X, len(parties), self.pad)
        n = len(views[0])
        self.classes_, y_enc = np.unique(check_classes(y, n), return_inverse=True)
        if len(self.classes_) < 2:
            raise DataError("y must contain at least two classes")
        ids = np.arange(n)
        datas = {
            p: PartyData(ids, views[k], y_enc if p == active else None)
            for k, p in enumerate(parties)
        }
        fed = build_in_process(run, datas, transport=self.transport)
        run_in_process(fed, type(self).__name__, self.epochs, self.verbose)
        self.parties_, self.label_owner_, self.pad_ = parties, active, bool(self.pad)
        self.input_shapes_ = [tuple(int(s) for s in v.shape[1:]) for v in views]
        self.models_ = {p: fed.algorithm.party_results(fed.parties[p]) for p in parties}
        self.setup_ = dict(fed.setup)
        driver = fed.coordinator
        assert isinstance(driver, EpochDriver)
        self.history_ = history_columns(driver.history)
        self.history_["epoch"] = [int(e) for e in self.history_["epoch"]]
        self.transport_ = fed.transport
        self.run_stats_ = self.message_log_ = fed.transport.log.summary()
        self.privacy_ = dict(fed.privacy)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """The class logits of ``X`` (features as in :meth:`fit`), computed together: every
        party's bottom on its own features, the passive parties' outputs sent to the label
        owner, its top (or sum) on them; as ``fedviews predict`` of a deployment."""
        check_fitted(self, "models_", "setup_")
        views = self._views(X, len(self.parties_), self.pad_)
        shapes = [tuple(int(s) for s in v.shape[1:]) for v in views]
        if shapes != self.input_shapes_:
            raise DataError(
                f"X gives the parties features of shapes {shapes}, the model was fit on "
                f"{self.input_shapes_}"
            )
        run = self._run_spec(self.parties_, self.label_owner_)
        rows = np.arange(len(views[0]))
        group = AlignGroup("predict", self.parties_)
        members = {
            p: SPLITNN_SPEC.build_predictor(
                run,
                p,
                self.models_[p],
                Local(PartyData(rows, views[k]), {"predict": rows}, {"predict": group}),
                self.setup_,
            )
            for k, p in enumerate(self.parties_)
        }
        transport = federate(list(members.values()), SPLITNN_SPEC.predict_policy(run, self.setup_))
        transport.log = self.transport_.log  # its messages follow the fit's, as they cross
        active = members[self.label_owner_]
        assert isinstance(active, SplitNNActive)
        return active.test_logits().astype(np.float64)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities: the softmax of :meth:`decision_function`."""
        return np.asarray(softmax(self.decision_function(X), axis=1))

    def predict(self, X: Any) -> np.ndarray:
        """Labels: the argmax of :meth:`decision_function`."""
        logits = self.decision_function(X)
        return np.asarray(self.classes_[np.argmax(logits, axis=1)])
