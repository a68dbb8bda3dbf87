r"""H-FedMV (Che et al., Algorithm 3): its params and spec (the parties: :mod:`.parties`).

Client ``l`` holds all views ``X^l_k`` and labels ``Y^l`` of its own samples. Each
round the server sends the global ``W_k``; every client runs ``local_iter`` passes
of local multi-view learning in the order of Algorithm 3 (Z_k step (16), Z step
(17), W step (14-15)), starting from the global ``W_k`` and keeping its ``Z^l``
between rounds; it returns ``W^l_k`` and its sample count ``N_l`` (metadata); the
server sets ``W_k = sum_l (N_l / N) W^l_k``. Only the ``W`` matrices cross; views,
labels and ``Z`` stay local. After the last round the server sends the final
``W_k`` to every client (``final``), which predicts its own test samples locally
(Eqs. 18-19) when it holds some.

Feature scaling (``standardize``): ``"none"`` (the paper), ``"local"`` (every
client its own training statistics) or ``"pooled"``: the clients report their
per-feature sums (``moments``: ``x_sum``, ``x_m2``, ``N_l``), the server pools them
and sends back the mean and scale (``scale``) before round 1.

Initialisation: the server draws a random ``W_k`` (``N(0, 1/d_k)`` entries) as in
Algorithm 3 (stream 0); client ``l`` draws its ``Z^l`` from stream ``1 + l``; the
clients' random ``Z^l_k`` of line 2 are overwritten by Eq. (16) before they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from fedviews._params import COUNT, FLAG, POSITIVE, TOL, VIEW_WEIGHTS, Checked, spec
from fedviews.data import PartyData, held_out_split
from fedviews.errors import ConfigError
from fedviews.federation import (
    Local,
    Observation,
    PrivacyPolicy,
    Recording,
    RunSpec,
    member_entropy,
    noise_multiplier,
    register_algorithm_spec,
    secured_policy,
    spawn_streams,
)
from fedviews.linear._common import LinearAlgorithm, per_party
from fedviews.linear._consensus import IRLSOptions
from fedviews.linear._horizontal import HorizontalClients, view_dims_of
from fedviews.linear.hfedmv.parties import (
    HFedMVClient,
    HFedMVServer,
    pooled_scaler,
    secure_mean_W,
)
from fedviews.linear.hfedmv.protocol import LocalLearner, init_W

#: feature scaling of the clients' training samples
STANDARDIZE = ("none", "local", "pooled")


def hfedmv_policy(n_views: int, *, pooled: bool = False) -> PrivacyPolicy:
    """The H-FedMV barrier for ``n_views`` views: only local and global ``W_k`` cross
    (and, with pooled scaling, the clients' per-feature sums and the pooled mean/scale)."""
    up = [f"W_local_{k}" for k in range(n_views)]
    down = [f"W_{k}" for k in range(n_views)]
    kinds = ["local_train", "final"]
    if pooled:
        up, down, kinds = (
            [*up, "x_sum", "x_m2"],
            [*down, "x_mean", "x_scale"],
            [*kinds, "moments", "scale"],
        )
    return PrivacyPolicy.of(
        "h-fedmv",
        {("client", "coordinator"): up, ("coordinator", "client"): down},
        kinds={("coordinator", "client"): kinds},
    )


def linear_predictor(
    Ws: Sequence[np.ndarray], scaler: tuple[np.ndarray, np.ndarray] | None
) -> Callable[[np.ndarray, np.ndarray | None], np.ndarray]:
    """``X -> argmax_c sum_k (X_k W_k)[:, c]`` for features ``X`` with the views side by side
    (scaled with ``scaler``, or with the given rows' own mean and deviation when it is
    ``None``): how a holder of the ``W_k`` labels samples whose features it knows."""
    W = np.vstack(Ws)

    def predict(X: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
        mean, sd = scaler if scaler is not None else (X.mean(0), X.std(0))
        return np.argmax(((X - mean) / np.where(sd > 1e-12, sd, 1.0)) @ W, axis=1)

    return predict


def _model(
    name: str, victim: str, Ws: list[np.ndarray], scaler: tuple[np.ndarray, np.ndarray] | None
) -> Observation:
    """A received model as an observation about ``victim``'s samples (rows: all of its group)."""
    none = np.zeros(0, dtype=np.int64)
    predict = linear_predictor(Ws, scaler)
    return Observation(name, "model", victim, none, none, victim, victim, predict)


@dataclass(frozen=True)
class HFedMVParams(Checked):
    """Hyper-parameters of H-FedMV: the one declaration used by :class:`HFedMV`, experiments
    and deployments (``[params]``).

    ``beta``/``zeta``: one value or one per view. ``standardize``: ``"none"`` (the
    paper), ``"local"`` or ``"pooled"`` (module docstring). ``evaluate``
    (deployments): every client predicts its own test split with the final model
    and reports its counts.
    """

    beta: float | tuple[float, ...] = field(default=4.0, metadata=VIEW_WEIGHTS)
    zeta: float | tuple[float, ...] = field(default=8.0, metadata=VIEW_WEIGHTS)
    eta: float = field(default=16.0, metadata=POSITIVE)
    n_rounds: int = field(default=20, metadata=COUNT)
    local_iter: int = field(default=2, metadata=COUNT)
    inner_max_iter: int = field(default=5, metadata=COUNT)
    inner_tol: float = field(default=1e-6, metadata=TOL)
    test_max_iter: int = field(default=1000, metadata=COUNT)
    test_tol: float = field(default=1e-8, metadata=TOL)
    eps: float = field(default=1e-10, metadata=POSITIVE)
    """ε of the IRLS reweighting (keeps a zero row of ``W_k`` from dividing by zero)."""
    standardize: str = field(default="none", metadata=spec(str, choices=STANDARDIZE))
    evaluate: bool = field(default=False, metadata=FLAG)


class HFedMVAlgorithm(HorizontalClients, LinearAlgorithm):
    """H-FedMV as a federated algorithm: clients with all views of their own samples."""

    name = "hfedmv"
    predicts_alone = (
        "every H-FedMV client holds all views of its samples and predicts alone with the W_k "
        "in its result.npz (the consensus of Eqs. 18-19, as HFedMV.predict does)"
    )
    Params = HFedMVParams
    defenses = frozenset({"none", "secagg", "label_rr", "model_dp"})

    def dp_releases(self, run: RunSpec) -> int:
        """Under ``model_dp`` a client's data enters one release (its update) per round."""
        return int(run.params.n_rounds)

    def planned_rounds(self, run: RunSpec, setup: Mapping[str, Any]) -> int:
        return int(run.params.n_rounds)

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        if run.defense.kind == "model_dp" and run.params.standardize == "pooled":
            raise ConfigError(
                "model_dp does not noise the pooled feature moments: set params.standardize "
                "to 'local' or 'none'"
            )
        return super().make_setup(run, infos)

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        K, pooled = len(view_dims_of(setup)), run.params.standardize == "pooled"
        policy = hfedmv_policy(K, pooled=pooled)
        if run.defense.secagg_bits is None:
            return policy
        masked = {f"W_local_{k}": [f"masked_W_local_{k}"] for k in range(K)}
        masked["W_local_0"].append("masked_objective")
        if pooled:
            masked |= {"x_sum": ["masked_x_sum"], "x_m2": ["masked_x_sq"]}
        return secured_policy(policy, masked)

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> HFedMVClient:
        p: HFedMVParams = run.params
        parties = run.federation.parties
        seed = spawn_streams(run.seed, len(parties) + 1)[1 + parties.index(party)]
        K, c = len(view_dims_of(setup)), int(setup["n_classes"])
        betas, zetas = per_party(p.beta, K, "beta"), per_party(p.zeta, K, "zeta")

        def take(group: str) -> tuple[list[np.ndarray], np.ndarray]:
            _, X, y = local.take(group)
            assert y is not None
            return [np.ascontiguousarray(v, dtype=np.float64) for v in local.data.views(X)], y

        views, y = take(party)
        Y = np.eye(c)[np.asarray(y, dtype=np.int64)]
        test = take(f"{party}:test") if f"{party}:test" in local.rows else None
        make = partial(
            LocalLearner,
            Y=Y,
            betas=betas,
            zetas=zetas,
            eta=p.eta,
            seed=seed,
            solver=IRLSOptions(p.inner_max_iter, p.inner_tol, p.eps),
        )
        return HFedMVClient(
            party,
            views,
            Y,
            make,
            local_iter=p.local_iter,
            standardize=p.standardize,
            test=test,
            zetas=zetas,
            test_opts=(p.test_max_iter, p.test_tol),
            secure=run.defense.secagg_bits is not None,
            dp=self._dp(run, party),
        )

    def _dp(self, run: RunSpec, party: str) -> tuple[float, float, np.random.SeedSequence] | None:
        d = run.defense
        if d.kind != "model_dp":
            return None
        z = noise_multiplier(d, self.dp_releases(run))
        return float(d.clip), 2.0 * z * float(d.clip), member_entropy(run, party)

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> HFedMVServer:
        p: HFedMVParams = run.params
        clients = run.federation.parties
        seed = spawn_streams(run.seed, len(clients) + 1)[0]
        W0 = init_W(view_dims_of(setup), int(setup["n_classes"]), seed)
        pooled = p.standardize == "pooled"
        return HFedMVServer(
            clients, W0, p.n_rounds, pooled=pooled, frac_bits=run.defense.secagg_bits
        )

    def round_message(self, role: str) -> str:
        return "local_train"

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """The models an attacker received, as label predictors for samples whose features it
        knows: the server gets every client's own ``W_local_k`` (trained on that client's
        samples only), a client gets the global ``W_k`` (about every other client). With
        pooled scaling both know the pooled statistics, without scaling none is needed; with
        each client's own scaling the attacker scales the rows it knows with their own
        statistics."""
        K, width = len(view_dims_of(setup)), sum(view_dims_of(setup))
        scaler: tuple[np.ndarray, np.ndarray] | None = None  # "local": unknown to the attacker
        if run.params.standardize == "none":  # the model is on raw features
            scaler = (np.zeros(width), np.ones(width))
        bits = run.defense.secagg_bits
        if run.params.standardize == "pooled":
            got = recording.select("moments:reply") or recording.select("scale")
            if got and got[0].kind == "scale":
                scaler = (got[0].arrays["x_mean"], got[0].arrays["x_scale"])
            elif got:  # the server: from the clients' statistics (only their sums, with secagg)
                scaler = pooled_scaler({m.sender: m.message() for m in got}, width, bits)
        out = []
        clients = run.federation.parties
        if recording.party == run.federation.coordinator:
            replies = recording.select("local_train:reply")
            last = [m for m in replies if m.round == max((r.round for r in replies), default=0)]
            if last and bits is not None:  # the sum is all it learns: the global model
                shapes = [(d, int(setup["n_classes"])) for d in view_dims_of(setup)]
                Ws, _ = secure_mean_W({m.sender: m.message() for m in last}, shapes, bits)
                out += [_model("W from the masked sum", c, Ws, scaler) for c in clients]
            for m in last if bits is None else []:
                Ws = [m.arrays[f"W_local_{k}"] for k in range(K)]
                out.append(_model(f"W_local from {m.sender}", m.sender, Ws, scaler))
        else:
            for m in (recording.select("final") or recording.select("local_train"))[-1:]:
                Ws = [m.arrays[f"W_{k}"] for k in range(K)]
                out += [_model("global W", c, Ws, scaler) for c in clients if c != recording.party]
        return out

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Deal a built-in multi-view dataset to the clients: all views of their own samples.

        ``[data]``: ``dataset``, ``views`` (default: all of the dataset's), ``n_per_class``
        (balanced subsample, 0 = all), ``n_test`` (stratified held-out samples, dealt
        IID to the clients, 0 = none), ``scenario`` (how the training samples are
        dealt, :func:`fedviews.data.partition_clients`: ``"iid"``, ``"label_skew"``,
        ``"dirichlet"``). Labels are written as class indices ``0..C-1``; every file
        holds ``view_dims`` and lists its rows in its own random order.
        """
        from fedviews.data import balanced_subsample, load, partition_clients

        fed, spec = cfg.federation, cfg.data
        ds = load(spec.dataset, **({"views": list(spec.views)} if spec.views else {}))
        if spec.n_per_class:
            ds = ds.subset(balanced_subsample(ds.y, spec.n_per_class, random_state=cfg.seed))
        classes = np.unique(ds.y)
        y = np.searchsorted(classes, np.asarray(ds.y)).astype(np.int64)
        X = np.hstack([np.asarray(v, dtype=np.float64) for v in ds.views])
        dims = [int(v.shape[1]) for v in ds.views]
        tr, te = held_out_split(y, spec.n_test, cfg.seed)
        M = len(fed.parties)
        parts = partition_clients(y[tr], M, spec.scenario, random_state=cfg.seed)
        tparts = partition_clients(y[te], M, "iid", random_state=cfg.seed) if len(te) else None
        rng = np.random.default_rng(cfg.seed)
        files: dict[str, PartyData] = {}
        for m, client in enumerate(fed.parties):
            rows = tr[parts[m]][rng.permutation(len(parts[m]))]
            test: dict[str, Any] = {}
            if tparts is not None:
                trows = te[tparts[m]][rng.permutation(len(tparts[m]))]
                test = {"ids_test": ds.ids[trows], "X_test": X[trows], "y_test": y[trows]}
            files[client] = PartyData(ds.ids[rows], X[rows], y[rows], view_dims=tuple(dims), **test)
        return files


HFEDMV_SPEC = register_algorithm_spec(HFedMVAlgorithm())
