"""Slurm runs against a real single-node Slurm cluster (tests/support/slurm_support.py): `specmon sim` as the job, launched,
queued behind another job with Slurm's reason shown, running, ready, stopped with scancel; a job cancelled outside
specmon; a specmon that reattaches to a queued job. Two-node jobs against a real two-node cluster on this machine
(n1 at 127.0.0.2, n2 at 127.0.0.3, one slurmd each): `specmon sim` as each rank of one job, the rank from Slurm's
SLURM_NODEID, rank 0's node as the master address, the server reached at the node Slurm names (its address, never
127.0.0.1)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lifecycle_support import Views, config_of, port_listening, sim_profile, stop_everything
from slurm_support import TWO_NODES, SlurmCluster
from sshd_support import Sshd
from test_multinode import args_dump

from specmon.errors import UserError
from specmon.loadgen.workload import Workload
from specmon.model.config import Config, Profile
from specmon.model.runs.slurm import SlurmRequest
from specmon.orchestration.inspect.serving import scraper_of
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.ready import wait_ready
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.watcher import LOG_QUIET_READY_S, WatchTimings

# Every test here submits a job to the cluster of slurm_support.py and waits on it (seconds each); a few wait minutes.
pytestmark = pytest.mark.slow


def slurm_profile(port: int, name: str = "sim") -> Profile:
    return dataclasses.replace(sim_profile(port, name=name, stall_timeout_s=5.0),
                               slurm=SlurmRequest(gpus=1, time="10"))


@pytest.fixture
async def managers(tmp_path: Path) -> AsyncIterator[Callable[[Profile], tuple[RunManager, Views]]]:
    made: list[RunManager] = []

    def make(profile: Profile, watch_timings: WatchTimings = WatchTimings()) -> tuple[RunManager, Views]:
        manager = RunManager(config_of(profile), state_dir=tmp_path / "state",
                             stop_timings=StopTimings(grace_s=10, port_wait_s=10), watch_timings=watch_timings)
        made.append(manager)
        return manager, Views(manager)

    yield make
    await stop_everything(made)


async def test_a_queued_job_shows_slurms_reason_then_runs_is_ready_is_swept_and_stop_cancels_it(
        slurm: SlurmCluster, managers, free_port: int, tmp_path: Path) -> None:
    filler = slurm.fill_node()
    manager, views = managers(slurm_profile(free_port))
    view = await manager.launch("sim")
    record = manager.index.store.load(view.run_id)
    assert record is not None and record.slurm_job is not None
    job = record.slurm_job
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%j").strip() == f"specmon-{view.run_id}"

    pending = await views.until(lambda v: bool(v.job and v.job.startswith("PENDING (Resources)")))
    assert pending.state == "launching" and not pending.stalled
    # Queued well past the stall time (5 s): waiting for the node is neither a stall nor load time.
    await asyncio.sleep(6)
    assert manager.view(view.run_id).state == "launching" and not manager.view(view.run_id).stalled

    queued_until = time.time()
    slurm.run("scancel", filler)
    ready = await views.until(lambda v: v.state == "ready", timeout=90)
    assert ready.job is not None and ready.job.startswith("RUNNING on localhost")
    assert ready.load_seconds is not None and ready.started_at >= queued_until - 1.5
    assert ready.shards == (4, 4)
    # The job's output file is the run's log.
    assert "ready to roll" in Path(ready.log_path).read_text()
    # A sweep against the job's server, as against any ready run.
    workload = Workload(levels=(1, 2), requests_per_level=4, warmup_requests=1, input_len=16, output_len=16)
    result = await run_sweep(SweepSpec(url=ready.url, workload=workload, out_path=tmp_path / "sweep.jsonl"))
    assert [(level.concurrency, level.requests_ok, level.requests_failed) for level in result.levels] == [
        (1, 4, 0), (2, 4, 0)]

    report = await manager.stop("sim")
    assert report.clean and report.stopped
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() in ("", "CANCELLED")
    assert not port_listening(free_port)
    assert manager.index.store.load(view.run_id).state == "stopped"


async def test_a_job_whose_log_was_read_before_its_start_was_seen_keeps_the_loads_progress(
        slurm: SlurmCluster, managers, free_port: int) -> None:
    # The queue is looked at once a tick; the log is read on its own. With a slow tick the server's shard lines
    # and its ready line are read before specmon learns that the job left the queue: learning it must not forget
    # what the log said.
    tick_s = 8.0
    filler = slurm.fill_node()
    manager, views = managers(slurm_profile(free_port), WatchTimings(process_s=tick_s))
    view = await manager.launch("sim")
    await views.until(lambda v: bool(v.job and v.job.startswith("PENDING")))
    queued_until = time.time()
    slurm.run("scancel", filler)
    ready = await views.until(lambda v: v.state == "ready", timeout=90)
    assert ready.shards == (4, 4), ready
    assert ready.run_state is not None and ready.run_state.ready
    assert ready.started_at >= queued_until - 1.5   # load time still counts from the job's start
    assert manager.index.store.load(view.run_id).shards == (4, 4)


async def test_a_job_cancelled_outside_specmon_is_reported_cancelled(slurm: SlurmCluster, managers,
                                                                     free_port: int) -> None:
    manager, views = managers(slurm_profile(free_port))
    view = await manager.launch("sim")
    await views.until(lambda v: v.state == "ready", timeout=90)
    slurm.run("scancel", manager.index.store.load(view.run_id).slurm_job)
    ended = await views.until(lambda v: v.state in ("exited", "failed", "stopped", "lost"), timeout=30)
    assert ended.state == "exited" and ended.failure is not None
    assert ended.failure.kind == "cancelled" and "cancelled outside specmon" in ended.failure.message


async def test_a_restarted_specmon_reattaches_to_its_queued_job(slurm: SlurmCluster, managers,
                                                                free_port: int) -> None:
    filler = slurm.fill_node()
    profile = slurm_profile(free_port)
    first, views = managers(profile)
    view = await first.launch("sim")
    await views.until(lambda v: bool(v.job and v.job.startswith("PENDING")))
    await first.close()   # specmon ends; the job stays queued

    second, views = managers(profile)
    [status] = await second.refresh()
    assert status.state == "launching" and status.job in ("PENDING (Resources)", "PENDING (Priority)")
    again = await second.attach(view.run_id)
    assert again.job is not None
    slurm.run("scancel", filler)
    ready = await views.until(lambda v: v.state == "ready", timeout=90)
    assert ready.run_id == view.run_id and ready.job is not None and ready.job.startswith("RUNNING on localhost")
    assert (await second.stop("sim")).clean


async def test_a_request_slurm_refuses_is_one_line_and_leaves_nothing_behind(slurm: SlurmCluster, managers,
                                                                             free_port: int) -> None:
    profile = dataclasses.replace(slurm_profile(free_port), slurm=SlurmRequest(partition="nosuch"))
    manager, _ = managers(profile)
    with pytest.raises(UserError) as caught:
        await manager.launch("sim")
    message = str(caught.value)
    assert message.startswith("local: sbatch refused the job: ") and "invalid partition" in message.lower(), message
    assert manager.index.store.all() == [] and slurm.jobs() == []
    runs_root = Path(os.environ["XDG_STATE_HOME"]) / "specmon" / "runs"
    assert not runs_root.exists() or [p.name for p in runs_root.iterdir() if not p.name.startswith(".")] == []


async def test_the_servers_card_of_a_queued_run_shows_slurms_reason(slurm: SlurmCluster, managers, free_port: int,
                                                                      tmp_path: Path) -> None:
    from ui_states import ROWS, fed_app

    from specmon.ui.rows import row_from_view
    from specmon.ui.servers import RunCard

    slurm.fill_node()
    manager, views = managers(slurm_profile(free_port, name="demo-eagle3"))
    await manager.launch("demo-eagle3")
    pending = await views.until(lambda v: bool(v.job and v.job.startswith("PENDING (Resources)")))
    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.update_rows([ROWS[0], row_from_view(pending, time.time())])
        app.flush()
        await pilot.pause()
        card = next(c for c in app.query(RunCard) if c.profile == "demo-eagle3")
        text = str(card.render())
        assert "slurm PENDING (Resources)" in text, text
        assert "STALLED" not in text


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_job_at_its_time_limit_shows_the_time_left_warns_then_ends_as_timeout(
        slurm: SlurmCluster, managers, free_port: int, tmp_path: Path) -> None:
    # Slurm's limits are whole minutes, enforced about every 30 s: this takes 60-100 s.
    notes = tmp_path / "notes"
    profile = dataclasses.replace(slurm_profile(free_port), slurm=SlurmRequest(time="1"),
                                  notify_cmd=f'echo "$SPECMON_STATE|$SPECMON_REASON" >> {notes}')
    manager, views = managers(profile)
    await manager.launch("sim")
    ready = await views.until(lambda v: v.state == "ready", timeout=90)
    # A one-minute limit: a job seen ready in its first second still has "1 min 00 s" left.
    assert ready.job is not None and re.fullmatch(r"RUNNING on localhost, (1 min 00|\d+) s left", ready.job), ready.job
    # A quarter of the limit before it (15 s): the card says so and the notify_cmd is told, once.
    near = await views.until(lambda v: bool(v.job and v.job.endswith("left before its time limit")), timeout=90)
    assert near.state == "ready"
    ended = await views.until(lambda v: not v.active, timeout=150)
    assert ended.state == "exited" and ended.failure is not None, ended
    assert ended.failure.kind == "timeout" and "reached its time limit" in ended.failure.message
    said = [line for line in notes.read_text().splitlines() if line.startswith("time_limit|")]
    assert len(said) == 1 and re.fullmatch(r"time_limit\|Slurm job \d+ RUNNING on localhost, \d+ s left before its "
                                           r"time limit", said[0]), said


async def test_a_login_node_reached_over_ssh_submits_follows_and_cancels_the_job(slurm: SlurmCluster, tmp_path: Path,
                                                                                 free_port: int) -> None:
    # Jump box -> SSH (the loopback sshd, a session whose SLURM_CONF names the test cluster) -> Slurm.
    sshd = Sshd.start(tmp_path / "sshd", set_env={"SLURM_CONF": str(slurm.conf),
                                                  "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"})
    profile = dataclasses.replace(slurm_profile(free_port), host="gpu1")
    manager = RunManager(Config(source="test profiles", profiles={"sim": profile}, ssh=sshd.settings()),
                         state_dir=tmp_path / "state", stop_timings=StopTimings(grace_s=10, port_wait_s=10))
    views = Views(manager)
    try:
        view = await manager.launch("sim")
        assert view.run_dir.startswith(str(sshd.home))   # the run directory is the login node's
        ready = await views.until(lambda v: v.state == "ready", timeout=90)
        assert ready.host == "gpu1" and ready.job is not None and ready.job.startswith("RUNNING on localhost")
        assert "ready to roll" in Path(ready.log_path).read_text()
        # Its log over SSH is polled as any ready run's: less often while it says nothing new (it was polled every
        # 0.5 s for as long as the job ran: the ready pace was set only for runs that are not Slurm jobs).
        tailer = manager._watching.watched[view.run_id].tailer
        looks: list[float] = []
        look = tailer.transport.look

        async def counted(path: str, start: int, length: int) -> object:
            looks.append(time.monotonic())
            return await look(path, start, length)

        tailer.transport.look = counted   # type: ignore[method-assign,assignment]
        await asyncio.sleep(2 * LOG_QUIET_READY_S)   # backed off by now
        looks.clear()
        await asyncio.sleep(2 * LOG_QUIET_READY_S)
        assert len(looks) <= 2 + 2, f"{len(looks)} looks at a quiet ready log in {2 * LOG_QUIET_READY_S:.0f} s"
        report = await manager.stop("sim")
        job = manager.index.store.load(view.run_id).slurm_job
        assert report.clean and slurm.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() in (
            "", "CANCELLED")
        assert manager.index.store.load(view.run_id).state == "stopped" and not port_listening(free_port)
    finally:
        await stop_everything([manager])
        sshd.stop()


async def test_a_job_launched_from_another_jump_box_is_found_by_its_name_and_adopted(slurm: SlurmCluster,
                                                                                      tmp_path: Path,
                                                                                      free_port: int) -> None:
    filler = slurm.fill_node()
    profile = slurm_profile(free_port)
    other = RunManager(config_of(profile), state_dir=tmp_path / "other-box")
    here = RunManager(config_of(profile), state_dir=tmp_path / "this-box",
                      stop_timings=StopTimings(grace_s=10, port_wait_s=10))
    views = Views(here)
    try:
        launched = await other.launch("sim", watch=False)
        await other.close()
        [found] = await here.host_runs("local")
        assert found.run_id == launched.run_id and found.running   # queued: its job is there, though no pid is
        adopted = await here.adopt("local", launched.run_id)
        assert adopted.state == "launching"
        assert here.index.store.load(launched.run_id).slurm_job == other.index.store.load(launched.run_id).slurm_job
        await here.attach(launched.run_id)
        slurm.run("scancel", filler)
        ready = await views.until(lambda v: v.state == "ready", timeout=90)
        assert ready.job is not None and ready.job.startswith("RUNNING on localhost")
        assert (await here.stop(launched.run_id)).clean
        assert here.index.store.load(launched.run_id).state == "stopped"
    finally:
        await stop_everything([here])


def test_the_readmes_slurm_profile_through_the_cli(slurm: SlurmCluster, tmp_path: Path, free_port: int) -> None:
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.llama-slurm]\nhost = "local"\n'
                      f'command = "specmon sim --port {free_port} --load-seconds 2 --shards 4"\nport = {free_port}\n\n'
                      '[profiles.llama-slurm.slurm]\ntime = "04:00:00"\ngpus = 1\nextra_args = ["--exclusive"]\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def specmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), *args], env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    filler = slurm.fill_node()
    launched = specmon("launch", "llama-slurm")
    assert launched.returncode == 0, launched.stderr
    assert re.search(r"launched llama-slurm run \S+ on local \(job \d+, port \d+\)", launched.stderr), launched.stderr
    status = specmon("status")
    assert re.search(r"llama-slurm .* launching .* PENDING \((Resources|Priority)\)", status.stdout), status.stdout
    # Queued: no node, so no address yet (127.0.0.1 here is the login host's loopback, where nothing will listen).
    assert "pending (no node yet)" in status.stdout and "127.0.0.1" not in status.stdout, status.stdout
    [run] = json.loads(specmon("status", "--json").stdout)
    assert run["state"] == "launching" and run["job"] in ("PENDING (Resources)", "PENDING (Priority)"), run
    assert run["url"] is None, run
    slurm.run("scancel", filler)
    waited = specmon("wait", "llama-slurm", "-q", timeout=120)
    assert waited.returncode == 0 and "RUNNING on localhost" in waited.stdout + waited.stderr, waited
    # Running: the port on the job's node, at the address Slurm has for it.
    node_url = f"http://localhost:{free_port}"
    assert node_url in specmon("status").stdout and json.loads(specmon("status", "--json").stdout)[0]["url"] == node_url
    stopped = specmon("stop", "llama-slurm")
    assert stopped.returncode == 0 and re.search(r"stopped in [\d.]+s \(scancel job \d+; exit code", stopped.stdout), \
        stopped
    assert re.search(r"llama-slurm .* stopped ", specmon("status").stdout)


def test_status_names_the_job_and_a_queued_jobs_wait_is_queue_time_not_load_time(slurm: SlurmCluster, tmp_path: Path,
                                                                                 free_port: int) -> None:
    """`status` (text and JSON) names the run's Slurm job; while the job waits in the queue, `wait` says how long it
    has been queued and gives no ETA (a past load of the profile would otherwise count down through the queue)."""
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.q]\nhost = "local"\n'
                      f'command = "specmon sim --port {free_port} --load-seconds 2 --shards 2"\nport = {free_port}\n'
                      '[profiles.q.slurm]\ngpus = 1\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def specmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), *args], env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    # One load of the profile first: its time is what an ETA is made of.
    assert specmon("launch", "q", "--wait", "-q").returncode == 0
    assert specmon("stop", "q").returncode == 0
    filler = slurm.fill_node()
    launched = specmon("launch", "q")
    job = re.search(r"\(job (\d+),", launched.stderr)
    assert launched.returncode == 0 and job is not None, launched.stderr
    shown = specmon("status")
    assert re.search(rf"q .* launching .* job {job[1]}: PENDING \((Resources|Priority)\)", shown.stdout), shown.stdout
    [run] = [r for r in json.loads(specmon("status", "--json").stdout) if r["run_id"] == launched.stdout.strip()]
    assert run["state"] == "launching" and run["slurm_job"] == job[1], run
    # A wait's time limit does not run while the job is queued: it is interrupted after a few progress lines.
    waiting = subprocess.Popen([sys.executable, "-m", "specmon", "--config", str(config), "wait", "q", "-q"], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)
    waiting.send_signal(signal.SIGINT)
    _, said = waiting.communicate(timeout=60)
    lines = [line for line in said.splitlines() if line.startswith("q: launching")]
    assert lines and all("ETA" not in line and "elapsed" not in line for line in lines), said
    assert re.search(r", queued \d+s", lines[-1]), said
    slurm.run("scancel", filler)
    ready = specmon("wait", "q", "-q")
    assert ready.returncode == 0, ready.stderr
    assert re.search(rf"q .* ready .* job {job[1]}", specmon("status").stdout)
    assert specmon("stop", "q").returncode == 0


async def test_a_wait_for_ready_does_not_count_queue_time_as_load_time(slurm: SlurmCluster, managers,
                                                                        free_port: int) -> None:
    filler = slurm.fill_node()
    manager, _ = managers(slurm_profile(free_port))
    view = await manager.launch("sim")

    async def free_the_node_later() -> None:
        await asyncio.sleep(10)
        slurm.run("scancel", filler)

    freeing = asyncio.ensure_future(free_the_node_later())
    try:
        # Queued 10 s, then loading in about 3 s: a 9 s load limit holds once the queue time is left out.
        verdict = await wait_ready(manager, view.run_id, timeout_s=9.0, heartbeat_s=1.0)
    finally:
        await freeing
    assert verdict.ready, verdict.reason


def test_an_experiment_on_slurm_profiles_waits_for_each_job_and_steps_show_the_queue(slurm: SlurmCluster,
                                                                                      tmp_path: Path,
                                                                                      free_port_factory) -> None:
    profiles = "".join(f'[profiles.{name}]\ncommand = "specmon sim --port {port} --load-seconds 2 --shards 2"\n'
                       f'port = {port}\n[profiles.{name}.slurm]\ngpus = 1\n'
                       for name, port in (("a", free_port_factory()), ("b", free_port_factory())))
    config = tmp_path / "profiles.toml"
    config.write_text(profiles + '[experiments.q]\nprofiles = ["a", "b"]\nlevels = [1]\nrepeats = 1\n'
                                 'requests_per_level = 4\ninput_len = 16\noutput_len = 16\nmax_load_s = 10\n')
    filler = slurm.fill_node()

    def free_12_s_after_a_queues() -> None:
        # Counted from a's submission, not from here: the command's own start (seconds on a busy box) must not
        # shorten the queue below the load limit.
        deadline = time.monotonic() + 120
        while len(slurm.jobs()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(12)
        slurm.run("scancel", filler)

    freeing = threading.Thread(target=free_12_s_after_a_queues)
    freeing.start()
    try:
        done = subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), "experiment", "q"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
                              env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    finally:
        freeing.join()
    # Queued 12 s against a 10 s load limit: the queue is a step of its own, and a went on to be swept.
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    queued = re.search(r" a: queued: PENDING \((Resources|Priority)\); then RUNNING on localhost\S* .*\((\d+\.\d)s\)",
                       done.stderr)
    assert queued and float(queued.group(2)) >= 10, done.stderr
    assert re.search(r" a: ready: .*\n.* a: sweep: ", done.stderr) and " b: swept: " in done.stderr, done.stderr


async def test_a_restarted_specmon_reattaches_mid_load_without_losing_a_log_line(slurm: SlurmCluster, managers,
                                                                                  free_port: int) -> None:
    profile = dataclasses.replace(sim_profile(free_port, shards=16, load_seconds=6, time_scale=0.5),
                                  slurm=SlurmRequest(gpus=1))
    first, views = managers(profile)
    view = await first.launch("sim")
    await views.until(lambda v: v.shards is not None and v.shards[0] >= 2, timeout=90)
    before: list[str] = []

    async def read(manager: RunManager, into: list[str], until: Callable[[], bool]) -> None:
        async for line in manager.log_lines(view.run_id, commit=True):
            if until():
                return   # as a reader that quits: this line was not handled (a later reader gets it)
            if line.kind == "line":
                into.append(line.text)

    await asyncio.wait_for(read(first, before, lambda: len(before) >= 3), 30)
    await first.close()   # specmon ends mid-load; the job goes on

    second, views = managers(profile)
    after: list[str] = []
    await asyncio.wait_for(read(second, after, lambda: any("ready to roll" in t for t in after)), 90)
    assert before and after
    assert (await views.until(lambda v: v.state == "ready", timeout=30)).job.startswith("RUNNING on localhost")
    logged = Path(view.log_path).read_bytes().decode().split("\n")   # as written: progress bars' \r kept
    assert before + after == logged[:len(before) + len(after)], "a line was lost or shown twice across the restart"
    assert (await second.stop("sim")).clean


async def test_a_command_missing_on_the_jobs_node_fails_the_run_with_the_shells_words(slurm: SlurmCluster, managers,
                                                                                       free_port: int) -> None:
    # Not refused before submitting: the login node need not have the compute nodes' software.
    profile = dataclasses.replace(slurm_profile(free_port), command=("no-such-server", "--port", str(free_port)))
    manager, views = managers(profile)
    await manager.launch("sim")
    ended = await views.until(lambda v: not v.active, timeout=60)
    assert ended.state == "failed" and ended.exit_code == 127, ended
    assert ended.failure is not None and "not found" in " ".join(ended.failure.last_lines), ended.failure


async def test_a_queued_job_shows_slurms_expected_start_once_the_backfill_pass_has_one(
        slurm_backfill: SlurmCluster, managers, free_port: int) -> None:
    slurm_backfill.fill_node("--time=5")   # a limit: the backfill pass can say when the node frees up (in 5 minutes)
    manager, views = managers(slurm_profile(free_port))
    await manager.launch("sim")
    pending = await views.until(lambda v: bool(v.job and "start expected" in v.job), timeout=30)
    assert pending.state == "launching" and pending.job is not None
    assert re.fullmatch(r"PENDING \((Resources|Priority)\), start expected \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", pending.job), \
        pending.job


async def test_a_job_whose_node_fails_ends_as_node_fail_not_back_in_the_queue(slurm: SlurmCluster, managers,
                                                                              free_port: int) -> None:
    manager, views = managers(slurm_profile(free_port))
    view = await manager.launch("sim")
    await views.until(lambda v: v.state == "ready", timeout=90)
    slurm.run("scontrol", "update", "nodename=localhost", "state=down", "reason=specmon-test")
    ended = await views.until(lambda v: not v.active, timeout=60)
    assert ended.state == "exited" and ended.failure is not None, ended
    assert ended.failure.kind == "node_fail" and "ended because its node failed" in ended.failure.message
    job = manager.index.store.load(view.run_id).slurm_job
    assert slurm.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() in ("", "NODE_FAIL")


async def test_a_job_preempted_by_a_higher_tier_partition_is_reported_preempted(slurm: SlurmCluster, managers,
                                                                                free_port: int) -> None:
    manager, views = managers(slurm_profile(free_port))
    await manager.launch("sim")
    await views.until(lambda v: v.state == "ready", timeout=90)
    slurm.fill_node("--partition=urgent")   # PriorityTier 2 over debug's 1, PreemptMode=CANCEL
    ended = await views.until(lambda v: not v.active, timeout=60)
    assert ended.state == "exited" and ended.failure is not None, ended
    assert ended.failure.kind == "preempted" and "was preempted" in ended.failure.message


async def test_the_gpus_of_a_running_job_are_read_on_its_node_through_the_allocation_with_the_run_as_holder(
        slurm: SlurmCluster, managers, free_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lifecycle_support import marked_pids
    from test_gpu_probe import FAKE

    from specmon.orchestration.inspect.environment import env_report, gpu_board

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)   # srun passes this PATH into the job (--export=ALL)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin")
    manager, views = managers(slurm_profile(free_port))
    view = await manager.launch("sim")
    await views.until(lambda v: v.state == "ready", timeout=90)
    monkeypatch.setenv("FAKE_SMI_APPS_OF", f"{view.run_id}:1:4000")

    board, known = await gpu_board(manager, "sim")
    assert board.error is None and board.apps_error is None, (board.error, board.apps_error)
    assert [g.latest.index for g in board.gpus_of_run(view.run_id)] == [1] and known[view.run_id] == "sim"
    [holder] = board.gpus()[1].holders
    # The pid is the one the job's node sees (the test cluster's jobs live in a PID namespace of their own), not
    # this machine's pid of the same server: the holders were looked up inside the allocation.
    assert holder.describe([view.run_id]) == f"run {view.run_id} (pid {holder.pid})"
    assert holder.pid not in marked_pids(view.run_id)
    # The env view of the run reads its processes there too.
    report = await env_report(manager, "sim")
    assert report.host.startswith("local job ") and report.host.endswith(" on localhost"), report.host
    assert [p.pid for p in report.processes if p.role == "server"] == [holder.pid], report.processes


async def test_the_tuis_gpu_pane_of_a_slurm_profile_shows_its_jobs_node_not_the_login_hosts(
        slurm: SlurmCluster, managers, free_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_gpu_probe import FAKE
    from test_ui_gpuenv import pane_text, until

    from specmon.ui.app import SpecmonApp
    from specmon.ui.bridge import EngineBridge

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)   # on the login host's PATH and (srun --export=ALL) in the job's
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin")
    filler = slurm.fill_node()
    profile = slurm_profile(free_port)
    manager, views = managers(profile)
    app = SpecmonApp(manager.config, engine=EngineBridge(manager.config, manager=manager, results_dir=tmp_path / "r"),
                     state_path=tmp_path / "ui.json")
    async with app.run_test(size=(160, 48)) as pilot:
        view = await manager.launch("sim")
        await views.until(lambda v: bool(v.job and v.job.startswith("PENDING")))
        # Queued: its GPUs are not known yet, and the login host's are not shown as if they were the job's.
        await until(lambda: "no Slurm job of it is running" in pane_text(app), pilot.pause, 30)
        assert "GPUs" in pane_text(app) and "H200" not in pane_text(app), pane_text(app)
        monkeypatch.setenv("FAKE_SMI_APPS_OF", f"{view.run_id}:1:4000")
        slurm.run("scancel", filler)
        await views.until(lambda v: v.state == "ready", timeout=90)
        job = manager.index.store.load(view.run_id).slurm_job
        await until(lambda: f"local job {job} on localhost · 2 GPUs" in pane_text(app), pilot.pause, 60)
        # The holders were read inside the allocation too: the run's server holds GPU 1, named by its profile.
        await until(lambda: pane_text(app).splitlines()[4].endswith(" sim"), pilot.pause, 30)
        lines = pane_text(app).splitlines()
        assert lines[2].endswith(" free") and "H200" in lines[3], lines


async def test_a_node_that_cannot_see_the_run_directory_fails_the_run_in_one_line_naming_path_and_node(
        slurm_unshared: SlurmCluster, managers, free_port: int) -> None:
    manager, views = managers(slurm_profile(free_port))
    view = await manager.launch("sim")
    ended = await views.until(lambda v: not v.active, timeout=60)
    assert ended.state == "failed" and ended.failure is not None, ended
    message = ended.failure.message
    assert ended.failure.kind == "no_shared_fs" and "\n" not in message, ended.failure
    assert message.startswith(f"Slurm job {manager.index.store.load(view.run_id).slurm_job} ended (FAILED, "
                              "JobLaunchFailure) before the run started: node localhost cannot see the run directory "
                              f"{view.run_dir} on local; it must be on a file system local and the compute nodes "
                              "share"), message


async def test_a_job_killed_over_its_memory_limit_is_reported_oom(slurm_memory: SlurmCluster, managers,
                                                                  free_port: int) -> None:
    # The server takes 400 MB once it has started, against a 100 MB --mem.
    grows = ("sh", "-c", 'echo "server starting"; exec "$0" -c "import time; x = bytearray(400 << 20); '
                         'x[::4096] = bytes(len(x[::4096])); time.sleep(600)"', sys.executable)
    profile = dataclasses.replace(slurm_profile(free_port), command=grows, slurm=SlurmRequest(mem="100M"))
    manager, views = managers(profile)
    view = await manager.launch("sim")
    ended = await views.until(lambda v: not v.active, timeout=60)
    assert ended.state == "failed" and ended.failure is not None, ended
    job = manager.index.store.load(view.run_id).slurm_job
    assert ended.failure.kind == "oom", ended.failure
    assert ended.failure.message == (f"Slurm job {job} ran out of memory (Slurm's memory limit): slurmstepd killed it "
                                     "(exceeded job memory limit; Slurm says FAILED)"), ended.failure


async def test_a_job_the_kernel_kills_in_its_memory_cgroup_ends_as_slurms_out_of_memory(
        slurm_cgroup_memory: SlurmCluster, managers, free_port: int) -> None:
    # As on a cluster that confines jobs in cgroups: the same 400 MB server against a 100 MB --mem, killed by the
    # kernel's OOM killer in the job's cgroup; Slurm's own state is OUT_OF_MEMORY (not FAILED, as above).
    grows = ("sh", "-c", 'echo "server starting"; exec "$0" -c "import time; x = bytearray(400 << 20); '
                         'x[::4096] = bytes(len(x[::4096])); time.sleep(600)"', sys.executable)
    profile = dataclasses.replace(slurm_profile(free_port), command=grows, slurm=SlurmRequest(mem="100M"))
    manager, views = managers(profile)
    view = await manager.launch("sim")
    # The log's "Killed" fails the run at once; Slurm's own verdict follows when the job has ended.
    ended = await views.until(lambda v: not v.active and v.failure is not None and v.failure.message.startswith(
        "Slurm job"), timeout=60)
    job = manager.index.store.load(view.run_id).slurm_job
    assert slurm_cgroup_memory.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").strip() == "OUT_OF_MEMORY"
    assert ended.state == "failed" and ended.failure is not None, ended
    assert (ended.failure.kind, ended.failure.message) == (
        "oom", f"Slurm job {job} ran out of memory (Slurm's memory limit) (OutOfMemory)"), ended.failure


# ---- two-node jobs: the cluster of `slurm2` (n1 at 127.0.0.2, n2 at 127.0.0.3), `specmon sim` as each rank ----------
N1 = TWO_NODES["n1"]


def two_node_job(port: int, master_port: int, *extra: str, shards: int = 4, load_s: float = 2,
                 before: tuple[str, ...] = ()) -> Profile:
    """Rank 0 binds n1's address only: a probe, sweep or port check that went to 127.0.0.1 would find nothing."""
    command = (*before, sys.executable, "-m", "specmon.sim", "--host", N1, "--port", str(port), "--time-scale", "0.05",
               "--shards", str(shards), "--load-seconds", str(load_s), *extra)
    return Profile(name="mn", command=command, port=port, server="sglang", master_port=master_port,
                   stall_timeout_s=30.0, slurm=SlurmRequest(nodes=2, time="10"))


def answers(addr: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((addr, port)) == 0


async def test_a_two_node_job_runs_rank_0_on_n1_and_rank_1_on_n2_is_ready_with_rank_0_and_stops_as_one(
        slurm2: SlurmCluster, managers, free_port_factory, tmp_path: Path) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    manager, views = managers(two_node_job(port, master_port))
    launched = await manager.launch("mn")
    [job] = slurm2.jobs()   # one job for both ranks
    assert slurm2.run("squeue", "-h", "-j", job, "-o", "%j %D").split() == [f"specmon-{launched.run_id}", "2"]
    assert [n.node_rank for n in launched.nodes] == [0, 1]

    ready = await views.until(lambda v: v.run_id == launched.run_id and v.state == "ready", timeout=90)
    assert [n.state for n in ready.nodes] == ["ready", "ready"]
    # Each rank ran on its own node, the rank being Slurm's, with rank 0's node (n1's address) as the master.
    for rank, node in enumerate(ready.nodes):
        log = Path(node.log_path)
        assert f"specmon: node rank {rank} on n{rank + 1} (master {N1})" in log.read_text()
        dump = args_dump(log)
        assert (dump["node_rank"], dump["nnodes"], dump["dist_init_addr"]) == (rank, 2, f"{N1}:{master_port}")
    # Readiness went to the port on n1 (nothing listens on 127.0.0.1), and so does a sweep.
    assert ready.url == f"http://{N1}:{port}" and not answers("127.0.0.1", port)
    # The card's /metrics reads (and `specmon metrics`) go there too: they read the login host's loopback before.
    scraper = scraper_of(manager, ready, 1.0)
    try:
        answer, text = await scraper.read()
    finally:
        await scraper.aclose()
    assert answer.status == 200 and text is not None and "sglang:num_running_reqs" in text, answer
    workload = Workload(levels=(1,), requests_per_level=3, warmup_requests=1, input_len=16, output_len=16)
    result = await run_sweep(SweepSpec(url=ready.url, workload=workload, out_path=tmp_path / "sweep.jsonl"))
    assert [(level.requests_ok, level.requests_failed) for level in result.levels] == [(3, 0)]
    # Another specmon (`status`) shows the same URL: the node's address is in the run's records.
    other, _ = managers(two_node_job(port, master_port))
    [shown] = [v for v in await other.refresh() if v.run_id == launched.run_id]
    assert shown.state == "ready" and shown.url == ready.url

    report = await manager.stop(launched.run_id)
    assert report.clean and report.stopped and len(report.nodes) == 2 and report.job == job, report
    assert slurm2.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() in ("", "CANCELLED")
    assert not answers(N1, port)
    final = manager.view(launched.run_id)
    assert final.state == "stopped" and [n.state for n in final.nodes] == ["stopped", "stopped"]


async def test_a_rank_dying_in_a_two_node_job_fails_the_run_naming_that_rank(
        slurm2: SlurmCluster, managers, free_port_factory) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    # Rank 1 (by Slurm's SLURM_NODEID) dies after 2 s without a word in its log, while the job runs on; rank 0
    # would go on loading for a long while.
    dies = ("sh", "-c", 'if [ "$SLURM_NODEID" = 1 ]; then sleep 2; exit 3; fi; exec "$@"', "sh")
    manager, views = managers(two_node_job(port, master_port, shards=8, load_s=400, before=dies))
    launched = await manager.launch("mn")
    failed = await views.until(lambda v: v.run_id == launched.run_id and v.state not in ("launching", "loading"),
                               timeout=90)
    assert failed.state == "failed" and failed.failure is not None, failed
    # Named by its node, as Slurm placed it: every rank's host is the login node ("node 1 (local)" said nothing).
    assert failed.failure.message == "rank 1 on n2: exited with code 3", failed.failure
    assert failed.nodes[1].state == "failed" and failed.nodes[0].state == "loading"
    # As for SSH multi-node runs, the other ranks keep running (here: the job) until the run is stopped.
    assert slurm2.run("squeue", "-h", "-o", "%T").split() == ["RUNNING"]
    report = await manager.stop(launched.run_id)
    assert report.stopped and slurm2.run("squeue", "-h", "-o", "%T", check=False).strip() in ("", "CANCELLED")
    final = manager.view(launched.run_id)
    assert final.state == "failed" and final.failure is not None and final.failure.message == failed.failure.message
    assert dataclasses.asdict(final.failure)["kind"] == "exited"


async def test_a_two_node_job_from_a_login_node_over_ssh_is_probed_swept_and_stopped_at_its_node_through_ssh(
        slurm2: SlurmCluster, tmp_path: Path, free_port_factory) -> None:
    # Jump box -> SSH (the loopback sshd) -> Slurm; rank 0's server on n1's address, reached through the login
    # node's connection (a forward here), never at this machine's 127.0.0.1.
    port, master_port = free_port_factory(), free_port_factory()
    sshd = Sshd.start(tmp_path / "sshd", set_env={"SLURM_CONF": str(slurm2.conf),
                                                  "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"})
    profile = dataclasses.replace(two_node_job(port, master_port), host="gpu1")   # the sshd config's alias
    manager = RunManager(Config(source="test profiles", profiles={"mn": profile}, ssh=sshd.settings()),
                         state_dir=tmp_path / "state", stop_timings=StopTimings(grace_s=10, port_wait_s=10))
    views = Views(manager)
    try:
        launched = await manager.launch("mn")
        ready = await views.until(lambda v: v.run_id == launched.run_id and v.state == "ready", timeout=90)
        assert ready.host == "gpu1" and ready.url.startswith("http://127.0.0.1:") and ready.url != f"http://127.0.0.1:{port}"
        workload = Workload(levels=(1,), requests_per_level=2, warmup_requests=1, input_len=16, output_len=16)
        result = await run_sweep(SweepSpec(url=ready.url, workload=workload, out_path=tmp_path / "sweep.jsonl"))
        assert [(level.requests_ok, level.requests_failed) for level in result.levels] == [(2, 0)]
        report = await manager.stop(launched.run_id)
        assert report.clean and report.stopped and not answers(N1, port)
        assert slurm2.run("squeue", "-h", "-o", "%T", check=False).strip() in ("", "CANCELLED")
    finally:
        await stop_everything([manager])
        sshd.stop()


@pytest.mark.timeout(300)
def test_a_two_node_job_launched_from_another_jump_box_is_found_by_its_name_and_adopted_as_one_run(
        slurm2: SlurmCluster, tmp_path: Path, free_port_factory) -> None:
    # Two jump boxes (each its own HOME, so its own specmon state) reach one login node over SSH (the loopback
    # sshd: one HOME there, where the run directories are). Box A launches a two-node job; box B, which has never
    # heard of it, finds it by the job's name and takes both ranks over as one run, then waits for it and stops it.
    port, master_port = free_port_factory(), free_port_factory()
    sshd = Sshd.start(tmp_path / "sshd", set_env={"SLURM_CONF": str(slurm2.conf),
                                                  "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"})
    job = two_node_job(port, master_port)
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.mn]\nhost = "gpu1"\ncommand = {json.dumps(list(job.command))}\nport = {port}\n'
                      f'master_port = {master_port}\nstall_timeout_s = 30\n[profiles.mn.slurm]\nnodes = 2\n'
                      f'time = "10"\n' + sshd.ssh_table())

    def box(name: str) -> Callable[..., subprocess.CompletedProcess[str]]:
        home = tmp_path / name
        env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / ".local/state"),
               "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")}

        def specmon(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
            # Output to files, not pipes: the command's end is its exit, whoever else holds its output open.
            out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
            with out.open("w") as stdout, err.open("w") as stderr:
                proc = subprocess.Popen([sys.executable, "-m", "specmon", "--config", str(config), *args], env=env,
                                        stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"{args} still running after {timeout} s: {err.read_text()[-3000:]}") from None
            done = subprocess.CompletedProcess(args, code, out.read_text(), err.read_text())
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            return done
        return specmon

    a, b = box("box-a"), box("box-b")
    try:
        launched = a("launch", "mn")
        run_id = re.search(r"launched mn run (\S+) on gpu1", launched.stderr + launched.stdout)[1]
        [slurm_job] = slurm2.jobs()
        # Box B: the job's two rank directories are one run found on the login node, its job still listed.
        found = json.loads(b("status", "--host", "gpu1", "--json").stdout)
        assert found["runs"] == [] and [(r["run_id"], r["profile"], r["running"]) for r in found["adoptable"]] == [
            (run_id, "mn", True)], found
        adopted = b("status", "--host", "gpu1", "--adopt", run_id)
        assert f"adopted {run_id} (profile mn) on gpu1: " in adopted.stdout, adopted.stdout
        b("wait", run_id, "-q", timeout=120)
        [run] = [r for r in json.loads(b("status", "--all", "--json").stdout) if r["run_id"] == run_id]
        assert run["state"] == "ready" and [(n["node_rank"], n["state"]) for n in run["nodes"]] == [
            (0, "ready"), (1, "ready")], run
        assert run["url"] == f"http://{N1}:{port}", run   # rank 0's node, as the login node reaches it
        assert b("status", "--host", "gpu1", "--json").stdout.count('"adoptable": []') == 1   # nothing left over
        stopped = b("stop", run_id, timeout=120)
        assert re.search(rf"scancel job {slurm_job}", stopped.stdout), stopped.stdout
        assert slurm2.run("squeue", "-h", "-o", "%T", check=False).strip() in ("", "CANCELLED")
        [final] = [r for r in json.loads(b("status", "--all", "--json").stdout) if r["run_id"] == run_id]
        assert final["state"] == "stopped" and [n["state"] for n in final["nodes"]] == ["stopped", "stopped"], final
    finally:
        sshd.stop()   # the cluster's end (the fixture) ends the job
