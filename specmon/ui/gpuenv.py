"""GPU / environment pane: the GPUs of the selected profile's host with sparklines and who holds each (view
"gpus"), the selected profile's environment (view "env") and its differences from the previously selected
profile (view "diff"). `e` cycles the views; the engine feeds the data (GpusUpdated messages, env reports)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.content import Content
from textual.markup import escape
from textual.message import Message
from textual.widgets import Static

from specmon.model.env import Difference, EnvReport, diff_lines, report_lines
from specmon.model.gpu import GpuBoard, GpuTrack, sparkline

VIEWS = ("gpus", "env", "diff")


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


def render_gpus(host: str, board: GpuBoard, known: Mapping[str, str], selected_run: str | None,
                width: int) -> Content:
    """Two lines a GPU: index, model, utilisation, memory (GiB), power; then a utilisation sparkline and the run
    (profile) or process holding it. The selected run's GPUs are marked ▶. `width` is the pane's inner width.

    Built as styled segments, not markup: parsing ~20 lines of markup costs ~10x more, once a second."""
    tracks = board.gpus()
    parts: list[tuple[str, str]] = [(host, "bold"), (f" · {len(tracks)} GPU{'s' if len(tracks) != 1 else ''}\n", "")]
    if board.error:
        parts.append((board.error + "\n", "$warning"))
    spark_width = max(4, min(24, width // 2))
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
        parts += [(head + "\n", style), ("  " + sparkline(track.utilization, 100.0, spark_width), "$primary"),
                  (" " + _holders(track, known)[: max(4, width - spark_width - 3)] + "\n", "")]
    if board.apps_error:
        parts.append((f"holders unknown: {board.apps_error}", "dim"))
    return Content.assemble(*parts).rstrip()


def render_env(report: EnvReport) -> str:
    """The env report's lines, section headings bold."""
    return "\n".join(escape(line) if line.startswith(" ") else f"[b]{escape(line)}[/]" for line in report_lines(report))


def render_diff(a: EnvReport, b: EnvReport, diffs: Sequence[Difference]) -> str:
    """The differences, each highlighted; headings bold."""
    out = []
    for line in diff_lines(a, b, diffs):
        out.append(f"[$warning]{escape(line)}[/]" if line.startswith("  ") else f"[b]{escape(line)}[/]")
    return "\n".join(out)


class GpuEnvPane(Static):
    """GPUs with sparklines, the environment, or a diff (one of VIEWS at a time)."""

    BORDER_TITLE = "GPU / env"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    def __init__(self, **kwargs: object) -> None:
        super().__init__("[dim]GPUs: waiting for nvidia-smi · e: env / diff[/]", **kwargs)  # type: ignore[arg-type]
        self._text: str | Content = ""
        self.view = "gpus"
        self._gpus: GpusUpdated | None = None
        self.selected_run: str | None = None

    def show(self, text: str | Content) -> None:
        """Replace the pane's text (markup, or ready-made Content). Its size is fixed by the layout, so no relayout
        is asked for: a relayout repaints every neighbouring pane, which at 1 Hz would cost ~20 KiB/s of terminal
        output. Unchanged text is not repainted."""
        if text != self._text:
            self._text = text
            self.update(text, layout=False)

    def set_view(self, view: str) -> None:
        """Switch to one of VIEWS (the gpus view repaints at once from the last board)."""
        self.view = view
        self.border_title = "GPU / env" if view == "gpus" else f"GPU / env · {view}"
        if view == "gpus" and self._gpus is not None:
            self._paint_gpus()
        elif view != "gpus":
            self.show(f"[dim]{view}: reading…[/]")

    def show_gpus(self, update: GpusUpdated, selected_run: str | None) -> None:
        """Keep the latest board; paint it when the gpus view is showing."""
        self._gpus = update
        self.selected_run = selected_run
        if self.view == "gpus":
            self._paint_gpus()

    def _paint_gpus(self) -> None:
        assert self._gpus is not None
        width = max(20, self.content_region.width or 30)
        self.show(render_gpus(self._gpus.host, self._gpus.board, self._gpus.known_runs, self.selected_run, width))
