"""SSHTransport against a real OpenSSH sshd on 127.0.0.1 (tests/support/sshd_support.py), beyond the transport contract
(tests/integration/test_transport_contract.py runs that over SSH too): ProxyJump chains, host-key and login refusals
without retry storms, keepalive and reconnect, HTTP over the link."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from simproc import start_sim
from sshd_support import Relay, Sshd

from specmon.sources.health import probe_of
from specmon.sources.ssh import AuthRefused, HostKeyChanged, HostKeyUnknown, SSHTransport
from specmon.sources.transport import LinkState, TransportError

pytestmark = pytest.mark.slow


def _count_commands(transport: SSHTransport) -> list[str]:
    """The commands `transport` starts on the host from now on (each its own SSH session: what costs), as they are
    started (clear() it to count from a moment on)."""
    commands: list[str] = []
    process = transport._process

    async def counted(command: str, wait_s: float | None) -> object:
        commands.append(command)
        return await process(command, wait_s)

    transport._process = counted   # type: ignore[method-assign,assignment]
    return commands


def _run_dirs(tmp_path: Path, count: int) -> list[Path]:
    """`count` empty run directories."""
    dirs = [tmp_path / f"run-{i}" for i in range(count)]
    for run_dir in dirs:
        run_dir.mkdir()
    return dirs


def _accepted(sshd: Sshd) -> int:
    return len(re.findall(r"Accepted publickey", sshd.log.read_text(errors="replace")))


@pytest.mark.parametrize(("alias", "logins"), [("gpu1", 1), ("gpu2", 2), ("gpu3", 3)])
async def test_aliases_and_proxyjump_chains_reach_the_host(sshd: Sshd, alias: str, logins: int) -> None:
    """HostName/Port/User/IdentityFile from the config file; ProxyJump with one and two jump hosts (each hop is
    a login of its own on the sshd); the remote HOME comes from the session, not from here."""
    before = _accepted(sshd)
    transport = SSHTransport(alias, sshd.settings())
    try:
        result = await transport.run('printf %s "$HOME"')
        assert result.ok and result.out == str(sshd.home)
        second = await transport.run("echo again")     # one shared connection: no new login
        assert second.out == "again\n"
        await asyncio.sleep(0.2)
        assert _accepted(sshd) - before == logins
        assert transport.link.state == "connected"
    finally:
        await transport.close()


async def _relay_alias(sshd: Sshd, name: str, *, trust: bool = True) -> Relay:
    relay = await Relay(sshd.port).start()
    sshd.add_alias(name, relay.port, trust_port=trust)
    return relay


async def test_unknown_host_key_fails_once_with_fingerprint_and_trust_command(sshd: Sshd) -> None:
    relay = await _relay_alias(sshd, "newhost", trust=False)
    transport = SSHTransport("newhost", sshd.settings())
    try:
        with pytest.raises(HostKeyUnknown) as info:
            await transport.run("true")
        message = str(info.value)
        fingerprint = re.search(r"SHA256:\S+?(?=[,)])", message)
        assert fingerprint and "specmon trust newhost" in message and "\n" not in message
        assert info.value.key is not None and info.value.key.fingerprint == fingerprint.group(0)
        assert transport.link.state == "host key unknown" and transport.link.label() == "host key refused"
        seen = relay.accepted          # the connect, plus one connection that read the key for the message
        for _ in range(5):
            with pytest.raises(HostKeyUnknown):
                await transport.run("true")
        await asyncio.sleep(2.5)
        assert relay.accepted == seen <= 2, "retried after a refused host key"
    finally:
        await transport.close()
        await relay.close()


async def test_changed_host_key_is_one_hard_error_without_retries(sshd: Sshd, tmp_path: Path) -> None:
    relay = await _relay_alias(sshd, "changed", trust=False)
    impostor = tmp_path / "impostor.pub"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")], check=True)
    with open(sshd.known_hosts, "a") as fh:
        fh.write(f"[127.0.0.1]:{relay.port} {' '.join(impostor.read_text().split()[:2])}\n")
    transport = SSHTransport("changed", sshd.settings())
    try:
        with pytest.raises(HostKeyChanged) as info:
            await transport.run("true")
        message = str(info.value)
        assert "HOST KEY CHANGED" in message and "SHA256:" in message and "\n" not in message
        assert transport.link.label() == "host key refused"
        seen = relay.accepted
        results = await asyncio.gather(*(transport.run("true") for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, HostKeyChanged) for r in results)
        await asyncio.sleep(2.5)
        assert relay.accepted == seen <= 2
    finally:
        await transport.close()
        await relay.close()


async def test_refused_key_is_one_clear_error_without_retries(sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    relay = await Relay(sshd.port).start()
    sshd.add_alias("nokey", relay.port, user_key=stranger)
    transport = SSHTransport("nokey", sshd.settings())
    try:
        with pytest.raises(AuthRefused, match=r"^nokey: authentication refused for user root") as info:
            await transport.run("true")
        assert "\n" not in str(info.value) and transport.link.label() == "auth failed"
        for _ in range(3):
            with pytest.raises(AuthRefused):
                await transport.run("true")
        await asyncio.sleep(2.5)
        assert relay.accepted == 1
    finally:
        await transport.close()
        await relay.close()


async def test_unreachable_host_fails_fast_before_a_first_connect(sshd: Sshd) -> None:
    relay = await Relay(sshd.port).start()
    port = relay.port
    await relay.close()          # nothing listens there now
    sshd.add_alias("down", port)
    transport = SSHTransport("down", sshd.settings())
    try:
        t0 = time.monotonic()
        with pytest.raises(TransportError, match="down: cannot connect") as info:
            await transport.run("true")
        assert not info.value.permanent and time.monotonic() - t0 < 30
    finally:
        await transport.close()


@pytest.mark.parametrize("how", ["reset", "blackhole"])
async def test_a_dead_link_is_noticed_within_the_keepalive_window_and_comes_back(sshd: Sshd, how: str) -> None:
    relay = await _relay_alias(sshd, f"flaky-{how}")
    transport = SSHTransport(f"flaky-{how}", sshd.settings(keepalive_s=1.0, connect_timeout_s=3.0),
                             backoff_cap_s=2.0)
    states: list[tuple[float, LinkState]] = []
    transport.watch_link(lambda link: states.append((time.monotonic(), link)))
    try:
        assert (await transport.run("echo up")).out == "up\n"
        t0 = time.monotonic()
        relay.reset() if how == "reset" else relay.blackhole()
        # The link's changes as its watcher saw them: after a reset the reconnect can finish within a few ms
        # (the relay keeps accepting), so sampling `transport.link` could miss the drop altogether.
        while not (down := [at for at, s in states if at >= t0 and not s.up]) and time.monotonic() - t0 < 20:
            await asyncio.sleep(0.05)
        assert down, f"the link never left 'connected' after the relay's {how}: {[s.state for _, s in states]}"
        noticed = down[0] - t0
        # keepalive 1 s x 3 unanswered: about 3-4 s; generous guard for a loaded machine
        assert noticed < 12, f"dead link noticed after {noticed:.1f} s"
        if how == "blackhole":
            await asyncio.sleep(2)
            relay.restore()
        result = await transport.run("echo back", timeout=60)
        assert result.out == "back\n" and transport.link.up
        assert any(s.state == "reconnecting" for _, s in states)
    finally:
        await transport.close()
        await relay.close()


async def test_a_command_cut_by_the_link_raises_instead_of_returning_a_result(sshd: Sshd) -> None:
    relay = await _relay_alias(sshd, "cut")
    transport = SSHTransport("cut", sshd.settings())
    try:
        await transport.run("true")
        task = asyncio.create_task(transport.run("sleep 5; echo late", timeout=30))
        await asyncio.sleep(0.5)
        relay.reset()
        with pytest.raises(TransportError):
            await task
    finally:
        await transport.close()
        await relay.close()


async def test_http_probes_go_through_the_host_and_say_refused_only_when_nothing_listens(
        sshd: Sshd, free_port: int) -> None:
    transport = SSHTransport("gpu2", sshd.settings())
    try:
        probe = await probe_of(transport, free_port)
        try:
            result = await probe.health()
            assert result.status is None and result.error == "connection refused"
        finally:
            await probe.aclose()
        with start_sim("--model", "test/Model-7B") as sim:
            port = int(sim.url.rsplit(":", 1)[1])
            probe = await probe_of(transport, port)
            try:
                assert probe.base_url == f"http://127.0.0.1:{port}"
                assert (await probe.health()).ok
                assert (await probe.completion()).ok
                assert await probe.model_id() == "test/Model-7B"
                assert isinstance(await probe.server_info(), dict)
            finally:
                await probe.aclose()
            # The forward: a local port on 127.0.0.1 that reaches the host's port, the same for every call.
            url = await transport.local_url(port)
            assert url == await transport.local_url(port) and url.startswith("http://127.0.0.1:")
            async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
                assert (await client.get("/health")).status_code == 200
    finally:
        await transport.close()


async def test_link_down_reads_as_link_down_not_as_refused(sshd: Sshd, free_port: int) -> None:
    relay = await _relay_alias(sshd, "probe-down")
    transport = SSHTransport("probe-down", sshd.settings(), link_wait_s=0.5)
    try:
        await transport.run("true")
        relay.blackhole()
        while transport.link.up:
            await asyncio.sleep(0.05)
        probe = await probe_of(transport, free_port, timeout_s=2.0)
        try:
            result = await probe.health()
            assert result.status is None and result.error == "link down"
        finally:
            await probe.aclose()
    finally:
        await transport.close()
        await relay.close()



async def test_many_concurrent_commands_share_one_connection_within_maxsessions(sshd: Sshd) -> None:
    """OpenSSH refuses an 11th session on one connection (MaxSessions 10): 25 commands at once still all run,
    over one login, with streams holding sessions at the same time."""
    before = _accepted(sshd)
    transport = SSHTransport("gpu1", sshd.settings())
    try:
        async with transport.stream("echo streaming; exec sleep 30") as held:
            assert (await held.read_chunk()).startswith(b"streaming")
            results = await asyncio.gather(*(transport.run(f"sleep 0.2; echo {i}", timeout=60) for i in range(25)))
        assert [r.out for r in results] == [f"{i}\n" for i in range(25)]
        assert _accepted(sshd) - before == 1
    finally:
        await transport.close()


async def test_commands_cut_by_a_dropped_link_are_ended_on_the_host_once_it_is_back(sshd: Sshd) -> None:
    """A command whose link drops cannot be ended then (the kill has no way to the host); it is ended as soon as
    the link is back, never left running there for good."""
    relay = await _relay_alias(sshd, "dropped")
    transport = SSHTransport("dropped", sshd.settings(keepalive_s=1.0, connect_timeout_s=3.0), backoff_cap_s=2.0)
    tag = f"{secrets.randbelow(10**6):06d}"   # the commands' own marks, as `pgrep -f` finds them on the host
    marks = [f"3001.{tag}", f"3002.{tag}"]

    def running() -> list[str]:
        return [m for m in marks if subprocess.run(["pgrep", "-f", f"[s]leep {m}"], capture_output=True).returncode == 0]

    try:
        await transport.run("true")
        ran = asyncio.create_task(transport.run(f"sleep {marks[0]}", timeout=300))
        stream = transport.stream(f"sleep {marks[1]}")
        await stream.start()
        deadline = time.monotonic() + 30
        while running() != marks:
            assert time.monotonic() < deadline, "the commands never started"
            await asyncio.sleep(0.1)
        relay.blackhole()
        with pytest.raises(TransportError):
            await ran
        assert await stream.read_chunk() == b"" and stream.exit_code is None
        await stream.aclose()
        assert running() == marks   # the link is still down: nothing could reach the host yet
        relay.restore()
        deadline = time.monotonic() + 60
        while running():
            assert time.monotonic() < deadline, f"still running on the host after the link came back: {running()}"
            await asyncio.sleep(0.2)
        while transport.unended or transport.unstarted:   # the kill's answer follows the kill by a moment
            assert time.monotonic() < deadline, f"kept as still to end: {transport.unended} {transport.unstarted}"
            await asyncio.sleep(0.2)
    finally:
        await transport.close()
        await relay.close()
        for mark in marks:   # a failed run's leftovers, by their pids
            found = subprocess.run(["pgrep", "-f", f"[s]leep {mark}"], capture_output=True, text=True).stdout
            for pid in found.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)


async def test_quiet_logs_of_a_hosts_runs_are_checked_in_one_command_not_one_each(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 37: every run's log tailer checks its log after each second of quiet (a rotation shows only at its
    name), one SSH command per run per second: at 64 runs on 16 hosts the idle app spent a fifth of its CPU opening
    sessions for them (py-spy: SSHTransport.run under LogTailer._look). The quiet checks of a host's tailers now
    fall on a shared tick and go out as one command; every tailer still gets its lines."""
    from specmon.sources.tailer import LogTailer

    transport = SSHTransport("gpu1", sshd.settings())
    logs = [tmp_path / f"server-{i}.log" for i in range(6)]
    for log in logs:
        log.write_text("ready\n")
    commands = _count_commands(transport)
    got: dict[int, bytes] = {i: b"" for i in range(len(logs))}

    async def follow(i: int) -> None:
        async for batch in LogTailer(transport, str(logs[i]), check_s=0.5).follow():
            got[i] += batch.data

    tasks = [asyncio.create_task(follow(i)) for i in range(len(logs))]
    try:
        deadline = time.monotonic() + 30
        while not all(got.values()):   # every tailer attached and read its first line
            assert time.monotonic() < deadline, got
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        commands.clear()
        started = time.monotonic()
        await asyncio.sleep(3.0)       # all quiet
        ticks = (time.monotonic() - started) / 0.5
        assert len(commands) <= 2 * ticks + 2, \
            f"{len(commands)} commands over {ticks:.0f} quiet checks of {len(logs)} logs (one command a tick expected)"
        for log in logs:
            with open(log, "a") as fh:
                fh.write("more\n")
        while not all(data.endswith(b"more\n") for data in got.values()):
            assert time.monotonic() < deadline + 30, got
            await asyncio.sleep(0.1)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await transport.close()


async def test_the_logs_of_more_runs_than_a_connection_has_sessions_are_all_followed(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 37: every run's log follower held an SSH session (`tail -f`) for good, and a connection allows only
    MaxSessions (10; 8 used): the ninth run on a host was never followed (its lines never came; a run whose ready
    line never arrives never turns READY). Twelve runs' logs on one host are all followed over the one
    connection, the lines written after the followers started included, and sessions stay free for commands."""
    from specmon.sources.tailer import LogTailer

    transport = SSHTransport("gpu1", sshd.settings())
    logs = [tmp_path / f"server-{i}.log" for i in range(12)]
    for i, log in enumerate(logs):
        log.write_text(f"run {i} loading\n")
    got: dict[int, bytes] = {i: b"" for i in range(len(logs))}

    async def follow(i: int) -> None:
        async for batch in LogTailer(transport, str(logs[i])).follow():
            got[i] += batch.data

    tasks = [asyncio.create_task(follow(i)) for i in range(len(logs))]
    try:
        deadline = time.monotonic() + 30
        while not all(got.values()):
            assert time.monotonic() < deadline, f"logs never followed: {[i for i, d in got.items() if not d]}"
            await asyncio.sleep(0.1)
        for i, log in enumerate(logs):
            with open(log, "a") as fh:
                fh.write(f"run {i} ready\n")
        while not all(data.endswith(b"ready\n") for data in got.values()):
            assert time.monotonic() < deadline, got
            await asyncio.sleep(0.1)
        assert (await transport.run("echo free", timeout=10)).stdout == b"free\n"   # a command still gets a session
        assert transport.connects == 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await transport.close()


async def test_process_checks_of_a_hosts_runs_go_out_as_one_command_not_one_each(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 37: each watched run checked its server's process (its /proc stat, exit code and stop file) with its
    own SSH command every 2 s: 13 % of the idle app's CPU at 128 runs went to opening those sessions. The checks
    of a host's runs fall on a shared tick (`until_tick`) and go out as one command; each run still gets its own
    answer (a live process, an exit code, a stop request)."""
    from specmon.sources.hostshell import HostOps
    from specmon.sources.transport import until_tick

    transport = SSHTransport("gpu1", sshd.settings())
    ops = HostOps(transport)
    sleeper = subprocess.Popen(["sleep", "60"])
    dirs = _run_dirs(tmp_path, 10)
    for i, run_dir in enumerate(dirs):
        if i % 3 == 1:
            (run_dir / "exit_code").write_text(f"{i}\n")
        if i % 3 == 2:
            (run_dir / "stop_requested").write_text("")
    commands = _count_commands(transport)

    async def check(run_dir: Path) -> tuple[bool, int | None, bool]:
        await asyncio.sleep(until_tick(0.5))   # as the watchers' process loops sleep
        info, code, stop = await ops.run_status(str(run_dir), sleeper.pid)
        return info is not None and info.alive, code, stop

    try:
        await transport.run("true")   # connected
        commands.clear()
        answers = await asyncio.gather(*(check(d) for d in dirs))
        assert answers == [(True, i if i % 3 == 1 else None, i % 3 == 2) for i in range(len(dirs))]
        assert len(commands) <= 1, f"{len(commands)} commands for the process checks of {len(dirs)} runs (one expected)"
    finally:
        sleeper.kill()
        sleeper.wait()
        await transport.close()


async def test_a_batch_of_reads_that_hangs_ends_its_shell_and_the_next_batch_gets_a_new_one(sshd: Sshd) -> None:
    """The batched reads share one shell kept running on the host: one that hangs (an NFS stall) must not hold up
    every later read for ever, nor stay behind on the host. It ends with a TimeoutError, its shell and what that
    shell ran are ended, and the next read starts a new shell."""
    transport = SSHTransport("gpu1", sshd.settings())
    mark = f"{secrets.randbelow(10**6) + 10**6}"
    try:
        assert await transport.batch_run("echo first", 10) == b"first\n"
        with pytest.raises(TimeoutError):
            await transport.batch_run(f"sleep {mark}", 1.0)
        assert await transport.batch_run("echo next", 10) == b"next\n"
        deadline = time.monotonic() + 10
        while subprocess.run(["pgrep", "-f", f"[s]leep {mark}"], capture_output=True).returncode == 0:
            assert time.monotonic() < deadline, "the hung read's command was left running on the host"
            await asyncio.sleep(0.1)
    finally:
        await transport.close()


async def test_status_checks_a_hosts_runs_in_about_one_command_each_not_four(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 37: `specmon status --all` checked each run with four SSH commands (its process, the host's boot id,
    its log's size, then its log), each a session opened and closed, four runs of a host at a time: 2.4 s at 64 runs
    on 16 hosts. The process and boot id of a host's runs checked at once are read together (one shell kept for such
    reads), the log's end and mtime in one command: about one command a run. Every run is still judged right."""
    from specmon.model.config import Config
    from specmon.model.runs.record import RunRecord
    from specmon.orchestration.runs.manager import RunManager

    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(8)]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    manager = RunManager(Config(source="test profiles", profiles={}, ssh=sshd.settings()))
    for i, proc in enumerate(sleepers):
        run_dir = tmp_path / f"run-{i}"
        run_dir.mkdir()
        (run_dir / "server.log").write_text("loading\nThe server is fired up and ready to roll!\n")
        starttime = int(Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[19])
        if i == 7:
            proc.kill()
            proc.wait()
            (run_dir / "exit_code").write_text("0\n")
        manager.index.store.save(RunRecord(
            run_id=f"20261205-00000{i}-ab{i:04d}", profile=f"p{i}", host="gpu1", run_dir=str(run_dir), port=1,
            url="http://127.0.0.1:1", server="sglang", health_path="/health", stall_timeout_s=30, notify_cmd=None,
            expected_load_s=None, started_at=time.time() - 60, state="ready", pid=proc.pid, starttime=starttime,
            boot_id=boot, ready_at=time.time() - 30))
    try:
        commands = _count_commands(manager.ops("gpu1").transport)   # type: ignore[arg-type]
        views = await manager.refresh(all_configs=True)
        assert [v.state for v in views] == ["ready"] * 7 + ["exited"], [v.state for v in views]
        assert len(commands) <= len(views) + 2, f"{len(commands)} commands to check {len(views)} runs"
        # ... and their logs' ends through the same kept shell: no session a run at all (status --all at 128 runs).
        assert len(commands) <= 2, f"{len(commands)} commands to check {len(views)} runs: {commands}"
    finally:
        for proc in sleepers:
            proc.kill()
            proc.wait()
        await manager.close()


async def test_the_link_uses_aes_gcm_unless_the_config_names_its_ciphers(sshd: Sshd) -> None:
    """Issue 37: asyncssh's first choice, chacha20-poly1305, costs it three cipher objects a packet (five times an
    AES-GCM packet's CPU), and an idle TUI reading a fleet's /metrics over SSH spends most of its CPU on packets.
    The link asks for AES-GCM first; a `Ciphers` line in the config file still decides where there is one."""
    sshd.extra_hosts["ctr"] = sshd.alias("ctr") + "  Ciphers aes128-ctr\n"
    sshd._write_config()
    for alias, wanted in (("gpu1", "aes128-gcm@openssh.com"), ("ctr", "aes128-ctr")):
        transport = SSHTransport(alias, sshd.settings())
        try:
            assert (await transport.run("echo up")).out == "up\n"
            assert transport._conn is not None
            assert (transport._conn.get_extra_info("send_cipher"), transport._conn.get_extra_info("recv_cipher")) \
                == (wanted, wanted)
        finally:
            await transport.close()


async def test_a_long_logs_end_comes_whole_through_the_kept_shell(sshd: Sshd, tmp_path: Path) -> None:
    """`status` reads each run's log end (up to 8 MiB) through the host's kept shell now, not a session each: a
    long log's end comes whole, and the shell answers the next read after it."""
    from specmon.sources.tailer import log_end

    log = tmp_path / "server.log"
    line = b"Decode batch. #running-req: 1, #token: 100, gen throughput (token/s): 50.00\n"
    log.write_bytes(line * (6_000_000 // len(line)))
    transport = SSHTransport("gpu1", sshd.settings())
    try:
        data, mtime = await log_end(transport, str(log), 8 << 20)
        assert data == log.read_bytes() and mtime == int(log.stat().st_mtime)
        assert await log_end(transport, str(tmp_path / "missing.log"), 100) == (b"", None)
        assert await transport.read_files([str(log)[:-4] + ".none"]) == [None]
    finally:
        await transport.close()


def _sends_on(transport: SSHTransport, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the send() calls made on `transport`'s socket to its host from now on (each one a system call)."""
    import socket

    assert transport._conn is not None
    fd = transport._conn.get_extra_info("socket").fileno()
    sizes: list[int] = []
    send = socket.socket.send

    def counted(self: socket.socket, data: bytes, *args: int) -> int:
        if self.fileno() == fd:
            sizes.append(len(data))
        return send(self, data, *args)

    monkeypatch.setattr(socket.socket, "send", counted)
    return sizes


async def test_the_metrics_requests_of_one_second_leave_a_host_link_in_one_send(
        sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: asyncssh sent each SSH packet with its own send() call (and an MSG_IGNORE before each data packet);
    the serving view's /metrics requests of a host's runs all go out on the same second, so at 64 runs py-spy found
    a quarter of the idle app's samples in those system calls (_SelectorSocketTransport.write under
    MetricsScraper._exchange). The packets written at one moment now leave in one send, and every read still gets
    its own whole answer, as soon as before."""
    from test_metrics_relay import answer_port

    from specmon.sources.scrape import MetricsScraper
    from specmon.sources.transport import until_tick

    servers = [await asyncio.start_server(answer_port, "127.0.0.1", 0) for _ in range(4)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    transport = SSHTransport("gpu1", sshd.settings())
    scrapers = [MetricsScraper(transport, port) for port in ports]
    try:
        for scraper in scrapers:   # each has its channel open, as between a fleet's reads
            assert (await scraper.read())[0].status == 200
        sends = _sends_on(transport, monkeypatch)
        for _ in range(3):
            await asyncio.sleep(until_tick(0.5))   # as the serving view's readers wake on the shared clock
            sends.clear()
            started = time.monotonic()
            answers = await asyncio.gather(*(scraper.read() for scraper in scrapers))
            took = time.monotonic() - started
            assert [text for _, text in answers] == [f"sglang:num_running_reqs {port}\n" for port in ports]
            assert len(sends) == 1, f"{len(sends)} sends for the /metrics requests of one moment on one link: {sends}"
            assert took < 2.0, f"four reads over the link took {took:.2f} s"
    finally:
        for scraper in scrapers:
            await scraper.aclose()
        await transport.close()
        for server in servers:
            server.close()


async def test_the_log_looks_and_process_checks_of_one_tick_are_one_query_of_the_kept_shell(
        sshd: Sshd, tmp_path: Path) -> None:
    """Issue 37: a host's log looks (every second) and its process checks (every 2 s) each went out as one query of
    the host's kept shell, so every other second a host was asked twice, one round trip after the other. What a
    host's runs ask at one moment now goes out as one query, and each run still gets its own answers."""
    from specmon.sources.hostshell import HostOps
    from specmon.sources.transport import until_tick

    transport = SSHTransport("gpu1", sshd.settings())
    ops = HostOps(transport)
    sleeper = subprocess.Popen(["sleep", "60"])
    dirs = _run_dirs(tmp_path, 4)
    for i, run_dir in enumerate(dirs):
        (run_dir / "server.log").write_text(f"run {i} ready\n")
        if i == 1:
            (run_dir / "exit_code").write_text("3\n")
    queries: list[str] = []
    batch_run = transport.batch_run

    async def counted(script: str, timeout: float) -> bytes:
        queries.append(script)
        return await batch_run(script, timeout)

    transport.batch_run = counted   # type: ignore[method-assign]

    async def look(run_dir: Path) -> bytes | None:
        await asyncio.sleep(until_tick(1.0))   # as the tailers and the process checks sleep
        found = await transport.look(str(run_dir / "server.log"), 0, 100)
        return None if found is None else found.data

    async def check(run_dir: Path) -> tuple[bool, int | None]:
        await asyncio.sleep(until_tick(1.0))
        info, code, _ = await ops.run_status(str(run_dir), sleeper.pid)
        return info is not None and info.alive, code

    try:
        await transport.run("true")   # connected
        looks, checks = await asyncio.gather(asyncio.gather(*(look(d) for d in dirs)),
                                             asyncio.gather(*(check(d) for d in dirs)))
        assert looks == [f"run {i} ready\n".encode() for i in range(len(dirs))]
        assert checks == [(True, 3 if i == 1 else None) for i in range(len(dirs))]
        assert len(queries) == 1, f"{len(queries)} queries for the looks and process checks of one tick (one expected)"
    finally:
        sleeper.kill()
        sleeper.wait()
        await transport.close()
