"""The transport contract: every Transport (and the LogTailer over it) must pass this module.

Adding a transport means adding a fixture, nothing else:

1. Write an async context manager `my_host(scratch: Path) -> AsyncIterator[Host]` that starts what the transport
   needs (e.g. an `sshd` on 127.0.0.1 with throwaway keys), yields a `Host`, and cleans up.
2. Add it to `HOSTS` under a short name; every test below then runs against it (`-k ssh` picks one).

`Host` fields:
- `transport`: the Transport under test; the tests call `run`, `stream`, `write_file`, `local_url`, `close`.
- `dir`: a scratch directory that is the same path on the host and in this process (hosts are reached on
  127.0.0.1, so the tests play the server's side, writing logs and reading pid files, with plain Python file
  calls, while specmon itself only goes through the transport).
- `drop_link(log)`: sever every live stream following the file `log`, the way a lost network would (locally:
  SIGKILL the `tail` processes; over SSH, a reset of the TCP connection).
Real parts only: real /bin/sh processes, real files, and for SSH a real sshd.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from lifecycle_support import tail_pids
from process_support import alive
from sshd_support import Relay, shared_sshd, sshd_available

from specmon.sources.local import LocalTransport
from specmon.sources.ssh import SSHTransport
from specmon.sources.tailer import LogTailer, TailBatch, last_lines, read_range
from specmon.sources.transport import Transport, TransportError

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Host:
    """One transport under test and the test's handles on its host (see the module docstring)."""

    transport: Transport
    dir: Path
    drop_link: Callable[[Path], None]


def _kill_tails(log: Path) -> None:
    for pid in tail_pids(log):
        os.kill(pid, signal.SIGKILL)


@contextlib.asynccontextmanager
async def local_host(scratch: Path) -> AsyncIterator[Host]:
    transport = LocalTransport()
    try:
        yield Host(transport, scratch, _kill_tails)
    finally:
        await transport.close()


@contextlib.asynccontextmanager
async def ssh_host(scratch: Path) -> AsyncIterator[Host]:
    """gpu1 on the loopback sshd, through a TCP relay: a lost link is a reset connection (RST), after which
    the transport reconnects on its own."""
    sshd = shared_sshd()
    relay = await Relay(sshd.port).start()
    alias = f"contract-{relay.port}"
    sshd.add_alias(alias, relay.port)
    transport = SSHTransport(alias, sshd.settings())
    try:
        yield Host(transport, scratch, lambda log: relay.reset())
    finally:
        await transport.close()
        await relay.close()


@contextlib.asynccontextmanager
async def ssh_jump_host(scratch: Path) -> AsyncIterator[Host]:
    """A host on the loopback sshd through `ProxyJump bastion,gpu1` (three logins), its first jump host reached
    through a TCP relay: a lost link is a reset of the first hop's connection, which takes the whole chain down
    (SSH follows logs by polling: no `tail` on the host to kill)."""
    sshd = shared_sshd()
    relay = await Relay(sshd.port).start()
    sshd.add_alias(f"contract-bastion-{relay.port}", relay.port)
    sshd.add_alias(f"contract-jump-{relay.port}", sshd.port, jump=f"contract-bastion-{relay.port},gpu1")
    transport = SSHTransport(f"contract-jump-{relay.port}", sshd.settings())
    try:
        yield Host(transport, scratch, lambda log: relay.reset())
    finally:
        await transport.close()
        await relay.close()


HOSTS: dict[str, Callable[[Path], AbstractAsyncContextManager[Host]]] = {
    "local": local_host, "ssh": ssh_host, "ssh-jump": ssh_jump_host}


@pytest.fixture(params=sorted(HOSTS))
async def host(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Host]:
    if request.param.startswith("ssh") and sshd_available() is not None:
        pytest.skip(str(sshd_available()))
    async with HOSTS[request.param](tmp_path) as h:
        yield h


async def test_run_returns_code_stdout_stderr_and_takes_input(host: Host) -> None:
    t = host.transport
    r = await t.run("printf 'a b'; printf oops >&2; exit 3")
    assert (r.exit_code, r.stdout, r.err) == (3, b"a b", "oops")
    r = await t.run("tr a-z A-Z", input=b"hello \xc3\xa9")
    assert r.ok and r.out == "HELLO \xc3\xa9".encode("latin-1").decode("utf-8")


async def test_run_timeout_ends_the_command(host: Host) -> None:
    t = host.transport
    pidfile = host.dir / "pid"
    with pytest.raises(TimeoutError):
        await t.run(f"sleep 30 & echo $! > {pidfile}; wait", timeout=0.5)
    pid = int(pidfile.read_text())
    for _ in range(50):
        if not alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(pid), "the timed-out command's child kept running"


async def test_write_file_and_unwritable_path(host: Host) -> None:
    t = host.transport
    target = host.dir / "x" / "launch.sh"
    target.parent.mkdir()
    await t.write_file(str(target), b"echo hi\n", 0o700)
    assert target.read_bytes() == b"echo hi\n" and (target.stat().st_mode & 0o777) == 0o700
    (host.dir / "file").write_text("")
    with pytest.raises(TransportError, match="cannot write"):
        await t.write_file(str(host.dir / "file" / "sub"), b"x")


async def test_read_files_gives_each_files_bytes_in_order_and_none_for_a_missing_one(host: Host) -> None:
    """The status checks' read: a file whose text looks like a separator or marker, no trailing newline and
    bytes that are not UTF-8 come back exactly; an empty file is b""; missing and directories are None."""
    tricky = b"<<0123456789abcdef>>missing\n\xff\x00 stat (a) b"
    (host.dir / "tricky").write_bytes(tricky)
    (host.dir / "empty").write_bytes(b"")
    (host.dir / "exit_code").write_bytes(b"143")
    (host.dir / "sub").mkdir()
    paths = [host.dir / "tricky", host.dir / "nosuch", host.dir / "empty", host.dir / "sub", host.dir / "exit_code"]
    got = await host.transport.read_files([str(p) for p in paths])
    assert got == [tricky, None, b"", None, b"143"]


async def test_stream_yields_output_and_close_ends_the_command(host: Host) -> None:
    t = host.transport
    async with t.stream("printf 'one\\n'; sleep 0.1; printf 'two\\n'; exit 4") as out:
        data = b"".join([chunk async for chunk in out])
    assert data == b"one\ntwo\n" and out.exit_code == 4
    pidfile = host.dir / "pid"
    async with t.stream(f"echo $$ > {pidfile}; exec sleep 30") as out:
        for _ in range(100):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.02)
    pid = int(pidfile.read_text())
    await asyncio.sleep(0.1)
    assert not alive(pid)


async def _collect(tailer: LogTailer, until: int, timeout: float = 10.0) -> list[TailBatch]:
    """Batches from follow() until `tailer.offset` reaches `until`."""
    batches: list[TailBatch] = []

    async def go() -> None:
        async with contextlib.aclosing(tailer.follow()) as follow:
            async for batch in follow:
                batches.append(batch)
                if tailer.offset >= until:
                    return

    await asyncio.wait_for(go(), timeout)
    return batches


async def test_tailer_emits_only_complete_lines_and_resumes_without_loss_or_repeat(host: Host) -> None:
    log = host.dir / "server.log"
    log.write_bytes(b"")
    t = host.transport
    # A writer that splits a multi-byte character and lines across writes, slowly.
    lines = [f"line {i} \u00e9\u4e2d".encode() + b"\n" for i in range(40)]
    blob = b"".join(lines)
    pieces = [blob[i:i + 7] for i in range(0, len(blob), 7)]

    async def writer() -> None:
        with open(log, "ab", buffering=0) as fh:
            for piece in pieces:
                fh.write(piece)
                await asyncio.sleep(0.002)

    tailer = LogTailer(t, str(log))
    half = len(b"".join(lines[:20]))
    wtask = asyncio.create_task(writer())
    first = await _collect(tailer, half)
    saved = tailer.offset
    got = b"".join(b.data for b in first)
    assert got.endswith(b"\n") and got == blob[:saved]
    # A new follower from the saved offset (as a later specmon process would) gets exactly the rest.
    await wtask
    # (A slow follower, e.g. over SSH on a loaded box, may have read it all already: then nothing is left.)
    second = await _collect(LogTailer(t, str(log), saved, tailer.inode), len(blob)) if saved < len(blob) else []
    assert got + b"".join(b.data for b in second) == blob
    for b in first + second:
        b.data.decode("utf-8")   # never a split character (raises if one were cut)


async def test_tailer_drain_includes_an_unterminated_last_line(host: Host) -> None:
    log = host.dir / "server.log"
    log.write_bytes(b"a\nb\nlast words")
    tailer = LogTailer(host.transport, str(log), offset=2)
    batch = await tailer.drain()
    assert batch.data == b"b\nlast words\n" and tailer.offset == log.stat().st_size


async def test_tailer_notes_a_replaced_log_and_a_skipped_backlog(host: Host) -> None:
    log = host.dir / "server.log"
    log.write_bytes(b"old line\n" * 3)
    t = host.transport
    tailer = LogTailer(t, str(log))
    await _collect(tailer, log.stat().st_size)
    inode = tailer.inode
    replacement = host.dir / "new.log"
    replacement.write_bytes(b"new\n")
    os.replace(replacement, log)
    resumed = LogTailer(t, str(log), tailer.offset, inode)
    batches = await _collect(resumed, 4)
    assert "replaced" in (batches[0].note or "") and b"".join(b.data for b in batches) == b"new\n"

    log.write_bytes(b"".join(f"{i:05d}\n".encode() for i in range(2000)))   # 12000 bytes
    big = LogTailer(t, str(log), max_backlog=600)
    batches = await _collect(big, 12000)
    assert "skipped" in (batches[0].note or "")
    data = b"".join(b.data for b in batches)
    assert data.startswith(b"01900\n") and data.endswith(b"01999\n")   # starts on a whole line


async def test_tailer_notes_a_log_rewritten_in_place_while_its_link_was_down(host: Host) -> None:
    """Truncated and refilled past the read offset while the link was down (same inode, never smaller at a
    check): the re-attach went on from the old offset, in the middle of the new content. It now compares the
    last bytes it read (the rule of specmon.sources.follow) and reads the log again from its start."""
    log = host.dir / "server.log"
    log.write_bytes(b"old 1\nold 2\n")
    tailer = LogTailer(host.transport, str(log), retry_s=0.05)
    batches: list[TailBatch] = []
    new = b"".join(f"new line {i}\n".encode() for i in range(5))
    async with contextlib.aclosing(tailer.follow()) as follow:
        it = follow.__aiter__()

        async def until(pred) -> None:   # type: ignore[no-untyped-def]
            while not pred():
                batches.append(await asyncio.wait_for(it.__anext__(), 10))

        await until(lambda: tailer.offset == 12)
        host.drop_link(log)
        await until(lambda: any(b.note and "lost" in b.note for b in batches))   # the follower waits at its note
        inode = log.stat().st_ino
        fd = os.open(log, os.O_WRONLY)
        os.ftruncate(fd, 0)
        os.write(fd, new)
        os.close(fd)
        assert log.stat().st_ino == inode
        await until(lambda: tailer.offset == len(new))
    notes = [b.note for b in batches if b.note]
    assert "log rewritten in place, reading it again from the start" in notes
    after = next(i for i, b in enumerate(batches) if b.note and "rewritten" in b.note)
    assert b"".join(b.data for b in batches[after:]) == new


class _Following:
    """One follow() of a tailer kept open across the test's writes (a new follow() would re-attach, where the
    rule was applied before): `until(pred)` takes batches into `batches` until `pred()` holds (10 s at most)."""

    def __init__(self, tailer: LogTailer) -> None:
        self.tailer = tailer
        self.batches: list[TailBatch] = []
        self._it = tailer.follow()

    async def until(self, pred: Callable[[], bool]) -> None:
        while not pred():
            self.batches.append(await asyncio.wait_for(self._it.__anext__(), 10))

    async def close(self) -> None:
        await self._it.aclose()


def _lines(batches: list[TailBatch]) -> bytes:
    return b"".join(b.data for b in batches)


async def test_tailer_follows_a_log_rotated_while_attached_without_losing_or_repeating_a_line(host: Host) -> None:
    """The log is renamed away mid-stream (its last line written just before) and a new file takes its name:
    the old file is read to its end, then the new one from its start, with a note; the saved offset and inode
    are the new file's, so a later follower resumes there (before: `tail -F` switched files under the byte
    count, so the old file's last line was lost and the offset pointed past the new file's end)."""
    log = host.dir / "server.log"
    log.write_bytes(b"a 1\na 2\n")
    f = _Following(LogTailer(host.transport, str(log), retry_s=0.05, check_s=0.2))
    try:
        await f.until(lambda: f.tailer.offset == 8)
        with open(log, "ab") as fh:
            fh.write(b"a 3\n")
        os.rename(log, host.dir / "server.log.1")
        log.write_bytes(b"b 1\nb 2\n")
        await f.until(lambda: b"b 2\n" in _lines(f.batches))
    finally:
        await f.close()
    assert _lines(f.batches) == b"a 1\na 2\na 3\nb 1\nb 2\n"
    assert "log replaced by a new file; reading it from the start" in [b.note for b in f.batches]
    assert (f.tailer.offset, f.tailer.inode) == (8, log.stat().st_ino)
    with open(log, "ab") as fh:
        fh.write(b"b 3\n")
    later = _Following(LogTailer(host.transport, str(log), f.tailer.offset, f.tailer.inode))
    try:
        await later.until(lambda: later.tailer.offset >= 12)
    finally:
        await later.close()
    assert _lines(later.batches) == b"b 3\n"


async def test_tailer_restarts_a_log_truncated_and_refilled_while_attached(host: Host) -> None:
    """Truncated to less than was read, then refilled past the old offset, while the stream runs: a note, and
    the new content from its first line (before: `tail -F` went on from the top under the old byte count, with
    no note and an offset past the file's end)."""
    log = host.dir / "server.log"
    log.write_bytes(b"old 1\nold 2\n")
    f = _Following(LogTailer(host.transport, str(log), retry_s=0.05, check_s=0.2))
    try:
        await f.until(lambda: f.tailer.offset == 12)
        fd = os.open(log, os.O_WRONLY | os.O_TRUNC)
        os.write(fd, b"n 1\n")
        await f.until(lambda: any(b.note for b in f.batches))
        os.write(fd, b"n 2\nn 3\nn 4\n")   # past the old offset
        os.close(fd)
        await f.until(lambda: b"n 4\n" in _lines(f.batches))
    finally:
        await f.close()
    assert [b.note for b in f.batches if b.note] == ["log truncated, reading it again from the start"]
    after = next(i for i, b in enumerate(f.batches) if b.note)
    assert _lines(f.batches[:after]) == b"old 1\nold 2\n"
    assert _lines(f.batches[after:]) == b"n 1\nn 2\nn 3\nn 4\n" and f.tailer.offset == 16


async def test_tailer_restarts_a_log_rewritten_in_place_while_attached(host: Host) -> None:
    """Overwritten from its first byte, never shorter, while the stream runs: the stream goes on at the old
    offset, in the middle of the new content; the last bytes read no longer match, so the log is read again
    from its start, and no fragment of the new content is handed out before (before: 'ew line 1')."""
    log = host.dir / "server.log"
    log.write_bytes(b"old 1\nold 2\n")
    f = _Following(LogTailer(host.transport, str(log), retry_s=0.05, check_s=0.2))
    new = b"".join(f"new line {i}\n".encode() for i in range(5))
    try:
        await f.until(lambda: f.tailer.offset == 12)
        fd = os.open(log, os.O_WRONLY)
        os.pwrite(fd, new, 0)
        os.close(fd)
        await f.until(lambda: b"new line 4\n" in _lines(f.batches))
    finally:
        await f.close()
    assert [b.note for b in f.batches if b.note] == ["log rewritten in place, reading it again from the start"]
    assert _lines(f.batches) == b"old 1\nold 2\n" + new and f.tailer.offset == len(new)


async def test_read_range_and_last_lines(host: Host) -> None:
    log = host.dir / "server.log"
    log.write_bytes(b"l1\nl2\nl3\npartial")
    t = host.transport
    assert await read_range(t, str(log), 3, 9) == b"l2\nl3\n"
    text, follow_from = await last_lines(t, str(log), 2)
    assert text == b"l2\nl3\n" and follow_from == 9


async def test_tail_follow_latency_is_small(host: Host) -> None:
    """A line appended to the log reaches the follower quickly (ready detection depends on it)."""
    log = host.dir / "server.log"
    log.write_bytes(b"")
    tailer = LogTailer(host.transport, str(log))
    got: list[float] = []

    async def follow() -> None:
        async with contextlib.aclosing(tailer.follow()) as batches:
            async for batch in batches:
                if batch.data:
                    got.append(time.monotonic())
                    return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    with open(log, "ab") as fh:
        fh.write(b"ready\n")
    await asyncio.wait_for(task, 5)
    assert got[0] - t0 < 1.5   # generous guard on a loaded box; typically a few ms (inotify)


async def test_partial_line_bytes_reach_the_parser_once_across_a_lost_link(host: Host) -> None:
    log = host.dir / "server.log"
    log.write_bytes(b"")
    tailer = LogTailer(host.transport, str(log), retry_s=0.05)
    batches: list[TailBatch] = []
    pieces = [b"start\n", b"\rshards 1/4", b"\rshards 2/4", b"\rshards 3/4", b"\rshards 4/4\n", b"done\n"]
    with open(log, "ab", buffering=0) as fh:
        async with contextlib.aclosing(tailer.follow()) as follow:
            it = follow.__aiter__()

            async def until(pred) -> None:   # type: ignore[no-untyped-def]
                while not pred():
                    batches.append(await asyncio.wait_for(it.__anext__(), 10))

            fh.write(pieces[0] + pieces[1])
            await until(lambda: b"shards 1/4" in b"".join(b.fresh for b in batches))
            fh.write(pieces[2])
            await until(lambda: b"shards 2/4" in b"".join(b.fresh for b in batches))
            # The progress line is unfinished: readers got "start" only, the parser got the redraws.
            assert b"".join(b.data for b in batches) == b"start\n" and tailer.offset == 6
            host.drop_link(log)
            await until(lambda: any(b.note and "lost" in b.note for b in batches))
            fh.write(pieces[3] + pieces[4] + pieces[5])
            await until(lambda: tailer.offset == log.stat().st_size)
    content = log.read_bytes()
    assert b"".join(b.fresh for b in batches) == content            # every byte to the parser exactly once
    assert b"".join(b.data for b in batches) == content              # every whole line to readers exactly once


async def test_local_url_reaches_a_server_listening_on_the_hosts_loopback(host: Host) -> None:
    """The URL the run hands to clients (sweeps, probes) reaches the host's 127.0.0.1:PORT from here."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\npong")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        url = await host.transport.local_url(port)
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.get(url + "/ping")
        assert (r.status_code, r.text) == (200, "pong")
    finally:
        server.close()
        await server.wait_closed()


async def test_port_holder_names_the_process_listening_on_the_hosts_port(host: Host) -> None:
    """What a busy port's error says ("held by pid N (its command line)"), read on the host through the transport;
    the command line's NUL separators become spaces, and the booted kernel's id comes back whole."""
    import subprocess
    import sys

    from specmon.sources.hostshell import HostOps

    listener = subprocess.Popen([sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "
                                 "s.bind(('127.0.0.1', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
                                 "time.sleep(60)", "holder-marker"], stdout=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        ops = HostOps(host.transport)
        assert port in await ops.listening()
        holder = await ops.port_holder(port)
        command = " ".join([sys.executable, "-c", "import socket, sys, time; s = socket.socket(); "])
        assert holder == f"pid {listener.pid} ({command[:60]}…)", holder
        assert await ops.boot_id() == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    finally:
        listener.kill()
        listener.wait()


async def test_open_tcp_carries_metrics_reads_from_the_host(host: Host, free_port: int) -> None:
    """The serving view's reads: one connection from the host to its 127.0.0.1:PORT, kept for many reads (over
    SSH a channel of the one connection); nothing listening reads as "connection refused"."""
    from specmon.sources.scrape import MetricsScraper

    connections = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await reader.readuntil(b"\r\n\r\n")
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 27\r\n\r\nvllm:num_requests_running 3")
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    scraper = MetricsScraper(host.transport, server.sockets[0].getsockname()[1])
    refused = MetricsScraper(host.transport, free_port)
    try:
        for _ in range(3):
            result, text = await scraper.read()
            assert (result.status, text) == (200, "vllm:num_requests_running 3")
        assert connections == 1
        result, text = await refused.read()
        assert (result.status, result.error, text) == (None, "connection refused", None)
    finally:
        await scraper.aclose()
        await refused.aclose()
        server.close()
        await server.wait_closed()


async def test_a_local_command_starts_no_thread_to_learn_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: before Python 3.12 asyncio started a thread for each local command to learn when it ended, and
    starting it held the event loop until that thread ran: 15-40 ms on a busy box at 64 runs (the Slurm runs'
    squeue and scontrol), in the way of the next key. The exit codes, a stream's too, are read as before, also by
    a second event loop in another thread."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    local = LocalTransport()
    codes = [(await local.run(f"echo {n}; exit {n}")).exit_code for n in (0, 3, 7)]
    stream = local.stream("echo streamed; exit 5")
    await stream.start()
    while await stream.read_chunk():
        pass
    assert started == [], started
    assert codes == [0, 3, 7] and stream.exit_code == 5
    await stream.aclose()
    assert await asyncio.to_thread(lambda: asyncio.run(local.run("exit 4")).exit_code) == 4

