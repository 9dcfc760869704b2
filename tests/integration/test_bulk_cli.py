"""`specmon stop|restart --profile NAME | --host HOST` and `specmon metrics --all` as a user runs them: real sim
servers, separate processes, a y/N answered on a real terminal (a pty)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pty
import signal
import subprocess
import time

import httpx
import pytest
from lifecycle_support import Cli, marked_pids, port_listening
from lifecycle_support import profile_toml as _profile
from ports import silent_host
from test_lifecycle_cli import cli  # noqa: F401  (the fixture: a private config, its runs stopped after)
from test_runs_hardening import _ended_record, _record_path

from specmon.model.runs.runstatus import RunStatus

pytestmark = pytest.mark.slow


def _ask_on_a_terminal(specmon: Cli, *args: str, before_answer: object = None, answer: bytes = b"y\n",
                       timeout: float = 120) -> tuple[int, str]:
    """Run `specmon ARGS` with a pty as its stdin (a person at a terminal): wait for its `[y/N]` question, call
    `before_answer()`, type `answer`; returns its exit code and stdout."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(specmon.argv(*args), stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    os.close(follower)
    try:
        assert proc.stdout is not None
        out = b""
        deadline = time.monotonic() + timeout
        while b"[y/N] " not in out:
            chunk = proc.stdout.read1(4096)
            assert chunk and time.monotonic() < deadline, out.decode()
            out += chunk
        if callable(before_answer):
            before_answer()
        os.write(leader, answer)
        rest, _ = proc.communicate(timeout=timeout)
        return proc.returncode, (out + rest).decode()
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _runs(specmon: Cli) -> dict[str, dict[str, object]]:
    return {str(r["profile"]): r for r in specmon.status() if r["state"] in ("loading", "ready", "launching")}


def test_stop_by_profile_and_by_host_lists_asks_and_says_what_happened_to_each_run(
        cli: Cli, free_port_factory) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    ports = {name: free_port_factory() for name in ("a", "b", "c")}
    cli.config.write_text("".join(_profile(name, port, load=0.5) for name, port in ports.items()))
    for name in ports:
        assert cli("launch", name).returncode == 0
    runs = _runs(cli)
    assert set(runs) == {"a", "b", "c"}

    # No terminal to ask on (a script): refused in one line, nothing stopped.
    blind = cli("stop", "--host", "local")
    assert blind.returncode == 2 and blind.stderr.count("\n") == 1 and "needs --yes" in blind.stderr, blind
    assert "Traceback" not in blind.stderr and set(_runs(cli)) == {"a", "b", "c"}

    # By profile, with --yes: only a's run, listed, then its outcome.
    one = cli("stop", "--profile", "a", "--yes")
    assert one.returncode == 0, one.stderr
    assert str(runs["a"]["run_id"]) in one.stdout and str(runs["b"]["run_id"]) not in one.stdout
    assert f"a run {runs['a']['run_id']} on local: stopped in" in one.stdout and one.stdout.endswith("1 stopped\n")
    assert set(_runs(cli)) == {"b", "c"} and not port_listening(ports["a"])

    # By host, on a terminal: both runs listed, "n" stops nothing.
    code, out = _ask_on_a_terminal(cli, "stop", "--host", "local", answer=b"n\n")
    assert code == 1 and "Stop 2 runs of host local? [y/N]" in out and "nothing done" in out, out
    assert set(_runs(cli)) == {"b", "c"}

    # "y": b's processes are killed while the question waits, so its outcome is "already gone"; c is stopped.
    def kill_b() -> None:
        for pid in marked_pids(str(runs["b"]["run_id"])):
            os.kill(pid, signal.SIGKILL)

    code, out = _ask_on_a_terminal(cli, "stop", "--host", "local", before_answer=kill_b)
    assert code == 0, out
    assert f"b run {runs['b']['run_id']} on local: already gone" in out, out
    assert f"c run {runs['c']['run_id']} on local: stopped in" in out, out
    assert out.endswith("1 already gone, 1 stopped\n") or out.endswith("1 stopped, 1 already gone\n"), out
    assert _runs(cli) == {} and not any(port_listening(p) for p in ports.values())

    nothing = cli("stop", "--host", "local", "--yes")
    assert nothing.returncode == 0 and nothing.stdout == "no live run of host local: nothing to stop\n"
    unknown = cli("stop", "--profile", "zzz", "--yes")
    assert unknown.returncode == 2 and "unknown profile 'zzz'" in unknown.stderr
    both = cli("stop", "a", "--host", "local")
    assert both.returncode == 2 and "not both" in both.stderr


def test_restart_by_host_launches_each_profile_again(cli: Cli, free_port_factory) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    ports = {name: free_port_factory() for name in ("a", "b")}
    cli.config.write_text("".join(_profile(name, port, load=0.5) for name, port in ports.items()))
    for name in ports:
        assert cli("launch", name).returncode == 0
    before = _runs(cli)
    done = cli("restart", "--host", "local", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    after = _runs(cli)
    assert set(after) == {"a", "b"} and all(after[n]["run_id"] != before[n]["run_id"] for n in ports)
    for name in ports:
        assert f"{name} run {before[name]['run_id']} on local: restarted as run {after[name]['run_id']}" in done.stdout
    assert done.stdout.endswith("2 restarted\n")


def test_stop_by_host_takes_only_that_hosts_runs_over_ssh(cli: Cli, free_port_factory, sshd) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A run on gpu1 (the real loopback sshd) and one here: `--host gpu1` lists and stops only gpu1's."""
    far, near = free_port_factory(), free_port_factory()
    cli.config.write_text(_profile("far", far, load=0.5).rstrip() + '\nhost = "gpu1"\n\n' + _profile("near", near, load=0.5)
                          + sshd.ssh_table(keepalive_s=5.0))
    for name in ("far", "near"):
        launched = cli("launch", name)
        assert launched.returncode == 0, launched.stderr
    runs = _runs(cli)
    done = cli("stop", "--host", "gpu1", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert str(runs["near"]["run_id"]) not in done.stdout
    assert f"far run {runs['far']['run_id']} on gpu1: stopped in" in done.stdout and done.stdout.endswith("1 stopped\n")
    assert set(_runs(cli)) == {"near"} and marked_pids(str(runs["far"]["run_id"])) == []


def test_hosts_that_do_not_answer_fail_their_own_runs_and_delay_nothing_else(cli: Cli, free_port_factory) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Runs of the profile recorded on three hosts whose link hangs (a listener that never sends SSH's banner) and
    one real run here: the real one is stopped, each hung one fails with its host's reason, in about one connect
    timeout in all (one after the other: three or more)."""
    timeout = 3.0
    port = free_port_factory()
    cli.config.write_text(_profile("sim", port, load=0.5) + f"[ssh]\nconnect_timeout_s = {timeout}\n")
    assert cli("launch", "sim", "--wait").returncode == 0
    [real] = _runs(cli).values()
    started = time.monotonic()
    assert cli("status", "--all").returncode == 0
    healthy_s = time.monotonic() - started   # what this box takes to check the runs without a hung host
    template = _ended_record("20261130-000000-hang00", port, time.time() - 30)
    with contextlib.ExitStack() as stack:
        hung = []
        for i in range(3):
            record = dataclasses.replace(template, run_id=f"20261130-00000{i}-hang0{i}",
                                         host=stack.enter_context(silent_host()), state=RunStatus.READY,
                                         exit_code=None, failure=None, pid=4242)
            _record_path(record.run_id).write_text(json.dumps({**record.to_json(),
                                                               "config": os.path.realpath(cli.config)}))
            hung.append(record)
        started = time.monotonic()
        out = cli("stop", "--profile", "sim", "--yes", timeout=120)
        elapsed = time.monotonic() - started
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"sim run {real['run_id']} on local: stopped in" in out.stdout, out.stdout
    for record in hung:
        line = next(line for line in out.stdout.splitlines() if line.startswith(f"sim run {record.run_id} "))
        assert f"on {record.host}: failed: not tried: {record.host}" in line, line
    assert out.stdout.endswith("3 failed, 1 stopped\n") or out.stdout.endswith("1 stopped, 3 failed\n"), out.stdout
    stop_s = float(out.stdout.split("stopped in ")[1].split("s")[0])
    assert elapsed < healthy_s + stop_s + 2.5 * timeout, f"took {elapsed:.1f} s ({healthy_s:.1f} s to check without " \
        f"the hung hosts, the stop {stop_s:.1f} s, connect timeout {timeout:g} s)"


def test_metrics_all_reads_every_ready_run_one_row_each_and_names_what_could_not_be_read(
        cli: Cli, free_port_factory) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """Three ready sim servers (one speculative, one without /metrics) and a ready run recorded on a host whose link
    hangs: one row per run in 80 columns, figures where read, the reason where not, never a traceback."""
    ports = {name: free_port_factory() for name in ("plain", "eagle", "bare")}
    extra = {"plain": (), "eagle": ("--spec", "eagle3", "--decode-log-interval", "4"), "bare": ("--no-metrics",)}
    cli.config.write_text("".join(_profile(name, port, *extra[name], load=0.5) for name, port in ports.items())
                          + "[ssh]\nconnect_timeout_s = 3\n")
    for name in ports:
        assert cli("launch", name, "--wait").returncode == 0
    with httpx.Client(timeout=60) as client:   # a few speculative steps, so the accept length is known
        for _ in range(3):
            client.post(f"http://127.0.0.1:{ports['eagle']}/v1/completions",
                        json={"prompt": "Hi", "max_tokens": 64, "ignore_eos": True}).raise_for_status()
    with silent_host() as host:
        hung = dataclasses.replace(_ended_record("20261130-000000-hang00", ports["plain"], time.time() - 30),
                                   host=host, state=RunStatus.READY,
                                   exit_code=None, failure=None, pid=4242)
        _record_path(hung.run_id).write_text(json.dumps({**hung.to_json(), "config": os.path.realpath(cli.config)}))
        table = cli("metrics", "--all", "--interval", "0.5")
        lines = cli("metrics", "--all", "--json", "--interval", "0.5")
    runs = _runs(cli)
    assert table.returncode == 1 and "Traceback" not in table.stderr, table.stderr
    rows = table.stdout.splitlines()
    assert rows[0].split() == ["PROFILE", "HOST", "RUN", "WAIT", "KV", "TOK/S", "ACCEPT", "NOTE"], table.stdout
    # The figures fit in 80 columns with room for the note (a terminal cuts the note to fit; a pipe gets it whole).
    assert len(rows) == 5 and rows[0].index("NOTE") <= 60, table.stdout
    by_profile = {row.split()[0] + " " + row.split()[1]: row for row in rows[1:]}
    assert by_profile["plain local"].split()[2:] == ["0", "0", "0%", "0", "—"], table.stdout
    assert by_profile["eagle local"].split()[6] != "—", table.stdout   # its accept length
    assert "no /metrics (HTTP 404)" in by_profile["bare local"], table.stdout
    assert f"not read: {hung.host}: " in by_profile[f"sim {hung.host}"], table.stdout

    assert lines.returncode == 1, lines.stderr
    objects = {str(o["profile"]): o for o in map(json.loads, lines.stdout.splitlines())}
    assert set(objects) == {"plain", "eagle", "bare", "sim"}
    assert objects["plain"]["run_id"] == runs["plain"]["run_id"] and objects["plain"]["error"] is None
    assert objects["plain"]["running"] == 0 and objects["plain"]["host"] == "local"
    assert objects["eagle"]["accept_len"] is not None and objects["eagle"]["accept_len"] > 1
    assert str(objects["bare"]["error"]).startswith("no /metrics (HTTP 404)") and objects["bare"]["running"] is None
    assert set(objects["bare"]) == set(objects["plain"])   # the same keys on every line, null where not read
