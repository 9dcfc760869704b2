"""Sweep pane: output tok/s (or goodput, toggled) against concurrency or, for open-loop sweeps, request rate (one
series per profile or result file, crossover marked) and a table of the levels. Redraws are throttled by the app;
the chart is rebuilt only when its data changed."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.color import Color
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.markup import escape
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from specmon.model.charts.chart import colour_index, series_symbol
from specmon.model.charts.levelrow import (
    CHART_METRICS,
    LEVEL_COLUMNS,
    LevelRow,
    distinct_width,
    fit_columns,
    is_rate_series,
    series_points,
)
from specmon.model.sweeps.compare import crossover_words, load_words
from specmon.ui import format as fmt
from specmon.ui.plot import draw_sweeps
from specmon.ui.rows import CrossoverMark

_TABLE_COLOURS = ("cyan", "orange1", "green", "magenta", "blue", "red")   # the chart's series colours, as Rich names them
_MAX_POINTS = 200
_LABELLED_HEIGHT = 12   # a shorter chart leaves out its axis names (the pane's border says them) for one more row

Levels = Sequence[LevelRow]

# The table's columns, most telling first (a narrow table scrolls sideways for the rest), as indices into
# LEVEL_COLUMNS / LevelRow.cells, with the short headers used when the table is narrow.
_TABLE_ORDER = (0, 1, 2, 5, 6, 3, 4, 7)
_SHORT_HEADERS = {"out tok/s": "tok/s", "TTFT p50": "TTFT", "TPOT p50": "TPOT", "ITL p99": "ITL99",
                  "tok/chunk": "tok/ch"}
GRID_SERIES = 3     # this many series and more with no crossover (a tuning grid's) get their best-per-level envelope
WIDE_SCREEN = 150   # the app's "-wide" breakpoint, where the table has 84 columns of its own


def short_series_names(names: Sequence[str]) -> dict[str, str]:
    """Series names without the dash-separated prefix they all share ("demo-baseline" -> "baseline")."""
    if len(names) < 2:
        return {n: n for n in names}
    parts = [n.split("-") for n in names]
    shared = 0
    while all(len(p) > shared + 1 and p[shared] == parts[0][shared] for p in parts):
        shared += 1
    return {n: "-".join(p[shared:]) for n, p in zip(names, parts)}


class StepsList(Static):
    """An experiment's steps, newest last, each wrapped whole: as many of the newest as fit, under a line counting
    the earlier ones (at 80×24 a pass outgrows the pane; the step running now must stay in view)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self._steps: list[str] = []

    def show(self, steps: Sequence[str]) -> None:
        self._steps = list(steps)
        self._paint()

    def on_resize(self) -> None:
        self._paint()

    def _paint(self) -> None:
        steps = self._steps
        if self.content_size.width < NARROW_STEPS:   # the step, not its clock time, is what must show
            steps = [_CLOCK.sub("", step) for step in steps]
        shown = fmt.fit_steps(steps, self.content_size.width, self.content_size.height)
        self.update(Text("\n".join(shown), no_wrap=True, overflow="ellipsis"))


NARROW_STEPS = 40                          # a steps list narrower than this drops the clock time of each step
_CLOCK = re.compile(r"^\d\d:\d\d:\d\d ")   # a step's leading "HH:MM:SS "


class LevelTable(DataTable[str]):
    """The level table: its columns are chosen by its width (those that fit whole), so a resize of the table alone
    (an experiment's steps list appearing beside it) redraws it."""

    def on_resize(self) -> None:
        pane = next((node for node in self.ancestors if isinstance(node, SweepPane)), None)
        if pane is not None:
            pane.show(*pane._shown)


class SweepPane(Vertical):
    """Chart and table of one or more sweeps; `show` is cheap when nothing changed."""

    BORDER_TITLE = "Sweep"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._drawn: tuple[object, ...] | None = None
        self._narrow = False
        self._shown: tuple[Mapping[str, Levels], CrossoverMark | None, str, str, tuple[str, str]] = \
            ({}, None, "", "throughput", ("", ""))

    def compose(self) -> ComposeResult:
        with Horizontal(id="sweep-body"):
            yield PlotextPlot(id="sweep-chart")
            yield LevelTable(id="sweep-table", zebra_stripes=True, cursor_type="row")
            yield StepsList(id="experiment-steps")
        yield Static("", id="sweep-verdict")
        yield Static("", id="sweep-live")

    def show_steps(self, steps: Sequence[str]) -> None:
        """An experiment's step list beside the chart; hidden when there is none."""
        panel = self.query_one(StepsList)
        panel.display = bool(steps)
        self.set_class(bool(steps), "-experiment")
        if steps:
            panel.show(steps)

    def show_live(self, text: str) -> None:
        """During a sweep's level, the client's load beside the server's own view of it, under the chart; hidden
        when there is none (touched only on change: the state repaint that calls it runs with every read)."""
        line = self.query_one("#sweep-live", Static)
        if str(line.content) != text:
            line.update(Text(text, no_wrap=True, overflow="ellipsis"))
            line.display = bool(text)

    @property
    def verdict(self) -> str:
        """The sentence under the chart: who leads on each side of the crossover, or why nothing is drawn."""
        return str(self.query_one("#sweep-verdict", Static).content)

    def on_mount(self) -> None:
        self.query_one("#experiment-steps", Static).display = False
        self.query_one("#sweep-verdict", Static).display = False
        self.query_one("#sweep-live", Static).display = False
        self._draw_chart({}, None)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.show(*self._shown))

    def on_resize(self) -> None:
        self.show(*self._shown)  # the table's headers and names follow the terminal's width

    def show(self, series: Mapping[str, Levels], crossover: CrossoverMark | None, status: str,
             metric: str = "throughput", grid_verdict: tuple[str, str] = ("", "")) -> None:
        """Draw every series (name -> level records) and the crossover, if any: a line on the chart and, under
        the pane, which series leads on each side in words. `metric` is what the chart's y axis shows: output
        tok/s ("throughput") or requests/s meeting the sweep's SLO ("goodput"); its x axis is the concurrency, or
        the request rate when the levels are open-loop ones. `grid_verdict`: a tuning grid's bands (in full, and
        brief for a narrow pane), written under the chart."""
        self._shown = (series, crossover, status, metric, grid_verdict)
        # Below the app's wide breakpoint the table gets half the pane (about 38 columns at 80): short headers.
        self._narrow = self.app.size.width < WIDE_SCREEN
        key = (tuple((name, tuple(series_points(levels, metric)), tuple(series_points(levels)))
                     for name, levels in series.items()), crossover, status, self._narrow, metric, grid_verdict,
               self.query_one(PlotextPlot).size, self.query_one(DataTable).size.width, self.app.theme)   # text backgrounds follow the theme
        if key == self._drawn:
            return
        self._drawn = key
        self.set_class(bool(series), "-charted")
        # the status names result files: escaped, never read as markup
        self.border_title = f"Sweep · {escape(status)}" if status else "Sweep · s starts a sweep, o overlays a result file"
        self.border_subtitle = ""
        if series and self.query_one(PlotextPlot).size.height < _LABELLED_HEIGHT:   # the chart leaves them out
            x_name = "request rate" if is_rate_series(series.values()) else "concurrency"
            self.border_subtitle = f"{CHART_METRICS[metric]} vs {x_name}"
        self._draw_chart(series, crossover, metric, grid_verdict[self._narrow])
        table = self.query_one(DataTable)
        table.clear(columns=True)
        headers = [LEVEL_COLUMNS[i] for i in _TABLE_ORDER]
        if is_rate_series(series.values()):
            headers = ["rate" if h == "C" else h for h in headers]
        if self._narrow:
            headers = [_SHORT_HEADERS.get(h, h) for h in headers]
        names = short_series_names(list(series)) if self._narrow else {n: n for n in series}
        rows: list[list[str | Text]] = []
        for index, (name, levels) in enumerate(series.items()):
            # The series' chart symbol in its colour before its name: the table is the chart's legend too.
            label = Text.assemble((series_symbol(index)[0], _TABLE_COLOURS[colour_index(index)]), " ")
            for level in levels:
                cells: list[str | Text] = list(level.cells(names[name]))
                cells[0] = label + cells[0]
                rows.append([cells[i] for i in _TABLE_ORDER])
        # Each column as wide as its widest text, and only the columns that fit whole (the rest are left out, never
        # cut: a cut figure reads as another one). The table's width less its vertical scrollbar's.
        widths = [max([cell_len(str(h)), *(cell_len(str(row[i])) for row in rows)]) for i, h in enumerate(headers)]
        # The names give way only while they stay apart (a grid's settings differ at their end); 2: the symbol.
        floor = 2 + distinct_width(list(names.values()), 10)
        widths[0], kept = fit_columns(widths, table.size.width - 1, 2 * table.cell_padding, floor)
        for header, width in zip(headers[:kept], widths):
            table.add_column(header, width=width)
        for row in rows:
            first = row[0]
            label = Text(first) if isinstance(first, str) else first.copy()
            label.truncate(widths[0], overflow="ellipsis")   # a long overlay's name: its end gives way
            table.add_row(label, *row[1:kept])

    def _draw_chart(self, series: Mapping[str, Levels], crossover: CrossoverMark | None,
                    metric: str = "throughput", grid_verdict: str = "") -> None:
        """The chart (specmon.ui.plot) and, in the line under it, the verdict."""
        chart = self.query_one(PlotextPlot)
        plt = chart.plt
        plt.clear_data()
        plt.clear_figure()
        rate = is_rate_series(series.values())
        curves = [(name, fmt.downsample(series_points(levels, metric), _MAX_POINTS))
                  for name, levels in series.items()]
        short = chart.size.height < _LABELLED_HEIGHT   # no axis names, no legend (the table's symbols say it)
        if series and not short:
            plt.xlabel("request rate (req/s)" if rate else "concurrency")
            plt.ylabel(CHART_METRICS[metric])
        marked = draw_sweeps(plt, curves, crossover, height=chart.size.height - (1 if short else 2),
                             width=chart.size.width, legend=not short, background=self._canvas(),
                             envelope=len(curves) >= GRID_SERIES and crossover is None)
        verdict = ""
        if crossover is not None and crossover.concurrency > 0:
            verdict = crossover_words(crossover.concurrency, crossover.ahead_below, crossover.ahead_above,
                                      crossover.mode)
            if not marked:
                plt.title(f"crossover {load_words(crossover.concurrency, crossover.mode)}")
        elif series and grid_verdict and metric == "throughput":
            verdict = grid_verdict
        elif series and metric == "goodput" and not any(points for _, points in curves):
            verdict = "no goodput in these sweeps: sweep with --slo (or [sweep] slo)"
        elif not series:   # an empty frame says what would fill it
            plt.xticks([])
            plt.yticks([])
            plt.xlim(0, 1)
            plt.ylim(0, 1)
            plt.text("no sweep yet", 0.5, 0.5, alignment="center", background=self._canvas(),
                     color=Color.parse(self.app.theme_variables.get("foreground", "white")).rgb)
        panel = self.query_one("#sweep-verdict", Static)
        panel.update(Content(verdict))   # plain text: it names `[sweep]` keys
        panel.display = bool(verdict)
        chart.refresh()

    def _canvas(self) -> tuple[int, int, int]:
        """The chart's background, for its text (plotext would take its default canvas colour, white)."""
        return Color.parse(self.app.theme_variables.get("surface", "black")).rgb
