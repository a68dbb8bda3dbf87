"""S-FedMV experiment (FedMV paper, Table 3) on public multi-view sequence data.

The paper's BiAffect keystroke sequences are private; its numbers are shown as
context only. Default data: the smartwatch recordings of ``seglearn==1.2.5``
(:func:`fedviews.data.load_sequences` ``"watch"``): views = accelerometer /
gyroscope, 7 exercise classes, windows of 3-6 s at 10 Hz (variable length).

Protocol, for each of ``n_repeats`` repetitions with seed ``seed + r``:

1. clients = subjects, dealt in sorted order into ``n_clients`` groups;
2. train / test split inside every client: ``split="time"`` puts the last
   ``test_fraction`` of every recording's windows into the test set (windows do
   not overlap; the analogue of the paper's split of one participant's sessions);
   ``split="recording"`` holds out whole recordings, ``test_fraction`` of every
   (client, class) cell, at least one (harder: the held-out arm side is unseen);
3. the four methods of Table 3 (:class:`fedviews.deep.SFedMV` settings) are
   fitted on the clients' training sequences and scored on all clients' test
   sequences pooled (each client predicts its own test samples): accuracy,
   macro precision, recall, F1 in %;
4. after every round, the test accuracy of each view's GRU classification head
   is recorded (federated: global model; centralized: the pooled model after the
   same number of epochs; local: every client's own model on its own test data),
   plotted as ``accuracy_per_round.png``.

The two local baselines share one set of locally trained GRUs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from fedviews.deep import SFedMVParams, deal_subjects, evenly_spaced, holdout_mask
from fedviews.errors import ConfigError
from fedviews.experiments._config import ExperimentConfig, check_choice
from fedviews.experiments._metrics import classification_metrics, metric_tables, summarize
from fedviews.experiments._registry import register_experiment
from fedviews.experiments._runner import ExperimentResult, RunContext

__all__ = ["METHODS", "SFedMVExperimentParams", "run_sfedmv"]

#: method key -> (Table 3 name, extractors, fusion)
METHODS: dict[str, tuple[str, str, str]] = {
    "sfedmv": ("S-FedMV", "federated", "hfedmv"),
    "local_hfedmv": ("Local Sequential H-FedMV", "local", "hfedmv"),
    "local_localmv": ("Local Sequential LocalMV", "local", "local"),
    "centralized_hfedmv": ("Centralized Sequential H-FedMV", "centralized", "hfedmv"),
}
SPLITS = ("time", "recording")


@dataclass(frozen=True)
class SFedMVExperimentParams(SFedMVParams):
    """The algorithm's :class:`~fedviews.deep.SFedMVParams` (its fields and checks; the
    experiment runs 15 rounds on 1 torch thread by default) plus the protocol above.
    ``device``: the config's top-level ``device``."""

    n_rounds: int = 15
    torch_threads: int = 1
    """Torch threads of the experiment (2 threads on a busy 2-core machine were ≈ 30× slower)."""
    methods: tuple[str, ...] = tuple(METHODS)
    """Methods compared: ``sfedmv``, ``local_hfedmv``, ``local_localmv``, ``centralized_hfedmv`` (paper
    Table 3 rows).
    """
    n_repeats: int = 3
    """Repetitions (seeds ``seed + r``); results are mean ± std."""
    n_clients: int = 5
    """Clients the subjects are grouped into."""
    split: str = "time"
    """Test split: ``"time"`` (the last ``test_fraction`` of every recording) or ``"recording"``
    (held-out recordings).
    """
    test_fraction: float = 0.25
    """Fraction of each recording (``"time"``) or of the recordings (``"recording"``) held out."""
    max_per_client: int = 0
    """At most this many training windows per client (0 = all; for smoke tests)."""
    paper_table: str = "fedmv_table3_sequential"
    """Key of the paper's table printed beside the results as context."""

    def validate(self) -> None:
        super().validate()
        check_choice("methods", self.methods, tuple(METHODS))
        check_choice("split", self.split, SPLITS)
        if not 0 < self.test_fraction < 1:
            raise ConfigError("params.test_fraction must lie in (0, 1)")
        for name in ("n_repeats", "n_clients", "torch_threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"params.{name} must be >= 1")
        if self.max_per_client < 0:
            raise ConfigError("params.max_per_client must be >= 0 (0 = all)")


@register_experiment(
    "sfedmv",
    SFedMVExperimentParams,
    description="S-FedMV vs local / centralized sequential baselines (FedMV paper, Table 3)",
    default_dataset="watch",
    needs="torch",
)
def run_sfedmv(cfg: ExperimentConfig, ctx: RunContext) -> ExperimentResult:
    from fedviews.data import load_sequences
    from fedviews.deep import require_torch, sequence_logits
    from fedviews.deep.sfedmv import SFedMV
    from fedviews.report import line_panels

    torch = require_torch()
    p: SFedMVExperimentParams = cfg.params
    if p.device != SFedMVParams.device:
        raise ConfigError("params.device: set the experiment's top-level `device` instead")
    # the estimator's hyper-parameters are the algorithm's, less the deployment-only ones
    names = {f.name for f in fields(SFedMVParams)} & set(SFedMV().get_params())
    algo = {name: getattr(p, name) for name in names} | {"device": cfg.device}
    ds = deal_subjects(
        load_sequences(cfg.data.name, **dict(cfg.data.options)),
        p.n_clients,
        "params.n_clients={n_clients} but the data has {n_subjects} subjects",
    )
    K, R = ds.n_views, p.n_rounds
    modes = sorted({METHODS[m][1] for m in p.methods})
    scores: dict[str, list[dict[str, float]]] = {m: [] for m in p.methods}
    curves: dict[str, np.ndarray] = {m: np.zeros((p.n_repeats, K, R)) for m in modes}
    log_summary: dict[str, Any] | None = None
    threads = torch.get_num_threads()
    torch.set_num_threads(p.torch_threads)
    work = p.n_repeats * (len(modes) + len(p.methods))
    try:
        with ctx.progress(work, "repeats x (extractors + fusions)") as advance:
            for r in range(p.n_repeats):
                seed = cfg.seed + r
                test = holdout_mask(ds, p.split, p.test_fraction, seed)
                # at most max_per_client training windows per client, evenly spaced, so that
                # every recording and class keeps some
                clients = [np.flatnonzero(~test & (ds.client_ids == c)) for c in range(p.n_clients)]
                train = [evenly_spaced(rows, p.max_per_client) for rows in clients]
                train_cl = ds.subset(np.concatenate(train)).by_client(list(range(p.n_clients)))
                test_cl = ds.subset(test).by_client(list(range(p.n_clients)))
                y_true = np.concatenate([y for _, y in test_cl])
                for mode in modes:
                    correct = np.zeros((K, R))

                    def on_round(
                        k: int,
                        t: int,
                        client: int | None,
                        model: Any,
                        _c: Any = correct,
                        _test: Any = test_cl,
                    ) -> None:
                        cl = range(p.n_clients) if client is None else [client]
                        for l in cl:  # noqa: E741
                            views, y = _test[l]
                            # labels of the test clients are global class indices; so are the model's
                            # (every class occurs in the training data, checked below)
                            _c[k, t - 1] += (sequence_logits(model, views[k]).argmax(1) == y).sum()

                    est = SFedMV(extractors=mode, **algo, random_state=seed)
                    est.fit_extractors(train_cl, on_round=on_round)
                    if len(est.classes_) != ds.n_classes:
                        raise ConfigError(
                            "a class is missing from the training data; lower test_fraction"
                        )
                    curves[mode][r] = 100.0 * correct / sum(len(y) for _, y in test_cl)
                    if mode == "federated":
                        assert est.transport_ is not None
                        log_summary = est.transport_.log.summary()
                    advance(1)
                    for m in p.methods:
                        _, m_mode, fusion = METHODS[m]
                        if m_mode != mode:
                            continue
                        est.set_params(fusion=fusion).fit_fusion(train_cl)
                        y_pred = np.concatenate(
                            [est.predict(v, client=l) for l, (v, _) in enumerate(test_cl)]  # noqa: E741
                        )
                        scores[m].append(classification_metrics(y_true, y_pred))
                        advance(1)
                ctx.checkpoint({"repeats_done": r + 1, "scores": scores})
    finally:
        torch.set_num_threads(threads)

    summary = {METHODS[m][0]: summarize(scores[m]) for m in p.methods}
    n_train = int(sum(len(y) for _, y in train_cl))
    note = (
        f"{ds.name}: {ds.n_samples} samples ({ds.n_dropped} dropped by the length filter), "
        f"{K} views {ds.view_names}, {ds.n_classes} classes, {p.n_clients} clients, split={p.split!r} "
        f"({n_train} train / {int(test.sum())} test in the last repeat); {p.n_repeats} repeats, "
        f"{R} rounds x {p.local_epochs} local epochs; macro metrics, mean ± std over repeats."
    )
    tables = metric_tables(
        summary,
        "S-FedMV and baselines (Table 3 shape)",
        note,
        p.paper_table,
        "Different (private) data with 3 views; 150-170 FedAvg rounds.",
    )
    label = {
        "federated": "S-FedMV (FedAvg GRU)",
        "centralized": "centralized GRU",
        "local": "local GRUs",
    }

    def panels(stat: str) -> dict[str, dict[str, list[float]]]:
        """``{view: {mode: mean or std over repeats of the per-round accuracy}}``."""
        return {
            f"view {ds.view_names[k]}": {
                label[m]: getattr(curves[m][:, k], stat)(0).tolist() for m in modes
            }
            for k in range(K)
        }

    fig = line_panels(
        ctx.path("accuracy_per_round.png"),
        list(range(1, R + 1)),
        panels("mean"),
        errors=panels("std"),
        xlabel=f"round (local/centralized: x {p.local_epochs} epochs)",
        ylabel="test accuracy of the GRU head (%)",
        title="Per-view extractor accuracy per round",
    )
    acc = {name: v["accuracy"][0] for name, v in summary.items()}
    return ExperimentResult(
        metrics={
            "summary": summary,
            "per_repeat": scores,
            "accuracy_per_round": {m: curves[m].mean(0).tolist() for m in modes},
            "n_samples": ds.n_samples,
            "n_dropped": ds.n_dropped,
        },
        tables=tables,
        figures=[fig],
        message_log=log_summary
        if log_summary is None or p.n_repeats == 1  # else: say whose traffic it is
        else {**log_summary, "scope": f"the last of this run's {p.n_repeats} federated trainings"},
        summary="accuracy: " + ", ".join(f"{k} {v:.1f}%" for k, v in acc.items()),
    )
