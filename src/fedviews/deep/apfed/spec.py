"""APFed, defined once: hyper-parameters, roles, privacy policy, the epoch driver, demo data.

:class:`APFedAlgorithm` is the one definition that the estimators
(:class:`fedviews.deep.APFed` and :class:`fedviews.deep.SingleVL`, in one process)
and a deployment (``fedviews launch``, one process per party) both run. This
module needs no torch to import (the registry loads it to read deployment
configs); the parties (:mod:`fedviews.deep.apfed.parties`) and networks are
imported when a party is built. What APFed shares with the split NN (the active and
passive roles, the epoch driver, seeds) is in :mod:`fedviews.deep._strips`.

Parties: ``federation.parties`` lists the ``m`` clients in the order of their
image strips (top to bottom); ``federation.label_owner`` is the **active** party
(role ``"active"``: its own strip, all labels, ``f_A`` and ``g_T``); every other
party is **passive** (role ``"passive"``: its own strip and its decoder (APFed-R)
or encoder (APFed-C)). So the ``m-i`` setting is ``m = len(parties)`` and ``i`` =
the active party's position (1-based). With the active party alone it is SingleVL.

Protocol (every message policy-checked and logged, in one process or deployed):

* the coordinator is a small **driver** (:class:`~fedviews.deep._strips.EpochDriver`) that holds no data
  and no model: it asks the active party for one epoch at a time (``apfed.train``,
  round = epoch), keeps the scalars it reports (mean ``L_A``; the test accuracy
  with ``evaluate``), then tells the passive parties the epoch is over
  (``apfed.epoch_done``, their checkpoint point);
* within an epoch the active party sends each passive party the epoch's shuffle
  seed (``apfed.epoch``) and, per batch, ``h_A`` (``apfed.forward``); the passive
  party replies ``λ_p ∂L_p/∂h_A`` (``grad_h_A``). Deployed, these go through the
  coordinator's hub, whose message log shows every array that crossed;
* with ``evaluate`` the active party scores its own strip of the test images after
  every epoch, alone (Eq. 11); its results hold its complete model, and a deployed
  active party writes its export folder ``model/`` (:func:`export_apfed_model`).

Alignment: one PSI of all parties on the training IDs. The test split is the
active party's alone.

Networks: ``params.encoder``, ``head``, ``decoder`` and ``passive_encoder`` name user
factories (:class:`~fedviews.deep._apfed_nets.APFedNets`; ``""``: the paper's networks of
``arch``). The active party builds ``f_A`` at setup and reports the shape of ``h_A``
(``h_A`` of the setup); every passive party builds its decoder or encoder for it, checked
against what its loss compares, and refuses ``h_A`` of any other shape.

Data (a :class:`~fedviews.data.PartyData` per party; ``fedviews launch`` writes
them from ``[data]``, see :func:`apfed_demo_data`): every party holds ``ids`` and
``X`` ``(n, h, W)`` (or ``(n, C, h, W)``), its strip of every image, or every party its own
table columns ``(n, k_p)`` (widths may differ; the setup then holds each party's
``input/<party>`` shape, and the default networks are fedviews' MLPs); the active
party also ``y`` and, to evaluate, ``ids_test``, ``X_test``, ``y_test``. ``uint8``
pixels are scaled to ``[0, 1]`` (``X / 255``), other values are used as given.

Random streams: ``spawn_streams(seed, m)``: ``[0]`` the active party, ``[1 + j]``
the ``j``-th passive party; a deployed run equals ``APFed(m=len(parties), i=...,
random_state=seed).fit(images, y)`` on the aligned images (rows in ascending ID
order, strips stacked top to bottom).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews._params import DEVICE, FACTORY, FLAG, POSITIVE, Checked, spec
from fedviews.data import PartyData, demo_image_split
from fedviews.deep._common import TOPK_RATIO, WIRE, as_strips, last_epoch_seen
from fedviews.deep._factory import (
    parse_shape,
    reported_shape,
    resolve_factory,
    shape_info,
    shape_text,
)
from fedviews.deep._strips import (
    BATCH_SIZE,
    EPOCHS,
    MOMENTUM,
    WEIGHT_DECAY,
    ActivePassive,
    EpochDriver,
    active_of,
    cut_images,
    party_seeds,
    passives_of,
    sgd_settings,
)
from fedviews.errors import ConfigError, DataError
from fedviews.federation import (
    Codec,
    Local,
    Observation,
    Party,
    PrivacyPolicy,
    Recording,
    Roster,
    RunSpec,
    register_algorithm_spec,
    wire_codecs,
)

if TYPE_CHECKING:
    from fedviews.deep._apfed_nets import APFedNets
    from fedviews.deep.apfed.parties import ActiveClient, PassiveClient

VARIANTS = ("R", "C")
#: APFed-R's ``ℓ_p`` (Eq. 12): the per-sample L2 norm, or the per-pixel mean square (older)
RECON_LOSSES = ("l2", "mse")
ARCH_NAMES = ("auto", "table3", "table4")

#: fields of :class:`APFedParams` that only a deployment uses (the estimators have none)
DEPLOY_ONLY = ("evaluate", "torch_threads")
#: ``λ_p`` of Eq. 8: one value for every passive party or one each
LAM = spec(float, low=0, per="passive party")
#: torch threads of a party process (0: torch's default)
TORCH_THREADS = spec(int, low=0)


# --------------------------------------------------------------------------- params


@dataclass(frozen=True)
class APFedParams(Checked):
    """Hyper-parameters of APFed: the one declaration used by :class:`~fedviews.deep.APFed`,
    :class:`~fedviews.deep.SingleVL` and deployments (the ``[params]`` table).

    ``variant``: the passive loss, ``"R"`` (reconstruction, decoder, Eq. 12) or ``"C"``
    (contrastive, encoder, Eq. 14 with temperature ``tau``). ``recon_loss``:
    APFed-R's ``ℓ_p``, ``"l2"`` (Eq. 12 with ``q = 2``: the L2 norm of each
    sample's residual ``x_i^p − DEC(h_i^A)``, averaged over the batch as Eq. 7
    averages over samples) or ``"mse"`` (the mean square over every pixel of the
    batch, which fedviews used before 2026-11; its gradient on ``h_A`` is about
    20× smaller at initialisation, so ``λ`` means something else). ``lam``: ``λ_p`` of
    Eq. 8, one value for every passive party or one each (in strip order),
    ``>= 0``; default 0.1 (the paper's Table 2 configs set 1.0: with the per-sample L2
    loss, λ = 1 holds APFed-R near chance for the first ~100 SGD steps). ``epochs``, ``batch_size``, ``lr``, ``momentum``, ``weight_decay``:
    SGD settings of every party (paper: lr 1e-3, momentum 0.9, weight decay 1e-4; the
    default lr is 0.01: at 1e-3 a few epochs stay near chance, and at 0.03 APFed-R's
    reconstruction gradient kills the active encoder's ReLUs, see docs/algorithms/apfed.md).
    ``pad``: zero rows at the bottom when the image height is not a multiple of
    ``m`` (the estimators cut images with it; ``fedviews launch`` cuts the demo
    data with it: the parties' files must hold strips of equal size). ``arch``:
    the networks of the paper's Table 3 (1 channel) or Table 4 (3 channels).
    ``device``: ``"auto"``, ``"cpu"``, ``"cuda"`` (``"cuda:<k>"``) or ``"mps"``.

    Deployment only (:data:`DEPLOY_ONLY`; the estimators run with the defaults
    that change nothing): ``evaluate``: the active party reports its test accuracy
    after every epoch (its file needs a test split); ``torch_threads``: torch
    threads of every party process (0 = torch's default).
    """

    variant: str = field(default="R", metadata=spec(str, choices=VARIANTS))
    recon_loss: str = field(default="l2", metadata=spec(str, choices=RECON_LOSSES))
    lam: float | tuple[float, ...] = field(default=0.1, metadata=LAM)
    tau: float = field(default=0.5, metadata=POSITIVE)
    epochs: int = field(default=10, metadata=EPOCHS)
    batch_size: int = field(default=64, metadata=BATCH_SIZE)
    lr: float = field(default=0.01, metadata=POSITIVE)
    momentum: float = field(default=0.9, metadata=MOMENTUM)
    weight_decay: float = field(default=1e-4, metadata=WEIGHT_DECAY)
    pad: bool = field(default=False, metadata=FLAG)
    arch: str = field(default="auto", metadata=spec(str, choices=ARCH_NAMES))
    device: str = field(default="auto", metadata=DEVICE)
    evaluate: bool = field(default=True, metadata=FLAG)
    torch_threads: int = field(default=0, metadata=TORCH_THREADS)
    wire_activations: str = field(default="none", metadata=WIRE)
    """How the active party sends ``h_A``: ``"none"`` (exact float32), ``"fp16"``, ``"bf16"`` or
    ``"int8"`` (lossy, opt-in; :class:`~fedviews.federation.Codec`).
    """
    wire_gradients: str = field(default="none", metadata=WIRE)
    """How passive parties send ``grad_h_A``: as ``wire_activations``, or ``"topk"`` (the largest
    ``topk_ratio`` of each sample's entries).
    """
    topk_ratio: float = field(default=0.1, metadata=TOPK_RATIO)
    """Fraction of each sample's gradient entries that ``"topk"`` keeps."""
    encoder: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """Factory of the active party's ``f_A``, ``encoder(input_shape)``: a module on the active
    strip (per-sample ``input_shape`` ``(C, h, W)``). ``""``: the encoder of ``arch``."""
    head: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """Factory of ``g_T``, ``head(input_shape, n_classes)``: a module on ``h_A`` (per-sample
    ``input_shape``: what ``f_A`` returns) returning ``n_classes`` logits. ``""``: the head of
    ``arch`` (flatten, ``hidden`` ReLU units, logits)."""
    decoder: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """APFed-R: factory of a passive party's ``DEC_p``, ``decoder(input_shape, output_shape)``:
    a module from ``h_A`` (per-sample ``input_shape``) to exactly the passive strip
    ``output_shape`` ``(C, h, W)``, which Eq. 12 compares it with. ``""``: the transposed
    convolutions of ``arch`` (they invert its encoder)."""
    passive_encoder: str | Callable[..., Any] = field(default="", metadata=FACTORY)
    """APFed-C: factory of a passive party's ``ENC_p``, ``passive_encoder(input_shape)``: a
    module on its strip returning as many features as ``h_A`` has (Eq. 15 takes their
    cosine). ``""``: ``encoder``'s factory."""

    def networks(self, channels: int, table: bool = False) -> APFedNets:
        """The networks of a run on strips of ``channels`` channels (``table``: on table
        columns, whose default networks are fedviews' MLPs)."""
        from fedviews.deep._apfed_nets import APFedNets

        return APFedNets(
            self.arch,
            channels,
            self.encoder,
            self.head,
            self.passive_encoder,
            self.decoder,
            table=table,
        )

    def codecs(self) -> tuple[Codec, Codec]:
        """How ``h_A`` and ``grad_h_A`` travel (:class:`~fedviews.federation.Codec`; lossy
        ones change the math, so they are off by default)."""
        return wire_codecs(self.wire_activations, self.wire_gradients, self.topk_ratio)

    def lams(self, n_passive: int) -> list[float]:
        """``λ_p`` of each of ``n_passive`` passive parties (of validated params)."""
        lam = self.lam
        if isinstance(lam, (list, tuple, np.ndarray)):
            return [float(v) for v in lam]
        return [float(lam)] * n_passive

    def cross_check(self, n_parties: int | None) -> None:
        """The codecs together (top-k only for the returned gradients) and the factories: an
        import path must import a callable (what it builds is checked where the shapes are
        known, at setup)."""
        self.codecs()
        for name in ("encoder", "head", "decoder", "passive_encoder"):
            resolve_factory(getattr(self, name), name)


# --------------------------------------------------------------------------- policy


def apfed_policy(n_passive: int, codecs: tuple[Codec, Codec] = (Codec(), Codec())) -> PrivacyPolicy:
    """The APFed barrier of a run with ``n_passive`` passive parties.

    Arrays: only ``h_A`` (active → passive) and ``grad_h_A`` (passive → active)
    cross (Algorithm 1, steps 4 and 7); the driver sends and receives none. Kinds:
    the driver asks the active party for epochs (``apfed.train``) and tells the
    passive parties when one is over (``apfed.epoch_done``); the active party
    starts each epoch (``apfed.epoch``) and sends every batch (``apfed.forward``).
    A passive party sends nothing but replies. Without passive parties (SingleVL)
    only ``apfed.train`` goes.
    """
    rules: dict[tuple[str, str], list[str]] = {}
    kinds: dict[tuple[str, str], list[str]] = {("coordinator", "active"): ["apfed.train"]}
    if n_passive:
        rules = {
            ("active", "passive"): codecs[0].names("h_A"),
            ("passive", "active"): codecs[1].names("grad_h_A"),
        }
        kinds[("active", "passive")] = ["apfed.epoch", "apfed.forward"]
        kinds[("coordinator", "passive")] = ["apfed.epoch_done"]
    return PrivacyPolicy.of("apfed", rules, kinds=kinds)


#: the barrier of a run with passive parties (any number of them: the policy is per role)
APFED_POLICY = apfed_policy(1)


# --------------------------------------------------------------------------- the spec


class APFedAlgorithm(ActivePassive):
    """APFed as a federated algorithm: one active party, passive parties, a driver."""

    name = "apfed"
    tables = True
    predicts_alone = (
        "APFed's active party predicts alone with the model it exported: "
        "`fedviews apfed predict <run>/<active party>/model NEW.npy`"
    )
    Params = APFedParams

    def check_federation(self, fed: Roster) -> None:
        if fed.label_owners or not fed.label_owner:
            raise ConfigError(
                "apfed has one active party: set federation.label_owner (not label_owners)"
            )
        if fed.label_owner not in fed.parties:
            raise ConfigError(f"the active party {fed.label_owner!r} is not one of the parties")

    def per_party_count(self, fed: Roster) -> int | None:
        return len(fed.parties) - 1  # lam: one per passive party

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        super().check_data(run, party, data)
        if party == active_of(run) and run.params.evaluate and data.y_test is None:
            raise DataError(
                f"{party!r} is the active party: its file needs ids_test, X_test and y_test "
                "(or set params.evaluate = false)"
            )

    def party_info(self, run: RunSpec, party: str, local: Local) -> dict[str, Any]:
        """Its strips' shape (table columns: ``input``, their per-sample shape ``(k,)``); the
        active party also the number of classes and the per-sample shape of ``h_A`` (from its
        ``f_A``), which the passive parties then expect."""
        X = local.data.features
        if X.ndim == 2:
            info: dict[str, Any] = shape_info("input", X.shape[1:])
            table, C = True, 1
        else:
            C = 1 if X.ndim == 3 else int(X.shape[1])
            info = {"channels": C, "height": int(X.shape[-2]), "width": int(X.shape[-1])}
            table = False
        if party == active_of(run):
            info["n_classes"] = int(len(np.unique(np.asarray(local.take("train")[2]))))
            shape = (int(X.shape[1]),) if table else (C, info["height"], info["width"])
            info |= shape_info("h_A", run.params.networks(C, table).rep_shape(shape))
        return info

    def make_setup(self, run: RunSpec, infos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Strips: their one size (``channels``, ``height``, ``width``); table columns: every
        party's ``input/<party>`` (widths may differ: each passive network is built for its
        party's own). Both: the active party's ``n_samples`` and ``h_A``."""
        tables = {p for p, i in infos.items() if "channels" not in i}
        if tables and len(tables) != len(infos):
            raise DataError(
                f"APFed's parties hold all image strips or all table columns: {sorted(tables)} "
                f"hold table columns, {sorted(set(infos) - tables)} strips"
            )
        shapes = {
            p: tuple(int(i[k]) for k in ("channels", "height", "width"))
            for p, i in infos.items()
            if not tables
        }
        if len(set(shapes.values())) > 1:
            raise DataError(
                f"APFed needs strips of equal size (C, h, W) at every party, got {shapes}; "
                "cut the images into equal strips (pad them, see params.pad)"
            )
        active = infos[active_of(run)]
        if int(active["n_classes"]) < 2:
            raise DataError("the active party's labels must contain at least two classes")
        n, rep = int(active["n/train"]), shape_text(reported_shape(active, "h_A", active_of(run)))
        if tables:
            inputs = {
                f"input/{p}": shape_text(reported_shape(i, "input", p)) for p, i in infos.items()
            }
            return {"n_samples": n, "h_A": rep, **inputs}
        C, h, w = shapes[active_of(run)]
        return {"n_samples": n, "channels": C, "height": h, "width": w, "h_A": rep}

    def policy(self, run: RunSpec, setup: Mapping[str, Any]) -> PrivacyPolicy:
        return apfed_policy(len(passives_of(run)), run.params.codecs())

    def observations(
        self, run: RunSpec, setup: Mapping[str, Any], recording: Recording
    ) -> list[Observation]:
        """A passive party's view: the active party's representation ``h_A`` of every sample in
        the last epoch it saw (rows from the epoch's ``shuffle_seed``, as the passive party
        derives them). ``h_A = f_A(x_A)`` is a function of the active party's strip, and it
        is trained to predict the active party's labels."""
        active = active_of(run)
        if recording.party == active:
            return []
        codec = run.params.codecs()[0]

        def h_a(m: Any) -> np.ndarray:
            return codec.unpack(m.message(), "h_A", (None,) * m.arrays["h_A"].ndim)

        seen = last_epoch_seen(recording, "apfed.forward", "h_A", h_a)
        if seen is None:
            return []
        return [Observation("h_A", "representation", "train", *seen, active, active)]

    def build_party(
        self, run: RunSpec, party: str, local: Local, setup: Mapping[str, Any]
    ) -> ActiveClient | PassiveClient:
        from fedviews.deep._common import party_device
        from fedviews.deep.apfed.parties import ActiveClient, PassiveClient

        p: APFedParams = run.params
        parties, passives = list(run.federation.parties), passives_of(run)
        seeds = party_seeds(run.seed, len(parties))
        table = "channels" not in setup  # the parties hold table columns
        C = 1 if table else int(setup["channels"])
        nets = p.networks(C, table)
        common = sgd_settings(p, party_device(p.device, p.torch_threads))
        _, X, y = local.take("train")
        if party != active_of(run):
            return PassiveClient(
                party,
                as_strips(X),
                p.variant,
                nets,
                parse_shape(setup["h_A"], "h_A"),
                seed=seeds[1 + passives.index(party)],
                tau=p.tau,
                recon_loss=p.recon_loss,
                codecs=p.codecs(),
                **common,
            )
        classes, y_idx = np.unique(np.asarray(y), return_inverse=True)
        lams = p.lams(len(passives))
        active = ActiveClient(
            as_strips(X),
            y_idx.astype(np.int64),
            len(classes),
            nets,
            passives=passives,
            lams=lams,
            seed=seeds[0],
            epochs=int(p.epochs),
            batch_size=int(p.batch_size),
            name=party,
            codecs=p.codecs(),
            **common,
        )
        active.classes = classes
        m = len(parties)
        # full images given to the export must have m * h rows (none on table columns)
        image = None if table else [C, m * int(setup["height"]), int(setup["width"])]
        active.model_info = {  # model.json of its export (fedviews.deep._export)
            "method": f"APFed-{p.variant}" if passives else "SingleVL",
            "m": m,
            "i": parties.index(party) + 1,
            "pad": False,
            "image_shape": image,
            "settings": {**asdict(p), "lam": lams, "random_state": run.seed},
        }
        if p.evaluate:
            _, X_test, y_test = local.data.split("test")
            assert y_test is not None  # check_data
            pos = np.clip(np.searchsorted(classes, y_test), 0, len(classes) - 1)
            y_test_idx = np.where(classes[pos] == y_test, pos, -1)  # unseen class: never right
            active.set_test(as_strips(X_test), y_test_idx)
        return active

    def build_coordinator(
        self, run: RunSpec, setup: Mapping[str, Any], local: Local | None = None
    ) -> EpochDriver:
        return EpochDriver(
            run.federation.coordinator,
            active_of(run),
            run.params.epochs,
            train="apfed.train",
            passives=passives_of(run),
            done="apfed.epoch_done",
        )

    def round_message(self, role: str) -> str:
        return "apfed.train" if role == "active" else "apfed.epoch_done"

    def write_party_results(self, party: Party, out_dir: Path) -> None:
        """``result.npz``; the active party also writes its export folder ``model/``."""
        from fedviews.deep.apfed.parties import ActiveClient

        super().write_party_results(party, out_dir)
        if isinstance(party, ActiveClient):
            party.export(out_dir / "model")

    def demo_data(self, cfg: Any) -> dict[str, PartyData]:
        """Each party's data from ``[data]`` (see :func:`apfed_demo_data`)."""
        return apfed_demo_data(cfg)


APFED_SPEC = register_algorithm_spec(APFedAlgorithm())


# --------------------------------------------------------------------------- data, export


def apfed_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Cut an image dataset into the strips of the ``m`` parties (``m = len(parties)``).

    ``[data]``: ``dataset`` (``mnist`` or ``fashion_mnist``), ``n_per_class``
    (balanced training subsample, 0 = all), ``n_test`` (test images, 0 = all;
    MNIST: a stratified fifth of the images is the test set), ``overlap`` (each
    party keeps this random fraction of the training images). Images are cut
    into ``m`` equal strips top to bottom in the order of ``federation.parties``
    (``params.pad``: zero rows at the bottom when the height is not a multiple of
    ``m``), as :func:`fedviews.deep._apfed_nets.cut_strips`; or, with ``views`` (one per
    party, in the order of ``federation.parties``), each party holds the columns of its view
    of a multi-view table (e.g. ``handwritten``; ``n_test``: a stratified held-out split).
    The active party also
    gets the labels and its strip of the test images; every file lists its rows
    in its own random order.
    """
    spec, parties, active = cfg.data, list(cfg.federation.parties), active_of(cfg)
    pad, m = bool(cfg.params.pad), len(parties)
    if spec.views:  # a multi-view table: one view's columns per party
        from fedviews.deep.multivfl.demo import table_split

        strips, ytr, ids, test_strips, yte, ids_te, rng = table_split(cfg, m, "APFed parties")
    else:
        (Xtr, ytr, ids, Xte, yte, ids_te), rng = demo_image_split(
            spec.dataset, spec.n_per_class, spec.n_test, cfg.seed
        )
        strips, test_strips = cut_images(Xtr, m, pad), cut_images(Xte, m, pad)
    files: dict[str, PartyData] = {}
    n = len(ytr)
    for k, name in enumerate(parties):
        keep = rng.permutation(n)[: max(1, int(round(spec.overlap * n)))]
        extra: dict[str, Any] = {}
        if name == active:
            tperm = rng.permutation(len(yte))
            extra = {
                "y": ytr[keep],
                "ids_test": ids_te[tperm],
                "X_test": test_strips[k][tperm],
                "y_test": yte[tperm],
            }
        files[name] = PartyData(ids[keep], strips[k][keep], **extra)
    return files


def export_apfed_model(result: str | Path, folder: str | Path) -> Path:
    """Turn an active party's ``result.npz`` into an export folder (``fedviews apfed predict``).

    Load it with :func:`fedviews.deep.load_active_model`; it predicts from the
    active strip alone (or from full images of ``m`` equal strips). A deployed
    active party writes this folder itself (``model/`` beside its ``result.npz``).
    """
    from fedviews.deep._common import require_torch
    from fedviews.deep._export import active_net, export_active_model

    torch = require_torch()
    with np.load(result, allow_pickle=False) as z:
        if "model_json" not in z.files:
            raise DataError(f"{result} is not the result of an APFed active party")
        meta = json.loads(str(z["model_json"]))
        state = {k[4:]: torch.as_tensor(z[k]) for k in z.files if k.startswith("net/")}
    net = active_net(meta)
    net.load_state_dict(state)
    return export_active_model(folder, net, meta)
