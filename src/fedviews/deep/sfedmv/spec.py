r"""S-FedMV (Che et al., Section 6, Algorithm 4), defined once: params, roles, policy, demo data.

Stage 1 (Algorithm 4): for each view ``k`` the server sends the global GRU
parameters ``w^k_t`` (``train_view``); every client runs ``local_epochs`` epochs of
RMSProp on its own sequences of view ``k`` and returns ``w^{k,l}_{t+1}`` with its
sample count; the server sets ``w^k_{t+1} = sum_l (N_l / N) w^{k,l}_{t+1}``. After
a view's last round it sends the final ``w^k`` (``final_view``). Rounds are
numbered over the views: view ``k``, round ``t`` is round ``k * n_rounds + t``.

Stage 2: every client embeds its own sequences with the final GRUs and the run
goes on as H-FedMV (:class:`fedviews.linear.HFedMVAlgorithm`, built by that spec
from the embeddings, with the fusion's own seed): ``local_train`` rounds, then
``final`` (clients with a test split predict it and report their counts).

Only ``view{k}/<parameter>`` (stage 1) and ``W_k``/``W_local_k`` (stage 2) cross;
sequences, labels and embeddings stay with their client. The policy names the
parameters of this run's GRUs and exactly its views.

Random streams: view ``k`` uses child ``k`` of ``SeedSequence(seed)``; its child 0
initialises the server's GRU, child ``1 + l`` is client ``l``'s stream. The fusion
is H-FedMV with seed :func:`fusion_seed` (the root sequence's own state).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews._params import COUNT, FLAG, POSITIVE, VIEW_WEIGHTS, spec
from fedviews.data import PartyData
from fedviews.deep.sfedmv.protocol import (
    GRUConfig,
    fedavg,
    fusion_seed,
    secure_average,
    view_seeds,
)
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    SECAGG_KINDS,
    Local,
    Observation,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    register_algorithm_spec,
)
from fedviews.linear import (
    HFEDMV_SPEC,
    HFedMVClient,
    HFedMVParams,
    HFedMVServer,
    HorizontalClients,
    view_dims_of,
)

if TYPE_CHECKING:
    from fedviews.deep.sfedmv.parties import SFedMVClient, SFedMVServer

#: params a deployment reads and the estimator leaves at their defaults
DEPLOY_ONLY = ("torch_threads", "evaluate")
#: the kinds of stage 1, from the server to the clients
STAGE1_KINDS = ("train_view", "final_view")
#: how the built-in ``watch`` recordings become the demo data's windows (10 Hz, 3 s)
WATCH_WINDOWS: dict[str, Any] = {
    "downsample": 5,
    "window_seconds": (3.0, 3.0),
    "min_length": 30,
    "max_length": 30,
}
#: the last quarter of every recording's windows is held out (the experiment's "time" split)
TEST_FRACTION = 0.25


def sequence_policy(param_names: Sequence[Sequence[str]], *, secure: bool = False) -> PrivacyPolicy:
    """The S-FedMV stage-1 barrier: only ``view{k}/{param}`` extractor parameters cross,
    ``param_names[k]`` those of view ``k``'s extractor (``secure``: upwards only their masked
    ``N_l``-weighted stand-ins and the masked loss, and the coordinator may run the key
    exchange)."""
    n_views = len(param_names)
    names = [f"view{k}/{p}" for k, view in enumerate(param_names) for p in view]
    up, kinds = names, list(STAGE1_KINDS)
    if secure:
        up = [f"masked_{n}" for n in names] + [f"masked_view{k}/loss" for k in range(n_views)]
        kinds += SECAGG_KINDS
    return PrivacyPolicy.of(
        "s-fedmv",
        {("client", "coordinator"): up, ("coordinator", "client"): names},
        kinds={("coordinator", "client"): kinds},
    )


@dataclass(frozen=True)
class SFedMVParams(GRUConfig):
    """Hyper-parameters of S-FedMV (federated extractors, H-FedMV fusion): the one declaration
    used by :class:`~fedviews.deep.SFedMV` and deployments (``[params]``).

    GRU and FedAvg schedule: the fields of :class:`GRUConfig`. Fusion:
    ``beta``/``zeta`` (one value or one per view), ``eta``, ``fusion_rounds``
    H-FedMV rounds of ``local_iter`` passes, ``inner_max_iter`` IRLS iterations.
    ``device``: ``"auto"``, ``"cpu"`` or ``"cuda"``. Deployment only
    (:data:`DEPLOY_ONLY`): ``torch_threads`` of every process (0 = torch's
    default); ``evaluate``: every client predicts its own test split.
    """

    beta: float | tuple[float, ...] = field(default=4.0, metadata=VIEW_WEIGHTS)
    zeta: float | tuple[float, ...] = field(default=8.0, metadata=VIEW_WEIGHTS)
    eta: float = field(default=16.0, metadata=POSITIVE)
    fusion_rounds: int = field(default=20, metadata=COUNT)
    local_iter: int = field(default=2, metadata=COUNT)
    inner_max_iter: int = field(default=5, metadata=COUNT)
    device: str = field(default="cpu", metadata=spec(str, choices=("auto", "cpu", "cuda")))
    torch_threads: int = field(default=0, metadata=spec(int, low=0))
    """Deployment only: torch threads of every party process (0 = torch's default)."""
    evaluate: bool = field(default=False, metadata=FLAG)

    def fusion(self) -> HFedMVParams:
        """The fusion stage's H-FedMV params."""
        return HFedMVParams(
            beta=self.beta,
            zeta=self.zeta,
            eta=self.eta,
            n_rounds=self.fusion_rounds,
            local_iter=self.local_iter,
            inner_max_iter=self.inner_max_iter,
            evaluate=self.evaluate,
        )


def _view_of(m: Any) -> int:
    """The view ``k`` of a message of ``view{k}/...`` (or ``masked_view{k}/...``) arrays."""
    return int(next(iter(m.arrays)).split("/", 1)[0].removeprefix("masked_")[len("view") :])


def _params_of(m: Any) -> dict[str, np.ndarray]:
    """The extractor parameters of a ``view{k}/...`` message, without the prefix."""
    return {n.split("/", 1)[1]: a for n, a in m.arrays.items()}


def _averaged_extractors(
    recording: Recording, frac_bits: int | None = None
) -> dict[int, dict[str, np.ndarray]]:
    """Per view, the clients' last ``train_view`` replies averaged with the server's own FedAvg
    (weights ``n_samples``; under secure aggregation from their masked sum): the global
    extractor it sends out (stage 1)."""

    by_view: dict[int, list[Any]] = {}
    for m in recording.select("train_view:reply"):
        by_view.setdefault(_view_of(m), []).append(m)
    out = {}
    for k, replies in by_view.items():
        last = [m for m in replies if m.round == max(r.round for r in replies)]
        if frac_bits is not None:
            like = {  # the masked words stand for float32 parameters of these names and shapes
                n: np.zeros(a.shape, np.float32)
                for n, a in _params_of(last[0]).items()
                if n != "loss"
            }
            msgs = {m.sender: m.message() for m in last}
            out[k] = secure_average(msgs, k, like, frac_bits)[0]
            continue
        sizes = [m.number("n_samples") for m in last]
        out[k] = fedavg([_params_of(m) for m in last], sizes)
    return out


def _sequence_predictor(
    grus: Mapping[int, Mapping[str, np.ndarray]],
    fuse: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
    dims: Sequence[int],
    n_classes: int,
    run: RunSpec,
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """``(X, lengths) -> labels``: each view's sequences embedded by its received extractor,
    then ``fuse`` (the received fusion model) on the embeddings."""

    def predict(X: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
        from fedviews.deep.sfedmv.nets import make_extractor, sequence_embed, set_params

        data = PartyData(np.arange(len(X)), X, view_dims=tuple(dims), lengths=lengths)
        views = data.sequences("train", np.arange(len(X)))
        emb = []
        for k, seqs in enumerate(views):
            model = make_extractor(dims[k], n_classes, run.params, 0, view=k)
            set_params(model, dict(grus[k]))
            emb.append(sequence_embed(model, seqs))
        return fuse(np.hstack(emb), None)

    return predict


def _fusion_run(run: RunSpec) -> RunSpec:
    fed = run.federation
    roster = Roster(fed.parties, label_owners=fed.parties, coordinator=fed.coordinator)
    return RunSpec("hfedmv", run.params.fusion(), roster, fusion_seed(run.seed), run.defense)


def _fusion_setup(run: RunSpec, setup: Mapping[str, Any]) -> dict[str, Any]:
    """The fusion's setup: H-FedMV's views are the extractors' embeddings."""
    from fedviews.deep.sfedmv.nets import make_extractor

    c = int(setup["n_classes"])
    widths = [
        make_extractor(ch, c, run.params, 0, view=k).width
        for k, ch in enumerate(view_dims_of(setup))
    ]
    return {**setup, "view_dims": ",".join(str(w) for w in widths)}


class SFedMVAlgorithm(HorizontalClients):
    """S-FedMV as a federated algorithm: clients with all sequential views of their own samples.

    A client's data: ``X`` ``(n, T, c_1 + ... + c_K)`` with ``view_dims`` and, for
    variable-length sequences, ``lengths`` (see :class:`~fedviews.data.PartyData`).
    """

    name = "sfedmv"
    predicts_alone = (
        "every S-FedMV client holds all views of its sequences and predicts alone with its own "
        "networks and W_k (its result.npz), as SFedMV.predict does"
    )
    Params = SFedMVParams
    client_ndim = 3
    defenses = frozenset({"none", "secagg", "label_rr"})

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        from fedviews.deep.sfedmv.nets import get_params, make_extractor

        c = int(setup["n_classes"])
        names = [
            list(get_params(make_extractor(ch, c, run.params, 0, view=k)))
            for k, ch in enumerate(view_dims_of(setup))
        ]
        fusion = HFEDMV_SPEC.policy(_fusion_run(run), _fusion_setup(run, setup))
        stage1 = sequence_policy(names, secure=run.defense.secagg_bits is not None)
        return stage1.merged(fusion, name="s-fedmv")

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> SFedMVClient:
        from fedviews.deep._common import party_device
        from fedviews.deep.sfedmv.parties import SFedMVClient

        p: SFedMVParams = run.params
        index = run.federation.parties.index(party)
        K, c = len(view_dims_of(setup)), int(setup["n_classes"])
        _, _, y = local.take(party)
        assert y is not None
        test = f"{party}:test"
        has_test = test in local.rows
        return SFedMVClient(
            party,
            local.sequences(party),
            np.asarray(y, dtype=np.int64),
            c,
            p,
            [view_seeds(run.seed, k, index)[1] for k in range(K)],
            party_device(p.device, p.torch_threads),
            secure=run.defense.secagg_bits is not None,
            # a partial of a module function, not a closure: a fitted estimator pickles
            make_fusion=partial(
                _make_fusion, _fusion_run(run), _fusion_setup(run, setup), party, local
            ),
            test_views=local.sequences(test) if has_test else None,
        )

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> SFedMVServer:
        from fedviews.deep._common import party_device
        from fedviews.deep.sfedmv.nets import make_extractor
        from fedviews.deep.sfedmv.parties import SFedMVServer

        p: SFedMVParams = run.params
        dev = party_device(p.device, p.torch_threads)
        c = int(setup["n_classes"])
        inits = [
            make_extractor(ch, c, p, view_seeds(run.seed, k, 0)[0], view=k).to(dev)
            for k, ch in enumerate(view_dims_of(setup))
        ]
        fusion = HFEDMV_SPEC.build_coordinator(_fusion_run(run), _fusion_setup(run, setup))
        assert isinstance(fusion, HFedMVServer)
        return SFedMVServer(
            run.federation.parties,
            inits,
            p.n_rounds,
            fusion=fusion,
            frac_bits=run.defense.secagg_bits,
        )

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int:
        """Stage 1's rounds, ``n_rounds`` per view (the fusion's lines are numbered on their
        own, ``fusion round k/fusion_rounds``)."""
        return len(view_dims_of(setup)) * int(run.params.n_rounds)

    def round_message(self, role: str) -> str:
        return "train_view"  # the fusion is not checkpointed: a resumed run redoes it

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """The received models, as label predictors for sequences whose values the attacker
        knows: per view the global GRU extractor, then the fusion's ``W_k`` on the
        embeddings (the H-FedMV observations of stage 2: the server holds every client's
        own ``W_local_k``, a client the global ``W_k``). A client receives the global
        extractors (``final_view``); the server averages the last replies it received, as
        it did to compute them."""
        K, c = len(view_dims_of(setup)), int(setup["n_classes"])
        if recording.party == run.federation.coordinator:
            grus = _averaged_extractors(recording, run.defense.secagg_bits)  # as the server did
        else:
            grus = {int(m.number("view")): _params_of(m) for m in recording.select("final_view")}
        if len(grus) != K:
            return []
        fusion = HFEDMV_SPEC.observations(_fusion_run(run), _fusion_setup(run, setup), recording)
        out = []
        for obs in fusion:
            assert obs.predict is not None
            predict = _sequence_predictor(grus, obs.predict, view_dims_of(setup), c, run)
            out.append(replace(obs, name=f"global GRUs + {obs.name}", predict=predict))
        return out

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        return watch_clients(cfg)


def evenly_spaced(idx: np.ndarray, n: int) -> np.ndarray:
    """At most ``n`` of ``idx``, evenly spaced (0 = all)."""
    if not n or len(idx) <= n:
        return idx
    return idx[np.unique(np.linspace(0, len(idx) - 1, n).round().astype(int))]


def deal_subjects(ds: Any, n_clients: int, error: str) -> Any:
    """The sequences ``ds`` with their subjects dealt in sorted order into clients
    ``0..n_clients-1`` (``error``, formatted with ``n_clients`` and ``n_subjects``: the
    :class:`ConfigError` when there are fewer subjects than clients)."""
    subjects = ds.clients()
    if n_clients > len(subjects):
        raise ConfigError(error.format(n_clients=n_clients, n_subjects=len(subjects)))
    group = {s: i * n_clients // len(subjects) for i, s in enumerate(subjects)}
    return replace(ds, client_ids=np.array([group[s] for s in np.asarray(ds.client_ids).tolist()]))


def holdout_mask(ds: Any, split: str, test_fraction: float, seed: int | None = None) -> np.ndarray:
    """The test samples of the sequences ``ds`` (``groups``: each window's recording, in time
    order). ``split="time"``: the last ``test_fraction`` (rounded up) of every recording's
    windows; ``"recording"``: ``test_fraction`` of the recordings of every (client, class)
    cell, at least one and never all, drawn with ``seed``."""
    test = np.zeros(ds.n_samples, dtype=bool)
    groups = np.asarray(ds.groups)
    if split == "time":
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            k = int(np.ceil(test_fraction * len(idx)))
            if len(idx) > k:  # a recording with one window stays in training
                test[idx[-k:]] = True
        return test
    rng = np.random.default_rng(seed)
    first = {g: i for i, g in reversed(list(enumerate(groups.tolist())))}
    for c in np.unique(ds.client_ids):
        for y in np.unique(ds.y):
            recs = sorted({g for g, i in first.items() if ds.client_ids[i] == c and ds.y[i] == y})
            if len(recs) < 2:
                continue
            k = max(1, round(test_fraction * len(recs)))
            test |= np.isin(groups, rng.choice(recs, size=min(k, len(recs) - 1), replace=False))
    return test


def watch_clients(cfg: Any) -> dict[str, PartyData]:
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
    ds = deal_subjects(
        ds, len(fed.parties), "{n_clients} clients but the watch data has {n_subjects} subjects"
    )
    test = holdout_mask(ds, "time", TEST_FRACTION)
    X = np.concatenate([np.stack(v) for v in ds.views], axis=2).astype(np.float32)
    dims = tuple(int(c) for c in ds.n_channels)
    y = np.asarray(ds.y, dtype=np.int64)
    rng = np.random.default_rng(cfg.seed)
    files: dict[str, PartyData] = {}
    for m, name in enumerate(fed.parties):
        mine = ds.client_ids == m
        rows = np.concatenate(
            [
                evenly_spaced(np.flatnonzero(mine & ~test & (y == c)), spec.n_per_class)
                for c in np.unique(y)
            ]
        )
        trows = evenly_spaced(np.flatnonzero(mine & test), spec.n_test)
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


SFEDMV_SPEC = register_algorithm_spec(SFedMVAlgorithm())


def _make_fusion(
    fusion_run: RunSpec,
    fusion_setup: Mapping[str, Any],
    party: str,
    local: Local,
    X: list[np.ndarray],
    X_test: list[np.ndarray] | None,
) -> HFedMVClient:
    """H-FedMV's own client of S-FedMV client ``party``, built by its spec from the client's
    embeddings ``X`` (and ``X_test`` of its test rows)."""
    _, _, y = local.take(party)
    assert y is not None
    test = f"{party}:test"
    n, n_test = len(y), len(local.rows[test]) if test in local.rows else 0
    extra: dict[str, Any] = {}
    if X_test is not None:
        _, _, y_test = local.take(test)
        extra = {"ids_test": np.arange(n_test), "X_test": np.hstack(X_test)}
        extra["y_test"] = y_test
    data = PartyData(np.arange(n), np.hstack(X), y, view_dims=tuple(x.shape[1] for x in X), **extra)
    groups = {g.name: g for g in HFEDMV_SPEC.groups(fusion_run) if party in g.parties}
    rows = {party: np.arange(n), **({test: np.arange(n_test)} if test in local.rows else {})}
    built = HFEDMV_SPEC.build_party(fusion_run, party, Local(data, rows, groups), fusion_setup)
    assert isinstance(built, HFedMVClient)
    return built
