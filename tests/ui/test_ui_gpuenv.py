"""The GPU/env pane in the running app (Textual Pilot) with the real engine bridge and GPU probe, against the fake
`nvidia-smi` on PATH (no GPU on CI) and real profile interpreters for the env and diff views."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lifecycle_support import kill_marked
from paths import FIXTURES
from textual.widgets import Static
from ui_states import fed_app

from specmon.model.config import parse_config
from specmon.model.machine.gpu import GpuBoard, parse_query
from specmon.ui.app import SpecmonApp
from specmon.ui.bridge import EngineBridge
from specmon.ui.gpuenv import GpuEnvPane, sparklines
from specmon.ui.servers import ServersPane

pytestmark = pytest.mark.slow

FAKE = FIXTURES / "gpu" / "fake-nvidia-smi"


async def until(check: Callable[[], bool], pilot_pause: Callable[[], object], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


def pane_text(app: SpecmonApp) -> str:
    return app.query_one(GpuEnvPane).text


@pytest.fixture
def app_with_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SpecmonApp:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SMI_GPUS", "8")
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text('import os\nos.environ["NCCL_PROTO"] = "LL"\n')
    config = parse_config(
        f'[profiles.ll]\ncommand = "true"\npython = "{sys.executable}"\nport = 39201\n'
        f'env = {{ PYTHONPATH = "{inject}" }}\n'
        f'[profiles.plain]\ncommand = "true"\npython = "{sys.executable}"\nport = 39202\n', "test-profiles.toml")
    return SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                      state_path=tmp_path / "ui.json")


async def test_pane_shows_gpus_then_env_then_diff(app_with_gpus: SpecmonApp) -> None:
    app = app_with_gpus
    async with app.run_test(size=(160, 48)) as pilot:
        await until(lambda: "local · 8 GPUs" in pane_text(app), pilot.pause)
        text = pane_text(app)
        assert text.count("H200") == 8 and "free" in text
        # The sparkline grows with the 1 Hz... here 1 s ticks: wait for a second point of GPU 1's history.
        await until(lambda: "▁" in pane_text(app) or "█" in pane_text(app), pilot.pause)

        await pilot.press("e")
        await until(lambda: "injected at start-up" in pane_text(app), pilot.pause)
        assert "NCCL_PROTO=LL" in pane_text(app) and "sitecustomize.py" in pane_text(app)

        await pilot.press("e")
        await until(lambda: "env: injected:" in pane_text(app), pilot.pause)
        assert "NCCL_PROTO" in pane_text(app) and "B: profile plain" in pane_text(app)

        await pilot.press("e")
        await until(lambda: "8 GPUs" in pane_text(app), pilot.pause)


async def test_the_confound_banner_names_an_env_difference_of_the_compared_runs(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    # Two sims alike in every argument; one profile's interpreter gets NCCL_PROTO=LL from a sitecustomize.py. Once
    # both run, the banner over the Servers pane names that difference (read by the start-up probe in a worker).
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text('import os\nos.environ["NCCL_PROTO"] = "LL"\n')
    parts = []
    for name, env in (("ll", f'env = {{ PYTHONPATH = "{inject}" }}\n'), ("plain", "")):
        port = free_port_factory()
        command = json.dumps(["specmon", "sim", "--port", str(port), "--shards", "2", "--load-seconds", "1"])
        parts.append(f'[profiles.{name}]\ncommand = {command}\npython = "{sys.executable}"\nport = {port}\n{env}')
    config = parse_config("".join(parts), "test-profiles.toml")
    app = SpecmonApp(config, engine=EngineBridge(config, autolaunch=["ll", "plain"], results_dir=tmp_path / "r"),
                     demo=True, state_path=tmp_path / "ui.json")
    runs: list[str] = []

    def banner() -> str:
        return str(app.query_one("#confound", Static).render())

    try:
        async with app.run_test(size=(160, 48)) as pilot:
            await until(lambda: all(app.state.rows[p].state == "ready" for p in ("ll", "plain")), pilot.pause, 90)
            runs = [str(app.state.rows[p].run_id) for p in ("ll", "plain")]
            await until(lambda: "NCCL_PROTO" in banner(), pilot.pause, 90)
            # (the values in the order of the first run's report, then this run's: the shared rule's wording)
            assert "plain vs ll: differs: NCCL_PROTO: LL vs (unset) [env: injected]" in banner()
            assert app.query_one(ServersPane).border_title == "Servers · ⚠ WARNING: confounded"
            await pilot.press("q")   # demo: q stops both servers
            await until(lambda: not app.is_running, pilot.pause, 60)
    finally:
        kill_marked(runs)


async def test_gpu_lines_take_the_new_theme_colours(tmp_path: Path) -> None:
    # The gpus view keeps its painted lines between samples; a theme change must repaint them in the new colours.
    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        pane = app.query_one(GpuEnvPane)
        await until(lambda: "gpu7 · 2 GPUs" in pane.text, pilot.pause)

        def colours() -> set[str]:
            return {str(seg.style.color) for y in range(1, 5) for seg in pane.render_line(y) if seg.style}

        dark = colours()
        app.theme = "specmon-light"
        await until(lambda: colours() != dark, pilot.pause, 10)
        app.theme = "specmon-dark"
        await until(lambda: colours() == dark, pilot.pause, 10)


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_e_opens_the_hidden_gpu_pane_full_screen_on_a_narrow_terminal(
        app_with_gpus: SpecmonApp, size: tuple[int, int]) -> None:
    # Below 150 columns the pane has no room beside the log. It was unreachable there: `e` changed its view
    # unseen and said nothing. Now `e` opens it full screen as it is (the GPUs), `e` cycles there, esc closes it.
    app = app_with_gpus
    async with app.run_test(size=size) as pilot:
        pane = app.query_one(GpuEnvPane)
        await pilot.pause()
        assert pane.region.width == 0   # hidden until asked for
        await pilot.press("e")
        await until(lambda: "local · 8 GPUs" in pane_text(app), pilot.pause)
        assert app.screen.maximized is pane and pane.region.width == size[0]
        assert pane.view == "gpus" and pane_text(app).count("H200") == 8
        await pilot.press("e")
        await until(lambda: "injected at start-up" in pane_text(app), pilot.pause)
        assert app.screen.maximized is pane
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None and pane.region.width == 0


@pytest.mark.parametrize("smi", ["missing", "driver-down"])
async def test_a_host_without_gpus_shows_the_selected_profiles_environment_under_the_gpu_line(
        app_with_gpus: SpecmonApp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smi: str) -> None:
    # With no GPUs to show, the gpus view was one line ("nvidia-smi not found") in a pane left empty at 160x48 (the
    # README's screenshot). It now shows that line and, under it, the selected profile's environment, which
    # follows the selection.
    path = [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    if smi == "driver-down":   # what the real tool prints (exit 9) on a host whose driver is not loaded
        down = tmp_path / "down"
        down.mkdir()
        (down / "nvidia-smi").write_text(
            "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\nexit 9\n")
        (down / "nvidia-smi").chmod(0o755)
        path.insert(0, str(down))
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    app = app_with_gpus
    async with app.run_test(size=(160, 48)) as pilot:
        line = "nvidia-smi not found" if smi == "missing" else "couldn't communicate with the NVIDIA driver"
        await until(lambda: line in pane_text(app) and "profile ll on local" in pane_text(app), pilot.pause)
        text = pane_text(app)
        assert "injected at start-up" in text and "NCCL_PROTO=LL" in text
        assert text.index(line) < text.index("profile ll on local")
        if smi == "driver-down":   # the env report's note quotes the tool, not "not XML"
            assert "nvidia-smi -q -x exited with status 9: NVIDIA-SMI has failed" in text and "not XML" not in text
        await pilot.press("j")   # the next profile: its environment replaces the first one's
        await until(lambda: "profile plain on local" in pane_text(app), pilot.pause)
        assert line in pane_text(app) and "NCCL_PROTO" not in pane_text(app)
        await pilot.press("e")   # the env view itself is unchanged
        await until(lambda: "GPU / env · env" == app.query_one(GpuEnvPane).border_title, pilot.pause)
        await until(lambda: pane_text(app).startswith("profile plain on local"), pilot.pause)


def test_gpu_sparklines_scale_to_100_percent_and_fill_their_width() -> None:
    """The pane's utilisation sparklines, as the GPU pane drew them before it shared the card's sparkline
    function: 0-100 %, the last values that fit, padded on the left to half the pane (4 to 24 cells)."""
    board = GpuBoard(history=30)
    rows = parse_query((FAKE.parent / "smi-query.csv").read_text())
    for t, util in enumerate([0, 7, 30, 55, 100, 64]):
        board.add_tick({g.uuid: dataclasses.replace(g, utilization_pct=float(util)) for g in rows}, float(t))
    assert sparklines(board, 40)[rows[0].uuid] == "              ▁▁▃▅█▅"
    assert sparklines(board, 6)[rows[0].uuid] == "▃▅█▅"


async def test_walking_the_profiles_for_a_long_session_leaves_no_pile_of_finished_gpu_watches(
        app_with_gpus: SpecmonApp) -> None:
    """Every selection change asks for a GPU watch; the finished ones are let go (a session kept open for days
    walks the list thousands of times and must not grow with it)."""
    app = app_with_gpus
    engine = app.engine
    assert isinstance(engine, EngineBridge)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(lambda: "local · 8 GPUs" in pane_text(app), pilot.pause)
        for _ in range(30):
            await pilot.press("j")
            await pilot.press("k")
        await until(lambda: all(task.get_name() != "tui-gpu-watch" for task in engine._tasks), pilot.pause)
        assert len(engine._tasks) <= 5, [task.get_name() for task in engine._tasks]
