"""A prediction session (``fedviews predict``): the fitted model's parts predict new rows together.

Every process loads only its own part of the model (:mod:`._model`, from its folder
of the training run) and its own file of new rows (the training formats, without
labels). The session follows the training session's steps, through the same
transports, so every message is policy-checked and logged:

1. PSI on the new rows' IDs, per group of :meth:`~fedviews.federation.Algorithm.predict_groups`
   (``federation.alignment = "none"``: every member holds the same IDs, sorted);
2. ``deploy:setup``: every party reports its aligned row counts and the run ID of its
   model part; the coordinator refuses a part of another training run than its own;
3. ``deploy:build``: every process widens its policy by exactly the algorithm's
   prediction policy (:meth:`~fedviews.federation.Algorithm.predict_policy`: what its test
   phase sends, never raw features or local models) and builds its predictor from its
   model part and its aligned rows;
4. the algorithm's test phase (:meth:`~fedviews.federation.Algorithm.run_prediction`);
5. ``deploy:finish``: where predictions land (the label owner), ``predictions.csv`` and
   ``predictions.npz`` keyed by sample ID; every process writes its message log.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import PartyData
from fedviews.deploy._config import DeployConfig
from fedviews.deploy._model import ModelPart
from fedviews.deploy._roles import (
    Printer,
    SessionParty,
    _widen,
    align_groups,
    run_policy,
)
from fedviews.errors import DataError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Local,
    Message,
    Prediction,
    SetupReport,
    check_group_sizes,
    get_algorithm_spec,
    handles,
)

PREDICTIONS = "predictions"


def write_predictions(out_dir: Path, ids: np.ndarray, pred: Prediction) -> Path:
    """``predictions.csv`` (columns ``id``, ``label``) and ``predictions.npz`` (``ids``,
    ``labels`` and, where the algorithm has them, ``scores``) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, Any] = {"ids": ids, "labels": pred.labels}
    if pred.scores is not None:
        arrays["scores"] = pred.scores
    np.savez(out_dir / f"{PREDICTIONS}.npz", **arrays)
    path = out_dir / f"{PREDICTIONS}.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "label"])
        w.writerows(zip(ids.tolist(), pred.labels.tolist(), strict=True))
    return path


class PredictParty(SessionParty):
    """A party process of a prediction session: its model part and its new rows."""

    def __init__(
        self,
        cfg: DeployConfig,
        name: str,
        data: PartyData,
        model: ModelPart,
        out_dir: Path,
        echo: Printer,
    ) -> None:
        if data.y is not None:
            raise DataError(
                f"{name!r}: its file of new rows holds labels (y); `fedviews predict` takes "
                "rows without labels (labels must stay with their owner): drop them"
            )
        app = get_algorithm_spec(cfg.algorithm)
        super().__init__(cfg, name, data, out_dir, echo, app.predict_groups(cfg))
        self.model = model
        self.local: Local | None = None

    def answer(self, msg: Message) -> Message:
        if msg.kind in self._handlers:
            return super().answer(msg)
        if self.algo is None:
            raise ProtocolError(f"{self.name!r} got {msg.kind!r} before deploy:build")
        return self.algo.handle(msg)

    @handles("deploy:setup")
    def on_setup(self, msg: Message) -> Message:
        rows = self.aligned_rows()
        self.local = Local(self.data, rows, self.groups)
        sizes = ", ".join(f"{g}: {len(r)}" for g, r in rows.items())
        self.echo(f"aligned new rows ({sizes}) of {len(self.ids)}")
        counts = {f"n/{g}": len(r) for g, r in rows.items()}
        meta: dict[str, Any] = {**counts, **self.id_digests(rows), "model_run": self.model.run_id}
        return self.reply(msg, meta=meta)

    @handles("deploy:build")
    def on_build(self, msg: Message) -> Message:
        if self.local is None:
            raise ProtocolError("deploy:build before deploy:setup")
        setup = self.model.setup  # its own, from its training run (the coordinator's is the same)
        _widen(self.transport, run_policy(self.cfg, self.app.predict_policy(self.cfg, setup)))
        self.algo = self.app.make_predictor(
            self.cfg, self.name, self.model.arrays, self.local, setup
        )
        self.algo.transport = self.transport
        return self.reply(msg)

    @handles("deploy:finish")
    def on_finish(self, msg: Message) -> Message:
        pred = self.app.predictions(self.algo)
        if pred is not None:
            assert self.local is not None
            path = write_predictions(self.out_dir, self.local.take(pred.group)[0], pred)
            self.echo(f"predicted {len(pred.labels)} rows: {path}")
        self.write_log()
        self.echo(f"finished; results in {self.out_dir}")
        self.finished = True
        return self.reply(msg)


class PredictCoordinator(Coordinator):
    """The coordinator process of a prediction session: its own model part (the run ID and
    setup of the training run) and the algorithm's test phase."""

    def __init__(self, cfg: DeployConfig, echo: Printer, model: ModelPart) -> None:
        super().__init__(cfg.federation.coordinator)
        self.cfg, self.echo, self.model = cfg, echo, model
        self.app = get_algorithm_spec(cfg.algorithm)
        self.parties = list(cfg.federation.parties)
        self.server: Any = None
        self.counts: dict[str, int] = {}
        self.seconds = 0.0

    def run(self) -> dict[str, Any]:
        groups = self.app.predict_groups(self.cfg)
        if self.cfg.federation.alignment == "psi":
            align_groups(self, groups, self.echo)
        replies = self.broadcast(self.parties, "deploy:setup")
        infos = {p: SetupReport(p, r.meta) for p, r in replies.items()}
        for p, info in infos.items():
            if info["model_run"] != self.model.run_id:
                raise ProtocolError(
                    f"{p!r} holds a model part of another training run ({info['model_run']}; "
                    f"the coordinator's is of run {self.model.run_id}): start every process "
                    "with its folder of the same run",
                    party=p,
                )
        check_group_sizes(groups, infos, same_ids=self.cfg.federation.alignment == "none")
        self.counts = {g.name: int(infos[g.parties[0]][f"n/{g.name}"]) for g in groups}
        # the training setup, and how many new rows each group aligned (``n/predict``: a
        # server that expected the training's test rows named an honest party)
        setup = {**self.model.setup, **{f"n/{g}": n for g, n in self.counts.items()}}
        _widen(self.transport, run_policy(self.cfg, self.app.predict_policy(self.cfg, setup)))
        self.broadcast(self.parties, "deploy:build")
        self.server = self.app.build_predict_coordinator(self.cfg, setup)
        self.server.transport = self.transport
        self.echo("predicting")
        t0 = time.perf_counter()
        self.app.run_prediction(self.cfg, self.server)
        self.seconds = time.perf_counter() - t0
        self.broadcast(self.parties, "deploy:finish")
        return self.results()

    def results(self) -> dict[str, Any]:
        return {
            "predicted_rows": dict(self.counts),
            "model_run": self.model.run_id,
            "predict_seconds": round(self.seconds, 4),
        }
