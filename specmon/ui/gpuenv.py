"""GPU / environment pane: a reserved slot. The GPU/NCCL work fills it with per-GPU memory and utilisation and the
server's NCCL_/CUDA_ environment; until then it says so, so the layout (and its snapshots) already has its place."""

from __future__ import annotations

from textual.widgets import Static


class GpuEnvPane(Static):
    """Placeholder for GPU utilisation, memory and the server's NCCL/CUDA environment."""

    BORDER_TITLE = "GPU / env"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("[dim]GPU and NCCL environment: not available yet[/]", **kwargs)  # type: ignore[arg-type]
