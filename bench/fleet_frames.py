"""How often an idle fleet's screen is drawn, counted in-process (no timing involved): frames and cards rendered.

    python3 bench/fleet_frames.py [--seconds 20] [--size 160x48]

The TUI with the tests' 64-run fleet (tests/support/ui_states.FLEET_ROWS: 58 ready on 16 hosts) under Textual's
headless driver. Every second each ready run gets a /metrics read with new figures (as the serving view reads at
1 Hz), and half a second later the GPU pane a board whose utilisation moved. Over --seconds after a settling
period it counts the frames the compositor sent (partial updates with something in them) and the renders of each
card's text (`RunLines._render_content`), and prints both, per 10 s. bench/fleet_cost.py measures what this costs
the real app (idle CPU, and `idle_out_b_s`, the bytes it writes to its terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
from textual._compositor import Compositor  # noqa: E402
from ui_states import FLEET_ROWS, fed_fleet_app, fleet_gpu_board  # noqa: E402

from specmon.model.server.serving import ServingFigures, ServingUpdate  # noqa: E402
from specmon.ui.gpuenv import GpusUpdated  # noqa: E402
from specmon.ui.messages import ServingChanged  # noqa: E402
from specmon.ui.servers import RunLines  # noqa: E402


class Counts:
    """Frames sent and card renders, by what was rendered, from when `reset` was last called."""

    def __init__(self) -> None:
        self.frames = 0
        self.renders: collections.Counter[str] = collections.Counter()
        partial, render = Compositor.render_partial_update, RunLines._render_content
        counts = self

        def counted_partial(compositor: Compositor) -> object:
            update = partial(compositor)
            counts.frames += update is not None
            return update

        def counted_render(card: RunLines) -> None:
            counts.renders[f"{type(card).__name__} {getattr(card, 'profile', '')}".strip()] += 1
            render(card)

        Compositor.render_partial_update = counted_partial  # type: ignore[assignment, method-assign]
        RunLines._render_content = counted_render  # type: ignore[assignment, method-assign]

    def reset(self) -> None:
        self.frames = 0
        self.renders.clear()


async def count(seconds: int, cols: int, rows: int) -> Counts:
    counts = Counts()
    app = fed_fleet_app(Path(tempfile.mkdtemp(prefix="fleet-frames-")))
    ready = [row for row in FLEET_ROWS if row.state == "ready"]
    async with app.run_test(size=(cols, rows)) as pilot:
        await pilot.pause(1)
        board, known = fleet_gpu_board("gpu01")
        settle = 4
        for second in range(settle + seconds):
            if second == settle:
                counts.reset()
            figures = ServingFigures(running=second % 7, waiting=0, kv_pct=float(second % 50), tok_s=1000.0 + second)
            app.post_message(ServingChanged(*(ServingUpdate(row.profile, str(row.run_id), figures) for row in ready)))
            await pilot.pause(0.5)
            for track in board.tracks.values():
                track.utilization[-1] = float((second * 17 + (track.latest.index or 0) * 40) % 100)
            app.post_message(GpusUpdated("gpu01", board, known))
            await pilot.pause(0.5)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--size", default="160x48")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    counts = asyncio.run(count(args.seconds, cols, rows))
    per10 = 10 / args.seconds
    print(f"64 runs at {args.size}, reads every second, {args.seconds} s counted")
    print(f"frames per 10 s: {counts.frames * per10:.1f}")
    print(f"card renders per 10 s: {sum(counts.renders.values()) * per10:.1f} "
          f"({len(counts.renders)} cards and panes rendered at least once)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
