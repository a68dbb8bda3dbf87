"""The APFed estimator: images -> every client's own strip -> the one runner -> the active model.

``fit`` cuts the images into the ``m`` clients' strips (:class:`~fedviews.data.PartyData`,
as a deployment's files hold them), builds every client from its own strip with
:class:`~fedviews.deep.apfed.spec.APFedAlgorithm` (:func:`fedviews.federation.build_in_process`,
exactly as a deployed party process does) and runs that protocol in one process; the
active client ends with a self-contained model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedviews._classifier import run_in_process
from fedviews._estimator import store_params
from fedviews._params import factory_fields
from fedviews._registry import register_estimator
from fedviews.data import PartyData
from fedviews.deep._apfed_nets import APFedNets, NetSpec, check_setting
from fedviews.deep._common import net_logits
from fedviews.deep._split import StripEstimator
from fedviews.deep.apfed.parties import ActiveClient, PassiveClient
from fedviews.deep.apfed.spec import DEPLOY_ONLY, APFedParams
from fedviews.errors import check_fitted
from fedviews.federation import (
    Defense,
    Roster,
    RunSpec,
    build_in_process,
    check_params,
    estimator_params,
)

__all__ = ["APFed", "ActiveOnly"]

_ACTIVE = "active"


class ActiveOnly(StripEstimator):
    """APFed and SingleVL: the active client ends with a self-contained model."""

    transport: Any
    active_: ActiveClient
    _factories = factory_fields(APFedParams)
    encoder: Any
    head: Any

    def _fit(self, images: Any, y: Any, *, passives: bool, **fixed: Any) -> None:
        """Run the ``apfed`` spec in one process: every client built from its own strip.

        The run's :class:`APFedParams` are the estimator's attributes of the same
        names, ``fixed`` for those it lacks; ``passives=False`` runs the active client alone.
        """
        params = estimator_params(APFedParams, self, skip=DEPLOY_ONLY, evaluate=False, **fixed)
        check_setting(self.m, self.i)
        check_params(params, self.m - 1 if passives else 0)  # before the images are cut
        views, labels = self._prepare(images, y)
        names = [_ACTIVE if k == self.i - 1 else f"passive{k + 1}" for k in range(self.m)]
        ids = np.arange(len(labels))
        datas = {
            name: PartyData(ids, views[k], labels if name == _ACTIVE else None)
            for k, name in enumerate(names)
            if passives or name == _ACTIVE
        }
        roster = Roster(tuple(datas), label_owner=_ACTIVE)
        defense = Defense.of(getattr(self, "defense", None), validate=False)  # (APFed only)
        run = RunSpec("apfed", params, roster, self.random_state, defense)
        fed = build_in_process(run, datas, transport=self.transport)
        run_in_process(fed, type(self).__name__, self.epochs, self.verbose)
        self.privacy_ = dict(fed.privacy)
        passive_clients = [p for p in fed.parties.values() if isinstance(p, PassiveClient)]
        self._keep_run(fed.parties[_ACTIVE], passive_clients, fed.transport)

    _tables = True

    def _paper_arch(self, channels: int | None) -> NetSpec | None:
        """The paper's networks only where a network of this fit is left to them (a user's
        encoder, head and passive network take images of any channels; on table columns,
        ``channels`` None, the defaults are fedviews' MLPs)."""
        variant = getattr(self, "variant", None)  # SingleVL: no passive party
        nets = APFedNets(
            self.arch,
            1 if channels is None else channels,
            self.encoder,
            self.head,
            getattr(self, "passive_encoder", ""),
            getattr(self, "decoder", ""),
            table=channels is None,
        )
        return nets.arch_needed(variant)

    def _logits(self, strip: np.ndarray) -> np.ndarray:
        return net_logits(self.active_.net, strip, self.device_)

    def _live_state(self) -> dict[str, Any]:
        info = {"model_info": self.active_.model_info, "classes": self.active_.classes}
        return {**super()._live_state(), **info}

    def _trained_active(self, view: np.ndarray, state: dict[str, Any]) -> ActiveClient:
        table = view.ndim == 2
        channels = 1 if table else int(view.shape[1])
        nets = APFedNets(self.arch, channels, self.encoder, self.head, table=table)
        active = ActiveClient(
            view, np.zeros(0, np.int64), len(self.classes_), nets, seed=0, device=self.device_
        )
        active.classes, active.model_info = state["classes"], state["model_info"]
        return active

    def export(self, path: str | Path, *, torchscript: bool = False) -> Path:
        """Write the active client's standalone model to the folder ``path``.

        See :func:`fedviews.deep._export.export_active_model`; load it with
        :func:`fedviews.deep.load_active_model` (no passive client needed).
        """
        check_fitted(self, "active_", "setting_")
        settings = {k: v for k, v in self.get_params().items() if k != "transport"}
        m, i, pad = self.setting_
        return self.active_.export(
            path,
            torchscript=torchscript,
            m=m,
            i=i,
            pad=pad,
            image_shape=None if self.image_shape_ is None else list(self.image_shape_),
            settings=settings,
        )


@register_estimator("apfed")
class APFed(ActiveOnly):
    """APFed-R / APFed-C: train with passive clients, predict with the active client alone.

    The hyper-parameters are those of :class:`~fedviews.deep.APFedParams` (the
    same names and defaults; a deployment's ``[params]``), less the
    deployment-only ``evaluate`` and ``torch_threads``.

    Parameters
    ----------
    variant : {"R", "C"}
        Passive loss: reconstruction (decoder, Eq. 12) or contrastive (encoder, Eq. 14).
    recon_loss : {"l2", "mse"}
        APFed-R's ``ℓ_p``: the per-sample L2 norm of Eq. 12 averaged over samples
        (default) or the older per-pixel mean square (:func:`reconstruction_loss`).
    m, i : int
        ``m-i`` setting: ``m`` horizontal strips (or ``m`` parties' features given as a list),
        strip ``i`` (1-based) is active.
    lam : float or sequence of float
        ``λ_p`` (Eq. 8), one value for all ``m - 1`` passive clients or one each; ``>= 0``.
        Default 0.1: at λ = 1 (the paper's Table 2 configs) APFed-R's per-sample L2
        reconstruction gradient on ``h_A`` is several times the classification gradient at
        initialisation and can hold the model near chance through a short schedule (measured
        in docs/algorithms/apfed.md, "The collapse"); over a converged schedule λ = 0.1 and
        λ = 1 both end higher than λ = 0 (the λ sweep on that page).
    tau : float
        Contrastive temperature (APFed-C).
    epochs, batch_size, lr, momentum, weight_decay
        SGD settings of every party (paper: lr 1e-3, momentum 0.9, weight decay 1e-4). The
        default lr 0.01 learns in a few epochs (1e-3 stays near chance that long); APFed-R
        collapses to chance at 0.03 (its reconstruction gradient kills the ReLUs of ``f_A``).
    pad : bool
        Zero-pad images at the bottom when their height is not a multiple of ``m``.
    arch : {"auto", "table3", "table4"}
        Networks of the paper's Table 3 (1 channel) or Table 4 (3 channels).
    encoder, head, decoder, passive_encoder : callable or str, default=""
        Your own networks (docs/your-own-model.md), as callables or import paths
        ``"package.module:function"``; ``""``: those of ``arch`` (on table columns fedviews'
        MLPs, :func:`~fedviews.deep._apfed_nets.vector_encoder`: the paper defines only image
        CNNs). ``encoder(input_shape)`` builds ``f_A`` on the active features (per-sample
        ``(C, h, W)``, or ``(k,)``); ``head(input_shape, n_classes)`` ``g_T`` on ``h_A``;
        APFed-R's ``decoder(input_shape, output_shape)`` maps ``h_A`` to exactly a passive
        party's features; APFed-C's ``passive_encoder(input_shape)`` (default: ``encoder``'s
        factory) a passive party's features to as many features as ``h_A``.
    device : str
        ``"auto"``, ``"cpu"`` or ``"cuda"``.
    random_state : int
    transport : callable, optional
        ``transport(policy) -> Transport`` (default: in-process).
    verbose : bool, default=False
        Show the progress of ``fit`` on stderr: a bar per epoch with its mean loss (a line
        per epoch when stderr is no terminal); silent when False.
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
    active_ : ActiveClient
        The trained active client (``active_.net`` is ``g_T ∘ f_A``).
    setting_ : (int, int, bool)
        ``(m, i, pad)`` of the fit: :meth:`predict` and :meth:`export` cut the active
        strip with them (``set_params`` of ``m``, ``i`` or ``pad`` takes effect at the next fit).
    passives_ : list of PassiveClient
    history_ : list of float
        Mean ``L_A`` per epoch.
    transport_ : Transport
        The federation (its ``log`` records every message).
    run_stats_, message_log_ : dict
        ``transport_.log.summary()``.

    Examples
    --------
    >>> model = APFed(variant="C", m=2, i=1, lam=1.0, epochs=5).fit(images, y)  # doctest: +SKIP
    >>> model.predict(new_images)                                              # doctest: +SKIP
    >>> model.export("model_dir")                                              # doctest: +SKIP
    """

    def __init__(
        self,
        variant: str = "R",
        m: int = 2,
        i: int = 1,
        lam: float | Sequence[float] = 0.1,
        recon_loss: str = "l2",
        tau: float = 0.5,
        epochs: int = 10,
        batch_size: int = 64,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        pad: bool = False,
        arch: str = "auto",
        encoder: Any = "",
        head: Any = "",
        decoder: Any = "",
        passive_encoder: Any = "",
        device: str = "auto",
        wire_activations: str = "none",
        wire_gradients: str = "none",
        topk_ratio: float = 0.1,
        random_state: int | None = 0,
        transport: Any = None,
        verbose: bool = False,
        defense: Any = None,
    ) -> None:
        store_params(self, locals())

    def fit(self, images: Any, y: Any) -> APFed:
        """Train the active and passive clients together on full images or on the parties'
        own features.

        Parameters
        ----------
        images : array, shape (n, H, W) or (n, C, H, W), or list of m arrays
            Aligned images, strip ``k`` of each to client ``k``; or every client's own
            features, e.g. its table columns ``(n, k_p)`` (widths may differ; client ``i`` is
            active). :meth:`predict` then takes the same list and uses client ``i``'s alone.
        y : array, shape (n,)
            Labels (held by the active client only).
        """
        self._fit(images, y, passives=True)
        return self
