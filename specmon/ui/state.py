"""What the TUI shows, as plain data, and the rules that change it: no Textual here (a layer contract says so).

`ScreenState` holds every pane's data: the runs' rows, their logs, the chart's series, the sweep's status, the
serving views, the selection. Each update function takes the state and what arrived (from the engine, or a key),
changes the state and returns what the screen must say beyond repainting (toasts, a bell). The app
(`specmon.ui.app`) only routes Messages and keys to these functions and hands the state to its widgets, so every
rule here is tested without a screen (tests/unit/test_screen_state.py).
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from specmon.model.charts.levelrow import LevelRow
from specmon.model.machine.env import EnvReport
from specmon.model.runs.fleet import fleet_summary, needs_attention
from specmon.model.runs.runstatus import ACTIVE, BROKEN, RunStatus
from specmon.model.server.serving import ServingUpdate
from specmon.model.sweeps.sweepstats import SweepProgress
from specmon.ui.format import transitions
from specmon.ui.rows import CrossoverMark, LogEntry, ServerRow

COMPARED_STATES = (RunStatus.LOADING, RunStatus.READY)   # runs in these states are the ones being compared
# From this many profiles on, the screen shows a fleet: a summary line heads the Servers pane, runs that need a look
# come first, and the runs' /metrics figures are shown every FLEET_FIGURES_S, as the GPU view's are (see
# `serving_changed`). Fewer cards all fit on screen, keep the order of the profiles file, and show each read.
FLEET_MIN = 9
FLEET_FIGURES_S = 2.0

Severity = Literal["information", "warning", "error"]


@dataclass(frozen=True)
class Toast:
    """A message for the corner of the screen; `bell`: ring the terminal too."""

    text: str
    severity: Severity = "information"
    timeout: float | None = None
    bell: bool = False


class Grouping(enum.Enum):
    """How the Servers pane groups its cards (the G key cycles them): not at all, by host, by profile family."""

    NONE = "none"
    HOST = "host"
    PROFILE = "profile"


class ChartMetric(enum.Enum):
    """The Sweep chart's y axis (the g key)."""

    THROUGHPUT = "throughput"
    GOODPUT = "goodput"


@dataclass
class ScreenState:
    """Every pane's data. `logs` keeps `log_lines` lines per profile; `pending_log` holds the selected profile's
    lines that arrived since the Log pane was last painted."""

    profiles: list[str]
    selected: str | None
    log_lines: int
    previous: str | None = None   # the profile selected before (what the diff view compares against)
    rows: dict[str, ServerRow] = field(default_factory=dict)
    logs: dict[str, deque[LogEntry]] = field(default_factory=dict)
    pending_log: list[LogEntry] = field(default_factory=list)
    series: dict[str, list[LevelRow]] = field(default_factory=dict)
    crossover: CrossoverMark | None = None
    goodput_crossover: CrossoverMark | None = None
    chart_metric: ChartMetric = ChartMetric.THROUGHPUT
    grouping: Grouping = Grouping.NONE
    grid_verdict: tuple[str, str] = ("", "")   # a tuning grid's bands so far (in full, brief), under the chart
    sweep_status: str = ""
    sweeping: bool = False
    sweep_live: tuple[str, SweepProgress] | None = None   # during a level: the swept profile and the client's view
    experiment_steps: list[str] = field(default_factory=list)
    serving: dict[str, ServingUpdate] = field(default_factory=dict)   # profile -> its ready run's /metrics view
    held: dict[str, ServingUpdate] = field(default_factory=dict)   # a fleet's newer views, not shown yet
    figures_at: float = float("-inf")   # when the held views were last shown (the app's clock)
    # Each compared run's set-up for the confound banner: profile -> (run id, report).
    setups: dict[str, tuple[str, EnvReport]] = field(default_factory=dict)


def initial_state(profiles: Sequence[str], preselect: str | None, log_lines: int) -> ScreenState:
    """The screen before anything arrived: every profile idle, `preselect` (else the first profile) selected."""
    names = list(profiles)
    selected = preselect if preselect in names else (names[0] if names else None)
    return ScreenState(profiles=names, selected=selected, log_lines=log_lines,
                       rows={name: ServerRow(profile=name) for name in names},
                       logs={name: deque(maxlen=log_lines) for name in names})


# ------------------------------------------------------------------- from the engine
def rows_changed(state: ScreenState, rows: Iterable[ServerRow]) -> list[Toast]:
    """New rows for some profiles. A new failure's whole reason goes to the profile's log (the card cuts it);
    a run that just became ready, failed or stalled rings and says so."""
    before = {p: (r.state, r.stalled) for p, r in state.rows.items() if r.run_id}
    for row in rows:
        old = state.rows.get(row.profile)
        if row.state == RunStatus.FAILED and row.failure and (old is None or old.failure != row.failure):
            log_added(state, row.profile, [LogEntry(f"✗ FAILED: {row.failure}", "error")])
        state.rows[row.profile] = row
    after = {p: (r.state, r.stalled) for p, r in state.rows.items() if r.run_id}
    toasts = []
    for profile, what in transitions(before, after):
        row = state.rows[profile]
        severity: Severity = "information" if what == RunStatus.READY else ("warning" if what == "stalled" else "error")
        text = f"{profile}: {what.upper()}" + (f": {row.failure}" if row.failure and what != RunStatus.READY else "")
        toasts.append(Toast(text, severity, timeout=8, bell=True))
    return toasts


def log_added(state: ScreenState, profile: str, entries: Sequence[LogEntry]) -> bool:
    """New log lines of a profile's run; true when they are the selected profile's (the Log pane repaints)."""
    state.logs.setdefault(profile, deque(maxlen=state.log_lines)).extend(entries)
    if profile != state.selected:
        return False
    state.pending_log.extend(entries)
    if len(state.pending_log) > state.log_lines:   # a flood between repaints: keep only what could be shown
        del state.pending_log[: -state.log_lines]
    return True


def log_cleared(state: ScreenState, profile: str) -> bool:
    """A new run of `profile` started: its old log goes; true when the Log pane must be redrawn."""
    state.logs[profile] = deque(maxlen=state.log_lines)
    if profile != state.selected:
        return False
    state.pending_log.clear()
    return True


def take_pending_log(state: ScreenState) -> list[LogEntry]:
    """The selected profile's lines not yet painted (and none pending after)."""
    batch, state.pending_log = state.pending_log, []
    return batch


def series_changed(state: ScreenState, name: str, levels: Sequence[LevelRow], crossover: CrossoverMark | None,
                   goodput_crossover: CrossoverMark | None) -> None:
    """One chart series replaced (a profile's live sweep or a result file), with the crossovers of throughput
    and of goodput."""
    state.series[name] = list(levels)
    state.crossover = crossover
    state.goodput_crossover = goodput_crossover


def chart_cleared(state: ScreenState) -> None:
    state.series.clear()
    state.crossover = state.goodput_crossover = None
    state.grid_verdict = ("", "")


def sweep_status_changed(state: ScreenState, status: str, running: bool,
                         live: tuple[str, SweepProgress] | None = None) -> None:
    state.sweep_status = status
    state.sweeping = running
    state.sweep_live = live
    if live is not None:   # the swept run's figures are current, beside the level's
        _show_latest(state, live[0])


def serving_changed(state: ScreenState, update: ServingUpdate) -> list[Toast]:
    """A ready run's new /metrics view; each alert it raised rings once.

    In a fleet, a view that only brings newer figures is held (`held`) until `release_held`: each read (every run,
    every second) changed the cards in view, and drawing a frame of them every second was a fifth of the idle app's
    CPU at 64 runs. The swept run's view, a run's first view or a new run's, and a view with an alert or a note are
    shown at once."""
    shown = state.serving.get(update.profile)
    swept = state.sweep_live is not None and state.sweep_live[0] == update.profile
    if (len(state.profiles) >= FLEET_MIN and shown is not None and shown.run_id == update.run_id and not swept
            and not update.raised and update.note is None and update.alerts == shown.alerts):
        state.held[update.profile] = update
    else:
        state.serving[update.profile] = update
        state.held.pop(update.profile, None)
    return [Toast(f"{update.profile}: {alert}", "warning", timeout=10, bell=True) for alert in update.raised]


def _show_latest(state: ScreenState, profile: str) -> None:
    """`profile`'s held view, if any, shown now."""
    if profile in state.held:
        state.serving[profile] = state.held.pop(profile)


def release_held(state: ScreenState, now: float, early: float = 0.0) -> float | None:
    """Show the held views if FLEET_FIGURES_S has passed since they were last shown, or will within `early` seconds
    (a repaint now takes them along, instead of another frame soon). The seconds until the views then held are due;
    None when none are."""
    if state.held and now >= state.figures_at + FLEET_FIGURES_S - early:
        state.serving.update(state.held)
        state.held.clear()
        state.figures_at = now
    return max(0.0, state.figures_at + FLEET_FIGURES_S - now) if state.held else None


def setups_to_read(state: ScreenState, reading: set[str]) -> list[tuple[str, str]]:
    """(profile, run id) of each compared run whose set-up is neither known nor being read: read while two or
    more runs are compared (loading or ready), for the confound banner."""
    compared = [r for r in state.rows.values() if r.state in COMPARED_STATES and r.run_id]
    if len(compared) < 2:
        return []
    wanted = []
    for row in compared:
        known = state.setups.get(row.profile)
        if row.run_id is not None and (known is None or known[0] != row.run_id) and row.run_id not in reading:
            wanted.append((row.profile, row.run_id))
    return wanted


# ------------------------------------------------------------------- what the panes show
def shown_rows(state: ScreenState) -> list[ServerRow]:
    return [state.rows[p] for p in state.profiles if p in state.rows]


def shown_setups(state: ScreenState) -> dict[str, EnvReport]:
    """The set-ups of the runs as they stand now (one read for an earlier run of the profile is not shown)."""
    return {p: report for p, (run_id, report) in state.setups.items()
            if p in state.rows and state.rows[p].run_id == run_id}


def shown_crossover(state: ScreenState) -> CrossoverMark | None:
    return state.goodput_crossover if state.chart_metric is ChartMetric.GOODPUT else state.crossover


def selected_row(state: ScreenState) -> ServerRow | None:
    return state.rows.get(state.selected) if state.selected else None


def watch_key(state: ScreenState) -> tuple[str | None, str | None, str | None]:
    """What the GPU and environment views are of: the selection, its run and the run's state (a Slurm job's
    GPUs are its node's, known once it runs; a process view exists only while the server runs)."""
    row = selected_row(state)
    return (state.selected, row.run_id if row else None, row.state if row else None)


def diff_partner(state: ScreenState) -> str | None:
    """The profile the diff view compares the selected one with: the one selected before, else the first other."""
    others = [p for p in state.profiles if p != state.selected]
    return state.previous if state.previous in others else (others[0] if others else None)


# ------------------------------------------------------------------- keys
def select(state: ScreenState, profile: str) -> bool:
    """Select `profile` (the one before becomes `previous`); false when it already was selected."""
    if profile == state.selected:
        return False
    state.previous, state.selected = state.selected, profile
    state.pending_log.clear()
    _show_latest(state, profile)   # the run just selected shows its latest figures
    return True


def stepped(state: ScreenState, order: Sequence[str], step: int) -> str | None:
    """The profile `step` cards away from the selected one in `order` (the cards shown, as they stand), wrapping;
    when a filter hides the selected one, the first card shown (or the last, going back)."""
    if not order:
        return None
    if state.selected not in order:
        return order[0 if step > 0 else -1]
    return order[(order.index(state.selected) + step) % len(order)]


def launch_refusal(row: ServerRow) -> str | None:
    """Why `row`'s profile cannot be launched now, or None."""
    return f"{row.profile} is already {row.state}" if row.state in ACTIVE else None


def stop_refusal(row: ServerRow) -> str | None:
    """Why there is nothing to stop for `row`'s profile, or None."""
    if row.run_id is None or (row.state in (RunStatus.STOPPED, *BROKEN, "idle") and not row.still_running):
        return f"{row.profile} has no running server"
    return None


@dataclass(frozen=True)
class SweepChoice:
    """The sweep form's offer: the ready profiles, and those ticked at first."""

    ready: list[str]
    checked: list[str]


def sweep_choice(state: ScreenState, demo: bool) -> SweepChoice | str:
    """What the sweep form offers, or why no sweep can start: the ready profiles, all ticked in the demo or when
    the selected one is not ready, else only the selected one."""
    if state.sweeping:
        return "a sweep is already running (c cancels it)"
    ready = [p for p in state.profiles if state.rows[p].state == RunStatus.READY]
    if not ready:
        return "no ready server to sweep"
    return SweepChoice(ready, ready if demo or state.selected not in ready else [state.selected])


def chart_metric_toggled(state: ScreenState) -> Toast:
    """Chart goodput (requests/s meeting the sweep's SLO targets) instead of output tok/s, or back."""
    goodput = state.chart_metric is ChartMetric.THROUGHPUT
    state.chart_metric = ChartMetric.GOODPUT if goodput else ChartMetric.THROUGHPUT
    if goodput and not any(lv.goodput is not None for levels in state.series.values() for lv in levels):
        return Toast("chart: goodput, but no sweep shown has any (sweep with --slo, or set [sweep] slo)", "warning",
                     timeout=5)
    return Toast(f"chart: {'goodput (req/s meeting the SLO)' if goodput else 'output tok/s'}", timeout=2)


# ------------------------------------------------------------------- groups of cards
_NUMBERED = re.compile(r"^(.*?[^-_.\d])[-_.]*\d+$")   # "llama-02" -> "llama"; "eagle3" -> "eagle"


def profile_family(profile: str) -> str:
    """The group of a profile when the cards are grouped by profile: its name less a trailing number (`llama-02`
    and `llama-17` are both `llama`), as a fleet's profiles are numbered copies of a few set-ups."""
    match = _NUMBERED.match(profile)
    return match.group(1) if match else profile


@dataclass(frozen=True)
class CardGroup:
    """One group of the Servers pane: its name (a host or a profile family), its cards top to bottom, and its
    header line (`gpu06 · 3 ready · 1 failed`)."""

    name: str
    profiles: tuple[str, ...]
    header: str


def card_groups(rows: Sequence[ServerRow], order: Sequence[str], grouping: Grouping,
                width: int | None = None) -> list[CardGroup]:
    """The cards of `order` (those shown, top to bottom) in their groups. A group keeps its cards in `order`'s
    order (so runs that need a look stay first within it); groups holding such a run come first, the rest in the
    order their first card has. A multi-node run is in its first node's host's group. Ungrouped: one group with no
    header. `width` limits the headers as the summary line is limited."""
    by_profile = {row.profile: row for row in rows}
    if grouping is Grouping.NONE:
        return [CardGroup("", tuple(order), "")]
    members: dict[str, list[str]] = {}
    for profile in order:
        row = by_profile.get(profile) or ServerRow(profile=profile)
        name = row.host if grouping is Grouping.HOST else profile_family(profile)
        members.setdefault(name, []).append(profile)

    def trouble(profiles: Sequence[str]) -> bool:
        return any(needs_attention(r.state, r.stalled) for p in profiles if (r := by_profile.get(p)) is not None)

    names = sorted(members, key=lambda name: not trouble(members[name]))   # stable: otherwise as they came
    groups = []
    for name in names:
        profiles = members[name]
        counts = fleet_summary(((r.state, r.stalled) for p in profiles if (r := by_profile.get(p)) is not None),
                               None if width is None else max(1, width - len(name) - 3))
        groups.append(CardGroup(name, tuple(profiles), f"{name} · {counts}" if counts else name))
    return groups


def grouping_cycled(state: ScreenState) -> Grouping:
    """The next grouping of the Servers cards: none -> by host -> by profile -> none (the pane's title says it)."""
    kinds = list(Grouping)
    state.grouping = kinds[(kinds.index(state.grouping) + 1) % len(kinds)]
    return state.grouping


# ------------------------------------------------------------------- hosts (the GPU view pages by host)
def _natural(name: str) -> list[tuple[int, int | str]]:
    """A sort key that puts gpu2 before gpu10."""
    return [(0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part]


def card_hosts(state: ScreenState, order: Sequence[str]) -> list[str]:
    """The hosts of the cards shown (`order`), sorted by name (gpu2 before gpu10): the GPU view's pages."""
    hosts = {state.rows[p].host for p in order if p in state.rows}
    return sorted(hosts, key=_natural)


def host_page(state: ScreenState, order: Sequence[str]) -> str:
    """Where the selected card's host is among the hosts of the cards shown: `host 3 of 16` (empty with one host,
    or none selected)."""
    hosts = card_hosts(state, order)
    row = selected_row(state)
    if len(hosts) < 2 or row is None or row.host not in hosts:
        return ""
    return f"host {hosts.index(row.host) + 1} of {len(hosts)}"


def host_stepped(state: ScreenState, order: Sequence[str], step: int) -> str | None:
    """The first card (in `order`) of the host `step` hosts away from the selected card's, wrapping: `]` and `[`
    page the GPU view through the fleet's hosts (the view shows the selected card's host)."""
    hosts = card_hosts(state, order)
    if not hosts:
        return None
    row = selected_row(state)
    if row is None or row.host not in hosts:
        target = hosts[0 if step > 0 else -1]
    else:
        target = hosts[(hosts.index(row.host) + step) % len(hosts)]
    return next(p for p in order if p in state.rows and state.rows[p].host == target)
