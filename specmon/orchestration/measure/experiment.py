"""The experiment runner: an unattended A/B over profiles that share hardware, resumable after a kill.

    state = await run_experiment(manager, config, "demo", results_dir=Path("results"), resume=False,
                                 on_update=callback)
    summary = verdict.summarize(experiment_runs(state), state.spec.repeats)

For each profile in turn (profiles on different hosts run in parallel, one after another within a host):
1. clear the host: stop the specmon runs that hold the profile's port or belong to this experiment (the stop waits
   until the port and GPUs are free); a process specmon did not start on the port is reported, and the experiment
   waits for it (`on_busy = "wait"`, up to `busy_wait_s`) or aborts;
2. launch and wait until ready (`wait_ready`, gates `max_load_s` and `stall_s`); a failed launch is retried
   (`retries` times, then skipped), skipped, or aborts the experiment, per `on_failure`;
3. sweep: pass 1 over every level (with the warm-up), then pass 2, ... (`repeats` passes), each pass a result file;
   during each level the server's decode-batch lines and /metrics are collected beside the client's figures
   (specmon.model.server.acceptance) and appended to acceptance.jsonl when the level ends;
4. stop the server and wait until its port and GPUs are free.

Every step is written to the state file (its shape: specmon.model.experiments.experiment; written here by save_state) and every
finished level is on disk the moment it ends, so `resume=True` continues the newest unfinished experiment of that name without repeating a finished
level; a server the experiment left running and still ready is adopted instead of loaded again.

`on_update` gets ExperimentStep (each step, with the new state), ExperimentProgress (about 4 Hz during a level)
and ExperimentLevel (each finished level with its acceptance), in the caller's event loop. Cancelling the task
leaves the state file and the finished levels; the server then keeps running, and a resume adopts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from specmon.errors import UserError
from specmon.loadgen.lines import append_line
from specmon.loadgen.workload import Workload
from specmon.model.config import Config, ExperimentSpec, Profile
from specmon.model.experiments.eta import ExperimentEta, experiment_eta
from specmon.model.experiments.experiment import (
    ACCEPTANCE_FILE,
    FINISHED,
    NOT_MEASURED,
    STATE_FILE,
    ExperimentState,
    ExperimentStatus,
    PassFile,
    ProfileStatus,
    Step,
    next_file_name,
    profile_setup,
    remaining,
)
from specmon.model.logs.events import DecodeStats
from specmon.model.logs.logparse import LogParser
from specmon.model.runs.runstatus import RunStatus
from specmon.model.server.acceptance import LevelAcceptance, LevelWindow, MetricsSample, parse_metrics
from specmon.model.sweeps.results import LevelResult, utc_now_iso
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress
from specmon.orchestration.measure.sweep import (
    SweepNotice,
    SweepSpec,
    SweepUpdate,
    WorkloadOverrides,
    run_sweep,
    workload_from,
)
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.ready import queued, wait_ready
from specmon.orchestration.runs.view import RunView
from specmon.sources.experimentfiles import done_levels, find_unfinished
from specmon.sources.health import ServerProbe
from specmon.sources.transport import TransportError

log = logging.getLogger(__name__)
METRICS_EVERY_S = 0.25    # /metrics scrape period during a sweep (SGLang refreshes its gauges at each decode log)
BUSY_POLL_S = 2.0


@dataclass(frozen=True)
class ExperimentStep:
    step: Step
    state: ExperimentState
    eta: ExperimentEta | None = None      # profiles done / total and the time left, as of this step


@dataclass(frozen=True)
class ExperimentProgress:
    profile: str
    pass_no: int
    progress: SweepProgress
    eta: ExperimentEta | None = None


@dataclass(frozen=True)
class ExperimentLevel:
    profile: str
    pass_no: int
    level: LevelResult
    acceptance: LevelAcceptance


ExperimentUpdate = ExperimentStep | ExperimentProgress | ExperimentLevel


class ExperimentAborted(Exception):
    """The experiment stopped early by its own rules (on_failure/on_busy = "abort")."""


class ServerLost(Exception):
    """The server being swept stopped answering (every request of a level failed, or the probe was refused)."""


def new_state(config: Config, spec: ExperimentSpec, results_dir: Path) -> ExperimentState:
    """A fresh experiment directory's state (not yet saved)."""
    stamp = utc_now_iso().replace(":", "").replace("-", "")
    directory = results_dir / "experiments" / f"{spec.name}-{stamp}"
    n = 1
    while directory.exists():
        n += 1
        directory = results_dir / "experiments" / f"{spec.name}-{stamp}-{n}"
    return ExperimentState(directory=directory, spec=spec, created_at=utc_now_iso(), config_source=config.source,
                           setups={name: profile_setup(config.profile(name)) for name in spec.profiles})


async def run_experiment(manager: RunManager, config: Config, name: str, *, results_dir: Path = Path("results"),
                         resume: bool = False,
                         on_update: Callable[[ExperimentUpdate], None] | None = None) -> ExperimentState:
    """Run (or with `resume`, continue) experiment `name`; returns the final state (see the module docstring).

    Every input is checked before the first launch: a bad dataset fails naming FILE:LINE (not after each profile's
    server has loaded), an unusable results directory before anything is started."""
    found = find_unfinished(results_dir, name) if resume else None
    if resume:
        if found is None:
            raise UserError(f"experiment {name}: nothing to resume under {results_dir / 'experiments'} "
                            "(run it without --resume to start one)")
        for profile in found.spec.profiles:
            config.profile(profile)   # a profile removed from the file since: say so before anything runs
    spec = found.spec if found is not None else config.experiment(name)
    workload_from(spec.sweep, WorkloadOverrides()).load_dataset()
    try:
        state = found if found is not None else new_state(config, spec, results_dir)
        state.directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{results_dir}: cannot create the experiment's directory there ({exc.strerror or exc}); "
                        "choose another --results-dir") from None
    with _exclusive(state.directory):
        runner = ExperimentRunner(manager, config, state, on_update)
        return await runner.run(resumed=resume)


@contextlib.contextmanager
def _exclusive(directory: Path) -> Iterator[None]:
    """Hold the experiment's lock: two specmon processes must never run one experiment (the kernel drops the lock
    when its holder dies, even by kill -9)."""
    path = directory / ".lock"
    with open(path, "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise UserError(f"{directory}: this experiment is being run by another specmon (pid {holder})") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        yield


class ExperimentRunner:
    """Runs one experiment state to its end. See the module docstring."""

    def __init__(self, manager: RunManager, config: Config, state: ExperimentState,
                 on_update: Callable[[ExperimentUpdate], None] | None = None) -> None:
        self.manager = manager
        self.config = config
        self.state = state
        self.spec = state.spec
        self._on_update = on_update
        self._serving: set[str] = set()   # runs this experiment launched or adopted and has not stopped yet
        self._history = self._load_history()

    def _load_history(self) -> dict[str, tuple[float, ...]]:
        """What each profile's load is compared with before this experiment (see model.experiments.eta): its past
        loads from this profiles file, else (a grid's variant never launched) its base's, else its expected_load_s."""
        store, key = self.manager.index.store, self.manager.index.config_key
        history = {}
        for name in self.spec.profiles:
            past = store.past_loads(name, key)
            if not past and name in self.config.variants:
                past = store.past_loads(name.split(" ", 1)[0], key)   # a variant is named after its base
            expected = self.config.profile(name).expected_load_s
            history[name] = past or ((expected,) if expected else ())
        return history

    def eta(self) -> ExperimentEta:
        return experiment_eta(self.state, time.time(), self._history)

    # ---- state -------------------------------------------------------------------------------------------
    def _notify(self, update: ExperimentUpdate) -> None:
        if self._on_update is None:
            return
        try:
            self._on_update(update)
        except Exception:  # a broken view must not end an unattended experiment
            log.exception("experiment update callback failed")

    def _step(self, profile: str | None, step: str, detail: str = "", seconds: float | None = None) -> None:
        self.state = self.state.with_step(profile, step, detail, seconds)
        self._save()
        self._notify(ExperimentStep(self.state.steps[-1], self.state, self.eta()))

    def _set(self, profile: str, **changes: object) -> None:
        self.state = self.state.with_profile(profile, **changes)
        self._save()

    def _save(self) -> None:
        try:
            save_state(self.state)
        except OSError as exc:   # a full or read-only disk: the file keeps the state saved before
            raise UserError(f"{self.state.path}: cannot save the experiment's state ({exc.strerror or exc}); "
                            "it holds the state saved before") from None

    # ---- the whole experiment ----------------------------------------------------------------------------
    async def run(self, resumed: bool = False) -> ExperimentState:
        self._step(None, "resume" if resumed else "start",
                   f"{self.spec.name}: {', '.join(self.spec.profiles)}; levels "
                   f"{','.join(map(str, self.spec.sweep.levels))} x {self.spec.repeats} passes; in {self.state.directory}")
        by_host: dict[str, list[str]] = {}
        for name in self.spec.profiles:
            by_host.setdefault(self.config.profile(name).host, []).append(name)
        tasks = [asyncio.ensure_future(self._host(names)) for names in by_host.values()]
        try:
            await asyncio.gather(*tasks)
        except ExperimentAborted as exc:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.state = dataclasses.replace(self.state, status=ExperimentStatus.ABORTED)
            self._step(None, "abort", str(exc))
            return self.state
        except Exception as exc:
            # An error ends the experiment (a state that cannot be saved, a results file that cannot be written):
            # the servers it started are stopped, not left holding their GPUs. (Interrupted, they are left ready
            # for --resume to adopt.)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            stopped = await self._stop_serving()
            if stopped and isinstance(exc, UserError):
                raise UserError(f"{exc}; stopped run(s) {', '.join(stopped)}") from None
            raise
        self.state = dataclasses.replace(self.state, status=ExperimentStatus.FINISHED)
        failed = [n for n in self.spec.profiles if self.state.profile(n).status in NOT_MEASURED]
        self._step(None, "done", "finished" + (f"; not measured: {', '.join(failed)}" if failed else ""))
        return self.state

    async def _stop_serving(self) -> list[str]:
        """Stop the runs this experiment still serves (no step is written: the state may not be writable)."""
        stopped = []
        for run_id in sorted(self._serving):
            with contextlib.suppress(UserError, TransportError):
                await self.manager.stop(run_id)
                stopped.append(run_id)
        self._serving.clear()
        return stopped

    async def _host(self, names: list[str]) -> None:
        for name in names:
            await self._profile(name)

    async def _profile(self, name: str) -> None:
        if self.state.profile(name).status in FINISHED:
            return
        profile = self.config.profile(name)
        while plan := remaining(self.state, done_levels(self.state, name)):
            view = await self._serve(profile)
            if view is None:
                return
            self._set(name, status=ProfileStatus.SWEEPING, run_id=view.run_id)
            warm = True
            try:
                for pass_no, levels in plan:
                    await self._sweep_pass(profile, view, pass_no, levels, warm)
                    warm = False
            except ServerLost as exc:
                # Levels measured against a dead server are not kept as done; a relaunch (per on_failure) redoes them.
                self._step(name, "failed", f"server lost mid-sweep: {exc}")
                await self._stop(profile, view.run_id)
                if not self._may_retry(name):
                    self._give_up(name, f"server lost mid-sweep: {exc}")
                    return
                continue
            await self._stop(profile, view.run_id)
        self._set(name, status=ProfileStatus.DONE)

    def _may_retry(self, name: str) -> bool:
        attempts = self.state.profile(name).attempts
        if self.spec.on_failure == "retry" and attempts <= self.spec.retries:
            self._step(name, "retry", f"retry {attempts} of {self.spec.retries}")
            return True
        return False

    def _give_up(self, name: str, reason: str) -> None:
        """After a failure: skip the profile (reported) or abort the experiment, per on_failure."""
        if self.spec.on_failure == "abort":
            self._set(name, status=ProfileStatus.FAILED, failure=reason)
            raise ExperimentAborted(f"{name}: {reason} (on_failure = \"abort\")")
        status = ProfileStatus.FAILED if self.spec.on_failure == "retry" else ProfileStatus.SKIPPED
        self._set(name, status=status, failure=reason)
        self._step(name, "skip", f"{name} not measured: {reason}")

    # ---- getting a ready server --------------------------------------------------------------------------
    async def _serve(self, profile: Profile) -> RunView | None:
        name = profile.name
        adopted = self._adoptable(name)
        if adopted is not None:
            self._serving.add(adopted.run_id)
            await self.manager.attach(adopted.run_id)
            self._step(name, "adopt", f"run {adopted.run_id} left ready by the interrupted experiment")
            return adopted
        attempts = self.state.profile(name).attempts
        while True:
            await self._clear_host(profile)
            attempts += 1
            self._set(name, status=ProfileStatus.LAUNCHING, attempts=attempts, failure=None)
            self._step(name, "launch", f"attempt {attempts}")
            t0 = time.monotonic()
            reason: str
            try:
                view = await self.manager.launch(name)
            except UserError as exc:
                reason = str(exc)
            else:
                self._serving.add(view.run_id)
                stall = self.spec.stall_s if self.spec.stall_s is not None else profile.stall_timeout_s
                verdict = await wait_ready(self.manager, view.run_id, timeout_s=self.spec.max_load_s,
                                           stall_timeout_s=stall, on_progress=self._queue_step(name))
                if verdict.ready:
                    self._step(name, "ready", verdict.reason, time.monotonic() - t0)
                    return verdict.view
                reason = verdict.reason if verdict.outcome != "timeout" else \
                    f"not ready within max_load_s = {self.spec.max_load_s:g} s"
                with contextlib.suppress(UserError):
                    await self.manager.stop(view.run_id)   # a stalled or slow load must not hold the GPUs
                    self._serving.discard(view.run_id)
            self._step(name, "failed", f"launch attempt {attempts}: {reason}", time.monotonic() - t0)
            if self._may_retry(name):
                continue
            self._give_up(name, f"launch failed {attempts} time{'s' if attempts > 1 else ''}: {reason}")
            return None

    def _queue_step(self, name: str) -> Callable[[RunView], None]:
        """A wait's progress callback that records, once a Slurm run's job starts, how long it waited in the queue
        (a step of its own: queue time is no load time)."""
        since: float | None = None
        reason = ""

        def see(view: RunView) -> None:
            nonlocal since, reason
            if queued(view):
                since = since if since is not None else time.monotonic()
                reason = view.job or ""
            elif since is not None:
                self._step(name, "queued", f"{reason}; then {view.job}", time.monotonic() - since)
                since = None

        return see

    def _adoptable(self, name: str) -> RunView | None:
        run_id = self.state.profile(name).run_id
        if run_id is None:
            return None
        with contextlib.suppress(UserError):
            view = self.manager.view(run_id)
            if view.state == RunStatus.READY:
                return view
        return None

    async def _clear_host(self, profile: Profile) -> None:
        """Stop the specmon runs in the way; report (and wait for, or abort on) anything else on the port."""
        ours = set(self.spec.profiles)
        for record in self.manager.index.store.all():
            if record.terminal or record.host != profile.host:
                continue
            if record.port != profile.port and record.profile not in ours:
                continue
            self._step(profile.name, "stop", f"run {record.run_id} ({record.profile}) holds {profile.host} "
                                             f"port {record.port} or its GPUs")
            report = await self.manager.stop(record.run_id)
            detail = "; ".join(report.blockers) or "port and GPUs free"
            self._step(profile.name, "stopped", f"run {record.run_id}: {detail}", report.seconds)
        ops = self.manager.ops(profile.host)
        deadline = time.monotonic() + self.spec.busy_wait_s
        said = False
        while profile.port in await ops.listening():
            what = f"port {profile.port} on {profile.host} is held by a process specmon did not start"
            if self.spec.on_busy == "abort":
                self._step(profile.name, "busy", what)
                raise ExperimentAborted(f"{profile.name}: {what} (on_busy = \"abort\")")
            if time.monotonic() >= deadline:
                raise ExperimentAborted(f"{profile.name}: {what}, still after {self.spec.busy_wait_s:g} s")
            if not said:
                self._step(profile.name, "busy", f"{what}; waiting up to {self.spec.busy_wait_s:g} s")
                said = True
            await asyncio.sleep(BUSY_POLL_S)

    async def _stop(self, profile: Profile, run_id: str) -> None:
        self._step(profile.name, "stop", f"run {run_id}")
        try:
            report = await self.manager.stop(run_id)
            self._serving.discard(run_id)
        except UserError as exc:
            self._step(profile.name, "stopped", f"run {run_id}: {exc}")
            return
        detail = "; ".join(report.blockers) or "port and GPUs free"
        self._step(profile.name, "stopped", f"run {run_id}: {detail}", report.seconds)

    # ---- sweeping ----------------------------------------------------------------------------------------
    def _workload(self, levels: tuple[int, ...], warm: bool) -> Workload:
        """The experiment's workload for one pass: its levels left, the warm-up only on a fresh server."""
        return workload_from(self.spec.sweep, WorkloadOverrides(levels=levels, warmup_requests=None if warm else 0))

    async def _sweep_pass(self, profile: Profile, view: RunView, pass_no: int, levels: tuple[int, ...],
                          warm: bool) -> None:
        name = profile.name
        file = next_file_name(self.state, name, pass_no)
        files = self.state.profile(name).files + (PassFile(pass_no, file),)
        self._set(name, files=files)   # known before the first level line, so a resume reads it
        self._step(name, "sweep", f"pass {pass_no}/{self.spec.repeats}: C={','.join(map(str, levels))}"
                                  f"{' after warm-up' if warm and self.spec.sweep.warmup_requests else ''} -> {file}")
        collector = LevelCollector(self.manager, view, profile.health_path)
        events: asyncio.Queue[SweepUpdate | None] = asyncio.Queue()
        await collector.start()
        consumer = asyncio.ensure_future(self._consume(events, collector, name, pass_no, file))
        spec = SweepSpec(url=view.url, workload=self._workload(levels, warm),
                         out_path=self.state.directory / file, profile=name)
        t0 = time.monotonic()
        sweep = asyncio.ensure_future(run_sweep(spec, events.put_nowait))
        try:
            await asyncio.wait({sweep, consumer}, return_when=asyncio.FIRST_COMPLETED)
            if consumer.done() and not sweep.done():   # the consumer saw the server go: end the sweep
                sweep.cancel()
                await asyncio.gather(sweep, return_exceptions=True)
                consumer.result()
            try:
                sweep.result()
            except UserError as exc:   # e.g. the server refused the probe
                raise ServerLost(str(exc)) from None
        finally:
            if not sweep.done():
                sweep.cancel()
                await asyncio.gather(sweep, return_exceptions=True)
            events.put_nowait(None)
            await asyncio.gather(consumer, return_exceptions=True)
            await collector.close()
        # The sweep can end before its last level is judged (the consumer still asking /health): that verdict counts.
        consumer.result()
        self._step(name, "swept", f"pass {pass_no}/{self.spec.repeats}", time.monotonic() - t0)

    async def _consume(self, events: asyncio.Queue[SweepUpdate | None], collector: LevelCollector, name: str,
                       pass_no: int, file: str) -> None:
        while (update := await events.get()) is not None:
            if isinstance(update, SweepProgress):
                if update.phase == ProgressPhase.MEASURING:
                    await collector.begin(update.concurrency)
                self._notify(ExperimentProgress(name, pass_no, update, self.eta()))
            elif isinstance(update, LevelResult):
                acceptance = await collector.end(update.tokens_per_chunk)
                health = await collector.probe.health() if update.requests_failed else None
                if update.requests_ok == 0 or health is not None and not health.ok:
                    # The server died (or answers nothing) during the level: it measured nothing trustworthy, and
                    # runs again after a relaunch (per on_failure).
                    self._set(name, discarded=self.state.profile(name).discarded + ((file, update.concurrency),))
                    errors = ", ".join(f"{k} {n}" for k, n in update.errors.items())
                    answer = "nothing" if health is None else health.status or health.error
                    raise ServerLost(f"C={update.concurrency}: {update.requests_failed} of "
                                     f"{(update.requests_failed or 0) + update.requests_ok} requests failed ({errors}); "
                                     f"/health answers {answer}")
                append_acceptance(self.state, name, pass_no, update.concurrency, acceptance)
                self._step(name, "level", _level_line(update, acceptance), update.duration_s)
                self._notify(ExperimentLevel(name, pass_no, update, acceptance))
            elif isinstance(update, SweepNotice):
                self._step(name, "warning", update.message)


def _level_line(level: LevelResult, a: LevelAcceptance) -> str:
    parts = [f"C={level.concurrency}: {level.output_throughput:.1f} tok/s"]
    if a.server_tok_s is not None:
        parts.append(f"server {a.server_tok_s:.1f} tok/s")
    srcs = a.sources
    if srcs:
        parts.append("accept " + " / ".join(f"{k} {v:.2f}" for k, v in srcs.items()))
    if a.queue_max is not None:
        parts.append(f"queue max {a.queue_max:.0f}")
    if a.disagree:
        parts.append("ACCEPTANCE SOURCES DISAGREE")
    return ", ".join(parts)


class LevelCollector:
    """The server's side of each level: decode-batch log lines and /metrics samples, windowed per level."""

    def __init__(self, manager: RunManager, view: RunView, health_path: str = "/health") -> None:
        self.manager = manager
        self.view = view
        self.probe = ServerProbe(view.url, health_path, timeout_s=5.0)
        self.window: LevelWindow | None = None
        self.concurrency: int | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._read_log(), name=f"experiment log {self.view.run_id}"),
                       asyncio.create_task(self._scrape_loop(), name=f"experiment metrics {self.view.run_id}")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.probe.aclose()

    async def _sample(self) -> MetricsSample | None:
        text = await self.probe.metrics()
        return None if text is None else MetricsSample(time.monotonic(), parse_metrics(text))

    async def begin(self, concurrency: int) -> None:
        """The level at `concurrency` has started (its first progress report arrived)."""
        if self.concurrency == concurrency and self.window is not None:
            return
        self.concurrency = concurrency
        self.window = LevelWindow()
        sample = await self._sample()
        if sample is not None and self.window is not None:
            self.window.add_sample(sample)

    async def end(self, client_tokens_per_chunk: float | None) -> LevelAcceptance:
        """The level has ended: one last scrape, then its acceptance."""
        window = self.window or LevelWindow()
        sample = await self._sample()
        if sample is not None:
            window.add_sample(sample)
        self.window, self.concurrency = None, None
        return window.result(client_tokens_per_chunk)

    async def _scrape_loop(self) -> None:
        while True:
            await asyncio.sleep(METRICS_EVERY_S)
            window = self.window
            if window is None:
                continue
            sample = await self._sample()
            if sample is not None and self.window is window:
                window.add_sample(sample)

    async def _read_log(self) -> None:
        parser = LogParser()
        async for line in self.manager.log_lines(self.view.run_id, commit=False, backlog=False, history=False):
            if line.kind != "line":
                continue
            for event in parser.feed((line.text + "\n").encode()):
                if isinstance(event, DecodeStats) and self.window is not None:
                    self.window.add_log(event.accept_len, event.accept_rate)


def save_state(state: ExperimentState) -> None:
    """Write experiment.json atomically (temp file, fsync, rename): a kill leaves the old or the new state."""
    state.directory.mkdir(parents=True, exist_ok=True)
    tmp = state.path.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
    try:
        # 0600: the setups hold each profile's command line and environment.
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
            json.dump(state.to_dict(), fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, state.path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_acceptance(state: ExperimentState, profile: str, pass_no: int, concurrency: int,
                      acceptance: LevelAcceptance) -> None:
    """One acceptance line for a finished level (appended and fsynced, like the level line itself)."""
    append_line(state.directory / ACCEPTANCE_FILE, {"profile": profile, "pass": pass_no,
                                                    "concurrency": concurrency, **acceptance.to_dict()})
