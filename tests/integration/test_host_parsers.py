"""The pure parsers of what a host's /proc prints (model/machine/procfs.py) on real captured text (tests/fixtures/procfs/,
see its README), plus the per-process GPU memory that `specmon stop` waits on (model/machine/gpu.py)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from paths import FIXTURES

from specmon.model.machine.gpu import memory_by_pid, parse_apps
from specmon.model.machine.procfs import (
    describe_process,
    free_ports_near,
    listener_inodes,
    listening_ports,
    parse_stat,
    pid_of_path,
)

PROCFS = FIXTURES / "procfs"
NET_TCP = (PROCFS / "net_tcp").read_text() + (PROCFS / "net_tcp6").read_text()


def test_stat_with_a_command_name_holding_spaces_and_parentheses() -> None:
    # The name is "my (odd) cmd) x": the fields start after the LAST ")".
    info = parse_stat((PROCFS / "stat_odd_name").read_text())
    assert info is not None
    assert (info.pid, info.state, info.pgid, info.sid, info.starttime) == (22106, "S", 22106, 22106, 1239818)
    assert info.alive


def test_a_zombie_is_not_alive_and_short_or_empty_lines_are_none() -> None:
    zombie = parse_stat((PROCFS / "stat_zombie").read_text())
    assert zombie is not None and zombie.state == "Z" and not zombie.alive
    assert parse_stat("") is None
    assert parse_stat("12 (short) S 1") is None
    assert parse_stat("x (not a pid) S " + "1 " * 30) is None


def test_stat_of_this_process() -> None:
    info = parse_stat(Path("/proc/self/stat").read_text())
    assert info is not None and info.alive and info.sid == os.getsid(info.pid) and info.pgid == os.getpgid(info.pid)


def test_listeners_ipv4_and_ipv6_but_not_connections() -> None:
    # Captured with listeners on 127.0.0.1:46149 and [::1]:36661 and one connection 33866 -> 46149.
    assert listening_ports(NET_TCP) == {46149, 36661}
    assert listener_inodes(NET_TCP, 46149) == {"794656"}   # not the inodes of the two connected sockets
    assert listener_inodes(NET_TCP, 36661) == {"794657"}
    assert listener_inodes(NET_TCP, 33866) == set()
    assert listening_ports("") == set()


@pytest.mark.slow
def test_listening_ports_sees_a_live_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        text = Path("/proc/net/tcp").read_text()
        assert listener.getsockname()[1] in listening_ports(text)


def test_free_ports_skip_listeners_and_ports_to_avoid() -> None:
    assert free_ports_near(46148, listening_ports(NET_TCP)) == [46150, 46151]
    assert free_ports_near(8000, {8001, 8003}, count=3, avoid=[8002]) == [8004, 8005, 8006]
    assert free_ports_near(65534, set(), count=3) == [65535]   # never past the last port


def test_pid_of_proc_paths_and_process_description() -> None:
    assert pid_of_path("/proc/4242/fd/7\n") == 4242
    assert pid_of_path("/proc/4242/environ") == 4242
    assert pid_of_path("/proc/self/fd/7") is None
    assert pid_of_path("/home/proc/12/x") is None and pid_of_path("") is None
    assert describe_process(7, "python3\0-m\0sglang.launch_server\0") == "pid 7 (python3 -m sglang.launch_server)"
    assert describe_process(7, "x" * 70) == f"pid 7 ({'x' * 60}…)"
    assert describe_process(7, "") == "pid 7 (?)"


def test_gpu_memory_of_a_process_on_two_gpus_is_the_sum() -> None:
    apps = parse_apps("GPU-a, 4242, 39000, python3\nGPU-b, 4242, 184, python3\nGPU-a, 77, [N/A], worker\n")
    assert memory_by_pid(apps) == {4242: 39184, 77: 0}
    assert memory_by_pid([]) == {}
