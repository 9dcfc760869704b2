"""The GPU probe (specmon.sources.gpu) through the real LocalTransport against a fake `nvidia-smi` on PATH.

The fake (tests/fixtures/gpu/fake-nvidia-smi) is the one stand-in here: no GPU exists on CI machines. It prints
rows shaped like the real captures and can print [N/A], drop a GPU mid-stream, or hang. `specmon gpus HOST` is
also run through a real loopback sshd whose sessions find the fake on their PATH."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from paths import FIXTURES
from sshd_support import Sshd, sshd_available

from specmon.sources.gpu import GpuProbe, snapshot
from specmon.sources.hostshell import HostOps
from specmon.sources.local import LocalTransport

FAKE = FIXTURES / "gpu" / "fake-nvidia-smi"


@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding `nvidia-smi` (the fake), put first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    return bin_dir


async def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for `check()`; the generous deadline only guards against a hang."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


@pytest.fixture
def marked_process() -> Iterator[tuple[int, int]]:
    """(pid of a process carrying SPECMON_RUN_ID=run-a, pid of one without it)."""
    env = {k: v for k, v in os.environ.items() if k != "SPECMON_RUN_ID"}
    marked = subprocess.Popen(["sleep", "60"], env={**env, "SPECMON_RUN_ID": "run-a"})
    stranger = subprocess.Popen(["sleep", "60"], env=env)
    yield marked.pid, stranger.pid
    for proc in (marked, stranger):
        proc.kill()
        proc.wait()


@pytest.mark.slow
async def test_snapshot_reads_gpus_and_maps_pids_to_runs(fake_smi: Path, monkeypatch: pytest.MonkeyPatch,
                                                       marked_process: tuple[int, int]) -> None:
    marked, stranger = marked_process
    monkeypatch.setenv("FAKE_SMI_APPS", f"0:{marked}:4000;1:{marked}:4000;1:{stranger}:50")
    board = await snapshot(LocalTransport())
    assert board.error is None and board.apps_error is None
    assert [g.latest.index for g in board.gpus()] == [0, 1]
    assert [g.latest.index for g in board.gpus_of_run("run-a")] == [0, 1]
    assert {h.describe(["run-a"]) for h in board.gpus()[1].holders} == {
        f"run run-a (pid {marked})", f"held by pid {stranger} (not a specmon run)"}


@pytest.mark.slow
async def test_na_fields_are_unknown_not_zero(fake_smi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SMI_NA", "1")
    board = await snapshot(LocalTransport())
    gpu = board.gpus()[0].latest
    assert (gpu.power_w, gpu.temperature_c, gpu.sm_clock_mhz) == (None, None, None)
    assert gpu.memory_total_mib == 143771


@pytest.mark.slow
async def test_missing_nvidia_smi_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    board = await snapshot(LocalTransport())
    assert board.error == "local: nvidia-smi not found (no NVIDIA driver here?)" and not board.tracks


@pytest.mark.slow
async def test_a_host_without_gpus_gets_no_compute_apps_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A jump box has no nvidia-smi: the probe says so and does not start a compute-apps query every few seconds
    for as long as the TUI stays open (the stream's retries back off to 30 s)."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    probe = GpuProbe(LocalTransport(), interval_s=0.1, apps_every_s=0.05)
    probe.start()
    try:
        await until(lambda: probe.board.error is not None)
        await asyncio.sleep(1.0)
        assert probe.board.error == "local: nvidia-smi not found (no NVIDIA driver here?)"
        assert probe.board.apps_error is None and not probe.board.tracks
    finally:
        await probe.close()


@pytest.mark.slow
async def test_holders_arrive_once_the_stream_has_shown_gpus(fake_smi: Path, monkeypatch: pytest.MonkeyPatch,
                                                            marked_process: tuple[int, int]) -> None:
    marked, _ = marked_process
    monkeypatch.setenv("FAKE_SMI_APPS", f"1:{marked}:4000")
    probe = GpuProbe(LocalTransport(), interval_s=0.1, apps_every_s=60)
    probe.start()
    try:
        await until(lambda: bool(probe.board.gpus_of_run("run-a")))
        assert [g.latest.index for g in probe.board.gpus_of_run("run-a")] == [1]
    finally:
        await probe.close()


@pytest.mark.slow
async def test_bad_field_error_reaches_the_board(fake_smi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SMI_BAD_FIELD", "1")
    board = await snapshot(LocalTransport())
    assert board.error is not None and "bogus.field" in board.error


@pytest.mark.slow
async def test_hung_one_shot_query_is_timed_out(fake_smi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SMI_HANG", "1")
    started = time.monotonic()
    board = await snapshot(LocalTransport(), timeout_s=1.0)
    assert board.error == "local: nvidia-smi did not answer within 1 s (hung)"
    assert time.monotonic() - started < 20


@pytest.mark.slow
async def test_gpu_disappearing_mid_stream_is_marked_gone(fake_smi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_SMI_GPUS", "3")
    monkeypatch.setenv("FAKE_SMI_DROP_AFTER", "4")
    probe = GpuProbe(LocalTransport(), interval_s=0.1, apps_every_s=60)
    probe.start()
    try:
        await until(lambda: len(probe.board.tracks) == 3)
        await until(lambda: any(t.gone for t in probe.board.tracks.values()))
        assert [t.latest.index for t in probe.board.gpus() if t.gone] == [2]
        # The other two keep moving: their history grows after the drop.
        before = len(probe.board.gpus()[0].utilization)
        await until(lambda: len(probe.board.gpus()[0].utilization) > before + 2)
        assert probe.board.gpus()[2].gone
    finally:
        await probe.close()


@pytest.mark.slow
async def test_hung_stream_is_ended_and_rearmed(fake_smi: Path, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    # The fake stops writing after 3 ticks on its first start only; the restart streams normally.
    monkeypatch.setenv("FAKE_SMI_HANG_AFTER", "3")
    monkeypatch.setenv("FAKE_SMI_STATE", str(tmp_path / "starts"))
    errors: list[str] = []
    probe: GpuProbe

    def seen() -> None:
        if probe.board.error and probe.board.error not in errors:
            errors.append(probe.board.error)

    probe = GpuProbe(LocalTransport(), interval_s=0.1, apps_every_s=60, silence_s=1.0, on_update=seen)
    probe.start()
    try:
        await until(lambda: probe.restarts >= 1 and probe.board.error is None
                    and (tmp_path / "starts").read_text() == "2")
        assert errors == ["local: nvidia-smi sent nothing for 1 s (hung); restarting it"]
        count = len(probe.board.gpus()[0].utilization)
        await until(lambda: len(probe.board.gpus()[0].utilization) > count)
    finally:
        await probe.close()
    # The hung first nvidia-smi was ended with its process group, not left behind.
    # ("[n]" so the pattern does not match the shell running pgrep.)
    leftover = await LocalTransport().run(f"pgrep -f {shlex.quote(str(fake_smi) + '/[n]vidia-smi')}")
    assert leftover.out.split() == []



@pytest.mark.slow
async def test_stop_sees_a_process_on_two_gpus_holding_the_sum(fake_smi: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What `specmon stop` waits on before it calls the GPUs free (HostOps.compute_apps, the same parser).
    monkeypatch.setenv("FAKE_SMI_APPS", "0:4242:19592;1:4242:19592;1:77:10")
    assert await HostOps(LocalTransport()).compute_apps() == {4242: 39184, 77: 10}
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert await HostOps(LocalTransport()).compute_apps() is None


@pytest.mark.slow
def test_specmon_gpus_over_ssh_reads_the_hosts_gpus_and_holders(tmp_path: Path,
                                                                marked_process: tuple[int, int]) -> None:
    # A dedicated loopback sshd whose sessions have the fake nvidia-smi first on PATH (sshd's SetEnv): the host
    # side of `specmon gpus gpu1` runs exactly as on a GPU host, nothing in system directories is touched.
    reason = sshd_available()
    if reason is not None:
        pytest.skip(reason)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)
    marked, stranger = marked_process
    sshd = Sshd.start(tmp_path / "sshd", set_env={
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin", "FAKE_SMI_GPUS": "3",
        "FAKE_SMI_APPS": f"2:{marked}:4000;2:{stranger}:50"})
    try:
        config = tmp_path / "profiles.toml"
        config.write_text('[profiles.remote]\nhost = "gpu1"\ncommand = "true"\nport = 39301\n' + sshd.ssh_table())
        shown = subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), "gpus", "gpu1", "--json"],
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        assert data["host"] == "gpu1" and data["apps_error"] is None
        assert [(g["index"], g["name"], g["memory_total_mib"]) for g in data["gpus"]] == [
            (0, "NVIDIA H200", 143771), (1, "NVIDIA H200", 143771), (2, "NVIDIA H200", 143771)]
        assert data["gpus"][2]["uuid"] == "GPU-00000002-fake-4000-8000-000000000002"
        assert data["gpus"][0]["holders"] == [] and data["gpus"][1]["holders"] == []
        holders = {h["pid"]: (h["run_id"], h["used_mib"], h["description"]) for h in data["gpus"][2]["holders"]}
        # run-a is no run of this profiles file: its marker is read on the host, but no profile is named.
        assert holders == {marked: ("run-a", 4000, f"held by pid {marked} (specmon run run-a, not known here)"),
                           stranger: (None, 50, f"held by pid {stranger} (not a specmon run)")}
    finally:
        sshd.stop()


@pytest.fixture(scope="module")
def hung_smi_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(profiles file naming host gpu1, the directory of its nvidia-smi): a loopback sshd whose nvidia-smi never
    answers."""
    reason = sshd_available()
    if reason is not None:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("hung-smi")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)
    sshd = Sshd.start(tmp / "sshd", set_env={"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
                                             "FAKE_SMI_HANG": "1"})
    config = tmp / "profiles.toml"
    config.write_text('[profiles.remote]\nhost = "gpu1"\ncommand = "true --port 39301"\nport = 39301\n'
                      + sshd.ssh_table())
    try:
        yield config, bin_dir
    finally:
        sshd.stop()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "time limit"])
def test_a_hung_remote_nvidia_smi_ends_with_specmon(hung_smi_host: tuple[Path, Path], how: str) -> None:
    """However `specmon gpus` ends (killed, interrupted, or its own 20 s limit on a hung nvidia-smi), the
    nvidia-smi it started on the host ends with it."""
    config, bin_dir = hung_smi_host

    def on_host() -> list[int]:
        found = subprocess.run(["pgrep", "-f", f"{bin_dir}/[n]vidia-smi"], capture_output=True, text=True).stdout
        return [int(pid) for pid in found.split()]

    proc = subprocess.Popen([sys.executable, "-m", "specmon", "--config", str(config), "gpus", "gpu1"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not on_host():
            assert proc.poll() is None and time.monotonic() < deadline, "nvidia-smi never started on the host"
            time.sleep(0.1)
        if how != "time limit":
            proc.send_signal(getattr(signal, how))
        _, err = proc.communicate(timeout=120)
        deadline = time.monotonic() + 5   # a SIGKILLed process leaves the process table at once; slack for a busy box
        while left := on_host():
            assert time.monotonic() < deadline, f"nvidia-smi still runs on the host after specmon {how}: {left}"
            time.sleep(0.1)
        if how == "time limit":
            assert "gpu1: nvidia-smi did not answer within 20 s (hung)" in err and proc.returncode == 2
        else:   # SIGTERM ends it as Ctrl-C does
            assert "specmon: interrupted" in err and "Traceback" not in err and proc.returncode == 130
    finally:
        proc.kill()
        proc.wait()
        for pid in on_host():   # a failed run's leftovers
            os.kill(pid, signal.SIGKILL)
