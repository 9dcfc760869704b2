"""The specmon TUI: Servers, Log, GPU/env and Sweep panes over the lifecycle engine and the sweep runner.

Data flows one way. An engine bridge (`specmon.ui.bridge`) watches runs and sweeps in asyncio tasks and posts the
app Messages (`specmon.ui.messages`: rows, log lines, series, sweep status, notices). What the screen shows is plain
data, `self.state` (`specmon.ui.state.ScreenState`): the app's handlers pass each Message and key to that module's
update functions, say the toasts those return, and repaint through two throttles (state ≤ 4 Hz, chart ≤ 1 Hz), so a
chatty log or a live sweep never drives the frame rate. Key actions call the bridge in workers; the UI never waits on
I/O.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.events import Event, Key, Resize
from textual.markup import escape
from textual.message_pump import MessagePump
from textual.notifications import SeverityLevel
from textual.theme import Theme
from textual.widget import Widget
from textual.widgets import Static

from specmon.model.config import Config
from specmon.model.config.keymap import KEYS
from specmon.model.machine.env import Difference, EnvReport
from specmon.model.runs.selection import RunScope
from specmon.model.server.serving import sweep_live_line
from specmon.model.sweeps.sweepstats import SweepProgress
from specmon.orchestration.runs.bulk import RunOutcome
from specmon.orchestration.runs.bulk import summary as bulk_summary
from specmon.orchestration.runs.view import RunView
from specmon.ui import heap, keys, messages
from specmon.ui import state as screen
from specmon.ui.footer import KeysFooter
from specmon.ui.format import left_running_note
from specmon.ui.forms import (
    ConfirmScreen,
    ExperimentRequest,
    ExperimentScreen,
    FleetChoice,
    FleetScreen,
    OverlayScreen,
    SweepFormScreen,
    SweepRequest,
)
from specmon.ui.gpuenv import RIDE_S, VIEWS, GpuEnvPane, GpusUpdated, render_diff, render_env
from specmon.ui.help import HelpScreen
from specmon.ui.logview import LogPane
from specmon.ui.palette import SpecmonCommands
from specmon.ui.rows import CrossoverMark, LogEntry, ServerRow
from specmon.ui.servers import RunCard, ServersPane
from specmon.ui.sweep import WIDE_SCREEN, Levels, SweepPane
from specmon.ui.themes import DEFAULT_THEME, load_themes, load_ui_state, save_ui_state, ui_state_path
from specmon.ui.throttle import Throttle

if TYPE_CHECKING:
    import argparse

MIN_WIDTH, MIN_HEIGHT = 80, 24
STATE_INTERVAL_S = 0.25   # state panes repaint at most 4 times a second
CHART_INTERVAL_S = 1.0    # the chart (a full plotext rebuild) at most once a second
# Every ready run's /metrics is read at the same moment of a shared second (ServingWatcher), and the answers come in
# over some tens of ms: a read's repaint waits this long for the others, one repaint for all of them (it was one for
# the first answer and another for the rest, twice the cards' work and frames at 64 runs).
SERVING_GATHER_S = 0.1
LOG_LINES = 2000          # lines kept per run; older ones are dropped
# The main screen's actions (from the key table) that a dialog on top blocks; quitting stays possible.
_SCREEN_ACTIONS = frozenset(spec.action.split("(")[0] for spec in KEYS) - {"quit", "command_palette"}


class Engine(Protocol):
    """What the app asks of the engine; `specmon.ui.bridge.EngineBridge` implements it over the RunManager."""

    async def start(self, target: MessagePump) -> None:
        """Begin watching runs; post rows, log lines and notices to `target` (the app) as Messages."""

    async def launch(self, profile: str) -> None: ...

    async def stop(self, profile: str) -> None: ...

    async def restart(self, profile: str) -> None: ...

    async def fleet_runs(self, scope: RunScope) -> list[RunView]:
        """The live runs in `scope`, checked now."""

    async def fleet_act(self, verb: str, views: Sequence[RunView]) -> list[RunOutcome]:
        """Stop or restart (`verb`) every run of `views`; each run's outcome."""

    async def sweep(self, request: SweepRequest) -> None:
        """Run the sweep, posting series and status as levels finish; cancelled, it posts its last status."""

    async def overlay(self, path: Path) -> None:
        """Read a result file and post it to the chart as a series."""

    async def experiment(self, request: ExperimentRequest) -> None:
        """Run (or resume) an experiment, posting its steps, series, status and verdict."""

    async def unfinished_experiments(self) -> set[str]:
        """The configured experiments that have an unfinished run to resume."""

    async def close(self, stop_started: bool) -> None:
        """Stop watching; with `stop_started`, stop the runs this session launched."""

    def watch_gpus(self, profile: str) -> None:
        """Watch where `profile`'s GPUs are (instead of the previous profile's), posting GpusUpdated to the app."""

    async def environment(self, profile: str) -> EnvReport:
        """The profile's environment report (with its live run's processes)."""

    async def difference(self, a: str, b: str) -> tuple[EnvReport, EnvReport, list[Difference]]:
        """Two profiles' reports and their differences."""

    def left_running(self) -> list[RunView]:
        """The runs still up that this session did not start (reattached)."""


class SpecmonApp(App[int]):
    """The specmon terminal UI."""

    CSS_PATH = "app.tcss"
    TITLE = "specmon"
    BINDINGS: ClassVar[list[BindingType]] = [*keys.BINDINGS]
    COMMANDS = App.COMMANDS | {SpecmonCommands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (WIDE_SCREEN, "-wide")]

    def __init__(
        self,
        config: Config,
        *,
        engine: Engine | None = None,
        preselect: str | None = None,
        demo: bool = False,
        state_path: Path | None = None,
        theme_dirs: list[Path] | None = None,
        log_lines: int = LOG_LINES,
    ) -> None:
        super().__init__()
        self.config = config
        self.engine = engine
        self.demo = demo
        self.state = screen.initial_state(list(config.profiles), preselect, log_lines)
        self.keymap = keys.validate_keymap(config.keys, lambda binding_id: config.where("keys", binding_id))
        # The GPU view's paging hint, on its head line with each board (every host's, every second).
        self._page_keys = f"{keys.key_of(self.keymap, 'prev_host')} {keys.key_of(self.keymap, 'next_host')} pages"
        self._env_below_of: tuple[str | None, str | None, str | None] | None = None   # what the pane's env is of
        self._gpus_of: tuple[str | None, str | None, str | None] | None = None   # what the GPU probe was asked for
        # Compared runs' set-ups are read in workers (the start-up probe takes seconds): the run ids being read.
        self._setups_reading: set[str] = set()
        self._state_path = state_path or ui_state_path()
        self._custom_themes: list[str] = []
        for theme in load_themes(theme_dirs).values():
            self.register_theme(theme)
            self._custom_themes.append(theme.name)
        saved = load_ui_state(self._state_path).get("theme")
        self.theme = saved if isinstance(saved, str) and saved in self.available_themes else (
            DEFAULT_THEME if DEFAULT_THEME in self.available_themes else "textual-dark"
        )
        self._state_throttle = Throttle(self, STATE_INTERVAL_S, self._paint_state)
        self._chart_throttle = Throttle(self, CHART_INTERVAL_S, self._paint_chart)
        self.first_frame_at: float | None = None
        self._heap = heap.Heap()
        self._quitting = False

    # ----------------------------------------------------------------- layout
    def compose(self) -> ComposeResult:
        yield Static(self._topbar_text(), id="topbar")
        with Vertical(id="main"):
            with Horizontal(id="top"):
                yield ServersPane(self.state.profiles, keys.key_of(self.keymap, "maximize"), keys.key_of(self.keymap, "stop"),
                                  id="servers", classes="pane")
                yield LogPane(self.state.log_lines, id="log", classes="pane")
                yield GpuEnvPane(id="gpuenv", classes="pane")
            yield SweepPane(id="sweep", classes="pane")
        yield Static("", id="too-small")
        yield KeysFooter()

    def _topbar_text(self) -> str:
        mode = "demo: q stops the servers" if self.demo else "q leaves servers running"
        return f"[b]specmon[/b] · {escape(self.config.source)} · {mode} · ? help"

    def on_mount(self) -> None:
        self.set_keymap(self.keymap)
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self._paint_state()
        self.query_one(SweepPane).show({}, None, "")
        self._show_log_of_selected()
        self.call_after_refresh(self._first_frame)
        for warning in self.config.warnings:
            self.notify(warning, severity="warning", timeout=15)
        if self.engine is not None:
            self._start_engine()
            self._watch_gpus_of_selected()

    def _first_frame(self) -> None:
        self.first_frame_at = time.monotonic()
        if not self.is_headless:   # a test's app (headless) shares its process with the others: left as it is
            self._heap.settle()
            self.set_interval(heap.QUIET_S, self._heap.tick)

    async def on_event(self, event: Event) -> None:
        if isinstance(event, Key):   # the collector's whole-heap walk waits for a pause in the typing
            self._heap.typed()
        await super().on_event(event)

    @work(group="engine", exit_on_error=False)
    async def _start_engine(self) -> None:
        assert self.engine is not None
        await self.engine.start(self)

    def on_resize(self, event: Resize) -> None:
        too_small = event.size.width < MIN_WIDTH or event.size.height < MIN_HEIGHT
        self.screen.set_class(too_small, "-too-small")
        self.query_one("#too-small", Static).update(
            f"Terminal too small: {event.size.width}×{event.size.height}.\n"
            f"specmon needs at least {MIN_WIDTH}×{MIN_HEIGHT}.\nq quits."
        )

    # ------------------------------------------------------- data from engine
    def update_rows(self, rows: Iterable[ServerRow]) -> None:
        """New state for some profiles; rings and toasts on ready/failed/stalled, repaints (throttled)."""
        self._say(screen.rows_changed(self.state, rows))
        self._read_setups()
        self._watch_gpus_of_selected()
        with contextlib.suppress(NoMatches):
            self._read_environment_below()
        self._state_throttle.request()

    def _say(self, toasts: Iterable[screen.Toast]) -> None:
        for toast in toasts:
            if toast.bell:
                self.bell()
            self.notify(toast.text, severity=toast.severity, timeout=toast.timeout)

    def _read_setups(self) -> None:
        """When two or more runs are compared, read each one's set-up once (the confound banner's env diff)."""
        if self.engine is None:
            return
        engine = self.engine
        for profile, run_id in screen.setups_to_read(self.state, self._setups_reading):
            self._setups_reading.add(run_id)

            async def read(profile: str = profile, run_id: str = run_id) -> None:
                try:
                    self.state.setups[profile] = (run_id, await engine.environment(profile))
                    self._state_throttle.request()
                except Exception as exc:   # the banner goes without this run's set-up; say why once
                    self.notify(f"{profile}: set-up not read for the comparison: {exc}", severity="warning",
                                timeout=8)
                finally:
                    self._setups_reading.discard(run_id)

            self.run_worker(read(), group=f"setup-{profile}", exit_on_error=False, description=f"set-up {profile}")

    def add_log(self, profile: str, entries: Sequence[LogEntry]) -> None:
        """New log lines of a profile's run (kept up to `log_lines`; shown when that profile is selected)."""
        if screen.log_added(self.state, profile, entries):
            self._state_throttle.request()

    def set_series(self, name: str, levels: Levels, crossover: CrossoverMark | None = None,
                   goodput_crossover: CrossoverMark | None = None) -> None:
        """Replace one chart series (a profile's live sweep or a result file) and the crossovers (of output
        throughput, and of goodput)."""
        screen.series_changed(self.state, name, levels, crossover, goodput_crossover)
        self._chart_throttle.request()

    @on(GpusUpdated)
    def _gpus_updated(self, message: GpusUpdated) -> None:
        row = screen.selected_row(self.state)
        with contextlib.suppress(NoMatches):
            self._show_host_page()
            self.query_one(GpuEnvPane).show_gpus(message, row.run_id if row is not None else None)
            self._read_environment_below()

    def _read_environment_below(self) -> None:
        """Under a board with no GPUs the pane shows the selected profile's environment: read it when the
        selection, its run or the run's state changes (the process view exists only while the server runs)."""
        pane = self.query_one(GpuEnvPane)
        key = screen.watch_key(self.state)
        if self.engine is not None and pane.wants_env and key != self._env_below_of:
            self._env_below_of = key
            self._read_environment("env", below=True)

    def _watch_gpus_of_selected(self) -> None:
        """Ask for the selected profile's GPUs when the selection, its run or the run's state changes (a Slurm
        job's GPUs are its node's, known once the job runs)."""
        key, selected = screen.watch_key(self.state), self.state.selected
        if self.engine is not None and selected in self.config.profiles and key != self._gpus_of:
            self._gpus_of = key
            self.engine.watch_gpus(selected)

    def set_sweep_status(self, status: str, running: bool, live: tuple[str, SweepProgress] | None = None) -> None:
        """The one-line status of the sweep (shown in the pane title), whether one is running and, during a level,
        the swept profile and the client's view of the level (shown beside that server's serving view)."""
        screen.sweep_status_changed(self.state, status, running, live)
        self._chart_throttle.request()
        self._state_throttle.request()

    def set_experiment_steps(self, steps: Sequence[str]) -> None:
        """The experiment's step list (newest last), shown beside the chart while there is one."""
        self.state.experiment_steps = list(steps)
        self._chart_throttle.request()

    @on(messages.RowsChanged)
    def _rows_changed(self, message: messages.RowsChanged) -> None:
        self.update_rows(message.rows)

    @on(messages.ServingChanged)
    def _serving_changed(self, message: messages.ServingChanged) -> None:
        shown_now = False
        for update in message.updates:
            self._say(screen.serving_changed(self.state, update))
            shown_now |= update.profile not in self.state.held
        due = screen.release_held(self.state, time.monotonic()) if not shown_now else None
        self._state_throttle.request(gather=SERVING_GATHER_S if due is None else due)

    @on(messages.LogAdded)
    def _log_added(self, message: messages.LogAdded) -> None:
        self.add_log(message.profile, message.entries)

    @on(messages.LogCleared)
    def _log_cleared(self, message: messages.LogCleared) -> None:
        if screen.log_cleared(self.state, message.profile):
            self._show_log_of_selected()

    @on(messages.SeriesChanged)
    def _series_changed(self, message: messages.SeriesChanged) -> None:
        self.set_series(message.name, message.levels, crossover=message.crossover,
                        goodput_crossover=message.goodput_crossover)

    @on(messages.ChartCleared)
    def _chart_cleared(self) -> None:
        screen.chart_cleared(self.state)
        self._chart_throttle.request()

    @on(messages.SweepStatusChanged)
    def _sweep_status_changed(self, message: messages.SweepStatusChanged) -> None:
        self.set_sweep_status(message.status, message.running, message.live)

    @on(messages.GridVerdictChanged)
    def _grid_verdict_changed(self, message: messages.GridVerdictChanged) -> None:
        self.state.grid_verdict = (message.verdict, message.brief)
        self._chart_throttle.request()

    @on(messages.ExperimentStepsChanged)
    def _experiment_steps_changed(self, message: messages.ExperimentStepsChanged) -> None:
        self.set_experiment_steps(message.steps)

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """A toast of plain text: what specmon says carries server error bodies, paths and `[sweep]` names, which
        Textual would read as markup (a `[/INST]` in a server's error crashed the app; `[sweep]` vanished)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    @on(messages.EngineNotice)
    def _engine_notice(self, message: messages.EngineNotice) -> None:
        if message.bell:
            self.bell()
        self.notify(message.text, title=message.title, severity=message.severity, timeout=message.timeout)

    # ---------------------------------------------------------------- painting
    def flush(self) -> None:
        """Paint everything pending now, throttles aside (screenshots and tests want the latest state); a fleet's
        figures show at their own pace still."""
        self._paint_state()
        self._paint_chart()

    def _paint_state(self) -> None:
        # A throttled repaint can fire while the app shuts down, after the panes are gone: nothing to paint then.
        state = self.state
        # A fleet's held figures go with this frame if they are due, or nearly (one frame, not two close together).
        due = screen.release_held(state, time.monotonic(), early=RIDE_S)
        if due is not None:
            self._state_throttle.request(gather=due)
        with contextlib.suppress(NoMatches):
            self.query_one(ServersPane).show(screen.shown_rows(state), state.selected, screen.shown_setups(state),
                                             state.serving, state.grouping)
            live = state.sweep_live   # the level in progress beside the swept server's own view of it
            self.query_one(SweepPane).show_live("" if live is None else sweep_live_line(live[1],
                                                                                        state.serving.get(live[0])))
            if state.pending_log:
                self.query_one(LogPane).append(screen.take_pending_log(state))
            self.query_one(GpuEnvPane).ride_along()

    def _paint_chart(self) -> None:
        state = self.state
        with contextlib.suppress(NoMatches):
            pane = self.query_one(SweepPane)
            pane.show(state.series, screen.shown_crossover(state), state.sweep_status, state.chart_metric.value,
                      state.grid_verdict)
            pane.show_steps(state.experiment_steps)

    def _show_log_of_selected(self) -> None:
        self.state.pending_log.clear()
        label = self.state.selected or ""
        with contextlib.suppress(NoMatches):  # a resize can arrive while the app shuts down
            self.query_one(LogPane).show(label, list(self.state.logs.get(label, ())))

    # ----------------------------------------------------------------- actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a dialog is open, the main screen's keys do nothing: a key the dialog does not take (a path
        typed after its input lost focus, say) must not launch, sweep or stop behind it. Quit always works."""
        if action in _SCREEN_ACTIONS and len(self.screen_stack) > 1:
            return None  # shown dimmed in the footer below, and not run
        return True

    def action_select(self, step: int) -> None:
        # The cards shown, as they stand (a fleet's failed runs first; a filter hides some).
        profile = screen.stepped(self.state, self.query_one(ServersPane).order, step)
        if profile is not None:
            self.select_profile(profile)

    def action_host(self, step: int) -> None:
        """The first card of the next (or previous) host: the GPU view, which shows the selected card's host, pages
        through the fleet's hosts."""
        profile = screen.host_stepped(self.state, self.query_one(ServersPane).order, step)
        if profile is not None:
            self.select_profile(profile)

    def _show_host_page(self) -> None:
        """The GPU view's head line: which of the fleet's hosts it shows, and the keys that page."""
        page = screen.host_page(self.state, self.query_one(ServersPane).order)
        self.query_one(GpuEnvPane).set_page(f"{page} · {self._page_keys}" if page else "")

    def select_profile(self, profile: str) -> None:
        """Make `profile` the selected one: its card highlighted, its log shown."""
        if not screen.select(self.state, profile):
            return
        self._paint_state()
        with contextlib.suppress(NoMatches):
            self.query_one(ServersPane).reveal(profile)
        self._show_log_of_selected()
        self._watch_gpus_of_selected()
        self._show_host_page()
        if self.query_one(GpuEnvPane).view != "gpus":
            self._read_environment()
        else:
            self._read_environment_below()

    def action_gpuenv_view(self) -> None:
        """Cycle the GPU/env pane: GPUs, the selected profile's environment, its diff from the previous one.

        Below WIDE_SCREEN columns the pane has no room beside the log and is hidden: the first press opens it full
        screen as it is (esc closes it), the next ones cycle its views there."""
        pane = self.query_one(GpuEnvPane)
        if self.screen.has_class("-narrow") and self.screen.maximized is not pane:
            self.screen.maximize(pane, container=False)
            pane.border_subtitle = (f"{keys.key_of(self.keymap, 'gpuenv')} cycles · "
                                    f"{keys.key_of(self.keymap, 'restore')} closes")
            return
        pane.set_view(VIEWS[(VIEWS.index(pane.view) + 1) % len(VIEWS)])
        if pane.view != "gpus":
            self._read_environment()
        else:
            self._read_environment_below()

    def _read_environment(self, view: str | None = None, below: bool = False) -> None:
        """Read the selected profile's env (or diff) view for the pane; `below`: for under a board with no GPUs."""
        pane = self.query_one(GpuEnvPane)
        if not self._need_engine() or self.state.selected is None:
            return
        engine, selected, view = self.engine, self.state.selected, view or pane.view
        assert engine is not None
        other = screen.diff_partner(self.state)

        async def read() -> None:
            try:
                if view == "env":
                    text = render_env(await engine.environment(selected), pane.content_size.width)
                elif other is None:
                    text = "[dim]diff: only one profile to compare[/]"
                else:
                    text = render_diff(*await engine.difference(selected, other))
            except Exception as exc:   # an unreachable host, a broken python: shown in the pane
                text = f"[$error]{escape(str(exc))}[/]"
            if self.state.selected != selected:
                return
            if below:
                pane.show_env_below(text)
            elif pane.view == view:
                pane.show(text)

        self.run_worker(read(), group="gpuenv", exclusive=True, exit_on_error=False, description=f"{view} {selected}")

    @on(RunCard.Clicked)
    def _card_clicked(self, event: RunCard.Clicked) -> None:
        self.select_profile(event.profile)

    def _need_engine(self) -> bool:
        if self.engine is None:
            self.notify("no engine attached (read-only view)", severity="warning")
            return False
        return True

    def action_launch(self) -> None:
        row = screen.selected_row(self.state)
        if row is None or not self._need_engine():
            return
        if (refusal := screen.launch_refusal(row)) is not None:
            self.notify(refusal, severity="warning")
            return
        self._engine_call("launch", row.profile)

    def action_stop(self) -> None:
        row = screen.selected_row(self.state)
        if row is None or not self._need_engine():
            return
        if (refusal := screen.stop_refusal(row)) is not None:
            self.notify(refusal, severity="warning")
            return
        self.push_screen(
            ConfirmScreen(f"Stop {row.profile} (run {row.run_id})?"),
            lambda yes: self._engine_call("stop", row.profile) if yes else None,
        )

    def action_restart(self) -> None:
        row = screen.selected_row(self.state)
        if row is None or not self._need_engine():
            return
        self.push_screen(
            ConfirmScreen(f"Restart {row.profile}? The current load is lost."),
            lambda yes: self._engine_call("restart", row.profile) if yes else None,
        )

    def action_fleet(self) -> None:
        """Stop or restart every live run of the selected card's profile or host: the runs of both are looked up,
        listed in a dialog that chooses between them, and acted on once confirmed."""
        row = screen.selected_row(self.state)
        if row is None or not self._need_engine():
            return
        engine = self.engine
        assert engine is not None
        scopes = [RunScope(profile=row.profile), RunScope(host=row.host)]

        async def offer() -> None:
            found = [await engine.fleet_runs(scope) for scope in scopes]
            if not any(found):
                self.notify(f"no live run of {scopes[0].describe()} or {scopes[1].describe()}", severity="warning")
                return

            def chosen(choice: FleetChoice | None) -> None:
                if choice is not None:
                    self.run_worker(act(scopes[choice.scope], choice.verb, found[choice.scope]), group="fleet",
                                    exit_on_error=False, description=f"{choice.verb} {scopes[choice.scope].describe()}")

            lines = [[f"{v.profile}  {v.run_id}  {v.host}  {'failed, still running' if v.still_running else v.state}"
                      for v in views] for views in found]
            self.push_screen(FleetScreen([(scope.describe(), runs) for scope, runs in zip(scopes, lines)],
                                         chosen=0 if found[0] else 1), chosen)

        async def act(scope: RunScope, verb: str, views: list[RunView]) -> None:
            self.notify(f"{verb} {scope.describe()}: {len(views)} run{'s' if len(views) > 1 else ''}…")
            outcomes = await engine.fleet_act(verb, views)
            failed = [o.text() for o in outcomes if not o.ok]
            self.notify(f"{verb} {scope.describe()}: {bulk_summary(outcomes)}" + "".join(f"\n{t}" for t in failed),
                        severity="warning" if failed else "information", timeout=10 if failed else 5)

        self.run_worker(offer(), group="fleet-form", exclusive=True, exit_on_error=False, description="fleet form")

    def _engine_call(self, verb: str, profile: str) -> None:
        assert self.engine is not None
        method = getattr(self.engine, verb)

        async def call() -> None:
            try:
                await method(profile)
            except Exception as exc:  # an engine refusal (busy port, ...) is shown, never fatal to the UI
                self.notify(f"{verb} {profile}: {exc}", severity="error", timeout=10)

        self.run_worker(call(), group=f"server-{profile}", exit_on_error=False, description=f"{verb} {profile}")

    def action_sweep(self) -> None:
        if not self._need_engine():
            return
        choice = screen.sweep_choice(self.state, self.demo)
        if isinstance(choice, str):
            self.notify(choice, severity="warning")
            return
        self.push_screen(SweepFormScreen(choice.ready, choice.checked, self.config.sweep), self._start_sweep)

    def _start_sweep(self, request: SweepRequest | None) -> None:
        if request is None or self.engine is None:
            return
        engine = self.engine

        async def sweep() -> None:
            try:
                await engine.sweep(request)
            except Exception as exc:
                # Posted, not set: it must come after the sweep's own updates still queued.
                self.post_message(messages.SweepStatusChanged(f"failed: {exc}", running=False))
                self.notify(f"sweep failed: {exc}", severity="error", timeout=10)

        self.state.sweeping = True
        self.run_worker(sweep(), group="sweep", exclusive=True, exit_on_error=False, description="sweep")

    def action_cancel_sweep(self) -> None:
        if not self.state.sweeping:
            self.notify("no sweep is running", severity="warning")
            return
        running = [w for w in self.workers if w.group in ("sweep", "experiment") and not w.is_finished]
        for worker in running:
            worker.cancel()
        # A cancelled sweep posts its last chart, then its status: `sweeping` ends once the chart is final.
        self.set_sweep_status("cancelling…" if running else "cancelled (finished levels kept in the result file)",
                              running=bool(running))

    def action_experiment(self) -> None:
        if not self._need_engine():
            return
        if not self.config.experiments:
            self.notify(f"no [experiments.NAME] table in {self.config.source}", severity="warning")
            return
        if self.state.sweeping:
            self.notify("a sweep or experiment is already running (c cancels it)", severity="warning")
            return

        def chosen(request: ExperimentRequest | None) -> None:
            if request is not None:
                self.start_experiment(request.name, request.resume)

        engine = self.engine
        assert engine is not None

        async def offer() -> None:   # resume is offered only where there is something to resume
            unfinished = await engine.unfinished_experiments()
            self.push_screen(ExperimentScreen(list(self.config.experiments.values()), unfinished), chosen)

        self.run_worker(offer(), group="experiment-form", exclusive=True, exit_on_error=False,
                        description="experiment form")

    def start_experiment(self, name: str, resume: bool = False) -> None:
        """Run (or resume) experiment `name` in a worker; its steps and the overlay build up in the Sweep pane."""
        if self.engine is None or self.state.sweeping:
            self.notify("a sweep or experiment is already running (c cancels it)", severity="warning")
            return
        engine = self.engine
        request = ExperimentRequest(name, resume)

        async def run() -> None:
            try:
                await engine.experiment(request)
            except Exception as exc:
                # The runner's errors name the experiment already ("experiment demo: ..."): said once.
                reason = str(exc).removeprefix(f"experiment {name}: ")
                self.post_message(messages.SweepStatusChanged(f"experiment {name} failed: {reason}", running=False))
                self.notify(f"experiment {name}: {reason}", severity="error", timeout=10)

        self.state.sweeping = True
        self.run_worker(run(), group="experiment", exclusive=True, exit_on_error=False, description=f"experiment {name}")

    def action_overlay(self) -> None:
        if not self._need_engine():
            return
        engine = self.engine
        assert engine is not None
        self.push_screen(OverlayScreen(engine.overlay))

    def action_filter(self) -> None:
        self.query_one(LogPane).open_filter()

    def action_filter_runs(self) -> None:
        self.query_one(ServersPane).open_filter()

    def action_cycle_grouping(self) -> None:
        """Group the Servers cards by host, by profile, or not; the selected card stays in view."""
        screen.grouping_cycled(self.state)
        self._paint_state()
        if self.state.selected is not None:   # once the moved cards and new headers are laid out
            self.query_one(ServersPane).reveal_after_layout(self.state.selected)

    @on(ServersPane.FilterChanged)
    def _runs_filtered(self) -> None:
        """A selected card the filter hides gives way to the first one shown (its log and GPUs with it)."""
        order = self.query_one(ServersPane).order
        if order and self.state.selected not in order:
            self.select_profile(order[0])
        self._show_host_page()   # the hosts the GPU view pages through are those of the cards shown

    @on(LogPane.FilterChanged)
    @on(LogPane.WidthChanged)
    def _log_needs_redraw(self) -> None:
        self._show_log_of_selected()

    def action_toggle_follow(self) -> None:
        pane = self.query_one(LogPane)
        pane.set_follow(not pane.follow)

    def _focused_pane(self) -> Widget:
        node: Any = self.focused
        while node is not None and not (isinstance(node, Widget) and node.has_class("pane")):
            node = node.parent
        return node if node is not None else self.query_one(ServersPane)

    def action_maximize(self) -> None:
        if self.screen.maximized is not None:
            self._minimize()
        else:
            self.screen.maximize(self._focused_pane(), container=False)
        self._paint_state()   # a maximised Servers pane shows failure reasons whole

    def action_restore(self) -> None:
        if self.query_one(LogPane).close_filter() or self.query_one(ServersPane).clear_filter():
            return
        if self.screen.maximized is not None:
            self._minimize()
            self._paint_state()

    def _minimize(self) -> None:
        self.screen.minimize()
        self.query_one(GpuEnvPane).border_subtitle = ""   # the hint of a pane opened full screen by its key

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.keymap))

    @property
    def theme_names(self) -> list[str]:
        """The themes `t` cycles through: specmon's own (themes/*.toml), else Textual's."""
        return self._custom_themes or sorted(self.available_themes)

    def action_toggle_goodput(self) -> None:
        """Chart goodput (requests/s meeting the sweep's SLO targets) instead of output tok/s, or back."""
        self._say([screen.chart_metric_toggled(self.state)])
        self._chart_throttle.request()

    def action_next_theme(self) -> None:
        names = self.theme_names
        index = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(index + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def _remember_theme(self, theme: Theme) -> None:
        state = load_ui_state(self._state_path)
        state["theme"] = theme.name
        try:
            save_ui_state(self._state_path, state)
        except OSError as exc:  # a read-only home must not break the app; say it once
            self.notify(f"cannot save theme choice: {exc}", severity="warning")

    async def action_quit(self) -> None:
        self._stop_and_exit(stop_started=self.demo)

    def action_quit_and_stop(self) -> None:
        self._stop_and_exit(stop_started=True)

    def _stop_and_exit(self, stop_started: bool) -> None:
        # In a worker: the app keeps painting while servers stop (cards say STOPPING, the toast counts them).
        if self._quitting:
            return
        self._quitting = True
        self.workers.cancel_group(self, "sweep")
        self.workers.cancel_group(self, "experiment")

        async def close() -> None:
            note = None
            if self.engine is not None:
                try:
                    await self.engine.close(stop_started)
                except Exception as exc:
                    self.notify(f"shutdown: {exc}", severity="error")
                if stop_started:   # said on the terminal once the screen is gone
                    note = left_running_note([(v.profile, v.run_id, v.host if v.host != "local" else "")
                                              for v in self.engine.left_running()])
            self.exit(0, message=note)

        self.run_worker(close(), group="quit", exit_on_error=False, description="quit")


def run_tui(args: argparse.Namespace) -> int:
    """`specmon [--config FILE] [--profile NAME]`: open the TUI on the configured profiles."""
    from specmon.model.config import load_config

    config = load_config(getattr(args, "config", None))
    preselect = getattr(args, "profile", None)
    if preselect is not None:
        config.profile(preselect)  # an unknown name is a UserError before the screen opens
    return run_app(config, preselect=preselect)


def run_app(config: Config, *, demo: bool = False, preselect: str | None = None,
            results_dir: Path = Path("results")) -> int:
    """Run the TUI on `config` with the real engine; in demo mode every profile is launched at start."""
    keys.validate_keymap(config.keys, lambda binding_id: config.where("keys", binding_id))  # a bad [keys] table fails before the screen opens
    from specmon.ui.bridge import EngineBridge

    engine = EngineBridge(config, autolaunch=list(config.profiles) if demo else [], results_dir=results_dir)
    app = SpecmonApp(config, engine=engine, preselect=preselect, demo=demo)
    return app.run() or 0
