"""S-FedMV deployed: one process per client, the coordinator is the server of both stages.

Every party is a client holding all sequential views and the labels of its own
samples (list every client in ``federation.label_owners``). A client's file holds
``X`` of shape ``(n, T, c_1 + ... + c_K)`` (float32): its sequences of every view
side by side along the channel axis, with the channels per view in ``view_dims``
(e.g. ``[3, 3]``: accelerometer, gyroscope), labels as class indices ``0..C-1``
and its own test sequences (``ids_test``, ``X_test``, ``y_test``). The file format
holds sequences of one length ``T`` (dense arrays), so the built-in ``watch`` data
is cut into fixed-length windows (:func:`sfedmv_demo_data`).

Alignment: as H-FedMV (:class:`fedviews.linear.HorizontalClients`), every client is its own group.

Stage 1 (Algorithm 4): the coordinator runs the unchanged
:class:`~fedviews.deep.sfedmv.SequenceServer` (FedAvg of every view's GRU, only
``view{k}/<parameter>`` arrays cross). Rounds are numbered over the views
(view ``k``, round ``t`` is round ``k * n_rounds + t``); every process checkpoints
there. Stage 2: every client embeds its own sequences with the final GRUs and
the coordinator runs the unchanged H-FedMV server on them (only ``W_k`` /
``W_local_k`` cross); then it sends the final ``W_k`` and every client predicts
its own test sequences and reports its counts. Stage 2 is not checkpointed (the
session checkpoints one message kind per role, here stage 1's ``train_view``,
where the time goes): a run killed during the fusion resumes after the last GRU
round and redoes the fusion, which is deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.data import PartyData
from fedviews.errors import ConfigError, DataError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Local,
    Message,
    Party,
    PrivacyPolicy,
    RunSpec,
    handles,
    register_algorithm_spec,
)
from fedviews.linear import (
    HFedMVClient,
    HFedMVServer,
    HorizontalClients,
    hfedmv_policy,
    view_dims_of,
)

if TYPE_CHECKING:
    from fedviews.deep.sfedmv import SequenceClient, SequenceServer

__all__ = ["SFedMVDeployParams", "sfedmv_demo_data"]

#: GRU depths whose parameter names the privacy policy lists
MAX_LAYERS = 4
#: the most views a client may hold (the privacy policy names ``W_0 .. W_15``)
MAX_VIEWS = 16
#: how the built-in ``watch`` recordings become fixed-length windows (10 Hz, 3 s)
WATCH_WINDOWS: dict[str, Any] = {
    "downsample": 5,
    "window_seconds": (3.0, 3.0),
    "min_length": 30,
    "max_length": 30,
}
#: the last quarter of every recording's windows is held out (the experiment's "time" split)
TEST_FRACTION = 0.25


@dataclass(frozen=True)
class SFedMVDeployParams:
    """Hyper-parameters of :class:`fedviews.deep.SFedMV` (federated extractors, H-FedMV fusion).

    Same names and defaults; ``torch_threads``: torch threads of every process
    (0 = torch's default); ``evaluate``: every client predicts its own test split.
    """

    hidden_size: int = 32
    num_layers: int = 1
    dropout: float = 0.1
    lr: float = 0.005
    batch_size: int = 128
    local_epochs: int = 2
    n_rounds: int = 10
    beta: float = 4.0
    zeta: float = 8.0
    eta: float = 16.0
    fusion_rounds: int = 20
    local_iter: int = 2
    inner_max_iter: int = 5
    device: str = "cpu"
    torch_threads: int = 1
    evaluate: bool = True

    def gru(self) -> Any:
        from fedviews.deep._gru import GRUConfig

        return GRUConfig(
            self.hidden_size,
            self.num_layers,
            self.dropout,
            self.lr,
            self.batch_size,
            self.local_epochs,
            self.n_rounds,
        )

    def validate(self) -> None:
        for name in (
            "hidden_size",
            "num_layers",
            "batch_size",
            "local_epochs",
            "n_rounds",
            "fusion_rounds",
            "local_iter",
            "inner_max_iter",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"params.{name} must be an integer >= 1")
        if self.num_layers > MAX_LAYERS:
            raise ConfigError(f"params.num_layers must be <= {MAX_LAYERS}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("params.dropout must lie in [0, 1)")
        if min(self.lr, self.beta, self.zeta, self.eta) <= 0:
            raise ConfigError("params.lr, beta, zeta and eta must be > 0")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError("params.device must be 'auto', 'cpu' or 'cuda'")
        if self.torch_threads < 0:
            raise ConfigError("params.torch_threads must be >= 0 (0 = torch's default)")


def _as_coordinator(
    pol: PrivacyPolicy, extra: Mapping[tuple[str, str], Sequence[str]]
) -> PrivacyPolicy:
    """``pol`` with the role ``server`` renamed ``coordinator`` (its role on the wire), plus ``extra``."""
    rename = {"server": "coordinator"}
    rules: dict[tuple[str, str], set[str]] = {}
    for (a, b), names in pol.allowed.items():
        rules.setdefault((rename.get(a, a), rename.get(b, b)), set()).update(names)
    for key, more in extra.items():
        rules.setdefault(key, set()).update(more)
    return PrivacyPolicy.of(pol.name, rules)


def _wrapped(coord: Coordinator) -> Any:
    """The algorithm's server inside a deploy coordinator, attached to its transport."""
    inner = coord.inner  # type: ignore[attr-defined]
    inner.transport = coord.transport
    return inner


class _DeployServer(Coordinator):
    """The coordinator process's algorithm object: the unchanged server plus deployment steps.

    ``inner`` is exactly the server the in-process estimator builds (it speaks
    with the coordinator's name); deployment-only steps (fetching the labels,
    scoring, evaluation) are messages of their own around its ``run()``.
    """

    def __init__(self, name: str, inner: Coordinator, **info: Any) -> None:
        super().__init__(name)
        inner.name, inner.role = name, "coordinator"
        self.inner = inner
        self.info = info
        self.results: dict[str, Any] = {}

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.inner.state_dict()

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.inner.load_state(state)


def _torch_setup(p: SFedMVDeployParams) -> Any:
    from fedviews.deep._common import require_torch, resolve_device

    torch = require_torch()
    if p.torch_threads:
        torch.set_num_threads(p.torch_threads)
    return resolve_device(p.device)


def _fusion_streams(cfg: RunSpec) -> list[np.random.SeedSequence]:
    """The streams of the fusion stage's H-FedMV (``SFedMV.fit_fusion``)."""
    from fedviews.deep.sfedmv import _fusion_seed

    return np.random.SeedSequence(_fusion_seed(cfg.seed)).spawn(len(cfg.federation.parties) + 1)


class SFedMVDeployClient(Party):
    """An S-FedMV client process's algorithm object.

    ``inner`` is exactly the in-process :class:`SequenceClient` (stage 1); the
    fusion client (exactly H-FedMV's, on this client's embeddings) is built on the
    first ``local_train``; ``final`` brings the final ``W_k``, with which this
    client predicts its own test sequences.
    """

    def __init__(
        self,
        inner: SequenceClient,
        make_fusion: Any,
        *,
        test_views: list[list[np.ndarray]] | None,
        y_test: np.ndarray | None,
        zeta: float,
    ) -> None:
        super().__init__(inner.name, role="client")
        self.inner, self.make_fusion = inner, make_fusion
        self.test_views, self.y_test, self.zeta = test_views, y_test, zeta
        self.fusion: HFedMVClient | None = None
        self.W: list[np.ndarray] = []
        self.y_test_pred: np.ndarray | None = None

    def _embed(self, views: list[list[np.ndarray]]) -> list[np.ndarray]:
        from fedviews.deep._gru import sequence_embed

        models = self.inner.models
        if any(m is None for m in models):
            raise ProtocolError(f"{self.name!r}: a view's extractor was never received")
        return [
            sequence_embed(m, s, device=self.inner.device)  # type: ignore[arg-type]
            for m, s in zip(models, views, strict=True)
        ]

    def handle(self, msg: Message) -> Message:
        if msg.kind in self._handlers:
            return super().handle(msg)
        if msg.kind == "local_train":
            if self.fusion is None:  # stage 2 starts: embed this client's own sequences
                self.fusion = self.make_fusion(self._embed(self.inner.views))
            assert self.fusion is not None
            return self.fusion.handle(msg)
        return self.inner.handle(msg)

    @handles("final")
    def on_final(self, msg: Message) -> Message:
        from fedviews.linear._fedmv import fedmv_consensus

        K = len(self.inner.views)
        self.W = [np.asarray(msg.arrays[f"W_{k}"]) for k in range(K)]
        if self.test_views is None or self.y_test is None:
            return self.reply(msg)
        Z, _ = fedmv_consensus(
            [X @ W for X, W in zip(self._embed(self.test_views), self.W, strict=True)],
            self.zeta,
        )
        self.y_test_pred = np.argmax(Z, axis=1)
        correct = int(np.sum(self.y_test_pred == self.y_test))
        return self.reply(msg, meta={"n_test": len(self.y_test), "n_correct": correct})

    def state_dict(self) -> dict[str, np.ndarray]:
        return self.inner.state_dict()

    def load_state(self, state: Mapping[str, np.ndarray]) -> None:
        self.inner.load_state(state)
        self.fusion = None


def _sfedmv_policy() -> PrivacyPolicy:
    from fedviews.deep._gru import GRUConfig, make_extractor
    from fedviews.deep.sfedmv import sequence_policy

    names: set[str] = set()
    for layers in range(1, MAX_LAYERS + 1):
        names |= set(
            make_extractor(1, 2, GRUConfig(hidden_size=1, num_layers=layers), 0).state_dict()
        )
    seq = sequence_policy(sorted(names), MAX_VIEWS)
    return _as_coordinator(
        hfedmv_policy(MAX_VIEWS),
        {key: sorted(v) for key, v in seq.allowed.items()},
    )


class SFedMVApp(HorizontalClients):
    name = "sfedmv"
    Params = SFedMVDeployParams
    client_ndim = 3

    def policy(self, cfg: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return _sfedmv_policy()

    def check_data(self, cfg: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(cfg, party, data)
        if data.view_dims is not None and len(data.view_dims) > MAX_VIEWS:
            raise DataError(
                f"client {party!r} holds {len(data.view_dims)} views; at most {MAX_VIEWS}"
            )

    def build_party(
        self, cfg: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> Party:
        from fedviews.data import check_sequences
        from fedviews.deep.sfedmv import SequenceClient, view_seeds
        from fedviews.linear._consensus import IRLSOptions
        from fedviews.linear._fedmv import _LocalMVL

        p: SFedMVDeployParams = cfg.params
        dev = _torch_setup(p)
        parties = cfg.federation.parties
        index = parties.index(party)
        c = int(setup["n_classes"])
        K = len(view_dims_of(setup))
        _, X, y = local.take(party)
        assert y is not None
        y = np.asarray(y, dtype=np.int64)
        views = check_sequences(local.data.views(X), y)
        inner = SequenceClient(
            party,
            views,
            y,
            c,
            p.gru(),
            [view_seeds(cfg.seed, k, index)[1] for k in range(K)],
            dev,
        )
        test_views = y_test = None
        if f"{party}:test" in local.rows:
            _, Xt, y_test = local.take(f"{party}:test")
            test_views = check_sequences(local.data.views(Xt), y_test)
        seed = _fusion_streams(cfg)[1 + index]
        Y = np.eye(c)[y]

        def make_fusion(Xs: list[np.ndarray]) -> HFedMVClient:
            def learner(views: list[np.ndarray]) -> _LocalMVL:
                return _LocalMVL(
                    views,
                    Y,
                    betas=[p.beta] * K,
                    zetas=[p.zeta] * K,
                    eta=p.eta,
                    seed=seed,
                    solver=IRLSOptions(p.inner_max_iter, 1e-6, 1e-10),
                )

            return HFedMVClient(party, Xs, Y, learner, local_iter=p.local_iter)

        return SFedMVDeployClient(
            inner, make_fusion, test_views=test_views, y_test=y_test, zeta=p.zeta
        )

    def build_coordinator(
        self, cfg: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> Coordinator:
        from fedviews.deep._gru import get_params, make_extractor
        from fedviews.deep.sfedmv import SequenceServer, view_seeds
        from fedviews.linear._fedmv import _init_W

        p: SFedMVDeployParams = cfg.params
        dev = _torch_setup(p)
        clients = list(cfg.federation.parties)
        c = int(setup["n_classes"])
        channels = view_dims_of(setup)
        gru = p.gru()
        inits = [
            make_extractor(ch, c, gru, view_seeds(cfg.seed, k, 0)[0]).to(dev)
            for k, ch in enumerate(channels)
        ]
        stage1 = SequenceServer(clients, [get_params(m) for m in inits], p.n_rounds, inits)
        W0 = _init_W([2 * p.hidden_size] * len(channels), c, _fusion_streams(cfg)[0])
        stage2 = HFedMVServer(clients, W0, p.fusion_rounds)
        stage2.name, stage2.role = cfg.federation.coordinator, "coordinator"
        return _DeployServer(cfg.federation.coordinator, stage1, fusion=stage2, params=p)

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        stage1: SequenceServer = _wrapped(coord)
        info = coord.info  # type: ignore[attr-defined]
        stage1.run(on_round_end=on_round_end)
        stage2: HFedMVServer = info["fusion"]
        stage2.transport = coord.transport
        stage2.run()
        coord.results.update(stage2.results)  # type: ignore[attr-defined]
        return stage2.W

    def round_message(self, role: str) -> str:
        return "train_view"

    def progress(self, coord: Coordinator) -> list[str]:
        stage1: SequenceServer = coord.inner  # type: ignore[attr-defined]
        stage2: HFedMVServer = coord.info["fusion"]  # type: ignore[attr-defined]
        R = stage1.n_rounds
        lines = [
            f"round {k * R + t + 1}: view {k} round {t + 1}, train loss {v:.4f}"
            for k, losses in enumerate(stage1.loss)
            for t, v in enumerate(list(losses))
        ]
        lines += [
            f"fusion round {r + 1}: objective {v:.6g}" for r, v in enumerate(list(stage2.objective))
        ]
        res = coord.results  # type: ignore[attr-defined]
        if "test_accuracy" in res:
            lines.append(
                f"test: accuracy {res['test_accuracy']:.4f} on {res['n_test']} sequences "
                "(every client predicts its own)"
            )
        return lines

    def party_results(self, party: Party) -> dict[str, np.ndarray]:
        from fedviews.deep._gru import get_params

        me: SFedMVDeployClient = party  # type: ignore[assignment]
        out: dict[str, np.ndarray] = {f"W_{k}": W for k, W in enumerate(me.W)}
        for k, model in enumerate(me.inner.models):
            if model is not None:
                out.update({f"view{k}/{n}": a for n, a in get_params(model).items()})
        if me.y_test_pred is not None:
            out["y_test_pred"] = me.y_test_pred
        return out

    def coordinator_results(
        self, coord: Coordinator
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        stage1: SequenceServer = coord.inner  # type: ignore[attr-defined]
        stage2: HFedMVServer = coord.info["fusion"]  # type: ignore[attr-defined]
        metrics = {
            "round_loss": [list(v) for v in stage1.loss],
            "rounds_done": stage1.rounds_done,
            "fusion_objective": list(stage2.objective),
            **coord.results,  # type: ignore[attr-defined]
        }
        arrays = {f"view{k}/{n}": a for k, ps in enumerate(stage1.params) for n, a in ps.items()}
        arrays.update({f"W_{k}": W for k, W in enumerate(stage2.W)})
        return metrics, arrays

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each client's data from ``[data]`` (see :func:`sfedmv_demo_data`)."""
        return sfedmv_demo_data(cfg)


def _evenly(idx: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of ``idx``, evenly spaced (0 = all)."""
    if not n or len(idx) <= n:
        return idx
    return idx[np.unique(np.linspace(0, len(idx) - 1, n).round().astype(int))]


def sfedmv_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Deal the ``watch`` sequences to the clients: subjects, fixed-length windows.

    ``[data]``: ``dataset = "watch"``, ``views`` (default both: accelerometer,
    gyroscope), ``n_per_class`` (at most this many training windows per client and
    class, evenly spaced over time; 0 = all), ``n_test`` (at most this many test
    windows per client; 0 = all). The recordings are cut into windows of 3 s at
    10 Hz (``T = 30``, :data:`WATCH_WINDOWS`); the 10 subjects are dealt in sorted
    order to the clients; the last quarter of every recording's windows is the
    test split (the S-FedMV experiment's ``split = "time"``). Labels are the 7
    exercises ``0..6``; rows are in each file's own random order.
    """
    from fedviews.data import load_sequences

    fed, spec = cfg.federation, cfg.data
    if spec.dataset != "watch":
        raise ConfigError(
            f"sfedmv writes its data files from data.dataset = 'watch', not {spec.dataset!r}"
        )
    ds = load_sequences(
        "watch", views=list(spec.views) or None, random_state=cfg.seed, **WATCH_WINDOWS
    )
    subjects = ds.clients()
    M = len(fed.parties)
    if M > len(subjects):
        raise ConfigError(f"{M} clients but the watch data has {len(subjects)} subjects")
    group = {s: i * M // len(subjects) for i, s in enumerate(subjects)}
    client = np.array([group[s] for s in np.asarray(ds.client_ids).tolist()])
    recording = np.asarray(ds.groups)
    test = np.zeros(ds.n_samples, dtype=bool)
    for g in np.unique(recording):
        idx = np.flatnonzero(recording == g)
        k = int(np.ceil(TEST_FRACTION * len(idx)))
        if len(idx) > k:  # a recording with one window stays in training
            test[idx[-k:]] = True
    X = np.concatenate([np.stack(v) for v in ds.views], axis=2).astype(np.float32)
    dims = tuple(int(c) for c in ds.n_channels)
    y = np.asarray(ds.y, dtype=np.int64)
    rng = np.random.default_rng(cfg.seed)
    files: dict[str, PartyData] = {}
    for m, name in enumerate(fed.parties):
        mine = client == m
        rows = np.concatenate(
            [
                _evenly(np.flatnonzero(mine & ~test & (y == c)), spec.n_per_class)
                for c in np.unique(y)
            ]
        )
        trows = _evenly(np.flatnonzero(mine & test), spec.n_test)
        if not len(rows):
            raise DataError(f"client {name!r} got no training windows")
        rows, trows = rows[rng.permutation(len(rows))], trows[rng.permutation(len(trows))]
        files[name] = PartyData(
            ds.ids[rows],
            X[rows],
            y[rows],
            ids_test=ds.ids[trows],
            X_test=X[trows],
            y_test=y[trows],
            view_dims=dims,
        )
    return files


register_algorithm_spec(SFedMVApp())
