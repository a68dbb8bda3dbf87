"""The benchmark scripts' command lines (``benchmarks/_args.py``): a size, device or choice that
makes no sense is refused by the parser at once, with one line naming it and exit status 2, and
a missing extra is one line naming the ``pip install`` command, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from _modules import load_file

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
#: run a benchmark script as if ``MODULE`` were not installed (argv: MODULE SCRIPT ARGS...)
WITHOUT = (
    "import runpy, sys\n"
    "sys.modules[sys.argv[1]] = None\n"  # `import MODULE` raises ImportError
    "sys.path.insert(0, 'benchmarks')\n"
    "sys.argv = sys.argv[2:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


def _bench(*args: str, without: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/ARGS...`` in the repository (``without``: that module missing)."""
    head = ["-c", WITHOUT, without] if without else []
    return subprocess.run(
        [sys.executable, *head, f"benchmarks/{args[0]}", *args[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _refused(r: subprocess.CompletedProcess[str], script: str, message: str, code: int = 2) -> None:
    """``r`` ended with status ``code`` and one error line saying ``message``, no traceback."""
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith(f"{script}: error:")]
    assert len(errors) == 1 and r.stderr.rstrip().endswith(errors[0]), r.stderr
    assert message in errors[0], errors[0]


#: (the script and its arguments, what its one error line says)
REFUSED = [
    (
        ["bench_apfed.py", "--samples", "-5"],
        "argument --samples: must be a positive integer, got -5",
    ),
    (
        ["bench_link.py", "--messages", "-1"],
        "argument --messages: must be a positive integer, got -1",
    ),
    (["bench_handover.py", "--messages", "0"], "argument --messages: must be a positive integer"),
    (["bench_fusedstep.py", "--batches", "-1"], "argument --batches: must be a positive integer"),
    (["bench_mmvfl.py", "--repeat", "0"], "argument --repeat: must be a positive integer, got 0"),
    (["bench_e2e.py", "--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["bench_secagg.py", "--repeat", "0"], "argument --repeat: must be a positive integer, got 0"),
    (
        ["bench_splitnn.py", "--parties", "1"],
        "argument --parties: must be an integer of at least 2",
    ),
    (
        ["bench_psi.py", "100", "--overlap", "1.5"],
        "argument --overlap: must be a number from 0 to 1, got 1.5",
    ),
    (["bench_link.py", "--mb", "nan"], "argument --mb: must be a positive number, got nan"),
    (
        ["bench_grpc.py", "mmvfl", "--rounds", "0"],
        "argument --rounds: must be a positive integer, got 0",
    ),
    (["bench_flower.py", "--engines", "foo"], "argument --engines: invalid choice: 'foo'"),
    (["bench_flower.py", "--executors", "bar"], "argument --executors: invalid choice: 'bar'"),
    (["bench_wire.py", "--datasets", "cifar"], "argument --datasets: invalid choice: 'cifar'"),
]


@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_senseless_argument_is_refused_at_once(args: list[str], message: str) -> None:
    _refused(_bench(*args), args[0], message)


@pytest.mark.parametrize("script", ["bench_splitnn.py", "bench_apfed.py"])
def test_device_cuda_without_a_cuda_device_is_refused_before_any_work(script: str) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is available here")
    r = _bench(script, "--device", "cuda", "--samples", "100")
    _refused(
        r, script, f"--device cuda: no CUDA device is available here (torch {torch.__version__}"
    )
    assert r.stdout == ""  # (no header: nothing ran)


def test_bench_flower_without_flwr_shows_its_help_and_refuses_a_run_in_one_line() -> None:
    r = _bench("bench_flower.py", "--help", without="flwr")
    assert r.returncode == 0 and "--engines" in r.stdout and "Flower" in r.stdout, r.stderr
    r = _bench("bench_flower.py", "--algorithms", without="flwr")
    _refused(
        r,
        "bench_flower.py",
        "'flwr' is required for this feature; install it with: pip install 'fedviews[flower]'",
    )


def test_a_missing_extra_of_a_run_is_one_line() -> None:
    r = _bench("bench_link.py", "--messages", "1", "--repeat", "1", without="grpc")
    _refused(r, "bench_link.py", "pip install 'fedviews[grpc]'")


def test_help_describes_with_the_docstrings_first_paragraph_and_shows_its_commands() -> None:
    r = _bench("bench_handover.py", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert (
        "handed over by the in-process transport, against a plain t.detach().clone() of the same tensor."
        in text
    )
    assert "examples: python benchmarks/bench_handover.py" in text


def test_capped_uses_what_the_data_hold_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    args = load_file(BENCH / "_args.py", "bench_args")
    assert args.capped(500, 10_000, "MNIST") == 500
    assert capsys.readouterr().err == ""
    assert args.capped(20_000, 10_000, "MNIST") == 10_000
    assert (
        capsys.readouterr().err
        == "MNIST holds 10,000 images: using 10,000 (not --samples 20,000)\n"
    )
