"""Log pane: the selected run's launch log, live, with parsed events highlighted, follow mode and a `/` filter.

The pane holds no history of its own: the app keeps one bounded buffer per run and hands the pane the entries to
show, so switching runs or changing the filter redraws from that buffer and memory stays bounded. Only the lines
in view are styled and drawn (LogLines): a RichLog drew every line it was given, and `j` onto a run with a
2000-line SGLang log drew all 2000 (hundreds of ms on a busy box) to show forty.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.cache import LRUCache
from textual.containers import Vertical
from textual.geometry import Size
from textual.markup import escape
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input

from specmon.ui import format as fmt
from specmon.ui.rows import LogEntry

# Below this many columns of log text, timestamps are cut to the time of day (an 80-column terminal leaves ~34).
SHORT_TIMES_BELOW = 100

# Which theme colour highlights which parsed event.
_KIND_COLOURS = {"shard": "primary", "kv": "accent", "ready": "success", "error": "error", "marker": "warning"}
_BOLD_KINDS = ("ready", "error", "marker")


# A shown line: its text as drawn (timestamp cut or not, a marker's rule) and its kind (the highlight).
Line = tuple[str, str]


class LogLines(ScrollView, can_focus=True):
    """Up to `max_lines` log lines (the oldest go first), each styled and drawn when it comes into view.

    Drawn as a RichLog (no wrap, markup or highlighting) draws a line of text: cut at the pane's width, padded to at
    least MIN_WIDTH cells; scrolled sideways, it shows the rest of a long line."""

    DEFAULT_CSS = """
    LogLines {
        background: $surface;
        color: $foreground;
        overflow-y: scroll;
        &:focus {
            background-tint: $foreground 5%;
        }
    }
    """
    MIN_WIDTH = 78

    def __init__(self, max_lines: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.max_lines = max_lines
        self.lines: list[Line] = []
        self._dropped = 0    # lines dropped off the top since the last `replace`: keeps the drawn lines' keys
        self._widest = 0
        self._drawn: LRUCache[tuple[int, int, int], Strip] = LRUCache(1024)

    def replace(self, lines: list[Line], *, follow: bool) -> None:
        """Show `lines` instead (the last `max_lines`)."""
        self.lines = lines[-self.max_lines:]
        self._dropped = 0
        self._widest = max((cell_len(text) for text, _ in self.lines), default=0)
        self._drawn.clear()
        self._grown(follow)

    def add(self, lines: list[Line], *, follow: bool) -> None:
        """Add lines at the end, dropping the oldest beyond `max_lines`."""
        self.lines += lines
        if (over := len(self.lines) - self.max_lines) > 0:
            del self.lines[:over]
            self._dropped += over
        self._widest = max(self._widest, *(cell_len(text) for text, _ in lines), 0)
        self._grown(follow)

    def _grown(self, follow: bool) -> None:
        self.virtual_size = Size(self._widest, len(self.lines))
        self.refresh()
        if follow:
            self.scroll_end(animate=False, immediate=False, x_axis=False)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._drawn.clear()

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.scrollable_content_region.width
        index = scroll_y + y
        if index >= len(self.lines):
            return Strip.blank(width, self.rich_style)
        key = (self._dropped + index, scroll_x, width)
        strip = self._drawn.get(key)
        if strip is None:
            strip = self._draw(*self.lines[index]).crop_extend(scroll_x, scroll_x + width, self.rich_style)
            self._drawn[key] = strip
        return strip.apply_style(self.rich_style)

    def _draw(self, text: str, kind: str) -> Strip:
        """The whole line, styled by its kind, padded to MIN_WIDTH cells."""
        colour = _KIND_COLOURS.get(kind)
        style = Style(color=self.app.theme_variables.get(colour), bold=kind in _BOLD_KINDS) if colour else ""
        console = self.app.console
        cells = max(cell_len(text), self.MIN_WIDTH)
        options = console.options.update(overflow="ignore", no_wrap=True).update_width(cells)
        rendered = list(Segment.split_lines(console.render(Text(text, style=style), options)))
        return (Strip(rendered[0]) if rendered else Strip.blank(cells)).adjust_cell_length(cells)


class LogPane(Vertical):
    """The log of one run, LogLines bounded to `max_lines`, with a filter input that appears on `/`."""

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
        yield LogLines(self.max_lines)
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

    def _shown(self, entries: Iterable[LogEntry]) -> list[Line]:
        """The entries that pass the filter, as drawn."""
        lines = []
        for entry in entries:
            if entry.kind == "marker" or fmt.log_filter_matches(entry.text, self.pattern):
                text = fmt.short_log_time(entry.text) if self.short_times else entry.text
                lines.append((text if entry.kind != "marker" else f"──── {text} ────", entry.kind))
        return lines

    def show(self, label: str, entries: Iterable[LogEntry]) -> None:
        """Replace the contents with `entries` (those passing the filter) of the run called `label`."""
        self.run_label = label
        self.query_one(LogLines).replace(self._shown(entries), follow=self.follow)
        self._retitle()

    def append(self, entries: Iterable[LogEntry]) -> None:
        """Add new lines (a batch per repaint, never one call per line)."""
        if lines := self._shown(entries):
            self.query_one(LogLines).add(lines, follow=self.follow)

    def set_follow(self, follow: bool) -> None:
        """Follow the end of the log, or hold the view still while lines keep arriving."""
        self.follow = follow
        if follow:
            self.query_one(LogLines).scroll_end(animate=False)
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
        self.query_one(LogLines).focus()
        return True
