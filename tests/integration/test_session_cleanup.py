"""A test run cut short (`timeout 60 pytest ...`: SIGTERM) left the servers its tests had detached running. The
suite's conftest marks every process a test starts and kills the marked ones on SIGTERM and at the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import SESSION_MARKER
from paths import SUPPORT, TESTS


def _pids_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.mark.slow
def test_a_run_cut_short_by_sigterm_leaves_no_detached_server(tmp_path: Path) -> None:
    token = f"detached-{uuid.uuid4().hex}"
    inner = tmp_path / "test_inner.py"
    inner.write_text(
        "import subprocess, sys, time\n"
        "def test_hangs():\n"
        f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', '{token}'],\n"
        "                     start_new_session=True)   # detached, as a launched server is\n"
        "    time.sleep(600)\n")
    env = {k: v for k, v in os.environ.items() if k != SESSION_MARKER}   # the inner run is a session of its own
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(SUPPORT)])
    run = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                            "--rootdir", str(tmp_path), "-c", os.devnull, str(inner)],
                           cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _pids_with(token):
            assert time.monotonic() < deadline and run.poll() is None, "the inner test never started its server"
            time.sleep(0.1)
        run.send_signal(signal.SIGTERM)
        run.wait(30)
        deadline = time.monotonic() + 10
        while _pids_with(token) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _pids_with(token) == []
    finally:
        run.kill()
        for pid in _pids_with(token):
            os.kill(pid, signal.SIGKILL)
