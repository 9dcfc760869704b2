"""Small helpers the tests share about processes: whether a pid still runs, waiting for a condition, and the installed
`specmon` command (the console script `pip install -e .` puts on PATH).

    from process_support import alive, run_specmon, specmon_script, wait_until

    done = run_specmon("compare", "a.jsonl", "b.jsonl", cwd=tmp_path)   # capture_output, text, stdin at EOF
    proc = subprocess.Popen([specmon_script(), "sweep", ...])           # for a process the test drives itself
    wait_until(lambda: not alive(proc.pid), timeout=30)

A test that starts a process (the console script included), listens on a socket or runs the Textual app is marked
`slow`: the quick subset, `-m "not slow"`, must pass in a venv without the script on PATH, in seconds.
`what_starts()` records those things; conftest.py fails an unmarked test that does one of them.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from textual.app import App


def alive(pid: int | None) -> bool:
    """The process exists and is not a zombie (a child that ended and was not reaped yet counts as ended)."""
    try:
        return pid is not None and Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def wait_until(pred: Callable[[], object], timeout: float = 30.0, step: float = 0.05) -> None:
    """Polls `pred` every `step` seconds; fails the test when it is still false after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(step)


def specmon_script() -> str:
    """The path of the installed `specmon` command; a test without it fails in one line saying how to install it."""
    exe = shutil.which("specmon")
    assert exe, "the `specmon` console script is not installed (pip install -e .)"
    return exe


def run_specmon(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, input: str = "",
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Runs the installed `specmon` with `args` to its end: its exit code, stdout and stderr as text. Its stdin is
    `input` (empty: at end of file at once), `env` replaces the environment when given."""
    return subprocess.run([specmon_script(), *args], input=input, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


@contextlib.contextmanager
def what_starts() -> Iterator[list[str]]:
    """While open, records each process started (`subprocess.Popen`, which asyncio's subprocesses use too), each socket
    put to listen and each run of a Textual app, in the order they came, into the list it yields."""
    started: list[str] = []
    popen_init, listen, run_test = subprocess.Popen.__init__, socket.socket.listen, App.run_test

    def recorded_popen(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        started.append(f"process {args[0] if isinstance(args, (list, tuple)) else str(args).split()[0]}")
        popen_init(self, args, *rest, **kwargs)

    def recorded_listen(self: socket.socket, backlog: int = 128) -> None:
        started.append("a listening socket")
        listen(self, backlog)

    def recorded_run_test(self: App[Any], *args: Any, **kwargs: Any) -> Any:
        started.append("the Textual app")
        return run_test(self, *args, **kwargs)

    subprocess.Popen.__init__ = recorded_popen  # type: ignore[method-assign]
    socket.socket.listen = recorded_listen  # type: ignore[method-assign,assignment]
    App.run_test = recorded_run_test  # type: ignore[method-assign]
    try:
        yield started
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        socket.socket.listen = listen  # type: ignore[method-assign]
        App.run_test = run_test  # type: ignore[method-assign]
