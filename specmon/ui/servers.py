"""Servers pane: one card per profile with its run's state, shard progress, ETA, memory and speculative setup."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.geometry import Region, Size
from textual.markup import escape
from textual.message import Message
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget, _RenderCache
from textual.widgets import Input, Static

from specmon.model.machine.env import EnvReport
from specmon.model.runs.fleet import filter_line, fleet_matches, fleet_summary, needs_attention
from specmon.model.runs.runstatus import STARTING, RunStatus
from specmon.model.server.serving import ServingUpdate, card_figure_lines, figure_texts
from specmon.model.sweeps.compare import ComparedRun, confound_warnings
from specmon.ui import format as fmt
from specmon.ui.rows import NodeRow, ServerRow
from specmon.ui.state import COMPARED_STATES, FLEET_MIN, Grouping, card_groups

if TYPE_CHECKING:
    from textual.css.styles import RulesMap


def _relayout(old: Sequence[Content], new: Sequence[Content], room: int) -> bool:
    """Whether a card's lines going from `old` to `new` can change its height: their count changed, or a line of
    either is too long for `room` cells (it wraps, or did). A line of another length that fits does not: the figures
    of a /metrics read and `log 2s ago` -> `log 7s ago` repaint without a layout of every widget."""
    return len(old) != len(new) or any(line.cell_length > room for line in (*old, *new))


SPARKS_MIN_HEIGHT = 40   # a terminal this tall has room for the card line the sparklines add (80x24, 100x30 do not)
# A fleet's card in full takes this many rows or more (head and two detail lines). Where the cards shown would not
# fit the pane at that, healthy READY cards shrink to their head line (see RunCard.show), and the selected run shows
# in full at the pane's foot (SelectedRun).
CARD_ROWS = 3
SELECTED_ROWS = 5   # the least a compact fleet's selected run has at the pane's foot (SelectedRun)


class RunLines(Widget):
    """A run drawn in lines: a head line, the shard progress bar while it loads, and detail lines.

    One widget that draws all of its lines (issue 37): a card of a head, a body and a progress bar of four widgets
    made 64 cards some 200 widgets, all laid out again whenever the selected card grew from one line to several,
    and restyled three at a time at each selection."""

    # A widget of a fixed height: its lines changing in number repaint it, and never lay the screen out.
    FIXED_HEIGHT = False

    def __init__(self, whole_key: str = "m", stop_key: str = "S", *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._whole_key = whole_key   # the key that maximises the pane, where a cut failure reason shows whole
        self._stop_key = stop_key     # named on a failed run whose process still runs
        # What the card draws: its lines' markup (its head line, then its detail lines; a compact card has its head
        # line alone) and its shard progress while it loads (shards done, total).
        self._shown: tuple[tuple[str, ...], tuple[int, int] | None] | None = None
        self._lines: tuple[Content, ...] = (Content(),)   # the head line, then the detail lines, parsed
        self._bar: tuple[int, int] | None = None
        self._strips: dict[tuple[Content, int, object], list[Strip]] = {}   # each line as last rendered
        self._drawn: tuple[object, ...] | None = None   # what `show` was last given
        self._serving_drawn: ServingUpdate | None = None

    def render(self) -> Content:
        return Content("\n").join(self._visual_lines())

    def _visual_lines(self) -> tuple[Content, ...]:
        if self._bar is None:
            return self._lines
        return (self._lines[0], self._bar_line(*self._bar), *self._lines[1:])

    def _render_content(self) -> None:
        """Textual's, line by line: a line rendered before at this width and style keeps its strips. A read
        changes one or two of a card's lines, and the whole card's text was wrapped and styled again for each (at 8
        runs a quarter of the frames' work)."""
        if self.text_selection is not None:   # a selection's offsets run over the card's whole text
            super()._render_content()
            return
        width, height = self.size
        style = self.visual_style
        kept: dict[tuple[Content, int, object], list[Strip]] = {}
        strips: list[Strip] = []
        for line in self._visual_lines():
            key = (line, width, style)
            rendered = kept.get(key) or self._strips.get(key) or Visual.to_strips(self, line, width, None, style)
            kept[key] = rendered
            strips += rendered
        self._strips = kept
        self._render_cache = _RenderCache(self.size, strips[:height])
        self._dirty_regions.clear()

    def _bar_line(self, done: int, total: int) -> Content:
        """The shard progress bar across the card, its percentage at the right (as Textual's ProgressBar)."""
        fraction = fmt.shard_fraction(done, total) or 0.0
        filled, rest = fmt.bar_cells(fraction, max(0, self.content_size.width - 5))
        colour = "$success" if fraction >= 1 else "$primary"
        percent = f"{round(100 * fraction)}%"
        # The room left of the percentage is blank cells of their own (no text, as the ProgressBar's was).
        return Content.from_markup(f"[{colour}]{filled}[/][$surface]{rest}[/][not b]{' ' * (5 - len(percent))}[/]{percent}")

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        """The lines of its text at `width` cells, and the bar's line (one at any width: it is drawn to fit)."""
        rules = cast("RulesMap", self.styles)   # what Textual hands a Visual to measure it by
        return sum(line.get_height(rules, width) for line in self._lines) + int(self._bar is not None)

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # A card scrolls nothing: its virtual size is its size, which the layout that set it already placed. Textual
        # asks for a second layout of the whole screen when it changes (every `j` resized two cards).
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    def show(self, row: ServerRow, selected: bool, serving: ServingUpdate | None = None, compact: bool = False,
             room: int = 72) -> None:
        """Draw `row` (and, while it is READY, its serving view); the card is repainted only where its text changed
        (every repaint costs terminal bytes). `compact` (a fleet that does not fit): a healthy READY card, selected or
        not, is its head line alone, with its output tok/s (the selected run shows in full in SelectedRun); a card
        that needs a look keeps every line. `room`: the cells a line has (ServersPane.line_room)."""
        whole = bool(row.failure) and isinstance(self.screen.maximized, ServersPane)
        # Every card is shown at each repaint, which one run's log line or /metrics read asks for: a card whose
        # row, serving view and room did not change has nothing new to draw.
        compact = compact and row.state == RunStatus.READY and not (row.failure or row.still_running)
        drawn = (row, selected, serving, room, whole, self.app.size.height >= SPARKS_MIN_HEIGHT, compact)
        if drawn == self._drawn:
            return
        self._drawn = drawn
        self._serving_drawn = serving
        if self.has_class("-selected") != selected:
            self.set_class(selected, "-selected")
        style = fmt.state_style(row.state, row.stalled)
        label = fmt.state_label(row.state, row.stalled, row.phase)
        head = f"[b]{escape(row.profile)}[/b] [{self._style_var(style)} b]{escape(label)}[/]"
        where = (f"{row.host}" if row.host != "local" else "") + (f":{row.port}" if row.port else "")
        if where and row.state != "idle":
            head += f" [dim]{escape(where)}[/]"
        if row.link is not None and row.state != "idle":
            head += f" [dim]{escape(row.link)}[/]" if row.link_ok else f" [$warning b]⚡ {escape(row.link)}[/]"
        figures = serving.figures if serving is not None and serving.run_id == row.run_id else None
        if compact and figures is not None:
            head += f" {dict(figure_texts(figures))['tok/s']} tok/s"
        # Only a known total gets a bar, and only while loading: at 100 % it says nothing, and an 80x24 screen lacks
        # its line (the second card's last line fell below the pane).
        bar = (row.shards_done or 0, row.shards_total) if row.shards_total and row.state in STARTING else None
        if compact:
            self._draw(head, bar, None, room)
            return

        if row.state == "idle":
            lines = ["[dim]not running · l launches[/]"]
        elif row.run_id is None:   # a launch that never started: only its reason is worth the space
            lines = []
        else:
            eta = f" ETA {fmt.fmt_duration(row.eta_s)}" if row.state in STARTING else ""   # none once loaded
            activity = f"log {fmt.fmt_ago(row.last_activity_ago_s)}"
            lines = [
                escape(text[: len(text) - len(activity)]) + f"[dim]{activity}[/]" if dims else escape(text)
                for text, dims in fmt.card_detail_lines(
                    f"{fmt.fmt_shards(row.shards_done, row.shards_total)}{eta}"
                    f" load {fmt.fmt_elapsed_vs_past(row.elapsed_s, row.past_load_s)}",
                    f"KV {fmt.fmt_count(row.kv_cache_tokens)} mem {fmt.fmt_number(row.mem_fraction_static, 2)}"
                    f" {fmt.fmt_spec(row.spec_algorithm, row.spec_steps, row.spec_accept_len)}",
                    activity, room)
            ]
        if row.job:   # a Slurm run's job; near its time limit, a warning
            job = escape(row.job)
            lines.insert(0, "[dim]slurm[/] " + (f"[$warning b]{job}[/]" if row.job.endswith("before its time limit")
                                                else job))
        if serving is not None and row.state == RunStatus.READY and serving.run_id == row.run_id:
            lines += serving_lines(serving, room, self.app.size.height >= SPARKS_MIN_HEIGHT)
        lines += [self._node_line(node) for node in row.nodes]
        if row.failure:
            # Two lines of this card (less "✗ "), whole while the pane is maximised.
            width = room - 2
            parts = fmt.card_reason(row.failure, width, f"… ({self._whole_key}: whole)", None if whole else 2)
            lines += [f"[$error b]{'✗' if i == 0 else ' '} {escape(part)}[/]" for i, part in enumerate(parts)]
        if row.still_running:
            lines.append(f"[$warning b]process still running (pid {row.pid}) · {escape(self._stop_key)} stops it[/]")
        if row.run_id is None and row.state == RunStatus.FAILED:
            lines.append("[dim]l tries again[/]")
        self._draw(head, bar, "\n".join(lines), room)

    def _draw(self, head: str, bar: tuple[int, int] | None, body: str | None, room: int) -> None:
        """Repaint the card if what it shows changed (rows arrive with every log batch; the words change far less
        often), each line parsed only when it changed. The screen is laid out again only when the card's height
        can change: not when `log 2s ago` became `log 7s ago`, a read's figures changed or the bar moved on. Then
        only the rows whose line changed are repainted (a read changes the figures' line, not the card's others)."""
        markup = (head, *(() if body is None else body.split("\n")))
        shown = (markup, bar)
        if shown == self._shown:
            return
        before, self._shown = self._shown, shown
        old_markup = () if before is None else before[0]
        parsed = dict(zip(old_markup, self._lines))
        old_lines, old_bar = self._lines, self._bar
        self._lines = tuple(parsed[line] if line in parsed else Content.from_markup(line) for line in markup)
        self._bar = bar
        if before is None or (bar is None) != (old_bar is None) or _relayout(old_lines, self._lines, room):
            self.refresh(layout=not self.FIXED_HEIGHT)
            return
        rows = [y + (bar is not None and y > 0) for y, (old, new) in enumerate(zip(old_markup, markup)) if old != new]
        if bar != old_bar:
            rows.append(1)
        self.refresh(*(Region(0, y, self.size.width, 1) for y in rows))

    def drawn_serving(self, update: ServingUpdate | None) -> ServingUpdate | None:
        """The serving view this card last drew (`update` when it has drawn none yet)."""
        return update if self._drawn is None else self._serving_drawn

    def _node_line(self, node: NodeRow) -> str:
        """A multi-node run's node in one line: `node 1 gpu2 LOADING WEIGHTS 3/8`."""
        style = self._style_var(fmt.state_style(node.state, node.stalled))
        label = fmt.state_label(node.state, node.stalled, node.phase)
        shards = f" {fmt.fmt_shards(node.shards_done, node.shards_total)}" if node.shards_total else ""
        link = f" [$warning]{escape(node.link)}[/]" if node.link else ""
        return f"[dim]node {node.rank}[/] {escape(node.host)} [{style}]{escape(label)}[/]{shards}{link}"

    @staticmethod
    def _style_var(style: str) -> str:
        return {"good": "$success", "busy": "$primary", "bad": "$error", "warn": "$warning"}.get(style, "$foreground-muted")


class RunCard(RunLines):
    """A profile's card in the Servers pane: its run in lines; a click selects it."""

    class Clicked(Message):
        """The user clicked a card (selects that profile)."""

        def __init__(self, profile: str) -> None:
            super().__init__()
            self.profile = profile

    def __init__(self, profile: str, whole_key: str = "m", stop_key: str = "S") -> None:
        super().__init__(whole_key, stop_key, classes="run-card")
        self.profile = profile

    def on_click(self) -> None:
        self.post_message(self.Clicked(self.profile))


class SelectedRun(RunLines):
    """The selected run in full at the foot of a compact fleet's pane, where every healthy READY card, the selected
    one too, is its head line (issue 37): moving the selection then changes no widget's height, and a `j` repaints
    two cards' head lines and this, where it laid out every card of the screen (25-40 ms at 64 runs). Its height
    follows the pane's, not the run's: lines beyond it are cut (a run that needs a look shows every line on its
    card)."""

    FIXED_HEIGHT = True

    def __init__(self, whole_key: str = "m", stop_key: str = "S", *, id: str | None = None) -> None:
        super().__init__(whole_key, stop_key, id=id)
        self._title = ""

    def _draw(self, head: str, bar: tuple[int, int] | None, body: str | None, room: int) -> None:
        # Its head line is the title of its top border: a rule between it and the cards above, where the selected
        # card's head line would otherwise show twice in a row.
        if head != self._title:
            self._title = self.border_title = head
        first, _, rest = (body or "").partition("\n")
        super()._draw(first, bar, rest or None, room)

    def rows_for(self, pane_height: int) -> None:
        """Its height in a pane `pane_height` rows tall: a quarter of it, and a READY run's head, two detail lines
        and two lines of figures at the least; set only when that changes (each set lays the screen out)."""
        rows = max(SELECTED_ROWS, pane_height // 4)
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows


def serving_lines(update: ServingUpdate, room: int, tall: bool = True) -> list[str]:
    """A ready run's serving view on its card: the figures from its /metrics with a sparkline of the last two
    minutes for the busy ones (on a `tall` screen, where the line they add fits, and where each line fits in `room`
    cells: a wrapped sparkline reads as noise on a narrow terminal), what it says is wrong, the impossible values it
    left out, or why there is nothing
    to show."""
    if update.note is not None:
        return [f"[dim]{escape(update.note)}[/]"]
    if update.figures is None:
        return [f"[$warning]⚠ {escape(a)}[/]" for a in update.alerts] or ["[dim]reading /metrics…[/]"]
    lines = card_figure_lines(update, sparks=tall)
    if any(cell_len("".join(text for text, _ in line)) > room for line in lines):
        lines = card_figure_lines(update, sparks=False)
    out = ["".join(f"[dim]{text}[/]" if spark else escape(text) for text, spark in line) for line in lines]
    if update.alerts:
        out.append(f"[$warning b]⚠ {escape(' · '.join(update.alerts))}[/]")
    if (ignored := update.ignored_text()) is not None:
        out.append(f"[dim]{escape(ignored)}[/]")
    return out


class ServersPane(VerticalScroll):
    """Profiles and their runs, with a warning when the runs being compared are configured differently, and a
    filter (state, host or profile name) that shows only the cards it matches."""

    BORDER_TITLE = "Servers"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    class FilterChanged(Message):
        """The cards shown changed with the filter (`order` holds them)."""

    def __init__(self, profiles: Sequence[str], whole_key: str = "m", stop_key: str = "S", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._warning = ""
        self._cards = [RunCard(name, whole_key, stop_key) for name in profiles]
        self._idle = {name: ServerRow(profile=name) for name in profiles}   # a card's row before its first run
        self._compared: tuple[tuple[str, float | None, int | None, int], ...] = ()
        self._warnings: list[str] = []
        self._summary = Static(id="fleet-summary")
        self._summary_text = ""
        self._sorted = [card.profile for card in self._cards]   # every card top to bottom (a fleet's trouble first)
        self.order = list(self._sorted)   # the cards shown (those the filter matches), as the keys walk them
        self.pattern = ""
        self.grouping = Grouping.NONE
        self._headers: dict[str, Static] = {}   # a group's header line, by group name (made when first needed)
        self._header_texts: dict[str, str] = {}
        self._reveal_pending: str | None = None
        self._header_of: dict[str, Static] = {}   # a card that comes first in its group -> its group's header
        self._layout: list[Widget] = list(self._cards)   # headers and cards as they stand, top to bottom
        self._input = Input(placeholder="state, host or name", id="fleet-filter")
        self._selected_run = SelectedRun(whole_key, stop_key, id="selected-run")
        self._arranged: tuple[object, ...] | None = None   # what the cards' order and groups were worked out from
        self._last: tuple[Sequence[ServerRow], str | None, Mapping[str, EnvReport] | None,
                          Mapping[str, ServingUpdate], Grouping] | None = None

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # Its virtual size is the height of the cards that the layout that set it has just placed; Textual asks for
        # a second layout of the whole screen when it changes (a `j` whose card grows by more lines than the last
        # one shrinks). Its scrollbars still follow (and a scrollbar shown or hidden lays the screen out itself).
        return super()._size_updated(size, virtual_size, container_size, layout=False)

    def compose(self) -> ComposeResult:
        yield self._input
        yield self._summary
        yield Static(id="confound", classes="warning-banner")
        yield self._selected_run
        yield from self._cards

    def on_mount(self) -> None:
        self.query_one("#confound").display = False
        self._selected_run.display = False
        self._summary.display = len(self._cards) >= FLEET_MIN
        self._input.display = False

    def open_filter(self) -> None:
        """Show the filter input with the current pattern and focus it: the cards follow what is typed."""
        self._input.value = self.pattern
        self._input.display = True
        self._input.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._set_pattern(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()   # enter keeps the filter and gives the keys back to the cards
        self._input.display = False
        self.focus()

    def clear_filter(self) -> bool:
        """Close the input and show every card again; True when there was an input or a filter to clear."""
        if not self._input.display and not self.pattern:
            return False
        if self._input.display:
            self._input.display = False
            self.focus()
        self._set_pattern("")
        return True

    def _set_pattern(self, pattern: str) -> None:
        if pattern.strip() == self.pattern:
            return
        self.pattern = pattern.strip()
        if self._last is not None:
            self.show(*self._last)
        self.scroll_home(animate=False, immediate=True)
        self.post_message(self.FilterChanged())

    def line_room(self) -> int:
        """The cells a card's line has: the pane's width less its border, a scrollbar's room and the card's bar (the
        card's own width changes with the scrollbar that a longer text brings, and would make lines flip). From the
        laid-out outer size: `size` asks Textual where the widget is, and while a layout is pending that lays out
        every widget of the screen (it was a third of a `j` at 64 runs, asked once per card)."""
        room = self.outer_size.width - self.styles.gutter.width - 6
        return room if room > 0 else 72   # before the first layout

    def _in_view(self) -> set[RunCard]:
        """The cards within the pane's scrolled window, from their laid-out heights (asking Textual for a widget's
        region would itself lay the screen out again)."""
        top = self.scroll_y
        bottom = top + self.scrollable_content_region.height   # a compact card is one line: the bounds are exact
        y = sum(w.outer_size.height for w in (self._summary, self.query_one("#confound")) if w.display)
        seen = set()
        for widget in self._layout:
            if not widget.display:
                continue
            height = widget.outer_size.height
            if isinstance(widget, RunCard) and y + height > top and y < bottom:
                seen.add(widget)
            y += height
        return seen

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self._last is not None:   # cards scrolled into view catch up on their serving figures
            self.call_after_refresh(self.show, *self._last)

    def reveal(self, profile: str) -> None:
        """Scroll so that `profile`'s card is in view (the keys walk the cards; the selection must not leave it),
        with its group's header when it comes first in its group."""
        for card in self._cards:
            if card.profile == profile:
                self.scroll_to_widget(card, animate=False, immediate=True)
                if (header := self._header_of.get(profile)) is not None:   # just above the card: both in view
                    self.scroll_to_widget(header, animate=False, immediate=True)
                return

    def reveal_after_layout(self, profile: str) -> None:
        """Reveal `profile`'s card once the pane is laid out again (its cards moved, headers were added): where a
        card is comes from the last layout. The new layout changes the pane's virtual size (its headers come or go),
        which Textual says with a Resize; a refresh later stands in when it does not."""
        self._reveal_pending = profile
        self.call_after_refresh(self.call_after_refresh, self._reveal_now)

    def on_resize(self) -> None:
        self._reveal_now()

    def _reveal_now(self) -> None:
        if self._reveal_pending is not None:
            profile, self._reveal_pending = self._reveal_pending, None
            self.reveal(profile)

    def _show_fleet(self, by_profile: Mapping[str, ServerRow]) -> None:
        """The cards that need a look moved first (stable: the file's order otherwise)."""
        rows = [by_profile.get(card.profile, self._idle[card.profile]) for card in self._cards]
        first = [card for card, row in zip(self._cards, rows) if needs_attention(row.state, row.stalled)]
        self._sorted = [card.profile for card in first] + [c.profile for c in self._cards if c not in first]

    def _show_groups(self, rows: Sequence[ServerRow]) -> None:
        """The cards shown in their groups (ui.state.card_groups), each under its header line, and `order` (what the
        keys walk) as they stand. Widgets are moved and touched only when something changed: each is a relayout."""
        groups = card_groups(rows, self.order, self.grouping, self.scrollable_content_region.width or None)
        layout: list[Widget] = []
        cards = {card.profile: card for card in self._cards}
        self._header_of = {}
        for group in groups:
            if group.header:
                header = self._headers.get(group.name)
                if header is None:
                    header = self._headers[group.name] = Static(classes="group-header", markup=False)
                    self.mount(header)
                if self._header_texts.get(group.name) != group.header:
                    self._header_texts[group.name] = group.header
                    header.update(group.header)
                if not header.display:
                    header.display = True
                self._header_of[group.profiles[0]] = header
                layout.append(header)
            layout += [cards[p] for p in group.profiles]
        self.order = [p for group in groups for p in group.profiles]
        shown = set(layout)
        for header in self._headers.values():
            if header not in shown and header.display:
                header.display = False
        # Hidden cards and headers go last, out of the way of the ones shown.
        layout += [card for card in self._cards if card not in shown]
        layout += [header for header in self._headers.values() if header not in shown]
        if layout != self._layout:
            self._layout = layout
            self.move_child(layout[0], after=self.query_one("#confound"))
            for before, widget in zip(layout, layout[1:]):
                self.move_child(widget, after=before)

    def _show_filter(self, by_profile: Mapping[str, ServerRow]) -> None:
        """The cards the filter matches shown (the rest hidden), and the summary line: the whole fleet's counts (a
        filter never hides that a run failed), then how many cards the filter shows."""
        rows = {card.profile: by_profile.get(card.profile, self._idle[card.profile]) for card in self._cards}
        order = [p for p in self._sorted if fleet_matches(self.pattern, p, (rows[p].host,
                      *(node.host for node in rows[p].nodes)), rows[p].state, rows[p].stalled)]
        shown = set(order)
        self.order = order
        for card in self._cards:
            if card.display != (card.profile in shown):   # assigned only on change: each is a relayout
                card.display = card.profile in shown
        lines = [fleet_summary(((row.state, row.stalled) for row in rows.values()),
                               self.scrollable_content_region.width or None)] if len(self._cards) >= FLEET_MIN else []
        if self.pattern:
            lines.append(filter_line(len(self.order), len(self._cards), self.pattern))
        text = "\n".join(lines)
        if text != self._summary_text:
            self._summary_text = text
            self._summary.update(escape(text))
            self._summary.display = bool(text)

    def _show_selected(self, by_profile: Mapping[str, ServerRow], selected: str | None,
                       serving: Mapping[str, ServingUpdate], compact: bool, room: int) -> None:
        """A compact fleet's selected run in full at the pane's foot (shown or hidden only when `compact` changes:
        each is a layout)."""
        shown = compact and selected in self._idle
        if self._selected_run.display != shown:
            self._selected_run.display = shown
        if shown and selected is not None:
            self._selected_run.rows_for(self.outer_size.height)
            self._selected_run.show(by_profile.get(selected, self._idle[selected]), True, serving.get(selected),
                                    room=room)

    def show(self, rows: Sequence[ServerRow], selected: str | None,
             setups: Mapping[str, EnvReport] | None = None, serving: Mapping[str, ServingUpdate] | None = None,
             grouping: Grouping = Grouping.NONE) -> None:
        """Draw every card (a ready run's with its serving view), in the groups of `grouping`, and the
        confounded-comparison warning (with each run's set-up where it was read: environment, launch arguments and
        versions that differ are named too)."""
        by_profile = {row.profile: row for row in rows}
        serving = serving or {}
        self.grouping = grouping
        # Which cards show, in what order and groups, and the summary line follow the rows, the filter, the grouping
        # and the width alone: a repaint for /metrics reads (most of them, at 1 Hz) changes none of these.
        arranged = (list(rows), self.pattern, grouping, self.scrollable_content_region.width)
        if arranged != self._arranged:
            self._arranged = arranged
            if len(self._cards) >= FLEET_MIN:
                self._show_fleet(by_profile)
            self._show_filter(by_profile)
            self._show_groups(rows)
        self._last = (rows, selected, setups, serving, grouping)
        in_view = self._in_view()
        room = self.line_room()
        headers = sum(1 for header in self._headers.values() if header.display)
        compact = len(self._cards) >= FLEET_MIN and \
            len(self.order) * CARD_ROWS + headers > self.scrollable_content_region.height
        for card in self._cards:
            if not card.display:
                continue   # filtered out: drawn when the filter shows it again
            # A card out of view keeps the serving figures it drew (its state still changes at once): each /metrics
            # read changed every ready card's figures, and one off-screen widget changed makes Textual lay the
            # whole screen out again (all 64 cards' widgets) at its next frame. Scrolling brings them up to date.
            update = serving.get(card.profile)
            card.show(by_profile.get(card.profile, self._idle[card.profile]), card.profile == selected,
                      update if card in in_view else card.drawn_serving(update), compact, room)
        self._show_selected(by_profile, selected, serving, compact, room)
        setups = setups or {}
        compared = [r for r in rows if r.state in COMPARED_STATES]
        # Rows arrive with every log batch: the set-up diff is redone only when what it compares changed.
        key = tuple((r.profile, r.mem_fraction_static, r.kv_cache_tokens, id(setups.get(r.profile))) for r in compared)
        if key != self._compared:
            self._compared = key
            self._warnings = confound_warnings([
                ComparedRun(r.profile, r.mem_fraction_static, r.kv_cache_tokens, setup=setups.get(r.profile))
                for r in compared])
        warnings = self._warnings
        text = "\n".join(f"⚠ {escape(w)}" for w in warnings)
        if text != self._warning:  # touch the widgets only on change: each touch is a relayout and a repaint
            self._warning = text
            banner = self.query_one("#confound", Static)
            banner.display = bool(warnings)
            banner.update(text)
        title = "Servers" + {Grouping.NONE: "", Grouping.HOST: " · by host", Grouping.PROFILE: " · by profile"}[
            grouping] + (" · ⚠ WARNING: confounded" if warnings else "")
        if title != self.border_title:
            self.border_title = title
