"""S-FedMV's pure helpers that the spec and the parties share (torch-free).

The extractor's configuration (:class:`GRUConfig`, which the networks read), every
party's random streams (:func:`view_seeds`, :func:`fusion_seed`), the names under
which view ``k``'s parameters cross (``view{k}/<parameter>``) and the server's FedAvg,
plain (:func:`fedavg`) or from masked sums (:func:`secure_average`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedviews._params import COUNT, FACTORY, POSITIVE, Checked, spec
from fedviews.deep._common import prefixed, unprefixed
from fedviews.deep._factory import resolve_factory
from fedviews.errors import ProtocolError
from fedviews.federation import Message, is_tensor, numpy_dtype, unmask_sum

#: a view's parameters by name: numpy arrays, or (what crosses in a round) tensors on the
#: party's device
Weights = dict[str, Any]


def view_seeds(random_state: int | None, view: int, client: int) -> tuple[int, int]:
    """``(init_seed, client_seed)`` of view ``view``: the server's GRU init and client ``client``'s stream."""
    ss = np.random.SeedSequence(random_state).spawn(view + 1)[view]
    children = ss.spawn(client + 2)
    return int(children[0].generate_state(1)[0]), int(children[client + 1].generate_state(1)[0])


def fusion_seed(random_state: int | None) -> int:
    """The fusion stage's seed: the root sequence's own state (the views use its children)."""
    return int(np.random.SeedSequence(random_state).generate_state(1)[0])


def view_prefixed(k: int, params: Weights) -> Weights:
    """``params`` named as view ``k``'s parameters cross: ``view{k}/<name>``."""
    return prefixed(f"view{k}/", params)


def view_params(k: int, msg: Message, like: Weights) -> Weights:
    """View ``k``'s parameters of ``msg``, checked by the receiver against ``like``.

    Parameters
    ----------
    k : int
        The view whose parameters ``msg`` carries (as ``view{k}/<name>``).
    msg : Message
        The server's broadcast or a client's reply.
    like : dict of str to numpy.ndarray or torch.Tensor
        The receiver's own parameters of view ``k``: the names, shapes and floating point
        types that ``msg`` must carry, nothing else.

    Returns
    -------
    dict of str to numpy.ndarray or torch.Tensor
        The parameters by name, cast to ``like``'s types: tensors on ``like``'s device where
        ``like`` holds tensors (a tensor handed over in one process stays on its device, an
        array from a wire is moved there), else arrays.

    Raises
    ------
    ProtocolError
        Naming the sender, when ``msg`` carries other arrays, misses one, or one is not of
        ``like``'s shape, not floating point or not finite.
    """
    prefix = f"view{k}/"
    if unprefixed(prefix, msg.arrays).keys() != like.keys() or len(msg.arrays) != len(like):
        raise ProtocolError(
            f"{msg.sender!r} sent {sorted(msg.arrays)[:4]}... for view {k}; expected exactly "
            "that view's GRU parameters",
            party=msg.sender,
        )
    return {n: _received(msg, prefix + n, a) for n, a in like.items()}


def _received(msg: Message, name: str, like: Any) -> Any:
    if is_tensor(like):
        dtype = numpy_dtype(like).type
        return msg.tensor(name, tuple(like.shape), dtype=dtype, device=like.device)
    return msg.array(name, like.shape, dtype=like.dtype.type)


def fedavg(local: Sequence[Weights], sizes: Sequence[float]) -> Weights:
    """``w = sum_l (N_l / N) w_l`` for every parameter (Algorithm 4), of arrays or of
    tensors (on their device); the sum starts from 0, as from a zero array."""
    N = float(sum(sizes))
    pairs = list(zip(sizes, local, strict=True))
    return {name: sum((n / N) * p[name] for n, p in pairs) for name in local[0]}


def secure_average(
    replies: Mapping[str, Message], k: int, like: Weights, frac_bits: int
) -> tuple[Weights, float]:
    """View ``k``'s FedAvg ``sum_l N_l w_l / N`` and mean loss from the clients' masked
    replies (secure aggregation): the parameters named and shaped as ``like``."""
    shapes = {f"masked_view{k}/{n}": a.shape for n, a in like.items()}
    totals = unmask_sum(replies, {**shapes, f"masked_view{k}/loss": (1,)}, frac_bits)
    N = float(sum(m.count("n_samples") for m in replies.values()))
    params = {n: (totals[f"masked_view{k}/{n}"] / N).astype(a.dtype) for n, a in like.items()}
    return params, float(totals[f"masked_view{k}/loss"][0] / N)


#: dropout probability
DROPOUT = spec(float, low=0, high=1, high_open=True)


@dataclass(frozen=True)
class GRUConfig(Checked):
    """Architecture and optimisation of one view's extractor (Algorithm 4's LocalTraining).

    Parameters
    ----------
    hidden_size : int, default=32
        GRU units per direction; the embedding has ``2 * hidden_size`` features.
    num_layers : int, default=1
    dropout : float, default=0.1
        Dropout on the embedding before the head (and between GRU layers);
        paper: from {0.1, 0.3}.
    lr : float, default=0.005
        RMSProp learning rate (paper: from {0.001, 0.005}).
    batch_size : int, default=128
        Paper: 128.
    local_epochs : int, default=2
        Epochs of local training per round (paper: from {10, 15}).
    n_rounds : int, default=10
        FedAvg rounds per view (paper: 150-170). Local / centralized training
        runs ``n_rounds * local_epochs`` epochs.
    extractor : callable or str, default=""
        Your own extractor (docs/your-own-model.md): ``extractor(n_channels, view)`` returns
        a ``torch.nn.Module`` whose ``forward(x, lengths)`` maps a zero-padded batch ``x``
        ``(B, T, n_channels)`` (float32) of view ``view``'s sequences and their lengths
        ``(B,)`` (int64, on the CPU) to one embedding per sequence ``(B, E)``; a linear
        head on the embedding (after ``dropout``) trains it. A callable or an import path
        ``"package.module:function"``; ``""``: the bidirectional GRU of ``hidden_size`` and
        ``num_layers`` (``E = 2 * hidden_size``).
    """

    hidden_size: int = field(default=32, metadata=COUNT)
    num_layers: int = field(default=1, metadata=COUNT)
    dropout: float = field(default=0.1, metadata=DROPOUT)
    lr: float = field(default=0.005, metadata=POSITIVE)
    batch_size: int = field(default=128, metadata=COUNT)
    local_epochs: int = field(default=2, metadata=COUNT)
    n_rounds: int = field(default=10, metadata=COUNT)
    extractor: str | Callable[..., Any] = field(default="", metadata=FACTORY)

    def cross_check(self, n_parties: int | None) -> None:
        """An import path of ``extractor`` must import a callable (what it builds is checked
        where the views' channels are known)."""
        resolve_factory(self.extractor, "extractor")
