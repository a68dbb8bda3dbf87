"""Bidirectional GRU feature extractor for variable-length sequences (S-FedMV, Sec. 6).

Sequences of a batch are padded and then *packed*
(:func:`torch.nn.utils.rnn.pack_padded_sequence`), so the GRU never reads a
padding step: the forward direction stops at each sequence's own last step and
the backward direction starts there. The embedding of a sequence is the
concatenation of the last hidden state of the forward and of the backward
direction of the top layer (``2 * hidden_size`` features); a linear head on it
is used only to train the extractor (cross-entropy), as in the paper where the
GRU's embedding becomes the feature matrix ``X_k`` of H-FedMV.

Nothing is truncated: the lengths of a batch are whatever the samples are
(filtering too short / too long samples is the data loader's job,
:meth:`fedviews.data.MultiViewSequences.filter_lengths`).

A user's extractor (``params.extractor``, :func:`make_extractor`) takes the GRU's place:
its ``forward(x, lengths)`` returns the embedding, and :class:`UserExtractor` adds the
same dropout and linear head to train it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.deep._common import (
    batches,
    require_torch,
    state_arrays,
    to_numpy,
    torch_seed,
)
from fedviews.deep._factory import build_network, output_shape, resolve_factory
from fedviews.deep.sfedmv.protocol import GRUConfig

if TYPE_CHECKING:
    import torch

torch = require_torch()
nn = torch.nn
_rnn = torch.nn.utils.rnn


class BiGRUExtractor(nn.Module):
    """Bidirectional GRU over packed sequences + a linear classification head."""

    def __init__(self, n_channels: int, n_classes: int, cfg: GRUConfig) -> None:
        super().__init__()
        self.gru = nn.GRU(
            n_channels,
            cfg.hidden_size,
            num_layers=cfg.num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if cfg.num_layers > 1 else 0.0,
        )
        self.drop = nn.Dropout(cfg.dropout)
        self.head = nn.Linear(2 * cfg.hidden_size, n_classes)
        self.width = 2 * cfg.hidden_size  # of the embedding

    def embed(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(B, 2H)``: last forward and backward states of the top layer (input order kept)."""
        packed = _rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h = self.gru(packed)  # (num_layers * 2, B, H), already un-sorted to input order
        return torch.cat([h[-2], h[-1]], dim=1)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.embed(x, lengths)))


class UserExtractor(nn.Module):
    """A user's extractor ``(x, lengths) -> (B, width)`` with the dropout and linear head that
    train it, as :class:`BiGRUExtractor`'s."""

    def __init__(self, extractor: nn.Module, width: int, n_classes: int, dropout: float) -> None:
        super().__init__()
        self.extractor = extractor
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(width, n_classes)
        self.width = width

    def embed(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """``(B, width)``: the user's embedding of each sequence."""
        out: torch.Tensor = self.extractor(x, lengths)
        return out

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.head(self.drop(self.embed(x, lengths)))


#: a view's extractor with its training head: the default GRU or a user's
Extractor = BiGRUExtractor | UserExtractor


def _with_lengths(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A zero batch ``x`` of sequences as an extractor's arguments: ``(x, lengths)``."""
    return x, torch.full((len(x),), x.shape[1], dtype=torch.int64)


def make_extractor(
    n_channels: int, n_classes: int, cfg: GRUConfig, seed: int, view: int = 0
) -> Extractor:
    """View ``view``'s freshly initialised extractor on ``n_channels`` channels, drawn with
    ``seed`` (the global torch RNG is left untouched): ``cfg.extractor(n_channels, view)``
    and a head (:class:`UserExtractor`) or, by default, the :class:`BiGRUExtractor`.

    Raises
    ------
    ConfigError
        The factory does not import or build a module whose ``forward(x, lengths)``
        returns one embedding vector per sequence.
    """
    made = resolve_factory(cfg.extractor, "extractor")
    with torch_seed(seed):
        if made is None:
            return BiGRUExtractor(n_channels, n_classes, cfg)
        shape = (2, n_channels)  # one sequence of two steps
        module = build_network(
            made,
            (n_channels, view),
            field="extractor",
            seed=None,
            input_shape=shape,
            inputs=_with_lengths,
            output=lambda out: None if len(out) == 1 else f"is {out}, not an embedding (E,)",
        )
        (width,) = output_shape(module, shape, "extractor", _with_lengths)
        return UserExtractor(module, width, n_classes, cfg.dropout)


def pad_batch(seqs: Sequence[np.ndarray], device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad ``(T_i, c)`` arrays to ``(B, max T, c)``; returns the padded batch and lengths."""
    lengths = torch.as_tensor([len(s) for s in seqs], dtype=torch.int64)
    x = _rnn.pad_sequence([torch.from_numpy(np.asarray(s)) for s in seqs], batch_first=True)
    return x.to(device), lengths


#: all parameters of an extractor as float32 numpy arrays, keyed by their state-dict names
get_params = state_arrays


def param_tensors(model: Extractor) -> dict[str, torch.Tensor]:
    """All parameters of an extractor as tensors on its device, keyed by their state-dict
    names: what crosses in a round (a device-resident message in one process: the transport
    hands the receiver a copy on the device, never these tensors; a wire encodes them)."""
    return dict(model.state_dict())  # (detached: state_dict's tensors keep no graph)


def set_params(model: Extractor, params: Mapping[str, Any]) -> None:
    """Copy ``params`` (tensors, or arrays) into ``model`` in place (an optimizer bound to
    it stays valid)."""
    state = {
        k: v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
        for k, v in params.items()
    }
    model.load_state_dict(state, strict=True)


@contextmanager
def private_rng(state: dict[str, Any]) -> Iterator[None]:
    """Run a block with a party's own torch RNG stream (dropout), saved back to ``state``.

    Keeps each party's randomness independent of how many other parties run in
    the same process and in which order.
    """
    with torch.random.fork_rng(devices=[]):
        torch.set_rng_state(state["torch"])
        yield
        state["torch"] = torch.get_rng_state()


def new_rng_state(seed: int) -> dict[str, Any]:
    """``{"torch": ..., "numpy": Generator}`` for a party seeded with ``seed``."""
    with torch_seed(seed):
        t = torch.get_rng_state()
    return {"torch": t, "numpy": np.random.default_rng(seed)}


def train_epochs(
    model: Extractor,
    optimizer: Any,
    seqs: Sequence[np.ndarray],
    y: np.ndarray,
    epochs: int,
    batch_size: int,
    rng_state: dict[str, Any],
    device: Any,
) -> float:
    """``epochs`` passes of mini-batch cross-entropy training; returns the last epoch's mean loss."""
    model.train()
    y_t = torch.as_tensor(np.asarray(y), dtype=torch.int64, device=device)
    loss_fn = nn.CrossEntropyLoss()
    last = float("nan")
    with private_rng(rng_state):
        for _ in range(epochs):
            # summed on the device, in float64 as Python would: no host sync per batch
            total, n = torch.zeros((), dtype=torch.float64, device=device), 0
            for idx in batches(len(seqs), batch_size, rng_state["numpy"]):
                x, lengths = pad_batch([seqs[i] for i in idx], device)
                optimizer.zero_grad()
                loss = loss_fn(model(x, lengths), y_t[idx])
                loss.backward()
                optimizer.step()
                total += loss.detach().double() * len(idx)
                n += len(idx)
            last = float(total) / max(n, 1)
    return last


def _apply(
    fn: Any, model: Extractor, seqs: Sequence[np.ndarray], batch_size: int, device: Any
) -> np.ndarray:
    model.eval()
    out = []
    with torch.no_grad():
        for idx in batches(len(seqs), batch_size, None):
            x, lengths = pad_batch([seqs[i] for i in idx], device)
            out.append(to_numpy(fn(x, lengths)))
    return np.concatenate(out).astype(np.float64)


def sequence_embed(
    model: Extractor, seqs: Sequence[np.ndarray], batch_size: int = 256, device: Any = "cpu"
) -> np.ndarray:
    """``(n, width)`` embeddings (eval mode, packed batches): the feature matrix ``X_k``."""
    return _apply(model.embed, model, seqs, batch_size, device)


def sequence_logits(
    model: Extractor, seqs: Sequence[np.ndarray], batch_size: int = 256, device: Any = "cpu"
) -> np.ndarray:
    """``(n, n_classes)`` head outputs (eval mode), e.g. to track accuracy per round."""
    return _apply(model, model, seqs, batch_size, device)
