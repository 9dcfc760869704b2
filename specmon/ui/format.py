"""Pure formatting for the TUI: numbers, durations and labels as the panes show them.

Nothing here imports Textual or touches the clock; every function takes plain values and returns text,
so the panes stay presentation-only and these rules are unit-tested on their own.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Mapping, Sequence

from specmon.model.runs.runstate import LogPhase
from specmon.model.runs.runstatus import BROKEN, BUSY, STARTING, RunStatus

# Re-exported: the panes read every format through this module.
from specmon.model.text.numbers import NA as NA
from specmon.model.text.numbers import counted
from specmon.model.text.numbers import fmt_count as fmt_count
from specmon.model.text.numbers import fmt_ms as fmt_ms
from specmon.model.text.numbers import fmt_number as fmt_number
from specmon.model.text.numbers import fmt_shards as fmt_shards

# Run states (the lifecycle engine's vocabulary) -> the label and the style class a pane shows.
_STATE_STYLES: dict[str, str] = {
    **dict.fromkeys(BUSY, "busy"),
    RunStatus.READY: "good",
    RunStatus.STOPPED: "idle",
    **dict.fromkeys(BROKEN, "bad"),
    "idle": "idle",
}


def fmt_duration(seconds: float | None) -> str:
    """`0:07`, `12:03`, `1:02:03`; NA when unknown. Negative values clamp to zero."""
    if seconds is None or math.isnan(seconds):
        return NA
    total = max(0, int(round(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def fmt_ago(seconds: float | None) -> str:
    """How long ago something happened, in steps coarse enough that the card does not repaint every second for
    nothing: `<10s`, then tens of seconds, minutes, hours. (A server that logs our own health checks every few
    seconds would otherwise flip between `0s` and `4s` forever: the idle TUI's largest repaint.)"""
    if seconds is None:
        return NA
    s = max(0, int(seconds))
    if s < 10:
        return "<10s ago"
    if s < 60:
        return f"{s // 10 * 10}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    return f"{s // 3600}h ago"


def shard_fraction(done: int | None, total: int | None) -> float | None:
    """Shard progress in 0..1, None before the total is known."""
    if not total:
        return None
    return min(1.0, max(0.0, (done or 0) / total))


def bar_cells(fraction: float, cells: int) -> tuple[str, str]:
    """A thin progress bar of `cells` cells filled to `fraction` (0..1) by half cells, as Textual's ProgressBar
    draws one: the filled part and the rest (each drawn in its own colour)."""
    end = round(fraction * cells * 2) / 2
    if end <= 0:
        return "", "━" * cells
    full, half = int(end), end > int(end)
    return "━" * full + ("╸" if half else ""), ("" if half or full >= cells else "╺") + "━" * max(0, cells - full - 1)


def fmt_spec(algorithm: str | None, steps: int | None, accept_len: float | None = None) -> str:
    """The speculative-decoding setup: `no spec`, `EAGLE3×3`, `EAGLE3×3 acc 2.41`."""
    if not algorithm or algorithm.lower() in ("none", "off"):
        return "no spec"
    text = algorithm.upper() + (f"×{steps}" if steps else "")
    if accept_len is not None:
        text += f" acc {accept_len:.2f}"
    return text


def state_style(state: str, stalled: bool = False) -> str:
    """The style class of a run state: good, busy, bad, warn (stalled) or idle."""
    if stalled and state in STARTING:
        return "warn"
    return _STATE_STYLES.get(state, "idle")


def state_label(state: str, stalled: bool = False, phase: LogPhase | None = None) -> str:
    """The upper-case words the Servers pane shows: the load phase while loading; a stalled load says so.

    READY and FAILED are the engine's verdicts (ready needs a real completion too), never the log's phase alone.
    """
    if stalled and state in STARTING:
        return "STALLED"
    if state == RunStatus.LOADING and phase is not None and phase not in (LogPhase.READY, LogPhase.FAILED):
        return phase.label.upper()
    return state.upper()


def fmt_elapsed_vs_past(elapsed_s: float | None, past_load_s: float | None) -> str:
    """`0:41/~1:10` when an earlier load of this profile is known, else just the elapsed time."""
    if past_load_s:
        return f"{fmt_duration(elapsed_s)}/~{fmt_duration(past_load_s)}"
    return fmt_duration(elapsed_s)


def downsample(points: Sequence[tuple[float, float]], limit: int = 200) -> list[tuple[float, float]]:
    """At most `limit` points, evenly picked, always keeping the last: chart build cost grows with points."""
    if len(points) <= limit:
        return list(points)
    step = len(points) / limit
    picked = [points[int(i * step)] for i in range(limit - 1)]
    picked.append(points[-1])
    return picked


def log_filter_matches(text: str, pattern: str) -> bool:
    """The log pane's `/` filter: case-insensitive substring; a leading `!` keeps lines NOT containing it."""
    if not pattern:
        return True
    if pattern.startswith("!"):
        needle = pattern[1:].lower()
        return not needle or needle not in text.lower()
    return pattern.lower() in text.lower()


def parse_positive(text: str, name: str, allow_empty: bool = False) -> int | None:
    """A positive integer form field; empty gives None when allowed."""
    text = text.strip()
    if not text and allow_empty:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}: {text!r} is not a positive whole number")
    return int(text)


def transitions(before: Mapping[str, tuple[str, bool]], after: Mapping[str, tuple[str, bool]]) -> list[tuple[str, str]]:
    """(profile, what) for every run that just became ready, failed or stalled: the moments worth a bell.

    `before`/`after` map profile -> (state, stalled). A profile seen for the first time already in a final state
    (reattached, or the app just started) is not news and rings nothing.
    """
    events: list[tuple[str, str]] = []
    for profile, (state, stalled) in after.items():
        if profile not in before:
            continue
        old_state, old_stalled = before[profile]
        if state == RunStatus.READY and old_state != RunStatus.READY:
            events.append((profile, RunStatus.READY))
        elif state in BROKEN and old_state != state:
            events.append((profile, state))
        elif stalled and not old_stalled:
            events.append((profile, "stalled"))
    return events


# A launch log line's leading timestamp: SGLang `[2026-11-29 15:00:01 TP0] ...`, vLLM
# `(APIServer pid=1) INFO 11-29 15:00:01 [loggers.py:271] ...`.
_SGLANG_DATE = re.compile(r"^\[\d{4}-\d{2}-\d{2} (?=\d{2}:\d{2}:\d{2})")
_VLLM_STAMP = re.compile(r"^((?:\([^)]*\) )?[A-Z]+) \d{2}-\d{2} (\d{2}:\d{2}:\d{2})(?:\.\d+)? (?:\[[^\]\s]+:\d+\] )?")


def short_log_time(text: str) -> str:
    """A log line with its timestamp cut to the time of day, for a narrow log pane: `[15:00:01] ...`,
    `(APIServer pid=1) INFO 04:56:17 ...` (the date and vLLM's `[file.py:N]` go; the message stays whole)."""
    shortened = _SGLANG_DATE.sub("[", text, count=1)
    return shortened if shortened != text else _VLLM_STAMP.sub(r"\1 \2 ", text, count=1)


REASON_LINES = 2


def card_reason(reason: str, width: int, more: str, lines: int | None = REASON_LINES) -> list[str]:
    """A failure reason wrapped to `width` columns and cut to `lines` lines (None: whole), so a long one (a held
    port's holder command line, a traceback's last line) never pushes the next card off an 80x24 screen; a cut
    reason ends in `more`, which says where the whole one is. A reason that fits comes back as one line."""
    width = max(width, len(more) + 8)
    wrapped = textwrap.wrap(" ".join(reason.split()), width, break_on_hyphens=False) or [""]
    if lines is None or len(wrapped) <= lines:
        return [" ".join(reason.split())]   # fits: one line, wrapped by the card itself
    kept = wrapped[:lines]
    kept[-1] = kept[-1][: width - len(more)].rstrip() + more
    return kept


# What each flag of the level table's client column means, for a toast that points at it.
FLAG_MEANINGS = {
    "SKEW": "chunks waited for the load generator",
    "BOUND": "the load generator was the bottleneck",
    "BEHIND": "the load generator fell behind its schedule",
    "OVER": "the server did not keep up with the offered rate",
}


def sweep_caution(profile: str, message: str, flag: str | None, level: str | None,
                  said: set[str]) -> str | None:
    """The toast for a sweep's caution, or None when it was said already. A caution its level's row carries (a
    `flag` of the table's client column) is said once per sweep (`said` keeps the flags said), short, pointing at
    the column that marks every level it hits: at 80x24 a toast of ten lines per level hid the table for the whole
    sweep. Any other caution is said whole, each time."""
    if flag is None:
        return f"{profile}: {message}"
    if flag in said:
        return None
    said.add(flag)
    meaning = FLAG_MEANINGS.get(flag, message)
    return f"{profile} {level or ''}: {flag}: {meaning} (the client column marks each such level)".replace(" :", ":")


def left_running_note(runs: Sequence[tuple[str, str, str]]) -> str | None:
    """What `Q` (stop the servers started here, then quit) leaves running: (profile, run id, where) of each run this
    session found already running and reattached; None when there is none."""
    if not runs:
        return None
    lines = [f"left running (not started here; reattached): {profile} (run {run_id}{', ' + where if where else ''})"
             for profile, run_id, where in runs]
    stops = " ".join(profile for profile, _, _ in runs)
    return "\n".join([*lines, f"stop {'it' if len(runs) == 1 else 'them'} with: specmon stop {stops}"])


def card_detail_lines(progress: str, setup: str, activity: str, width: int) -> list[tuple[str, bool]]:
    """A run card's two detail lines: `progress` (shards, ETA, load time), `setup` (KV, memory fraction, speculative
    set-up) and `activity` (`log <10s ago`) put at the end of the first line it fits on whole, else on a line of its
    own: `KV 400k mem 0.88 EAGLE3×3 acc 2.93 log <10s ago` wrapped at 80 and 160 columns. Each line as (text, whether
    it ends in `activity`), so the card can dim that part."""
    for index, line in enumerate((progress, setup)):
        if len(line) + 1 + len(activity) <= width:
            lines = [(progress, False), (setup, False)]
            lines[index] = (f"{line} {activity}", True)
            return lines
    return [(progress, False), (setup, False), (activity, True)]


def log_title(label: str, follow: bool, pattern: str, width: int) -> str:
    """The Log pane's title in `width` cells: `Log NAME · follow · filter '!INFO:'`; where that is too long, the
    filter goes first and the run's name (its card is highlighted) goes: the filter hides lines, so it must show."""
    state = "follow" if follow else "paused"
    shown = f"filter {pattern!r}" if pattern else ""
    text = ""
    for parts in ((f"Log {label}".strip(), state, shown), ("Log", shown, state), ("Log", shown)):
        text = " · ".join(part for part in parts if part)
        if len(text) <= width:
            break
    return text


def wrap_paths(line: str, width: int) -> list[str]:
    """`line` with a path too long for a line of its own: wrapped to `width` cells at spaces and after the path's
    `/`s, continuation lines indented two more than it (the pane would break it mid-name, and
    `/opt/venv/lib/python3.11/site-` `packages/...` reads as two names). A piece longer than `width` on its own is
    left whole (the pane folds it). Any other line comes back as it is (the pane wraps it at spaces)."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    if width <= 0 or not any("/" in word and len(indent) + len(word) > width for word in line.split()):
        return [line]   # no path to break: the pane wraps it at spaces
    out: list[str] = []
    current = line[: len(line) - len(line.lstrip())]
    for word in line.split():
        pieces = [word] if len(indent) + len(word) <= width else re.findall(r"[^/]*/|[^/]+", word)
        for index, piece in enumerate(pieces):
            joined = piece if index else (" " + piece if current.strip() else piece)
            if current.strip() and len(current) + len(joined) > width:
                out.append(current)
                current = indent + piece
            else:
                current += joined
    out.append(current)
    return out


def fit_steps(steps: Sequence[str], width: int, rows: int) -> list[str]:
    """An experiment's steps (newest last) in `rows` lines of `width` cells: each step wrapped whole (continuation
    indented), as many of the newest as fit, under a line counting the earlier ones; a step was cut at every width
    (`demo-baseline level: p…`). `rows` or `width` of 0 (not laid out yet): every step, one a line."""
    if rows <= 0 or width <= 0:
        return list(steps)
    wrapped = [textwrap.wrap(step, width, subsequent_indent="  ", break_on_hyphens=False) or [""] for step in steps]
    kept: list[str] = []
    oldest = len(wrapped)   # the oldest step kept
    for index in range(len(wrapped) - 1, -1, -1):
        count_line = 1 if index > 0 else 0   # the line counting the steps left out, if this one is the oldest shown
        if len(kept) + len(wrapped[index]) + count_line > rows:
            break
        kept, oldest = wrapped[index] + kept, index
    else:
        return kept
    if not kept:   # the newest step alone is taller than the list
        return wrapped[-1][:rows]
    return [f"… {counted(oldest, 'earlier step')}", *kept]
