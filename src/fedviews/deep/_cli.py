"""``fedviews apfed predict MODEL DATA``: the exported active model predicts alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Mount the ``apfed`` command group on the main CLI (torch is imported only when run)."""
    apfed_app = typer.Typer(
        help="APFed: use an exported active-client model.", no_args_is_help=True
    )

    @apfed_app.command("predict")
    def predict(
        model: Annotated[Path, typer.Argument(help="Folder written by APFed.export(...).")],
        data: Annotated[Path, typer.Argument(help=".npy of images (n,H,W) or active strips.")],
        out: Annotated[
            Path | None, typer.Option(help="Write predictions to this .npy / .csv file.")
        ] = None,
    ) -> None:
        """Predict labels for new data with the exported active model (no passive client)."""
        import numpy as np

        from fedviews.cli import console, friendly
        from fedviews.deep._export import predict_exported

        @friendly
        def _run() -> None:
            pred = predict_exported(model, data)
            if out is None:
                console.print("\n".join(str(p) for p in pred.tolist()))
            elif out.suffix == ".csv":
                np.savetxt(out, pred, fmt="%s", delimiter=",")
                console.print(f"{len(pred)} predictions -> {out}")
            else:
                np.save(out, pred)
                console.print(f"{len(pred)} predictions -> {out}")

        _run()

    app.add_typer(apfed_app, name="apfed")
