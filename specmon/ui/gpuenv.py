"""GPU / environment pane: a reserved slot. The GPU/NCCL work fills it with per-GPU memory and utilisation and the
server's NCCL_/CUDA_ environment; until then it says so, so the layout (and its snapshots) already has its place."""

from __future__ import annotations

from textual.widgets import Static


class GpuEnvPane(Static):
    """Placeholder for GPU utilisation, memory and the server's NCCL/CUDA environment."""

    BORDER_TITLE = "GPU / env"
    ALLOW_MAXIMIZE = True  # `m` fills the screen with this pane

    def __init__(self, **kwargs: object) -> None:
        super().__init__("[dim]GPU and NCCL environment: not available yet[/]", **kwargs)  # type: ignore[arg-type]
        self._text = ""

    def show(self, text: str) -> None:
        """Replace the pane's text (e.g. one GPU poll). Its size is fixed by the layout, so no relayout is asked
        for: a relayout repaints every neighbouring pane, which at 1 Hz would cost ~20 KiB/s of terminal output."""
        if text != self._text:
            self._text = text
            self.update(text, layout=False)
