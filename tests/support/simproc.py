"""Start `specmon sim` as a real subprocess for tests (reusable by every test module).

    from simproc import start_sim       # pytest puts tests/ on sys.path (rootdir import mode)

    with start_sim("--spec", "eagle3", flavor="vllm") as sim:   # waits for the ready line
        httpx.get(sim.url + "/health")                          # sim.url = "http://127.0.0.1:PORT"
        sim.wait_for(r"Decode batch", timeout=5)                # regex over the log pieces
        sim.lines()                                             # log pieces split on \\r, \\n, \\r\\n
        sim.text()                                              # raw stdout so far (keeps \\r)
        sim.process                                             # subprocess.Popen (stdout is ours)

`wait="ready"` (default) waits for the flavour's ready line; `wait="bound"` for the first HTTP
answer; `wait=None` returns at once. On exit the sim gets SIGTERM, then SIGKILL after 5 s.
Defaults keep startups short: `--time-scale 0.05`, 4 shards, 4 s of (scaled) loading.
"""

from __future__ import annotations

import codecs
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from ports import free_port

READY_PATTERNS = {"sglang": r"The server is fired up and ready to roll!", "vllm": r"Application startup complete\."}
_SPLIT = re.compile(r"\r\n|\r|\n")
# The checkpoint-shard bar (both flavours): groups 1 = percent, 2 = n, 3 = total.
SHARD_RE = re.compile(r"checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+) \[")


class SimProcess:
    """A running sim: its URL, process and captured stdout."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, flavor: str) -> None:
        self.process = process
        self.port = port
        self.flavor = flavor
        self.url = f"http://127.0.0.1:{port}"
        self._text: list[str] = []
        self._pieces: list[str] = []  # complete log pieces (split on \r, \n, \r\n), empty ones dropped
        self._tail = ""  # the piece still being written (a bar waiting for its next redraw, a partial line)
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # bars hold multi-byte block characters
        while True:
            data = os.read(fd, 65536)
            text = decoder.decode(data, final=not data)
            with self._lock:
                self._text.append(text)
                parts = _SPLIT.split(self._tail + text)
                self._pieces.extend(p for p in parts[:-1] if p)
                self._tail = parts[-1]
            if not data:
                return

    @property
    def pid(self) -> int:
        return self.process.pid

    def text(self) -> str:
        """Everything the sim wrote to stdout so far, byte for byte (decoded as UTF-8)."""
        with self._lock:
            return "".join(self._text)

    def lines(self) -> list[str]:
        """The log split as a tailer does (on \r\n, \r and \n), without empty pieces."""
        with self._lock:
            return self._pieces + ([self._tail] if self._tail else [])

    def wait_for(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """First match of `pattern` in a log piece, waiting up to `timeout` seconds."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        scanned = 0  # complete pieces already searched
        while True:
            exited = self.process.poll() is not None
            if exited:
                self._reader.join(1.0)
            with self._lock:
                fresh = self._pieces[scanned:] + ([self._tail] if self._tail else [])
                scanned = len(self._pieces)
            for piece in fresh:
                m = rx.search(piece)
                if m:
                    return m
            if exited:
                raise RuntimeError(f"sim exited ({self.process.returncode}) before {pattern!r}; tail:\n"
                                   + "\n".join(self.lines()[-15:]))
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} in sim output after {timeout} s; tail:\n" + "\n".join(self.lines()[-15:]))
            time.sleep(0.02)

    def wait_exit(self, timeout: float = 10.0) -> int:
        """Wait for the process to end; returns its exit code."""
        code = self.process.wait(timeout)
        self._reader.join(2.0)
        return code

    def health_status(self) -> int | None:
        """HTTP status of GET /health, or None when the connection is refused."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (ConnectionError, urllib.error.URLError):
            return None

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._reader.join(2.0)
        return int(self.process.returncode)


@contextmanager
def start_sim(*args: str, flavor: str = "sglang", wait: str | None = "ready", timeout: float = 20.0,
              time_scale: float = 0.05, load_seconds: float = 4.0, shards: int = 4, port: int | None = None,
              env: dict[str, str] | None = None) -> Iterator[SimProcess]:
    """Run `python -m specmon.sim` with `args` on a free port; stop it on exit.

    Later `args` override the defaults given as keywords (argparse keeps the last value).
    """
    port = port or free_port()
    argv = [sys.executable, "-m", "specmon.sim", "--flavor", flavor, "--port", str(port),
            "--time-scale", str(time_scale), "--load-seconds", str(load_seconds), "--shards", str(shards), *args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})
    sim = SimProcess(proc, port, flavor)
    try:
        if wait == "ready":
            sim.wait_for(READY_PATTERNS[flavor], timeout)
        elif wait == "bound":
            deadline = time.monotonic() + timeout
            while sim.health_status() is None:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("sim never answered HTTP; tail:\n" + "\n".join(sim.lines()[-15:]))
                time.sleep(0.02)
        yield sim
    finally:
        sim.stop()
