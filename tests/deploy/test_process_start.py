"""How the deployment tests start processes with a descriptor limit or SIGINT ignored:
through a shell that sets them before its exec, never a fork that runs Python first."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _protocol import inherited

ROOT = Path(__file__).resolve().parents[2]
#: what it reports: its descriptor limit (soft, hard) and whether it ignores SIGINT
REPORT = (
    "import resource, signal; "
    "print(resource.getrlimit(resource.RLIMIT_NOFILE), "
    "signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"
)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX limits and signals")
@pytest.mark.parametrize(
    ("nofile", "sigint_ignored", "limit"),
    [(160, True, "(160, 160)"), (160, False, "(160, 160)"), (None, True, None)],
)
def test_a_started_process_has_its_limit_and_sigint_ignored_from_its_start(
    nofile: int | None, sigint_ignored: bool, limit: str | None
) -> None:
    """The limit and the ignored SIGINT are the child's own from its exec on, as a
    ``preexec_fn`` set them (the limit soft and hard, as ``setrlimit(n, n)`` did). Without
    ``sigint_ignored`` the child keeps what this process has: SIGINT ignored where the suite
    itself runs as a background job of a script (which no shell can undo), else not."""
    here = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    cmd = inherited([sys.executable, "-c", REPORT], nofile=nofile, sigint_ignored=sigint_ignored)
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    ignored = str(sigint_ignored or here)
    assert out.endswith(ignored) if limit is None else out == f"{limit} {ignored}", out


def test_the_child_keeps_an_ignored_sigint_it_was_not_asked_to_ignore() -> None:
    """What the test above expects of a suite run as a background job: a child started
    without ``sigint_ignored`` by a process that ignores SIGINT ignores it too."""
    script = (
        "import signal, subprocess, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
        f"sys.exit(subprocess.run({inherited([sys.executable, '-c', REPORT], nofile=160)!r}).returncode)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "(160, 160) True", out


def test_no_test_or_module_forks_a_process_that_runs_python_before_its_exec() -> None:
    """A ``preexec_fn`` (or ``os.fork``) in a process that has run a gRPC server forks with
    gRPC's fork handlers, whose restarted poller can abort the child before its exec (see
    :func:`_protocol.inherited`): the coordinator of
    test_a_non_member_holding_connections_cannot_stop_results_being_written once died so."""
    forks = re.compile(r"\bpreexec_fn\s*=|\bos\.fork\(")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("src", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if forks.search(line)
    ]
    assert not found, f"start these through _protocol.inherited instead: {found}"
