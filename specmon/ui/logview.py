"""Log pane: the selected run's launch log, live, with parsed events highlighted, follow mode and a `/` filter.

The pane holds no history of its own: the app keeps one bounded buffer per run and hands the pane the entries to
show, so switching runs or changing the filter redraws from that buffer and memory stays bounded.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.markup import escape
from textual.message import Message
from textual.widgets import Input, RichLog

from specmon.ui import format as fmt
from specmon.ui.rows import LogEntry

# Below this many columns of log text, timestamps are cut to the time of day (an 80-column terminal leaves ~34).
SHORT_TIMES_BELOW = 100

# Which theme colour highlights which parsed event.
_KIND_COLOURS = {"shard": "primary", "kv": "accent", "ready": "success", "error": "error", "marker": "warning"}


class LogPane(Vertical):
    """The log of one run, in a RichLog bounded to `max_lines`, with a filter input that appears on `/`."""

    BORDER_TITLE = "Log"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    class FilterChanged(Message):
        """The user applied a filter (empty clears it)."""

        def __init__(self, pattern: str) -> None:
            super().__init__()
            self.pattern = pattern

    class WidthChanged(Message):
        """The pane crossed the width where timestamps are shortened: the lines shown must be written again."""

    def __init__(self, max_lines: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.max_lines = max_lines
        self.pattern = ""
        self.follow = True
        self.run_label = ""
        self.short_times = False

    def compose(self) -> ComposeResult:
        yield RichLog(max_lines=self.max_lines, wrap=False, markup=False, highlight=False, auto_scroll=True)
        # Short enough for an 80-column screen's Log pane (27 cells inside the box and its cursor).
        yield Input(placeholder="text, or !text to hide", id="log-filter")

    def on_mount(self) -> None:
        self.query_one("#log-filter").display = False
        self._retitle()

    def _retitle(self) -> None:
        # The border's corners and the spaces around the title take 4 cells (before the first layout: no limit).
        room = self.size.width - 4 if self.size.width else 1000
        # the filter is what was typed: never read as markup
        self.border_title = escape(fmt.log_title(self.run_label, self.follow, self.pattern, room))

    def on_resize(self) -> None:
        self._retitle()
        short = self.content_size.width < SHORT_TIMES_BELOW
        if short != self.short_times:
            self.short_times = short
            self.post_message(self.WidthChanged())

    def _styled(self, entry: LogEntry) -> Text:
        text = fmt.short_log_time(entry.text) if self.short_times else entry.text
        colour = _KIND_COLOURS.get(entry.kind)
        if colour is None:
            return Text(text)
        value = self.app.theme_variables.get(colour)
        style = Style(color=value, bold=entry.kind in ("ready", "error", "marker"))
        return Text(text if entry.kind != "marker" else f"──── {text} ────", style=style)

    def show(self, label: str, entries: Iterable[LogEntry]) -> None:
        """Replace the contents with `entries` (those passing the filter) of the run called `label`."""
        self.run_label = label
        log = self.query_one(RichLog)
        log.clear()
        self.append(entries)
        self._retitle()

    def append(self, entries: Iterable[LogEntry]) -> None:
        """Add new lines (a batch per repaint, never one call per line)."""
        log = self.query_one(RichLog)
        for entry in entries:
            if entry.kind == "marker" or fmt.log_filter_matches(entry.text, self.pattern):
                log.write(self._styled(entry), scroll_end=self.follow)

    def set_follow(self, follow: bool) -> None:
        """Follow the end of the log, or hold the view still while lines keep arriving."""
        self.follow = follow
        log = self.query_one(RichLog)
        log.auto_scroll = follow
        if follow:
            log.scroll_end(animate=False)
        self._retitle()

    def open_filter(self) -> None:
        """Show the filter input with the current pattern and focus it."""
        box = self.query_one("#log-filter", Input)
        box.value = self.pattern
        box.display = True
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.pattern = event.value.strip()
        event.input.display = False
        self._retitle()
        self.post_message(self.FilterChanged(self.pattern))

    def close_filter(self) -> bool:
        """Hide the filter input without changing the filter; True when it was open."""
        box = self.query_one("#log-filter", Input)
        if not box.display:
            return False
        box.display = False
        self.query_one(RichLog).focus()
        return True
