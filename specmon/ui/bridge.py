"""The TUI's link to the engine: RunManager views and log lines, and sweeps, turned into presentation rows.

Runs in the app's event loop, in asyncio tasks it owns and cancels on `close`. Engine callbacks only store the
latest view and post the app a Message (`specmon.ui.messages`); the app decides when to repaint. The bridge knows
the app only as a message target, so neither module imports the other. No engine call ever runs on a timer that
could pile up: the clock tick that ages "elapsed" and "last log" re-arms after each pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.message_pump import MessagePump

from specmon.errors import PortBusy, UserError
from specmon.model.charts.levelrow import LevelRow, rows_of
from specmon.model.config import Config
from specmon.model.experiments.bands import experiment_summary, grid_verdict, label, with_grid_verdict
from specmon.model.experiments.verdict import ExperimentSummary, summarize_passes, summarize_profiles
from specmon.model.machine.env import Difference, EnvReport
from specmon.model.machine.gpu import GpuBoard
from specmon.model.runs.runstatus import BUSY, RunStatus
from specmon.model.runs.selection import RunScope
from specmon.model.server.serving import ServingUpdate
from specmon.model.sweeps.compare import METRICS, find_crossover, model_warning
from specmon.model.sweeps.formats import TOOL_NAMES
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress
from specmon.orchestration.inspect.environment import diff_targets, env_report, gpu_transport
from specmon.orchestration.inspect.runlog import log_state
from specmon.orchestration.inspect.serving import ServingWatcher
from specmon.orchestration.runs import bulk
from specmon.orchestration.runs.bulk import RunOutcome
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView
from specmon.sources.experimentfiles import experiment_runs, find_unfinished
from specmon.sources.gpu import GpuProbe
from specmon.sources.resultfiles import read_any_results
from specmon.sources.transport import Transport, TransportError
from specmon.ui import format as fmt
from specmon.ui.forms import ExperimentRequest, SweepRequest
from specmon.ui.gpuenv import GpusUpdated
from specmon.ui.messages import (
    ChartCleared,
    EngineNotice,
    ExperimentStepsChanged,
    GridVerdictChanged,
    LogAdded,
    LogCleared,
    RowsChanged,
    SeriesChanged,
    ServingChanged,
    SweepStatusChanged,
)
from specmon.ui.rows import CrossoverMark, LogEntry, ServerRow, entry_from_line, row_from_view

if TYPE_CHECKING:   # imported where a sweep or an experiment starts: their load generator (aiohttp) is a tenth of a
    # second of the start-up, before the first frame
    from specmon.orchestration.measure.comparison import ComparisonUpdate
    from specmon.orchestration.measure.experiment import ExperimentUpdate

TICK_ACTIVE_S = 1.0   # how often time-based fields (elapsed, ETA, last log) age while a run is loading
TICK_IDLE_S = 5.0     # ... and while every run is settled
STEPS_SHOWN = 200     # the experiment step list keeps this many (newest last)

log = logging.getLogger(__name__)


def sweep_status(progress: SweepProgress, profile: str) -> str:
    """One line about the level in progress, for the Sweep pane's title."""
    done = f"{progress.requests_done}/{progress.requests_target}" if progress.requests_target else f"{progress.elapsed_s:.0f}s"
    return (f"{profile} C={progress.concurrency} ({progress.level_index + 1}/{progress.level_count}) {progress.phase}"
            f" {done} req · {progress.output_tok_s:.0f} tok/s")


class EngineBridge:
    """Implements the app's Engine protocol over a RunManager and `run_sweep`."""

    def __init__(self, config: Config, *, autolaunch: Sequence[str] = (), manager: RunManager | None = None,
                 results_dir: Path = Path("results")) -> None:
        self.config = config
        self.manager = manager or RunManager(config)
        self.autolaunch = list(autolaunch)
        self.results_dir = results_dir
        self.started_here: list[str] = []          # run ids launched by this session (stopped by "quit and stop")
        self._starts: set[asyncio.Task[RunView]] = set()   # launches and restarts in flight (quit waits for them)
        self._closing = False
        self._views: dict[str, RunView] = {}       # profile -> its latest run
        self._earlier: list[RunView] = []          # every run known at start, oldest first (names GPU holders)
        self._log_tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._levels: dict[str, list[LevelResult]] = {}
        self._models: dict[str, str | None] = {}   # series name -> the model its result file names
        self._refused: dict[str, str] = {}         # profile -> why its last launch never started (shown as FAILED)
        self._unsubscribe: object = None
        self._target: MessagePump | None = None
        self._gpu_probe: GpuProbe | None = None
        self._gpus_of = ""                         # the profile whose GPUs the pane shows
        self._gpu_lock = asyncio.Lock()
        self._log_batches: dict[str, list[LogEntry]] = {}   # lines read in this loop turn, posted at its end
        self._serving = ServingWatcher(self.manager, self._serving_read)
        self._serving_batch: list[ServingUpdate] = []   # reads that changed a card in this loop turn, posted at its end

    def _post(self, message: Message) -> None:
        if self._target is not None:
            self._target.post_message(message)

    def _serving_read(self, update: ServingUpdate) -> None:
        """One message for the reads of one loop turn: those of a host's runs end together (their answers come
        in one packet of its SSH connection), as the log lines of a burst do."""
        if not self._serving_batch:
            asyncio.get_running_loop().call_soon(self._post_serving)
        self._serving_batch.append(update)

    def _post_serving(self) -> None:
        batch, self._serving_batch = self._serving_batch, []
        if batch:
            self._post(ServingChanged(*batch))

    # --------------------------------------------------------------- watching
    async def start(self, target: MessagePump) -> None:
        """Begin watching runs; every update goes to `target` (the app) as a Message."""
        self._target = target
        self._unsubscribe = self.manager.subscribe(self._on_view)
        for view in await self.manager.refresh():
            if view.profile in self.config.profiles:
                self._views[view.profile] = view
                self._earlier.append(view)
        for view in list(self._views.values()):
            if view.active:
                await self.manager.attach(view.run_id)
                self._follow_log(view)
            self._serving.track(view)
        self._push(self._shown())
        self._spawn(self._tick(), "tui-tick")
        for view in list(self._views.values()):
            if not view.active and view.run_state is None:   # ended before we watched: its card reads its log
                self._spawn(self._read_log_state(view), f"log-state-{view.run_id}")
        for profile in self.autolaunch:
            current = self._views.get(profile)
            if current is None or not current.active:
                await self.launch(profile)
            else:   # left running by an earlier demo that was killed: this one adopts it, and its quit stops it
                self.started_here.append(current.run_id)

    async def _read_log_state(self, view: RunView) -> None:
        """A run that ended before this session shows what its log said (its speculative set-up, memory fraction);
        an unreadable log (a host out of reach) leaves its card as its record has it."""
        try:
            state = await log_state(self.manager, view.run_id)
        except (TransportError, TimeoutError, OSError, UserError):
            return
        current = self._views.get(view.profile)
        if current is not None and current.run_id == view.run_id and current.run_state is None:
            self._views[view.profile] = dataclasses.replace(current, run_state=state)
            self._push([view.profile])

    def _on_view(self, view: RunView) -> None:
        if view.profile not in self.config.profiles:
            return
        current = self._views.get(view.profile)
        if current is not None and current.run_id != view.run_id and current.started_at > view.started_at:
            return  # a late update of an older run must not hide the newer one
        self._views[view.profile] = view
        self._follow_log(view)
        self._serving.track(view)
        self._push([view.profile])

    def _shown(self) -> list[str]:
        """Profiles with something to show: a run, or a launch that was refused."""
        return list(dict.fromkeys([*self._views, *self._refused]))

    def _push(self, profiles: Sequence[str]) -> None:
        if self._target is None:
            return
        now = time.time()
        rows = []
        for profile in profiles:
            if profile in self._refused:
                rows.append(ServerRow(profile=profile, state=RunStatus.FAILED, failure=self._refused[profile],
                                      port=self.config.profiles[profile].port))
                continue
            rows.append(row_from_view(self._views[profile], now))
        self._post(RowsChanged(rows))

    async def _tick(self) -> None:
        while True:
            active = any(v.state in BUSY for v in self._views.values())
            await asyncio.sleep(TICK_ACTIVE_S if active else TICK_IDLE_S)
            self._push(self._shown())

    def _follow_log(self, view: RunView) -> None:
        current = self._log_tasks.get(view.profile)
        if current is not None and current[0] == view.run_id:
            return
        if current is not None:
            current[1].cancel()
        self._log_batches.pop(view.profile, None)   # the old run's unposted lines must not follow the clear
        self._post(LogCleared(view.profile))
        task = asyncio.create_task(self._read_log(view.profile, view.run_id), name=f"tui-log-{view.profile}")
        self._log_tasks[view.profile] = (view.run_id, task)

    async def _read_log(self, profile: str, run_id: str) -> None:
        # commit=False: the TUI reads the whole log for display; it must not move `specmon logs`' resume point.
        async for line in self.manager.log_lines(run_id, commit=False):
            entry = entry_from_line(line)
            if entry is None:
                continue
            # One message per profile per loop turn: a burst of lines reaches the app as one batch, not N messages.
            batch = self._log_batches.get(profile)
            if batch is None:
                self._log_batches[profile] = [entry]
                asyncio.get_running_loop().call_soon(self._post_log, profile)
            else:
                batch.append(entry)

    def _post_log(self, profile: str) -> None:
        batch = self._log_batches.pop(profile, None)
        if batch:
            self._post(LogAdded(profile, batch))

    # ------------------------------------------------------------ GPUs / env
    def _spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run `work` as a task the bridge ends on close; a finished one is dropped at once (a selection change
        starts one: a long session must not pile them up)."""
        task = asyncio.create_task(work, name=name)
        self._tasks.append(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    def watch_gpus(self, profile: str) -> None:
        """Keep one GPU probe where `profile`'s GPUs are (inspection.gpu_transport: its host, or its Slurm job's
        node through the allocation), posting GpusUpdated to the app as it changes. Asked again when the profile's
        run changes state (a job that starts running moves the probe to its node)."""
        self._gpus_of = profile
        self._spawn(self._watch_gpus(profile), "tui-gpu-watch")

    async def _watch_gpus(self, profile: str) -> None:
        async with self._gpu_lock:   # one choice at a time; one made stale by a later selection is dropped
            if profile != self._gpus_of:
                return
            try:
                transport: Transport | None = await gpu_transport(self.manager, profile)
                why = ""
            except Exception as exc:   # no SSH transport for the host, a Slurm job not running: say so in the pane
                transport, why = None, str(exc)
            old = self._gpu_probe
            if old is not None and transport is not None and old.transport.host == transport.host:
                return
            if old is not None:
                self._spawn(old.close(), "tui-gpu-close")
            self._gpu_probe = None
            if transport is None:
                board = GpuBoard()
                board.mark_stale(why)
                self._post(GpusUpdated(profile, board, {}))
                return
            where = transport.host
            probe = GpuProbe(transport)
            probe.on_update = lambda: self._post_gpus(where, probe)
            self._gpu_probe = probe
            probe.start()

    def _post_gpus(self, host: str, probe: GpuProbe) -> None:
        if probe is self._gpu_probe:
            known = {v.run_id: v.profile for v in self._earlier + list(self._views.values())}
            self._post(GpusUpdated(host, probe.board, known))

    async def environment(self, profile: str) -> EnvReport:
        """The env report of the profile (and its live run)."""
        return await env_report(self.manager, profile)

    async def difference(self, a: str, b: str) -> tuple[EnvReport, EnvReport, list[Difference]]:
        """The env reports of two profiles and their differences."""
        return await diff_targets(self.manager, a, b)

    # ---------------------------------------------------------------- actions
    async def launch(self, profile: str) -> None:
        await self._starting(profile, lambda: self.manager.launch(profile, watch=True))

    async def _starting(self, profile: str, start: Callable[[], Awaitable[RunView]]) -> None:
        """Launch or restart: a run that never started (busy port, missing command, ...) shows as FAILED on its
        card with the one-line reason, and a toast says so; it is never an exception lost in a worker.

        The start runs in a task of its own that quitting waits for (the worker that asked may be cancelled by
        the app's exit): a launch in flight when `q` is pressed ends with its server recorded, then stopped."""
        if self._closing:
            return

        async def started() -> RunView:
            view = await start()
            self.started_here.append(view.run_id)
            return view

        task = asyncio.create_task(started(), name=f"tui-start-{profile}")
        self._starts.add(task)
        task.add_done_callback(self._starts.discard)
        try:
            view = await asyncio.shield(task)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, PortBusy) and self.autolaunch and len(exc.free) >= len(self.config.profiles):
                # The demo's ports are built in: say how to run it on free ones.
                reason += f" · try: specmon demo --ports {','.join(map(str, exc.free[:len(self.config.profiles)]))}"
            self._refused[profile] = reason
            self._push([profile])
            self._post(EngineNotice(f"{profile}: FAILED to start: {reason}", severity="error", timeout=15, bell=True))
            return
        self._refused.pop(profile, None)
        self._on_view(view)

    async def stop(self, profile: str) -> None:
        report = await self.manager.stop(profile)
        if report.blockers:
            self._post(EngineNotice(f"{profile}: " + "; ".join(report.blockers), severity="warning", timeout=10))

    async def restart(self, profile: str) -> None:
        await self._starting(profile, lambda: self.manager.restart(profile))

    async def fleet_runs(self, scope: RunScope) -> list[RunView]:
        """The live runs in `scope`, checked now (what the fleet dialog lists)."""
        return await bulk.select(self.manager, scope)

    async def fleet_act(self, verb: str, views: Sequence[RunView]) -> list[RunOutcome]:
        """Stop or restart (`verb`) every run of `views`, hosts at once; runs launched in their place count as this
        session's (quitting with Q stops them)."""
        outcomes = await (bulk.restart_all(self.manager, views) if verb == "restart" else
                          bulk.stop_all(self.manager, views))
        self.started_here.extend(o.new_run_id for o in outcomes if o.new_run_id is not None)
        return outcomes

    # ----------------------------------------------------------------- sweeps
    def _publish_series(self, name: str, live: SweepProgress | None = None) -> None:
        """Send one series to the chart: its finished levels, plus the level in progress as a live point."""
        names = list(self._levels)
        marks: dict[str, CrossoverMark | None] = {}
        for metric in METRICS:
            found = find_crossover(self._levels[names[0]], self._levels[names[1]], metric) if len(names) >= 2 else None
            mode = "rate" if found is not None and self._levels[names[0]][0].rate is not None else "concurrency"
            marks[metric] = None if found is None else CrossoverMark(found.concurrency,
                                                                     *found.leaders(names[0], names[1]), mode)
        rows = rows_of(self._levels[name])
        if live is not None and live.phase == ProgressPhase.MEASURING and live.requests_done > 0:
            rows.append(LevelRow.of_live(live))
        self._post(SeriesChanged(name, rows, marks["throughput"], marks["goodput"]))

    async def sweep(self, request: SweepRequest) -> None:
        from specmon.orchestration.measure.comparison import SweepFinished, SweepStarted, sweep_profiles
        from specmon.orchestration.measure.sweep import SweepNotice, WorkloadOverrides, workload_from

        # The form showed [sweep]'s request count; an emptied field means its duration, else whole waves of C.
        defaults = dataclasses.replace(self.config.sweep, requests_per_level=None)
        workload = workload_from(defaults, WorkloadOverrides(
            levels=request.levels, requests_per_level=request.requests_per_level, input_len=request.input_len,
            output_len=request.output_len))
        ready: list[RunView] = []
        for profile in request.profiles:
            view = self._views.get(profile)
            if view is None or view.state != RunStatus.READY:
                self._post(EngineNotice(f"{profile} is not ready; skipped", severity="warning"))
            else:
                ready.append(view)

        # The profile whose sweep is in progress, and its last complete series: shown again if this one is cancelled.
        sweeping: str | None = None
        earlier: list[LevelResult] = []

        status = ""   # the last progress line: kept while the next level starts
        said: set[str] = set()   # the level flags (SKEW, BOUND, ...) this sweep's toasts have named

        def on_update(u: ComparisonUpdate) -> None:
            nonlocal sweeping, earlier, status
            profile = u.profile
            if isinstance(u, SweepStarted):
                sweeping, earlier = profile, self._levels.get(profile, [])
                self._levels[profile] = []
                self._post(SweepStatusChanged(f"{profile}: starting", running=True))
                return
            if isinstance(u, SweepFinished):
                sweeping = None
                self._models[profile] = u.result.meta.model
                return
            update = u.update
            if isinstance(update, SweepProgress):
                status = sweep_status(update, profile)
                self._post(SweepStatusChanged(status, running=True,
                                              live=(profile, update) if update.phase == ProgressPhase.MEASURING else None))
                self._publish_series(profile, live=update)
            elif isinstance(update, LevelResult):
                self._levels[profile].append(update)
                self._publish_series(profile)
                # The level is over: its client figures must not stand beside the server's view of the next one
                # (the server sees the next level's requests before its first progress report).
                self._post(SweepStatusChanged(status, running=True, live=None))
            elif isinstance(update, SweepNotice):
                toast = fmt.sweep_caution(profile, update.message, update.flag, update.level, said)
                if toast is not None:
                    self._post(EngineNotice(toast, severity="warning", timeout=6))

        try:
            comparison = await sweep_profiles(ready, workload, results_dir=self.results_dir, on_update=on_update)
            if comparison.failures:
                # The rule `specmon sweep` and `demo --headless` exit 1 by: a sweep of failures measured nothing.
                reason = "; ".join(comparison.failures)
                self._post(SweepStatusChanged(f"failed: {reason}", running=False))
                self._post(EngineNotice(f"sweep failed: {reason}", severity="error", timeout=15))
                return
            written = [Path(r.path) for r in comparison.results if r.path]
            where = f" in {written[0].parent}" if written else ""
            self._post(SweepStatusChanged("done: " + ", ".join(p.name for p in written) + where, running=False))
        except asyncio.CancelledError:
            if sweeping is not None:
                # The unfinished level is not a result: drop its live point. The chart keeps the profile's last
                # complete series (and so the crossover); with none, the finished levels of this sweep.
                if earlier:
                    self._levels[sweeping] = earlier
                self._publish_series(sweeping)
            self._post(SweepStatusChanged("cancelled (finished levels kept in the result file)", running=False))
            raise

    async def overlay(self, path: Path) -> None:
        result = await asyncio.to_thread(read_any_results, path)
        name = path.stem
        shown = {lv.rate is not None for levels in self._levels.values() for lv in levels}
        if result.levels and shown and shown != {result.levels[0].rate is not None}:
            # One x axis per chart: request rates and concurrencies are not comparable points.
            kinds = ("an open-loop (request-rate) sweep", "concurrency sweeps") if result.levels[0].rate is not None \
                else ("a concurrency sweep", "open-loop (request-rate) sweeps")
            self._post(EngineNotice(f"{path.name} is {kinds[0]} and the chart shows {kinds[1]}: not overlaid",
                                    severity="error", timeout=8))
            return
        for note in result.notes:   # a torn last line: said, and the whole lines before it drawn (as compare does)
            self._post(EngineNotice(note, severity="warning", timeout=10))
        different = model_warning([*((shown_name, m) for shown_name, m in self._models.items() if shown_name != name),
                                   (name, result.meta.model)])
        if different is not None:
            self._post(EngineNotice(f"comparison confounded: {different}", severity="warning", timeout=10))
        self._levels[name] = list(result.levels)
        self._models[name] = result.meta.model
        self._publish_series(name)
        tool = f" ({TOOL_NAMES[result.meta.tool]} output)" if result.meta.tool else ""
        self._post(EngineNotice(f"overlaid {path.name}{tool}: {len(result.levels)} levels", timeout=4))

    # ------------------------------------------------------------ experiments
    async def experiment(self, request: ExperimentRequest) -> None:
        from specmon.orchestration.measure.experiment import (
            ExperimentLevel,
            ExperimentProgress,
            ExperimentStep,
            run_experiment,
        )

        name = request.name
        steps: list[str] = []
        passes: dict[str, dict[int, list[LevelResult]]] = {}   # profile -> pass -> finished levels

        baseline = self.config.experiments[name].baseline if name in self.config.experiments else None
        kind = "experiment" if baseline is None else "grid"   # what the status lines call it
        eta = ""   # the last "k/N done · ETA 1:05" the runner sent

        def shown(profile: str | None) -> str:
            """A profile as the pane names it: a grid's by its settings (the title's 80 columns keep what differs)."""
            return "" if profile is None else profile if baseline is None else label(profile, baseline)

        def publish(summary: ExperimentSummary) -> None:
            # The overlay: each profile's mean over the repeats, and the crossover they imply (a grid's series are
            # named by their settings, as its verdict names them: the table's narrow column keeps what differs).
            x = summary.crossover
            cross = None if x is None else CrossoverMark(x.concurrency, x.ahead_below, x.ahead_above)
            for p in summary.profiles:
                self._post(SeriesChanged(shown(p.profile), [LevelRow.of_repeats(lv) for lv in p.levels], cross))
            if baseline is not None:
                bands = grid_verdict(summary.profiles, baseline)
                self._post(GridVerdictChanged(bands.sentence, bands.brief))

        def on_update(update: ExperimentUpdate) -> None:
            nonlocal eta
            if isinstance(update, (ExperimentStep, ExperimentProgress)) and update.eta is not None:
                eta = f" {update.eta.words(fmt.fmt_duration)}"
            if isinstance(update, ExperimentStep):
                s = update.step
                took = f" ({s.seconds:.1f}s)" if s.seconds is not None else ""
                steps.append(f"{s.at[11:19]} {s.profile + ' ' if s.profile else ''}{s.step}: {s.detail}{took}")
                del steps[:-STEPS_SHOWN]
                self._post(ExperimentStepsChanged(steps))
                self._post(SweepStatusChanged(f"{kind} {name}{eta}: {shown(s.profile)} {s.step}".replace("  ", " "),
                                              running=True))
            elif isinstance(update, ExperimentProgress):
                status = sweep_status(update.progress, f"{shown(update.profile)} pass {update.pass_no}")
                self._post(SweepStatusChanged(f"{kind} {name}{eta}: {status}", running=True))
            elif isinstance(update, ExperimentLevel):
                passes.setdefault(update.profile, {}).setdefault(update.pass_no, []).append(update.level)
                so_far = summarize_profiles([summarize_passes(profile, list(by_pass.items()))
                                             for profile, by_pass in passes.items()])   # the repeats so far
                publish(with_grid_verdict(so_far, baseline))

        self._post(ChartCleared())   # a fresh chart for the experiment's profiles
        before = {record.run_id for record in self.manager.index.store.all()}
        try:
            state = await run_experiment(self.manager, self.config, name, results_dir=self.results_dir,
                                         resume=request.resume, on_update=on_update)
        except asyncio.CancelledError:
            self._post(SweepStatusChanged(f"{kind} {name} cancelled: x → resume continues it", running=False))
            raise
        finally:
            # Its launches are this session's: a cancelled experiment leaves its current server up, and the demo's
            # q (or Q) must stop it as it stops the ones launched by key.
            self.started_here.extend(record.run_id for record in self.manager.index.store.all()
                                     if record.run_id not in before and self.manager.index.mine(record))
        summary = await asyncio.to_thread(lambda: experiment_summary(experiment_runs(state), state))
        # The chart's last picture comes from the summary the verdict is made of (its result files), so the crossover
        # drawn and the one the status line and the toast name are one figure (C≈5.69 on the chart beside C≈5.68).
        publish(summary)
        self._post(SweepStatusChanged(f"{kind} {name} {state.status}: {summary.verdict}", running=False))
        # The verdict stays in the pane's title; the toast only says it came (it covered the table for 15 s).
        self._post(EngineNotice(summary.verdict, title=f"{kind} {name}", timeout=6))
        for warning in summary.warnings:
            self._post(EngineNotice(warning, severity="warning", timeout=8))

    async def unfinished_experiments(self) -> set[str]:
        def look() -> set[str]:
            found = set()
            for name in self.config.experiments:
                try:
                    if find_unfinished(self.results_dir, name) is not None:
                        found.add(name)
                except UserError:   # a state file it cannot read: resuming says which
                    found.add(name)
            return found

        return await asyncio.to_thread(look)

    # --------------------------------------------------------------- shutdown
    async def close(self, stop_started: bool) -> None:
        self._closing = True
        if self._starts:   # a launch in flight finishes first: its server is then stopped (or left, as asked)
            self._post(EngineNotice(f"waiting for {len(self._starts)} launch{'es' if len(self._starts) > 1 else ''}"
                                    " in flight…", timeout=30))
            await asyncio.gather(*self._starts, return_exceptions=True)
        if stop_started:
            await self._stop_started()
        if callable(self._unsubscribe):
            self._unsubscribe()
        if self._gpu_probe is not None:
            await self._gpu_probe.close()
        await self._serving.close()
        tasks = self._tasks + [task for _, task in self._log_tasks.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.manager.close()

    def left_running(self) -> list[RunView]:
        """The runs still up that this session did not start (found running and reattached): "stop the servers
        started here" leaves them, and says so."""
        started = set(self.started_here)
        return [view for view in self._views.values() if view.active and view.run_id not in started]

    async def _stop_started(self) -> None:
        """Stop this session's runs that are still up, all at once, while the cards still follow them (they say
        STOPPING, then STOPPED); runs that already ended (the old run of a restart) are left alone. A run failed
        by its log whose process still runs (holding its port and GPUs) is stopped too."""
        hung = {view.run_id for view in self._views.values() if view.still_running}
        live = []
        for run_id in dict.fromkeys(self.started_here):
            record = self.manager.index.store.load(run_id)
            if record is not None and (not record.terminal or run_id in hung):
                live.append(run_id)
        if not live:
            return
        self._post(EngineNotice(f"stopping {len(live)} server{'s' if len(live) > 1 else ''}…", timeout=60))
        # A stop that fails (already gone, link down) must not keep the others from stopping.
        await asyncio.gather(*(self.manager.stop(run_id) for run_id in live), return_exceptions=True)
