"""GPU / environment pane: the GPUs of the selected profile's host with sparklines and who holds each (view
"gpus"), the selected profile's environment (view "env") and its differences from the previously selected
profile (view "diff"). `e` cycles the views; the engine feeds the data (GpusUpdated messages, env reports). On a host with no
GPUs to show (no NVIDIA driver, a dead nvidia-smi) the gpus view would be one line in an empty pane: it shows that
line and the selected profile's environment under it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.geometry import Region
from textual.markup import escape
from textual.message import Message
from textual.strip import Strip
from textual.visual import Visual
from textual.widgets import Static

from specmon.model.machine.env import Difference, EnvReport, diff_lines, report_lines
from specmon.model.machine.gpu import GpuBoard, GpuTrack
from specmon.model.text.numbers import sparkline
from specmon.ui import format as fmt
from specmon.ui.throttle import Throttle

VIEWS = ("gpus", "env", "diff")
PAINT_S = 2.0   # the gpus view repaints at most this often (samples still arrive, and are kept, at 1 Hz) ...
SPARK_S = 6.0   # ... and its sparklines move this often
# While the cards repaint about every second (every ready run's /metrics read on a shared 1 s clock), a repaint of
# the board rides on the cards' repaint nearest its due time, up to this much before or after it: one frame a
# second instead of one more every other second. With no such repaints it waits no longer than PAINT_S.
RIDE_S = 0.5


class GpusUpdated(Message):
    """A host's GPU board changed (a tick, new holders, or an error). Only the latest one matters."""

    def __init__(self, host: str, board: GpuBoard, known_runs: Mapping[str, str]) -> None:
        super().__init__()
        self.host = host
        self.board = board
        self.known_runs = dict(known_runs)     # run id -> profile

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpusUpdated) and message.host == self.host


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.0f}"


def _holders(track: GpuTrack, known: Mapping[str, str]) -> str:
    if not track.holders:
        return "free"
    names = []
    for holder in track.holders:
        if holder.run_id is not None and holder.run_id in known:
            names.append(known[holder.run_id])
        else:
            names.append(f"pid {holder.pid} (not a specmon run)" if holder.run_id is None
                         else f"pid {holder.pid} (run {holder.run_id})")
    return ", ".join(dict.fromkeys(names))


Line = tuple[tuple[str, str], ...]   # one line of the gpus view as (text, style) parts: cheap to build and compare


def sparklines(board: GpuBoard, width: int) -> dict[str, str]:
    """Each GPU's utilisation sparkline (by UUID), as wide as the gpus view gives it in a pane `width` wide."""
    spark_width = max(4, min(24, width // 2))
    return {track.uuid: sparkline(track.utilization, spark_width, 100.0) for track in board.gpus()}


def gpu_lines(host: str, board: GpuBoard, known: Mapping[str, str], selected_run: str | None, width: int,
              sparks: Mapping[str, str], page: str = "") -> list[Line]:
    """The gpus view, two lines a GPU: index, model, utilisation, memory (GiB), power; then its utilisation
    sparkline (from `sparks`, by UUID: the pane refreshes those on a slower cadence than the numbers) and the run
    (profile) or process holding it. The selected run's GPUs are marked ▶. `width` is the pane's inner width;
    `page` (`host 3 of 16 · [ ] pages`) goes on the head line, where a fleet has more hosts than this one."""
    tracks = board.gpus()
    lines: list[Line] = [((host, "bold"), (f" · {len(tracks)} GPU{'s' if len(tracks) != 1 else ''}", ""),
                          *(((f" · {page}", "$accent"),) if page else ()))]
    if board.error:
        lines.append(((board.error, "$warning"),))
    for track in tracks:
        g = track.latest
        mark = "▶" if selected_run is not None and any(h.run_id == selected_run for h in track.holders) else " "
        name = (g.name or "GPU").replace("NVIDIA ", "")
        util = "  ?%" if g.utilization_pct is None else f"{g.utilization_pct:3.0f}%"
        power = "" if g.power_w is None else f" {g.power_w:.0f}W"
        head = f"{mark}{g.index if g.index is not None else '?'} {name[:8]} {util} " \
               f"{_gib(g.memory_used_mib)}/{_gib(g.memory_total_mib)}G{power}"
        if track.gone:
            head += " GONE"
        elif g.fault:
            head += f" {g.fault}"
        style = "$error" if track.gone or g.fault else "$accent" if mark == "▶" else ""
        spark = sparks.get(track.uuid, "")
        lines += [((head, style),),
                  (("  " + spark, "$primary"), (" " + _holders(track, known)[: max(4, width - len(spark) - 3)], ""))]
    if board.apps_error:
        lines.append(((f"holders unknown: {board.apps_error}", "dim"),))
    return lines


def lines_markup(lines: Sequence[Line]) -> str:
    """Lines of the gpus view as markup (for the rare paint that goes through Static: a board with no GPUs)."""
    return "\n".join("".join(f"[{style}]{escape(text)}[/]" if style else escape(text) for text, style in line)
                     for line in lines)


def render_env(report: EnvReport, width: int = 0) -> str:
    """The env report's lines, section headings bold, wrapped to `width` cells (0: not) at spaces and between a
    path's directories."""
    return "\n".join(escape(part) if line.startswith(" ") else f"[b]{escape(part)}[/]"
                     for line in report_lines(report) for part in fmt.wrap_paths(line, width))


def render_diff(a: EnvReport, b: EnvReport, diffs: Sequence[Difference]) -> str:
    """The differences, each highlighted; headings bold."""
    out = []
    for line in diff_lines(a, b, diffs):
        out.append(f"[$warning]{escape(line)}[/]" if line.startswith("  ") else f"[b]{escape(line)}[/]")
    return "\n".join(out)


class GpuEnvPane(Static):
    """GPUs with sparklines, the environment, or a diff (one of VIEWS at a time).

    The gpus view repaints every PAINT_S seconds at most and only the lines whose text changed (each frame costs
    the compositor a pass over every pane beside this one, and a monitor is left open for hours): it keeps its
    lines as strips and serves them through `render_line`, asking the compositor for just the changed rows. The
    sparklines move every SPARK_S seconds while samples still arrive at 1 Hz. The env and diff views are plain
    Static text."""

    BORDER_TITLE = "GPU / env"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    def __init__(self, **kwargs: object) -> None:
        super().__init__("[dim]GPUs: waiting for nvidia-smi · e: env / diff[/]", **kwargs)  # type: ignore[arg-type]
        self._text: str | Content = ""
        self.view = "gpus"
        self._gpus: GpusUpdated | None = None
        self.selected_run: str | None = None
        self._sparks: dict[str, str] = {}
        self._sparks_at = float("-inf")
        self._lines: list[Line] = []
        self._strips: dict[Line, list[Strip]] = {}   # each shown line's rendering, reused while it is unchanged
        self._rows: list[Strip] | None = None        # what render_line serves in the gpus view
        self._rows_width = 0
        self._styles: dict[str, RichStyle] = {}      # style name -> the rich style it resolves to on this pane
        self._throttle = Throttle(self, PAINT_S, self._paint_gpus)
        self._rides: tuple[float, float] = (float("-inf"), float("-inf"))   # the two latest `ride_along` offers
        self._env_below = ""    # the selected profile's environment (markup), shown under a board with no GPUs
        self.page = ""          # where the selected card's host is among the fleet's: "host 3 of 16 · [ ] pages"

    @property
    def wants_env(self) -> bool:
        """Whether the gpus view is showing a board without GPUs, so the environment belongs under it."""
        return self.view == "gpus" and self._gpus is not None and not self._gpus.board.tracks

    def show_env_below(self, text: str) -> None:
        """The environment to show under a board with no GPUs (ignored once the board has GPUs)."""
        self._env_below = text
        if self.wants_env:
            self._paint_gpus(full=True)

    @property
    def text(self) -> str:
        """What the pane shows, as plain text."""
        if self.view == "gpus" and self._rows is not None:
            return "\n".join("".join(text for text, _ in line) for line in self._lines)
        return str(self.render())

    def show(self, text: str | Content) -> None:
        """Replace the pane's text (markup, or ready-made Content). Its size is fixed by the layout, so no relayout
        is asked for: a relayout repaints every neighbouring pane, which at 1 Hz would cost ~20 KiB/s of terminal
        output. Unchanged text is not repainted."""
        self._rows = None
        if text != self._text:
            self._text = text
            self.update(text, layout=False)

    def set_view(self, view: str) -> None:
        """Switch to one of VIEWS (the gpus view repaints at once from the last board)."""
        self.view = view
        self.border_title = "GPU / env" if view == "gpus" else f"GPU / env · {view}"
        if view == "gpus" and self._gpus is not None:
            self._paint_gpus(full=True)
        elif view != "gpus":
            self.show(f"[dim]{view}: reading…[/]")

    def show_gpus(self, update: GpusUpdated, selected_run: str | None) -> None:
        """Keep the latest board; paint it when the gpus view is showing."""
        repaint_now = self._gpus is None or selected_run != self.selected_run
        self._gpus = update
        self.selected_run = selected_run
        if self.view == "gpus":
            if repaint_now:   # the first board, or the ▶ marks moved to another run's GPUs
                self._paint_gpus()
            else:
                self._throttle.request(late=RIDE_S if self._rides_regularly() else 0.0)

    def ride_along(self) -> None:
        """The app repaints other panes now: a repaint of the board that is due about now happens with it."""
        self._rides = (self._rides[1], time.monotonic())
        self._throttle.ride_along(RIDE_S)

    def _rides_regularly(self) -> bool:
        """Whether the other panes repaint about every second (so one will come near the board's due time)."""
        first, last = self._rides
        return time.monotonic() - first < 2 * (1 + RIDE_S) and time.monotonic() - last < 1 + RIDE_S

    def set_page(self, page: str) -> None:
        """Where the shown host is among the fleet's hosts (the head line says it); repainted when it changed."""
        if page != self.page:
            self.page = page
            if self.view == "gpus" and self._gpus is not None:
                self._paint_gpus()

    def on_resize(self) -> None:
        if self.view == "gpus" and self._gpus is not None:
            self._paint_gpus(full=True)

    def render_line(self, y: int) -> Strip:
        if self.view != "gpus" or self._rows is None:
            return super().render_line(y)
        return self._rows[y] if y < len(self._rows) else Strip.blank(self.size.width, self.visual_style.rich_style)

    def _paint_gpus(self, full: bool = False) -> None:
        width = self.size.width
        if self._gpus is None or self.view != "gpus" or not width:
            return   # a throttled paint after the view changed; or not laid out yet (the resize that follows paints)
        now = time.monotonic()
        board = self._gpus.board
        if full or now - self._sparks_at >= SPARK_S or self._sparks.keys() != board.tracks.keys():
            self._sparks, self._sparks_at = sparklines(board, width), now
        lines = gpu_lines(self._gpus.host, board, self._gpus.known_runs, self.selected_run, width, self._sparks,
                          self.page)
        if not board.tracks:   # nothing that moves at 1 Hz: plain Static text, the environment under the line
            self.show("\n".join(filter(None, (lines_markup(lines), self._env_below))))
            return
        full = full or self._rows is None or width != self._rows_width
        if full:
            self._strips.clear()
        strips = {line: self._strips.get(line) or self._render_strips(line, width) for line in lines}
        rows = [strip for line in lines for strip in strips[line]]
        old = self._rows or []
        self._lines, self._strips, self._rows, self._rows_width, self._text = lines, strips, rows, width, ""
        if full:
            self.refresh()
            return
        changed = [y for y in range(max(len(rows), len(old)))
                   if y >= len(rows) or y >= len(old) or rows[y] is not old[y]]
        if changed:
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def _render_strips(self, line: Line, width: int) -> list[Strip]:
        """One line of the gpus view as the pane paints it. Built from segments: Content's wrapping machinery costs
        ~10x more a line, once a second; only a line too long for the pane goes through it (wrapped, as Static)."""
        if sum(cell_len(text) for text, _ in line) > width:
            return Visual.to_strips(self, Content.assemble(*line), width, None, self.visual_style)
        return [Strip([Segment(text, self._rich_style(style)) for text, style in line if text])]

    def _rich_style(self, style: str) -> RichStyle:
        cached = self._styles.get(style)
        if cached is None:
            base = self.visual_style
            cached = self._styles[style] = (base + self._get_style(style)).rich_style if style else base.rich_style
        return cached

    def notify_style_update(self) -> None:
        """A theme or CSS change: the kept strips carry the old colours."""
        super().notify_style_update()
        self._styles.clear()
        if self._rows is not None and self._gpus is not None:
            self._paint_gpus(full=True)
