"""`specmon logscan`: human output, --json, --follow on a file another process appends to, bad files."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest
from paths import FIXTURES

from specmon.cli import main

LOGS = sorted((FIXTURES / "real-logs").glob("*.log"))
FULL = FIXTURES / "real-logs" / "sglang-full-startup-tp4-ready-health-llms-in-clouds.log"
OOM = FIXTURES / "real-logs" / "sglang-deepep-2node-cudagraph-oom-5285.log"


def test_human_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logscan", str(FULL), str(OOM)]) == 1   # one of them failed
    out = capsys.readouterr().out
    full, oom = out.split(str(OOM))
    assert "server      sglang (model /home/model/Qwen/QwQ-32B, tp 4, mem fraction 0.85)" in full
    assert "phase       ready" in full and "shards      14/14" in full
    assert "kv cache    46,611 tokens" in full and "ready       yes (ready line)" in full
    assert "load time   29.0 s" in full and "failure     -" in full
    assert "phase       failed" in oom
    assert "failure     oom at line 20: Exception: Capture cuda graph failed: CUDA out of memory" in oom


def test_a_failed_log_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    """`specmon logscan` of a failed launch log exited 0, as for a ready one: a script could not tell (issue 35 #20)."""
    port_in_use = FIXTURES / "real-logs" / "vllm-port-in-use-after-load-8638.log"
    for args in ([], ["--json"]):
        assert main(["logscan", *args, str(FULL)]) == 0
        assert main(["logscan", *args, str(OOM)]) == 1
        assert main(["logscan", *args, str(port_in_use)]) == 1
        assert main(["logscan", *args, str(FULL), str(port_in_use)]) == 1
    assert "failure     port_in_use" in capsys.readouterr().out


def test_json_one_object_per_file_per_line_for_every_real_log(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logscan", "--json", *map(str, LOGS)]) == 1   # some of them failed
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(LOGS)
    for log, line in zip(LOGS, lines):
        got = json.loads(line)
        want = json.loads((FIXTURES / "expected" / f"{log.stem}.json").read_text())
        assert got["file"] == str(log)
        for key in ("server", "phase", "shards", "kv_cache_tokens", "ready", "spec_accept_len", "load_seconds"):
            assert got[key] == want[key], (log.name, key)
        if want["failure"] is None:
            assert got["failure"] is None
        else:
            assert set(got["failure"]) == {"kind", "line", "message"}
            assert (got["failure"]["kind"], got["failure"]["line"]) == (want["failure"]["kind"], want["failure"]["line"])


@pytest.mark.slow
@pytest.mark.parametrize("make", ["missing", "directory", "unreadable", "read error"])
def test_bad_file_is_one_clear_line_and_exit_2(tmp_path: Path, make: str) -> None:
    path = tmp_path / "server.log"
    if make == "read error":
        path = Path("/proc/self/mem")  # opens, but reading address 0 fails with EIO, even for root
    elif make == "directory":
        path.mkdir()
    elif make == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        path.write_text("x\n")
        path.chmod(0)
    proc = subprocess.run([sys.executable, "-m", "specmon", "logscan", str(FULL), str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    if make != "read error":
        assert proc.stdout == ""  # every file is opened before any output
    assert proc.stderr.count("\n") == 1 and str(path) in proc.stderr and "Traceback" not in proc.stderr


class Follower:
    """`specmon logscan --follow` as a real child process, with its stdout lines in a queue."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "specmon", "logscan", "--follow", *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.errors), daemon=True).start()

    @staticmethod
    def _pump(stream: IO[str] | None, into: queue.Queue[str]) -> None:
        assert stream is not None
        for line in stream:
            into.put(line.rstrip("\n"))

    def expect(self, fragment: str, timeout: float = 20.0, stderr: bool = False) -> str:
        deadline = time.monotonic() + timeout
        seen = []
        lines = self.errors if stderr else self.lines
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                continue
            seen.append(line)
            if fragment in line:
                return line
        raise AssertionError(f"{fragment!r} not printed; got {seen}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()


@pytest.mark.slow
def test_follow_prints_each_step_as_the_log_grows_and_exits_at_ready(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/m', tp_size=1, port=30000)\n")
    follower = Follower(str(log))
    try:
        follower.expect("server sglang")
        # A bar redrawn with \r and no newline yet: each step must show before the line ends.
        for n in (1, 2):
            append(log, f"Loading safetensors checkpoint shards:  {n * 50}% Completed | {n}/2 [00:0{n}<00:00,  1.00it/s]\r")
            follower.expect(f"shards {n}/2")
        append(log, "\n[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n")
        follower.expect("kv cache 46,611 tokens")
        assert follower.proc.poll() is None  # still following
        append(log, "[2025-03-08 12:29:33] The server is fired up and ready to roll!\n")
        follower.expect("ready after 29.0 s")
        assert follower.proc.wait(timeout=20) == 0
    finally:
        follower.close()


@pytest.mark.slow
def test_follow_exits_1_at_a_failure(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    follower = Follower(str(log))
    try:
        time.sleep(0.3)
        append(log, "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] EngineCore failed to start.\n")
        follower.expect("failure exception at line 1")
        assert follower.proc.poll() is None  # the header only: the error itself is still to come
        append(log, "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] Traceback (most recent call last):\n"
                    "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] torch.OutOfMemoryError: CUDA out of "
                    "memory.\n")
        follower.expect("failure oom at line 3")
        assert follower.proc.wait(timeout=20) == 1
    finally:
        follower.close()


@pytest.mark.slow
def test_follow_json_and_ctrl_c(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]\n")
    follower = Follower("--json", str(log))
    try:
        obj = json.loads(follower.expect('"shards"'))
        assert (obj["file"], obj["phase"], obj["shards"]) == (str(log), "loading_weights", {"done": 1, "total": 2})
        follower.proc.send_signal(signal.SIGINT)
        assert follower.proc.wait(timeout=20) == 130
    finally:
        follower.close()


@pytest.mark.slow
def test_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "specmon", "logscan", "--json", "-"], input=FULL.read_bytes(),
                          capture_output=True, timeout=60)
    assert proc.returncode == 0
    got = json.loads(proc.stdout)
    assert main(["logscan", "--json", str(FULL)]) == 0
    want = json.loads(capsys.readouterr().out)
    assert got == {**want, "file": "-"}


@pytest.mark.slow
def test_follow_a_pipe_until_ready_or_its_end() -> None:
    follower = Follower("-")
    assert follower.proc.stdin is not None
    try:
        follower.proc.stdin.write("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  "
                                  "1.00it/s]\n")
        follower.proc.stdin.flush()
        follower.expect("shards 1/2")
        follower.proc.stdin.write("[2025-03-08 12:29:33] The server is fired up and ready to roll!\n")
        follower.proc.stdin.flush()
        follower.expect("ready")
        assert follower.proc.wait(timeout=20) == 0  # ready ends the follow; the writer is still there
    finally:
        follower.close()
    follower = Follower("-")
    assert follower.proc.stdin is not None
    try:
        follower.proc.stdin.write("Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01, ")
        follower.proc.stdin.close()  # the writer goes away before ready: the partial line still counts
        follower.expect("shards 1/2")
        assert follower.proc.wait(timeout=20) == 1
    finally:
        follower.close()


# A log that tries to act on the reader's terminal: retitle it (OSC 0), hide text (a hyperlink OSC 8 and C1 CSI),
# ring the bell, recolour, clear the screen. Written as bytes, the way a server (or an attacker) would.
HOSTILE_LOG = (
    b"[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/m\x1b]0;PWNED\x07odel', tp_size=1, port=30000)\n"
    b"Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]\x1b[2J\x1bc\n"
    b"[2025-03-08 12:29:21 TP0] Exception: \x1b]8;;http://evil\x1b\\Capture\x1b]8;;\x1b\\ cuda graph failed: "
    b"CUDA out of memory \xc2\x9b31m\x07\x1b[31mred\x1b[0m\n"
)
CONTROL = ("\x1b", "\x07", "\x9b", "\x9d", "\x9c")


@pytest.mark.slow
def test_escape_sequences_in_a_log_never_reach_the_terminal(tmp_path: Path) -> None:
    """An OSC title sequence (ESC]0;TITLE BEL) in a log line passed through logscan to the user's terminal."""
    log = tmp_path / "server.log"
    log.write_bytes(HOSTILE_LOG)
    for args in ([str(log)], ["--json", str(log)]):
        done = subprocess.run([sys.executable, "-m", "specmon", "logscan", *args], capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 1, done.stderr   # its launch failed (OOM)
        assert not any(c in done.stdout + done.stderr for c in CONTROL), repr(done.stdout)
    assert "Capture cuda graph failed: CUDA out of memory" in done.stdout
    follower = Follower(str(log))
    try:
        line = follower.expect("failure")
        assert not any(c in line for c in CONTROL), repr(line)
    finally:
        follower.close()
    assert not any(c in "".join(follower.lines.queue) for c in CONTROL)


SHARD = "Loading safetensors checkpoint shards:  {p}% Completed | {n}/{t} [00:01<00:01,  1.00it/s]\n"
READY = "[2025-03-08 12:29:33] The server is fired up and ready to roll!\n"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["rename", "delete"])
def test_follow_notices_a_renamed_or_deleted_log_and_follows_the_new_one(tmp_path: Path, how: str) -> None:
    """`logscan --follow` kept reading the old file forever; like `tail -F` it now follows the name."""
    log = tmp_path / "server.log"
    log.write_text(SHARD.format(p=50, n=1, t=2))
    follower = Follower(str(log))
    try:
        follower.expect("shards 1/2")
        if how == "rename":
            log.rename(tmp_path / "server.log.1")
        else:
            log.unlink()
        follower.expect(f"{log}: deleted or renamed; waiting for it to appear again", stderr=True)
        assert follower.proc.poll() is None
        log.write_text(SHARD.format(p=25, n=1, t=4) + READY)   # the relaunch's new log
        follower.expect(f"{log}: appeared again; reading it from the start", stderr=True)
        follower.expect("shards 1/4")
        follower.expect("ready")
        assert follower.proc.wait(timeout=20) == 0
    finally:
        follower.close()


@pytest.mark.slow
def test_follow_notices_a_log_replaced_by_a_new_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(SHARD.format(p=50, n=1, t=2))
    follower = Follower(str(log))
    try:
        follower.expect("shards 1/2")
        new = tmp_path / "server.log.new"
        new.write_text(SHARD.format(p=25, n=1, t=4))
        new.replace(log)   # atomically: the name never points at nothing
        follower.expect(f"{log}: replaced by a new file; reading it from the start", stderr=True)
        follower.expect("shards 1/4")
    finally:
        follower.close()


def test_follow_notices_a_rewrite_that_lands_between_its_check_and_its_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The truncate-and-refill lands after a poll has checked the file by name but before it reads (a loaded box
    made that window real: CI under a CPU hog missed the note). The bytes read then are the middle of the new
    file; they must not be parsed as what followed the old content."""
    from specmon.commands import logscan
    from specmon.sources import follow

    log = tmp_path / "server.log"
    log.write_text(SHARD.format(p=50, n=1, t=2))
    refill = SHARD.format(p=25, n=1, t=4) + "".join(f"[2025-03-08 12:29:{i:02d}] padding line {i}\n"
                                                  for i in range(40)) + READY
    real_read, reads = follow.read_chunk, []

    def read(handle: IO[bytes]) -> bytes:
        reads.append(handle)
        if len(reads) == 3:   # 1: the first line; 2: end of file (a poll with nothing new); 3: the rewrite lands
            fd = os.open(log, os.O_WRONLY)
            os.ftruncate(fd, 0)
            os.write(fd, refill.encode())
            os.close(fd)
        return real_read(handle)

    monkeypatch.setattr(follow, "read_chunk", read)
    with open(log, "rb") as handle:
        assert logscan._follow([str(log)], [handle], as_json=False, out=sys.stdout) == 0
    captured = capsys.readouterr()
    assert "rewritten in place, reading it again from the start" in captured.err
    assert "shards 1/4" in captured.out and "ready" in captured.out


@pytest.mark.slow
def test_follow_notices_a_log_truncated_and_refilled_past_its_old_offset(tmp_path: Path) -> None:
    """Truncated and refilled beyond the read offset between two polls: the size never looked smaller, so the
    follower went on from the old offset, in the middle of the new content."""
    log = tmp_path / "server.log"
    log.write_text(SHARD.format(p=50, n=1, t=2))
    follower = Follower(str(log))
    try:
        follower.expect("shards 1/2")
        refill = SHARD.format(p=25, n=1, t=4) + "".join(f"[2025-03-08 12:29:{i:02d}] padding line {i}\n"
                                                      for i in range(40))
        fd = os.open(log, os.O_WRONLY)
        os.ftruncate(fd, 0)
        os.write(fd, refill.encode())   # microseconds after the truncation: a 0.2 s poll all but never sees it empty
        os.close(fd)
        follower.expect("again from the start", stderr=True)
        follower.expect("shards 1/4")
    finally:
        follower.close()
