"""Fixed model states for the TUI's snapshot and layout tests: two demo profiles mid-comparison.

Everything here is frozen data (no clocks, no processes), so a screenshot of the app fed with it is byte-stable.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from paths import FIXTURES

from specmon.model.charts.levelrow import LevelRow
from specmon.model.config import Config, Profile, SweepDefaults
from specmon.model.experiments.bands import GridVerdict, grid_verdict
from specmon.model.experiments.verdict import LevelSummary, ProfileSummary
from specmon.model.machine.env import EnvReport, Injection, ProcessEnv, Startup
from specmon.model.machine.gpu import APPS_FIELDS, QUERY_FIELDS, GpuBoard, parse_apps, parse_query, parse_run_markers
from specmon.model.runs.runstate import LogPhase
from specmon.ui.app import SpecmonApp
from specmon.ui.gpuenv import GpuEnvPane, GpusUpdated, render_env
from specmon.ui.messages import GridVerdictChanged
from specmon.ui.rows import CrossoverMark, LogEntry, ServerRow
from specmon.ui.state import chart_cleared

PROFILES = ("demo-baseline", "demo-eagle3")


def demo_config(keys: dict[str, str] | None = None) -> Config:
    profiles = {
        name: Profile(name=name, command=("specmon", "sim"), port=port)
        for name, port in zip(PROFILES, (30001, 30002))
    }
    return Config(source="built-in demo profiles", profiles=profiles, sweep=SweepDefaults(levels=(1, 4, 16)),
                  keys=keys or {})


ROWS = [
    ServerRow(profile="demo-baseline", run_id="r-0001", state="ready", phase=LogPhase.READY, shards_done=8, shards_total=8,
              elapsed_s=41.0, past_load_s=44.0, kv_cache_tokens=1_203_456, mem_fraction_static=0.85,
              last_activity_ago_s=3.0, pid=4242, port=30001),
    ServerRow(profile="demo-eagle3", run_id="r-0002", state="loading", phase=LogPhase.LOADING_WEIGHTS, shards_done=5,
              shards_total=8, eta_s=17.0, elapsed_s=23.0, past_load_s=39.0, kv_cache_tokens=None,
              mem_fraction_static=0.80, spec_algorithm="EAGLE3", spec_steps=3, last_activity_ago_s=1.0, pid=4243,
              port=30002),
]

# A launch refused on a held port, with the message PortBusy gives (the holder's command line is long).
HELD_PORT = ("port 30001 is already in use (profile demo-baseline) by pid 81234 (python3 -m sglang.launch_server "
             "--model-path meta-llama/Llama-3.1-8B-Instruct --tp 8 --port 30001 --mem-fraction-static 0.85 "
             "--speculative-algorithm EAGLE3 --speculative-draft-model-path jamesliu1/sglang-EAGLE3-Llama-3.1-"
             "Instruct-8B); stop it or choose another port (free: 30003, 30004) · try: specmon demo --ports "
             "30003,30004")
FAILED_ROWS = [ServerRow(profile="demo-baseline", state="failed", failure=HELD_PORT, port=30001), ROWS[1]]

LOG = [
    LogEntry("[2026-11-29 15:00:01] server_args=ServerArgs(model_path='demo/llama-8b', tp_size=1, ...)"),
    LogEntry("Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:11<00:11,  2.80s/it]", "shard"),
    LogEntry("3,120 lines skipped", "marker"),
    LogEntry("Loading safetensors checkpoint shards: 100% Completed | 8/8 [00:22<00:00,  2.77s/it]", "shard"),
    LogEntry("[2026-11-29 15:00:25] KV Cache is allocated. #tokens: 1203456, K size: 36.73 GB", "kv"),
    LogEntry("[2026-11-29 15:00:41] The server is fired up and ready to roll!", "ready"),
]


def level(c: int, tput: float, itl99: float, tpc: float, bound: bool = False) -> LevelRow:
    return LevelRow(concurrency=c, output_throughput=tput, ttft_p50_ms=20.0 + c, tpot_p50_ms=1000 / (tput / c),
                    itl_p99_ms=itl99, tokens_per_chunk=tpc, client="BOUND" if bound else "ok")


BASELINE = [level(1, 93.0, 11.2, 1.0), level(4, 350.0, 12.0, 1.0), level(16, 690.0, 25.1, 1.0),
            level(64, 770.0, 80.4, 1.0, bound=False)]
EAGLE = [level(1, 140.0, 30.5, 2.4), level(4, 370.0, 33.0, 2.4), level(16, 480.0, 60.2, 2.3),
         level(64, 510.0, 190.0, 2.3)]
CROSSOVER = CrossoverMark(5.0, ahead_below="demo-eagle3", ahead_above="demo-baseline")


def gpu_board() -> GpuBoard:
    """The real two-H200 captures (tests/fixtures/gpu/), GPU 0 held by run r-0001, a few fixed history points."""
    fixtures = FIXTURES / "gpu"
    samples = {s.uuid: s for s in parse_query((fixtures / "smi-query.csv").read_text())}
    board = GpuBoard(history=30)
    for tick in range(12):
        board.add_tick(samples, float(tick))
        for track in board.tracks.values():
            track.utilization[-1] = float((tick * 17 + (track.latest.index or 0) * 40) % 100)
    apps = parse_apps((fixtures / "apps.csv").read_text())
    board.set_apps(apps[:1], parse_run_markers("582 SPECMON_RUN_ID=r-0001\n"))
    return board


def no_gpu_board() -> GpuBoard:
    """A host without an NVIDIA driver, as the GPU probe leaves its board."""
    board = GpuBoard(history=30)
    board.error = "local: nvidia-smi not found (no NVIDIA driver here?)"
    return board


# The environment of a running demo-baseline as the env probe reads it (redacted already, as reports are built).
RUNNING_ENV = EnvReport(
    subject="run r-0001 (profile demo-baseline)", host="local", launch_env={"NCCL_DEBUG": "WARN"},
    startup=Startup(python="/opt/venv/bin/python3", injections=(
        Injection("NCCL_ALGO", "Ring", None, "/opt/venv/lib/python3.11/site-packages/sitecustomize.py"),)),
    processes=(ProcessEnv(4242, "python3", {"NCCL_DEBUG": "WARN", "NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0,1",
                                             "SGLANG_ENABLE_TORCH_COMPILE": "0"}, role="server"),),
    args={"mem fraction": "0.88", "model": "demo/Kimi-K2.5-int4", "tp": "8"},
    notes=("local: no nvidia-smi: no NVIDIA driver, CUDA driver or GPU versions",))


def fed_app(tmp: Path, rows: list[ServerRow] = ROWS, gpus: bool = True) -> SpecmonApp:
    """An app with no engine, its panes fed the fixed states above (`rows`: the Servers pane's; `gpus`: the two
    H200s, else a host without a driver and the selected profile's environment under its line). Themes come from
    the repo; state in `tmp`."""
    app = SpecmonApp(demo_config(), state_path=tmp / "ui.json")

    def feed() -> None:
        app.update_rows(rows)
        app.add_log("demo-baseline", LOG)
        app.set_series("demo-baseline", BASELINE)
        app.set_series("demo-eagle3", EAGLE, crossover=CROSSOVER)
        app.set_sweep_status("done: 2 profiles × 4 levels", running=False)
        if gpus:
            app.post_message(GpusUpdated("gpu7", gpu_board(), {"r-0001": "demo-baseline"}))
        else:
            app.post_message(GpusUpdated("local", no_gpu_board(), {"r-0001": "demo-baseline"}))
            pane = app.query_one(GpuEnvPane)
            # Once laid out, as the app's own read is (it wraps the report to the pane's width).
            app.call_after_refresh(lambda: pane.show_env_below(render_env(RUNNING_ENV, pane.content_size.width)))
        app.flush()

    app.call_later(feed)
    return app


def screen_text(app: SpecmonApp) -> str:
    """What the terminal shows now (the top screen, modal included), as plain text lines."""
    import io

    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=app.size.width, height=app.size.height, color_system=None,
                      force_terminal=False, legacy_windows=False)
    console.print(app.screen._compositor.render_update(full=True))
    return buffer.getvalue()


# Goodput (requests/s meeting the SLO) of the same levels: eagle3 meets the SLO at low load, loses it sooner.
GOODPUT = {"demo-baseline": (0.9, 3.4, 6.1, 4.0), "demo-eagle3": (1.4, 3.9, 3.2, 0.6)}
GOODPUT_CROSSOVER = CrossoverMark(6.2, ahead_below="demo-eagle3", ahead_above="demo-baseline")
# A result file overlaid with `o` (its series is named by the file's stem): an earlier eagle3 run, a little slower.
OVERLAY = [level(1, 121.0, 31.0, 2.2), level(4, 330.0, 35.0, 2.2), level(16, 430.0, 64.0, 2.1),
           level(64, 455.0, 201.0, 2.1)]


def with_goodput(name: str, levels: list[LevelRow]) -> list[LevelRow]:
    return [dataclasses.replace(lv, goodput=g) for lv, g in zip(levels, GOODPUT[name])]


def fed_goodput_app(tmp: Path) -> SpecmonApp:
    """The fed app whose sweeps also measured goodput against an SLO (the chart shows it after `g`)."""
    app = fed_app(tmp)

    def feed() -> None:
        app.set_series("demo-baseline", with_goodput("demo-baseline", BASELINE))
        app.set_series("demo-eagle3", with_goodput("demo-eagle3", EAGLE), crossover=CROSSOVER,
                       goodput_crossover=GOODPUT_CROSSOVER)
        app.flush()

    app.call_later(feed)
    return app


def fed_overlay_app(tmp: Path) -> SpecmonApp:
    """The fed app with a result file overlaid (a third series)."""
    app = fed_app(tmp)

    def feed() -> None:
        app.set_series("eagle3-20261128T101500Z", OVERLAY, crossover=CROSSOVER)
        app.flush()

    app.call_later(feed)
    return app


# A tuning grid under way (issue 36): the baseline and six variants named by their settings, as the bridge names a
# grid's series; deep drafts lead at low load, shallow ones in the middle, the baseline at saturation.
GRID_LEVELS = (1, 2, 4, 8, 16)
GRID_MEANS = {
    "baseline": (95, 185, 350, 600, 760),
    "steps=1 topk=1": (118, 226, 410, 640, 730),
    "steps=1 topk=4": (120, 228, 405, 620, 700),
    "steps=3 topk=1": (132, 250, 440, 650, 720),
    "steps=3 topk=4": (136, 252, 430, 610, 660),
    "steps=5 topk=1": (142, 262, 420, 590, 640),
    "steps=5 topk=4": (145, 258, 400, 550, 600),
}
GRID_STEPS = [f"12:0{n}:00 demo-eagle3 {name} {step}" for n, (name, step) in enumerate([
    ("steps=5 topk=1", "stopped: run r-0006: port and GPUs free (1.2s)"),
    ("steps=5 topk=4", "launch: attempt 1"),
    ("steps=5 topk=4", "ready: /health 200 (16.4s)"),
    ("steps=5 topk=4", "sweep: pass 1/3: C=1,2,4,8,16 after warm-up"),
    ("steps=5 topk=4", "level: C=1: 145.0 tok/s, accept log 3.10 (2.0s)"),
])]
GRID_STATUS = "grid demo-grid 6/7 done · ETA 1:05: steps=5 topk=4 pass 1 C=2 (2/5) level 3.1s req · 258 tok/s"


def grid_bands() -> GridVerdict:
    """The grid's verdict as the bridge posts it: its bands, from three repeats of each mean ± 2 tok/s."""
    profiles = [ProfileSummary("demo-baseline" if name == "baseline" else f"demo-eagle3 {name}", None,
                               tuple(LevelSummary(c, (m - 2, m, m + 2)) for c, m in zip(GRID_LEVELS, means)))
                for name, means in GRID_MEANS.items()]
    return grid_verdict(profiles, "demo-baseline")


def fed_grid_app(tmp: Path) -> SpecmonApp:
    """The fed app in a tuning grid's experiment view: seven series, the steps, the progress line."""
    app = fed_app(tmp)

    bands = grid_bands()

    def feed() -> None:
        chart_cleared(app.state)   # as ChartCleared does when an experiment starts
        for name, means in GRID_MEANS.items():
            app.set_series(name, [level(c, m, 12.0 + c, 1.0 if name == "baseline" else 2.2)
                                  for c, m in zip(GRID_LEVELS, means)])
        app.set_experiment_steps(GRID_STEPS)
        app.set_sweep_status(GRID_STATUS, running=True)
        app.post_message(GridVerdictChanged(bands.sentence, bands.brief))
        app.flush()

    app.call_later(feed)
    return app


# A fleet: 64 profiles on 16 hosts (4 each), most ready, a few loading, one failed and two stalled in the middle of
# the list (where, in the profiles file's order, they would be far below an 80x24 screen's fold).
FLEET_HOSTS = tuple(f"gpu{h:02d}" for h in range(1, 17))
FLEET_PROFILES = tuple(f"llama-{i:02d}" for i in range(64))
FLEET_TROUBLE = {"llama-37": "failed", "llama-41": "stalled", "llama-50": "stalled"}
FLEET_LOADING = ("llama-05", "llama-22", "llama-60")


def fleet_config() -> Config:
    profiles = {name: Profile(name=name, command=("specmon", "sim"), host=FLEET_HOSTS[i % 16], port=30000 + i // 16)
                for i, name in enumerate(FLEET_PROFILES)}
    return Config(source="fleet profiles", profiles=profiles, sweep=SweepDefaults(levels=(1, 4, 16)))


def fleet_row(i: int, name: str) -> ServerRow:
    where = {"host": FLEET_HOSTS[i % 16], "port": 30000 + i // 16, "run_id": f"r-{i:04d}", "pid": 5000 + i,
             "kv_cache_tokens": 1_203_456, "mem_fraction_static": 0.85, "last_activity_ago_s": 2.0}
    trouble = FLEET_TROUBLE.get(name)
    if trouble == "failed":
        return ServerRow(profile=name, state="failed", shards_done=3, shards_total=8, elapsed_s=20.0,
                         failure="CUDA out of memory. Tried to allocate 2.00 GiB", **where)  # type: ignore[arg-type]
    if trouble == "stalled" or name in FLEET_LOADING:
        return ServerRow(profile=name, state="loading", phase=LogPhase.LOADING_WEIGHTS, stalled=trouble == "stalled",
                         shards_done=4, shards_total=8, eta_s=30.0, elapsed_s=25.0, **where)  # type: ignore[arg-type]
    return ServerRow(profile=name, state="ready", phase=LogPhase.READY, shards_done=8, shards_total=8, elapsed_s=41.0,
                     **where)  # type: ignore[arg-type]


FLEET_ROWS = [fleet_row(i, name) for i, name in enumerate(FLEET_PROFILES)]


def fed_fleet_app(tmp: Path) -> SpecmonApp:
    """64 runs on 16 hosts (FLEET_ROWS), no engine; the GPU pane shows one host's board."""
    app = SpecmonApp(fleet_config(), state_path=tmp / "ui.json")

    def feed() -> None:
        app.update_rows(FLEET_ROWS)
        app.post_message(GpusUpdated("gpu01", gpu_board(), {"r-0000": "llama-00"}))
        app.flush()

    app.call_later(feed)
    return app


def _stand_in_smi(query: str, env: dict[str, str]) -> str:
    """What the stand-in nvidia-smi (tests/fixtures/gpu/fake-nvidia-smi) answers to one query."""
    return subprocess.run([sys.executable, str(FIXTURES / "gpu" / "fake-nvidia-smi"), query,
                           "--format=csv,noheader,nounits"], env={**os.environ, **env}, capture_output=True,
                          text=True, check=True, timeout=30).stdout


def fleet_gpu_board(host: str) -> tuple[GpuBoard, dict[str, str]]:
    """A FLEET_HOSTS host's 8 GPUs as the stand-in nvidia-smi reports them, two held by each of the host's four
    runs (FLEET_ROWS), with a few fixed history points; and the run ids known to the app (run id -> profile)."""
    runs = [row for row in FLEET_ROWS if row.host == host]
    samples = {s.uuid: s for s in parse_query(_stand_in_smi(f"--query-gpu={','.join(QUERY_FIELDS)}",
                                                            {"FAKE_SMI_GPUS": "8"}))}
    board = GpuBoard(history=30)
    for tick in range(12):
        board.add_tick(samples, float(tick))
        for track in board.tracks.values():
            track.utilization[-1] = float((tick * 17 + (track.latest.index or 0) * 40) % 100)
    holders = ";".join(f"{gpu}:{row.pid}:60000" for i, row in enumerate(runs) for gpu in (2 * i, 2 * i + 1))
    apps = parse_apps(_stand_in_smi(f"--query-compute-apps={','.join(APPS_FIELDS)}", {"FAKE_SMI_APPS": holders}))
    board.set_apps(apps, parse_run_markers("".join(f"{row.pid} SPECMON_RUN_ID={row.run_id}\n" for row in runs)))
    return board, {row.run_id: row.profile for row in runs if row.run_id}
