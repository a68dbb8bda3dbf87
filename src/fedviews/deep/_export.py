"""Standalone export of an active client's model (APFed "inferring solely").

An export is a folder::

    model_dir/
      active_model.pt    torch.save'd state dict of g_T ∘ f_A (loaded with weights_only=True)
      model.json         architecture, m-i setting, strip/image shapes (or the table columns'
                         input_shape), classes, training settings
      active_model.ts    optional TorchScript module (same weights)

:func:`load_active_model` rebuilds the network from ``model.json`` and the
state dict; it needs neither the passive clients nor the training code's
objects. :func:`predict_exported` is what ``fedviews apfed predict MODEL DATA.npy``
calls.
"""

from __future__ import annotations

import json
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import softmax

from fedviews.data import check_numeric
from fedviews.deep._apfed_nets import APFedNets, as_images, cut_strips
from fedviews.deep._common import as_strips, net_logits, require_torch, resolve_device
from fedviews.deep._factory import factory_name
from fedviews.errors import ConfigError, DataError

FORMAT = "fedviews.apfed.active/1"
STATE_FILE = "active_model.pt"
META_FILE = "model.json"
SCRIPT_FILE = "active_model.ts"


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if callable(v):  # a user's network factory
        return factory_name(v)
    return v


def active_net(meta: Mapping[str, Any]) -> Any:
    """The (untrained) :class:`~fedviews.deep._apfed_nets.ActiveNet` that ``meta``
    (the contents of ``model.json``) describes: the paper's ``arch``, or the user factories
    of ``networks`` imported by path (a :class:`~fedviews.errors.ConfigError` if they do not
    import)."""
    arch = meta["arch"]
    networks = {str(k): str(v) for k, v in dict(meta.get("networks") or {}).items()}
    unknown = set(networks) - {"encoder", "head"}
    if unknown:
        raise ValueError(f"unknown networks {sorted(unknown)}")
    shape = input_shape(meta)
    table = len(shape) == 1
    channels = 1 if table else shape[0]
    name = "auto" if arch is None else str(arch["name"])
    nets = APFedNets(name, channels, **networks, table=table)
    return nets.active(shape, len(meta["classes"]), 0)


def input_shape(meta: Mapping[str, Any]) -> tuple[int, ...]:
    """The per-sample shape of the active party's features that ``meta`` describes: its
    table columns' ``input_shape`` ``(k,)``, or its strip ``(C, h, W)``."""
    if meta.get("input_shape") is not None:
        return tuple(int(s) for s in meta["input_shape"])
    return (int(meta["image_shape"][0]), *(int(s) for s in meta["strip_hw"]))


def export_active_model(
    path: str | Path, net: Any, meta: Mapping[str, Any], *, torchscript: bool = False
) -> Path:
    """Write ``net`` (an :class:`~fedviews.deep._apfed_nets.ActiveNet`) and ``meta``, its
    ``model.json`` (format, method, arch, ``m``, ``i``, ``pad``, image and strip shapes,
    classes, settings; :meth:`~fedviews.deep.apfed.ActiveClient.model_meta`), to ``path``.

    Returns the folder.
    """
    torch = require_torch()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    torch.save(state, out / STATE_FILE)
    meta = {
        **meta,
        "settings": dict(meta.get("settings") or {}),
        "torch_version": str(torch.__version__),
        "torchscript": SCRIPT_FILE if torchscript else None,
    }
    (out / META_FILE).write_text(json.dumps(_jsonable(meta), indent=2), encoding="utf-8")
    if torchscript:
        was_training = net.training
        net.eval()
        example = torch.zeros((1, *input_shape(meta)), device=next(net.parameters()).device)
        with torch.no_grad(), warnings.catch_warnings():
            # TorchScript is deprecated in recent torch but still the one self-contained format
            # that loads without the model's Python code (torch.jit.load)
            warnings.simplefilter("ignore", DeprecationWarning)
            traced = torch.jit.trace(net, example)
            traced.save(str(out / SCRIPT_FILE))
        net.train(was_training)
    return out


class ExportedActiveModel:
    """An exported active model, ready to predict without any passive client.

    Attributes
    ----------
    net : torch.nn.Module
        ``g_T ∘ f_A`` in eval mode.
    meta : dict
        The contents of ``model.json``.
    classes : ndarray
    """

    def __init__(self, net: Any, meta: dict[str, Any], device: Any) -> None:
        self.net = net
        self.meta = meta
        self.device = device
        self.classes = np.asarray(meta["classes"])

    def active_strip(self, images: Any) -> np.ndarray:
        """Accept full images (strip ``i`` is cut out) or already-cut active strips; a model
        of table columns its columns ``(n, k)``, or the list of every party's features that
        the estimator's ``predict`` takes (the active party's are used)."""
        if self.meta.get("input_shape") is not None:
            m, i = int(self.meta["m"]), int(self.meta["i"])
            if isinstance(images, (list, tuple)):
                if len(images) != m:
                    raise DataError(
                        f"a list of {len(images)} arrays: this model's setting has {m} parties; "
                        f"give the active party's columns (n, k), or all {m} parties' features"
                    )
                images = images[i - 1]
            cols = as_strips(check_numeric(images, "X"))
            shape = input_shape(self.meta)
            if cols.ndim != 2 or cols.shape[1:] != shape or not np.isfinite(cols).all():
                raise DataError(
                    f"input of shape {cols.shape} is not the active party's table columns: "
                    f"finite values of shape (n, {shape[0]})"
                )
            return cols
        X = as_images(images)
        full = tuple(self.meta["image_shape"])
        strip = (full[0], *self.meta["strip_hw"])
        if tuple(X.shape[1:]) == full:
            return cut_strips(X, self.meta["m"], pad=self.meta["pad"])[self.meta["i"] - 1]
        if tuple(X.shape[1:]) == strip:
            return X
        raise DataError(
            f"input of shape {X.shape[1:]} fits neither the full images {full} "
            f"nor the active strip {strip} of this model"
        )

    def logits(self, images: Any) -> np.ndarray:
        return net_logits(self.net, self.active_strip(images), self.device)

    def predict_proba(self, images: Any) -> np.ndarray:
        return softmax(self.logits(images), axis=1)

    def predict(self, images: Any) -> np.ndarray:
        """Predicted labels (the original class labels)."""
        return self.classes[np.argmax(self.logits(images), axis=1)]


def load_active_model(path: str | Path, device: str = "cpu") -> ExportedActiveModel:
    """Load an export written by :func:`export_active_model` (or ``APFed.export``).

    Raises
    ------
    DataError
        If the folder, ``model.json`` or the state dict is missing or of another format.
    """
    torch = require_torch()
    folder = Path(path)
    meta_path = folder / META_FILE
    if not meta_path.is_file() or not (folder / STATE_FILE).is_file():
        raise DataError(
            f"{folder} is not an exported APFed model (expected {META_FILE} and {STATE_FILE})"
        )
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"{meta_path} is not a JSON model description: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise DataError(f"{meta_path}: unknown format {found!r}; expected {FORMAT!r}")
    dev = resolve_device(device)
    try:
        net = active_net(meta)
    except ConfigError:  # (a factory it names that does not import: the user's to fix)
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{meta_path} does not describe an active model: {exc!r}") from None
    state_path = folder / STATE_FILE
    try:  # weights only: a tampered file cannot run code, it fails to load
        with warnings.catch_warnings():  # (torch's own warnings and advice are not ours)
            warnings.simplefilter("ignore")
            state = torch.load(state_path, map_location=dev, weights_only=True)
        net.load_state_dict(state)
    except pickle.UnpicklingError:  # (torch's message advises loading it unsafely: not relayed)
        raise DataError(
            f"{state_path} is not the weights of the model {META_FILE} describes: it holds "
            "more than tensors (objects or code a pickle would run) or damaged bytes; refused "
            "unread (tampered with, or not an export)"
        ) from None
    except (RuntimeError, ValueError, EOFError, TypeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise DataError(
            f"{state_path} is not the weights of the model {META_FILE} describes (damaged, "
            f"tampered with or of another export): {type(exc).__name__}: {first}"
        ) from None
    net.to(dev).eval()
    return ExportedActiveModel(net, meta, dev)


def predict_exported(model_path: str | Path, images_or_npy_path: Any) -> np.ndarray:
    """Predict labels with an exported active model.

    Parameters
    ----------
    model_path : str or Path
        Folder written by ``APFed.export`` / ``SingleVL.export``.
    images_or_npy_path : array or str or Path
        Full images ``(n, H, W)`` / ``(n, C, H, W)`` or active strips, or the
        path of a ``.npy`` file holding them (read with ``allow_pickle=False``).

    Returns
    -------
    ndarray, shape (n,)
        Predicted class labels.
    """
    if isinstance(images_or_npy_path, (str, Path)):
        p = Path(images_or_npy_path)
        if not p.is_file():
            raise DataError(f"data file {str(p)!r} does not exist")
        if p.suffix != ".npy":  # (numpy's error for a .csv spoke of pickled data)
            raise DataError(f"{p}: not a .npy file; the images (or rows) go in a numeric .npy")
        try:
            images = np.load(p, allow_pickle=False)
        except ValueError as exc:
            raise DataError(f"{p}: not a numeric .npy array ({exc})") from None
    else:
        images = images_or_npy_path
    return load_active_model(model_path).predict(images)
