"""Shared fixtures only: free loopback ports, a private HOME/XDG so no test touches the user's files, a real sshd and
a real Slurm cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import ports
import pytest
from process_support import what_starts
from slurm_support import TWO_NODES, SlurmCluster, memory_cgroup_available, slurm_available, slurm_cluster
from sshd_support import Sshd, shared_sshd, sshd_available


def pytest_configure() -> None:
    """Tests press Ctrl-C on commands they start, as a user does on a command in the foreground. A runner that
    started the suite in the background of a non-interactive shell (`.ci/run &`) leaves SIGINT ignored, every child
    inherits that, and Python then never raises KeyboardInterrupt: a handler here is reset to the default in
    each child (an ignored signal is not)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Every process a test starts inherits this marker, servers detached with setsid included: a run cut short
    # (`timeout 60 pytest`, a CI job cancelled) kills them on its SIGTERM, and a finished one kills what is left.
    os.environ.setdefault(SESSION_MARKER, f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
    signal.signal(signal.SIGTERM, _terminated)


SESSION_MARKER = "SPECMON_TEST_SESSION"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): twice the cores this process may use. Most tests wait rather than compute
    (a server's start, sshd, tmux's screen, a Slurm job, a timeout): on a 2-core box the serial suite used about
    one core in five, so two workers per core keep the cores busy while the tests' timing guards, which scale with
    what they measure, still hold. `-n N` or PYTEST_XDIST_AUTO_NUM_WORKERS=N say otherwise."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(given) if given else 2 * len(os.sched_getaffinity(0))


def kill_session_processes() -> None:
    """SIGKILL every process (but this one) that carries this test session's marker in its environment."""
    marker = f"{SESSION_MARKER}={os.environ.get(SESSION_MARKER, '')}".encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read():
                    os.kill(int(entry), signal.SIGKILL)


def _terminated(signum: int, frame: FrameType | None) -> None:
    kill_session_processes()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def pytest_unconfigure() -> None:
    if os.environ.get(SESSION_MARKER, "").startswith(f"{os.getpid()}-"):   # the session that set it, not a child
        kill_session_processes()


@pytest.fixture
def free_port_factory() -> Callable[[], int]:
    """A function returning a free 127.0.0.1 TCP port (tests/support/ports.py: outside the ephemeral range, never twice)."""
    return ports.free_port


@pytest.fixture
def free_port(free_port_factory: Callable[[], int]) -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    return free_port_factory()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point HOME and the XDG directories at a fresh temp dir for every test (and the processes it starts).

    So no test reads or writes the user's ~/.config, ~/.local/state or ~/.ssh, and a stray $SPECMON_CONFIG
    cannot change which profiles a test sees. The current directory is left alone.
    """
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_STATE_HOME", ".local/state"),
                      ("XDG_CACHE_HOME", ".cache"), ("XDG_DATA_HOME", ".local/share")):
        path = home / sub
        path.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(path))
    monkeypatch.delenv("SPECMON_CONFIG", raising=False)
    yield home


@pytest.fixture(autouse=True)
def quick_tests_start_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """`-m "not slow"` is the quick subset: it must pass in seconds in any venv, the `specmon` script on PATH or not.
    A test not marked `slow` that starts a process, listens on a socket or runs the app fails, naming what it
    started (issue 33 #7: 66 such tests ran in the quick subset, 33 of them the console script)."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    with what_starts() as started:
        yield
    if started:
        pytest.fail(f"not marked slow, but it started {', '.join(dict.fromkeys(started))}: mark it @pytest.mark.slow",
                    pytrace=False)


@pytest.fixture(scope="session")
def sshd() -> Sshd:
    """A real OpenSSH sshd on 127.0.0.1 with its own keys, config and known_hosts (see tests/support/sshd_support.py)."""
    reason = sshd_available()
    if reason is not None:
        pytest.skip(reason)
    return shared_sshd()


def _cluster(monkeypatch: pytest.MonkeyPatch, nodes: dict[str, str] | None, unshared: Path | None = None,
             backfill_s: int = 30, memory_limits: str | None = None, jobs_per_core: int = 1) -> Iterator[SlurmCluster]:
    reason = slurm_available()
    if reason is not None:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="specmon-slurm-"))
    try:
        with slurm_cluster(root, nodes, unshared, backfill_s, memory_limits, jobs_per_core) as cluster:
            monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
            yield cluster
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A real single-node Slurm cluster (two fake GPUs) for this test, SLURM_CONF pointing at it; skipped with
    the reason when Slurm is not installed. Every daemon and job of it is gone after the test, and its files.
    (Not under pytest's tmp_path: munged refuses a socket below a directory others cannot traverse.)"""
    yield from _cluster(monkeypatch, None)


@pytest.fixture
def slurm2(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """A real two-node Slurm cluster on this machine (n1 at 127.0.0.2, n2 at 127.0.0.3: TWO_NODES), as `slurm`."""
    yield from _cluster(monkeypatch, TWO_NODES)


@pytest.fixture
def slurm_backfill(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The single-node cluster of `slurm` whose backfill pass runs every second: a pending job's expected start
    is known within a second or two (not 30)."""
    yield from _cluster(monkeypatch, None, backfill_s=1)


@pytest.fixture
def slurm_shared(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The single-node cluster of `slurm` whose node runs up to eight jobs on each of its two cores at once: a
    fleet of light servers, one job each."""
    yield from _cluster(monkeypatch, None, jobs_per_core=8)


@pytest.fixture
def slurm_memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The single-node cluster of `slurm` that kills a job over its --mem by polling its memory, as a cluster
    without cgroups does (the job ends FAILED)."""
    yield from _cluster(monkeypatch, None, memory_limits="poll")


@pytest.fixture
def slurm_cgroup_memory(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlurmCluster]:
    """The single-node cluster of `slurm` that confines each job to its --mem in a memory cgroup, as most GPU
    clusters do: the kernel kills the job over it and Slurm's own state says OUT_OF_MEMORY."""
    reason = memory_cgroup_available()
    if reason is not None:
        pytest.skip(reason)
    yield from _cluster(monkeypatch, None, memory_limits="cgroup")


@pytest.fixture
def slurm_unshared(monkeypatch: pytest.MonkeyPatch, isolated_home: Path) -> Iterator[SlurmCluster]:
    """The single-node cluster of `slurm`, whose node does not share $XDG_STATE_HOME (where the test's runs
    directories are) with this machine: a login node whose state is on a disk the compute nodes do not mount."""
    yield from _cluster(monkeypatch, None, unshared=Path(os.environ["XDG_STATE_HOME"]))
