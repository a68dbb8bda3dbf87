"""Screenshots of two reports a new user meets, taken with headless Chromium (issue #35).

1. the MMVFL experiment report (``fedviews run configs/mmvfl_handwritten.toml`` with the
   smoke overrides): its config table, whose values read as in ``config.json``;
2. the Multi-VFL deployment report (``fedviews launch configs/deploy_multivfl_mnist.toml``,
   one round, 4 data owners and 2 label owners: 28 pairs): its privacy-barrier diagram.

Usage::

    python benchmarks/report_screenshots.py --out docs/img/screenshots

Writes ``mmvfl_report.png`` and ``multivfl_deployment_report.png`` (full pages, 1280 px
wide) and prints the command behind each. Needs ``chromium`` (Debian package) on PATH.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _args import parser, positive_int, run_cli

FEDVIEWS = [sys.executable, "-m", "fedviews"]
RUNS = {
    "mmvfl_report": [
        "run",
        "configs/mmvfl_handwritten.toml",
        "params.n_folds=2",
        "params.betas=[1]",
        "params.percents=[10,50]",
        "params.n_per_class=50",
    ],
    "multivfl_deployment_report": [
        "launch",
        "configs/deploy_multivfl_mnist.toml",
        "params.rounds=1",
        "data.n_per_class=30",
        "data.n_test=100",
    ],
}


def _run(args: list[str], out: Path) -> Path:
    """Run ``fedviews ARGS --out OUT`` and return the folder holding its ``report.html``."""
    subprocess.run([*FEDVIEWS, *args, "--out", str(out)], check=True)
    found = sorted(out.rglob("report.html"), key=lambda p: len(p.parts))
    if not found:
        raise SystemExit(f"fedviews {' '.join(args)} wrote no report.html under {out}")
    return found[0]


def _screenshot(chromium: str, page: Path, png: Path, height: int) -> None:
    png.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size=1280,{height}",
            f"--screenshot={png.absolute()}",
            page.absolute().as_uri(),
        ],
        check=True,
        capture_output=True,
    )


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="where to write the screenshots (the docs' are in docs/img/screenshots)",
    )
    ap.add_argument("--height", type=positive_int, default=2400, help="page height in pixels")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("needs chromium on PATH (apt install chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, run_args in RUNS.items():
            report = _run(run_args, Path(tmp) / name)
            png = args.out / f"{name}.png"
            _screenshot(chromium, report, png, args.height)
            print(f"{png}: fedviews {' '.join(run_args)} --out RUN; {report.name}")


if __name__ == "__main__":
    run_cli(main)
