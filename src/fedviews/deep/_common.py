"""Pieces shared by the deep (PyTorch) algorithms: torch import, device, seeds, batches,
model state as named numpy arrays, and the checks of integer hyper-parameters.

Every deep module imports torch through :func:`require_torch`, so a missing
extra gives ``pip install 'fedviews[torch]'`` rather than an ImportError from
deep inside the package.

Estimators never reseed the global random number generators: they seed their
own streams (:func:`torch_seed` around a model's construction, numpy
``Generator`` objects for shuffling), so fitting one leaves the caller's
``torch``, ``numpy`` and ``random`` states as they were.
"""

from __future__ import annotations

import importlib
import random
import threading
import warnings
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fedviews._params import spec
from fedviews.errors import ConfigError, DataError, DataWarning, MissingDependency
from fedviews.federation import CODECS, to_host

if TYPE_CHECKING:
    import torch

V = TypeVar("V")
#: rows per batch when a network only evaluates
EVAL_BATCH = 1024

#: how :func:`fedviews.deep.multivfl.nets.init_weights` draws initial weights: ``"xavier"`` (Glorot-normal
#: weights, zero biases: Multi-VFL Algorithm 1's "Gaussian/Xavier initializer") or ``"torch"``
#: (PyTorch's default layers, fedviews' behaviour before 2026-11)
INITS = ("xavier", "torch")


def require_torch() -> Any:
    """Return the ``torch`` module or raise MissingDependency with the install hint."""
    try:
        import torch
    except ImportError as exc:
        raise MissingDependency("torch", "torch") from exc
    return torch


def train_mode(net: Any) -> None:
    """Put ``net`` (a module) in training mode unless it is: ``train()`` walks every
    submodule, too slow to call once per batch of a small network."""
    if not net.training:
        net.train()


def zero_grads(opt: Any) -> None:
    """``opt.zero_grad()`` (gradients set to ``None``, its default) without its wrappers:
    the profiler's record function, the dynamo guard and the per-call set-up cost 9 us on a
    CPU, more than a small network's step; a split-learning batch zeroes one optimiser per
    party."""
    for group in opt.param_groups:
        for p in group["params"]:
            p.grad = None


def preload_optimizers() -> None:
    """Import what the first ``torch.optim`` optimizer of a process imports (``torch._dynamo``,
    1-2 CPU-s). Parties call it while they are built, so a deployed run does not pay it inside
    its first timed round."""
    require_torch()
    importlib.import_module("torch._dynamo")


def resolve_device(device: str = "auto") -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; ``"cuda"`` without a GPU is a ConfigError."""
    torch = require_torch()
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device={device!r} but no CUDA device is available; use device='auto' or 'cpu'"
        )
    try:
        return torch.device(device)
    except RuntimeError:
        raise ConfigError(f"unknown device {device!r}; use 'auto', 'cpu' or 'cuda'") from None


#: how an array of split learning travels (``wire_activations``, ``wire_gradients``)
WIRE = spec(str, choices=CODECS)
#: the fraction of each sample's gradient entries that ``"topk"`` keeps
TOPK_RATIO = spec(float, low=0, low_open=True, high=1)


def party_device(device: str, torch_threads: int = 0) -> torch.device:
    """The device of a party process, after setting its torch threads (0: torch's default;
    this process's own setting, results do not depend on it)."""
    if torch_threads:
        require_torch().set_num_threads(torch_threads)
    return resolve_device(device)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA): for scripts, never called by an estimator."""
    torch = require_torch()
    random.seed(seed)
    np.random.seed(seed % (2**32))  # noqa: NPY002 - third-party code may use the legacy global RNG
    torch.manual_seed(seed)


#: one seeded block at a time: parties hosted by one process (a Flower simulation actor,
#: a test grid) may build their networks on several threads, and the generator is global
_SEEDED = threading.RLock()


@contextmanager
def torch_seed(seed: int) -> Iterator[None]:
    """Run a block with torch's CPU generator seeded with ``seed``; restore it afterwards.

    A module built inside is initialised exactly as after ``torch.manual_seed(seed)``
    on the CPU (build on the CPU, then move it), but the global torch RNG state is
    the same after the block as before it, and the CUDA generators are not touched.
    Blocks on several threads of one process run one after the other (the generator is
    the process's), so two parties built at once draw what each would alone.
    """
    torch = require_torch()
    with _SEEDED, torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """Detach a tensor to a numpy array on the CPU (:func:`fedviews.federation.to_host`: a
    CUDA tensor through pinned memory). The other way (:func:`to_tensor`) stays pageable:
    staging through a pinned buffer measured slower there (218 us against 134 us on an H200)."""
    return to_host(t)


def to_tensor(a: np.ndarray, device: torch.device | None, dtype: Any = None) -> torch.Tensor:
    """Move a numpy array received in a Message onto ``device``."""
    torch = require_torch()
    return torch.as_tensor(np.asarray(a), device=device, dtype=dtype)


def as_strips(X: np.ndarray) -> np.ndarray:
    """A party's strips as the networks see them: float32 ``(n, C, h, W)`` (``(n, h, W)`` gets
    ``C = 1``), uint8 pixels / 255."""
    X = np.asarray(X)
    X = X[:, None] if X.ndim == 3 else X
    return X.astype(np.float32) / 255.0 if X.dtype == np.uint8 else X.astype(np.float32)


def warn_raw_pixels(images: np.ndarray, name: str) -> None:
    """Warn (:class:`~fedviews.errors.DataWarning`) where float ``images`` hold whole values
    from 0 up to more than 1 and at most 255, as raw pixels do: only ``uint8`` pixels are
    scaled to ``[0, 1]``, and a network trained on 0..255 inputs can diverge without an error
    (APFed-R did). Whole values are read on the first 256 samples only."""
    if images.dtype.kind != "f" or not images.size:
        return
    top, low = float(images.max()), float(images.min())
    head = images[:256]
    if 1.0 < top <= 255.0 and low >= 0.0 and np.array_equal(head, np.round(head)):
        warnings.warn(
            f"{name} holds floats with whole values from {low:g} to {top:g}, as raw 0..255 "
            "pixels do: they are used as given (only uint8 pixels are scaled to [0, 1]); "
            "pass uint8 images or divide them by 255",
            DataWarning,
            stacklevel=3,
        )


def net_logits(net: Any, strip: np.ndarray, device: Any) -> np.ndarray:
    """Outputs of ``net`` (a network, put in eval mode, or any function of a batch) on a strip,
    without gradient, in batches of :data:`EVAL_BATCH`."""
    torch = require_torch()
    if isinstance(net, torch.nn.Module):
        net.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(strip), EVAL_BATCH):
            x = to_tensor(strip[start : start + EVAL_BATCH], device, torch.float32)
            out.append(to_numpy(net(x)))
    return np.concatenate(out).astype(np.float64)


def host_copies(tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``tensors`` (or arrays) as numpy arrays of their own on the CPU (never a tensor's
    memory), by the same names."""
    return {k: to_numpy(v).copy() for k, v in tensors.items()}


def state_arrays(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """A copy of ``module``'s state dict as numpy arrays on the CPU, keyed by state-dict name."""
    return host_copies(module.state_dict())


#: the key suffix of a network's structure in :func:`module_arrays`
STRUCTURE = "#structure"


def module_arrays(prefix: str, module: Any) -> dict[str, np.ndarray]:
    """A network's parameters and buffers as ``{prefix/name: array}``, and its structure
    (``repr(module)``: its layers and their settings, as UTF-8 bytes) under
    ``prefix#structure``, which :func:`load_module` checks."""
    out = prefixed(prefix + "/", state_arrays(module))
    out[prefix + STRUCTURE] = np.frombuffer(repr(module).encode("utf-8"), np.uint8).copy()
    return out


def optimizer_arrays(prefix: str, opt: Any) -> dict[str, np.ndarray]:
    """The tensors of an optimiser's per-parameter state (SGD: the momentum buffers)."""
    out: dict[str, np.ndarray] = {}
    for idx, st in opt.state_dict()["state"].items():
        for key, val in st.items():
            if require_torch().is_tensor(val):
                out[f"{prefix}/{idx}/{key}"] = to_numpy(val).copy()
    return out


def load_module(prefix: str, module: Any, state: Mapping[str, np.ndarray], who: str) -> None:
    """Restore :func:`module_arrays` (DataError naming the keys that do not fit)."""
    own = module.state_dict()
    got = {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + "/")}
    bad = sorted(
        k
        for k in set(own) | set(got)
        if k not in got or k not in own or tuple(own[k].shape) != got[k].shape
    )
    if bad:
        raise DataError(f"{who}: checkpointed {prefix!r} does not fit its network ({bad})")
    saved = state.get(prefix + STRUCTURE)  # (absent from what older versions wrote)
    if saved is not None and (was := bytes(np.asarray(saved, np.uint8))) != (
        now := repr(module).encode("utf-8")
    ):
        old, new = was.decode("utf-8", "replace").splitlines(), now.decode().splitlines()
        line = next(
            (
                f"{a.strip()!r} is now {b.strip()!r}"
                for a, b in zip(old, new, strict=False)
                if a != b
            ),
            f"{len(old)} lines of layers are now {len(new)}",
        )
        raise DataError(
            f"{who}: checkpointed {prefix!r} was saved from another network than its factory "
            f"builds now ({line}); its weights would compute something else: load it with "
            "the code that trained it"
        )
    torch = require_torch()
    module.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in got.items()})


def load_saved_module(prefix: str, module: Any, saved: Mapping[str, Any], who: str) -> None:
    """Restore what an estimator saved of one network: :func:`module_arrays` (checked by
    :func:`load_module`), or a torch ``state_dict`` that a version before networks kept
    their structure wrote (loaded by names and shapes only)."""
    if any(k.startswith(prefix + "/") for k in saved):
        load_module(prefix, module, {k: np.asarray(v) for k, v in saved.items()}, who)
    else:
        module.load_state_dict(saved)


def load_optimizer(prefix: str, opt: Any, state: Mapping[str, np.ndarray]) -> None:
    """Restore :func:`optimizer_arrays`."""
    torch = require_torch()
    sd = opt.state_dict()
    per: dict[int, dict[str, Any]] = {}
    for key, val in state.items():
        if key.startswith(prefix + "/"):
            idx, name = key[len(prefix) + 1 :].split("/", 1)
            per.setdefault(int(idx), {})[name] = torch.as_tensor(np.asarray(val))
    sd["state"] = per
    opt.load_state_dict(sd)


def prefixed(prefix: str, arrays: Mapping[str, V]) -> dict[str, V]:
    """``arrays`` with every key written ``prefix + key`` (names in a message or checkpoint)."""
    return {prefix + k: v for k, v in arrays.items()}


def unprefixed(prefix: str, state: Mapping[str, V]) -> dict[str, V]:
    """The entries of ``state`` whose key starts with ``prefix``, with the prefix cut off."""
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def history_columns(records: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    """A coordinator's per-round records by column: every key of the first record → its
    value per round (NaN in a round that lacks it)."""
    keys = records[0] if records else {}
    return {k: [rec.get(k, float("nan")) for rec in records] for k in keys}


def history_records(columns: Mapping[str, Any]) -> list[dict[str, float]]:
    """Inverse of :func:`history_columns` (e.g. on a checkpoint's arrays)."""
    n = len(next(iter(columns.values()))) if columns else 0
    return [{k: float(v[i]) for k, v in columns.items()} for i in range(n)]


def history_summary(records: Sequence[Mapping[str, float]], done: str) -> dict[str, Any]:
    """The metrics of a run's ``results.json``: ``history`` by column, the number of finished
    rounds (as ``done``) and the last ``final_accuracy`` where the records have one."""
    history = history_columns(records)
    metrics: dict[str, Any] = {"history": history, done: len(records)}
    if history.get("accuracy"):
        metrics["final_accuracy"] = history["accuracy"][-1]
    return metrics


def progress_tail(rec: Mapping[str, float]) -> str:
    """A round's progress line ends with the test accuracy, where it has one, and its seconds."""
    acc = f", test accuracy {rec['accuracy']:.4f}" if "accuracy" in rec else ""
    return f"{acc} ({rec['seconds']:.1f} s)"


def batches(
    n: int, batch_size: int, rng: np.random.Generator | None, *, drop_last: bool = False
) -> Iterator[np.ndarray]:
    """Yield index batches over ``range(n)``; shuffled when ``rng`` is given."""
    if batch_size <= 0:
        raise ConfigError(f"batch_size must be positive, got {batch_size}")
    order = rng.permutation(n) if rng is not None else np.arange(n)
    stop = n - (n % batch_size) if drop_last else n
    for start in range(0, stop, batch_size):
        idx = order[start : start + batch_size]
        if len(idx):
            yield idx


def device_batches(
    n: int, batch_size: int, rng: np.random.Generator | None, device: torch.device
) -> list[torch.Tensor]:
    """The batches of :func:`batches` as index tensors on ``device``: the epoch's order moves
    there once, not once per batch (indexing a device tensor with host indices copies them
    to the device each time)."""
    torch = require_torch()
    rows = list(batches(n, batch_size, rng))
    if not rows:
        return []
    return list(torch.as_tensor(np.concatenate(rows), device=device).split(batch_size))


def last_epoch_seen(
    recording: Iterable[Any],
    kinds: str | Collection[str],
    name: str,
    unpack: Callable[[Any], Any] | None = None,
    *,
    previous: bool = False,
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(rows, values)`` per sample of array ``name`` in the messages of ``kinds``
    (``<protocol>.<kind>``) a passive party of split learning received in the last epoch it
    saw, or None (values: ``unpack(message)``, default the array as sent). The rows come from
    the epoch's shuffle seed (``<protocol>.epoch``) and the batch of each
    ``<protocol>.forward``: the order is :func:`batches` with ``default_rng(seed)`` over every
    row of the epoch, as both sides derive it. An array belongs to the batch its message asks
    for, or with ``previous`` (a gradient of the party's output) to the batch of the forward
    before its message: a gradient that travels with the request for the next batch, or
    alone after the epoch's last one."""
    protocol = (kinds if isinstance(kinds, str) else next(iter(kinds))).split(".")[0]
    wanted = {kinds} if isinstance(kinds, str) else set(kinds)
    seed, bs, batch = 0, 1, 0
    seen: list[tuple[int, np.ndarray]] = []
    for m in recording:
        if m.kind == f"{protocol}.epoch":  # a new epoch: keep only the last one
            seed, bs, seen = int(m.number("shuffle_seed")), int(m.number("batch_size")), []
        asked = m.kind == f"{protocol}.forward"
        if asked and not previous:
            batch = int(m.number("batch"))
        if m.kind in wanted and name in m.arrays:
            seen.append((batch, m.arrays[name] if unpack is None else unpack(m)))
        if asked and previous:
            batch = int(m.number("batch"))
    if not seen:
        return None
    order = list(batches(sum(len(v) for _, v in seen), bs, np.random.default_rng(seed)))
    return np.concatenate([order[b] for b, _ in seen]), np.concatenate([v for _, v in seen])
