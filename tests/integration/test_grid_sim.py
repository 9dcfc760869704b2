"""A tuning grid end to end on `specmon sim`, run as the installed command: the baseline and two variants of the
demo EAGLE-3 profile launched, swept and stopped in turn by the experiment runner, to a verdict whose bands match
the sim's ground truth (computed from its model without running); `specmon report` on the result directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ports import free_port
from process_support import run_specmon, specmon_script
from test_experiment_sim import level_lines, port_is_free, write_config
from test_sim_tuning import truth

from specmon.model.config import load_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GRID = """[experiments.grid]
base = "demo-eagle3"
baseline = "demo-baseline"
vary = { "--speculative-num-steps" = [1, 5] }
levels = [1, 2, 16]
repeats = 2
duration_s = 1.5
max_load_s = 60
"""


def test_a_grid_runs_unattended_to_the_bands_the_sim_model_implies(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    used: list[int] = []

    def ports() -> int:
        used.append(free_port())
        return used[-1]

    config_path = write_config(tmp_path / "profiles.toml", ports, GRID)
    expected = truth(load_config(config_path, env={}), "grid")
    env = dict(os.environ, HOME=str(home), XDG_STATE_HOME=str(home / "state"), XDG_CONFIG_HOME=str(home / "cfg"))
    done = subprocess.run([specmon_script(), "--config", str(config_path), "experiment", "grid", "--json",
                           "--results-dir", str(tmp_path / "results")],
                          capture_output=True, text=True, timeout=280, cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    # Every variant ran under its readable name: steps, result files, results.
    names = ["demo-baseline", "demo-eagle3 steps=1", "demo-eagle3 steps=5"]
    assert [p["profile"] for p in result["profiles"]] == names
    assert all(p["status"] == "done" for p in result["profiles"])
    directory = Path(result["directory"])
    directory = directory if directory.is_absolute() else tmp_path / directory
    assert (directory / "demo-eagle3 steps=5.pass2.jsonl").is_file()
    assert "demo-eagle3 steps=1: launch: attempt 1" in done.stderr
    # The whole grid's ETA from the first step on, kept current: the sweeps from levels x repeats x duration_s and the
    # loads, unknown here (no load history, no expected_load_s), counted apart until a variant's load is measured.
    assert done.stderr.splitlines()[0].endswith("[0/3 done · ETA 27 s + 3 loads]"), done.stderr
    assert re.search(r"steps=1: ready: .*\[1/3 done · ETA \d+ s\]$", done.stderr, re.M), done.stderr
    etas = [(int(d), int(m or 0) * 60 + int(s)) for d, m, s in
            re.findall(r"\[(\d)/3 done · ETA (?:(\d+) min )?(\d+) s\]$", done.stderr, re.M)]
    assert [d for d, _ in etas] == sorted(d for d, _ in etas) and etas[-1][0] == 2, etas
    assert etas[-1][1] < etas[len(etas) // 2][1] < etas[0][1], etas
    variant = next(p for p in result["profiles"] if p["profile"] == "demo-eagle3 steps=5")
    assert variant["setup"]["command"][-2:] == ["--speculative-num-steps", "5"]
    # The bands match the model's: which levels each covers and who leads it (ties may be named beside).
    measured = [(tuple(b["levels"]), b["best"]) for b in result["grid"]["bands"]]
    assert measured == [(b.levels, b.leader) for b in expected.bands], (result["verdict"], expected.sentence)
    assert result["verdict"].startswith("C 1-2: steps=5 (+") and result["verdict"].endswith("; C >= 16: baseline")
    # The report: the verdict table (Markdown) and each variant's setup.
    report = run_specmon("report", str(directory), cwd=tmp_path, timeout=280)
    assert report.returncode == 0, report.stderr
    text = (directory / "report.md").read_text()
    assert "## Best setting per load band" in text and "| C >= 16 | baseline | – | – |" in text
    assert "| 1 | steps=5 | +" in text
    for name, steps in (("demo-eagle3 steps=1", "1"), ("demo-eagle3 steps=5", "5")):
        assert f"- **{name}**" in text and f"--speculative-num-steps {steps}`" in text
    assert all(port_is_free(p) for p in used)


def test_kill_9_mid_grid_then_resume_repeats_no_finished_level_of_any_variant(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    config = write_config(tmp_path / "profiles.toml", free_port_factory,
                          GRID.replace("levels = [1, 2, 16]", "levels = [1, 16]"))
    base, first, last = "demo-baseline", "demo-eagle3 steps=1", "demo-eagle3 steps=5"
    results = tmp_path / "results"
    proc = subprocess.Popen([specmon_script(), "--config", str(config), "experiment", "grid", "--results-dir", str(results)],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    directory: Path | None = None
    try:
        # Kill once the last variant has finished a level of its first pass: mid-grid, mid-variant.
        while time.monotonic() < deadline and proc.poll() is None:
            found = list(results.glob("experiments/grid-*/experiment.json"))
            if found:
                directory = found[0].parent
                if level_lines(directory).get(last):
                    break
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert directory is not None
    before = level_lines(directory)
    every = sorted((p, c) for p in (1, 2) for c in (1, 16))
    assert sorted(before[base]) == every and sorted(before[first]) == every and 1 <= len(before[last]) < 4

    done = run_specmon("--config", str(config), "experiment", "grid", "--resume", "--json",
                       "--results-dir", str(results), cwd=tmp_path, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    after = level_lines(directory)
    for profile in (base, first, last):
        assert sorted(after[profile]) == every, (profile, after[profile])   # each (pass, level) exactly once
    assert set(before[last]) <= set(after[last])
    steps = [(s["profile"], s["step"]) for s in result["steps"]]
    assert (None, "resume") in steps
    assert steps.count((base, "launch")) == 1 and steps.count((first, "launch")) == 1   # finished: not run again
    assert (last, "adopt") in steps or steps.count((last, "launch")) == 2
    assert result["grid"]["bands"][0]["best"] == last


@pytest.mark.parametrize(("vary", "problem"), [
    ('{ "--port" = [30009] }', 'experiments.grid.vary.--port: would change the server\'s port'),
    ('{ "--speculative num steps" = [1] }', 'not a command flag'),
])
def test_a_refused_grid_starts_nothing(tmp_path: Path, free_port_factory: Callable[[], int], vary: str,
                                       problem: str) -> None:
    config = write_config(tmp_path / "profiles.toml", free_port_factory,
                          GRID.replace('vary = { "--speculative-num-steps" = [1, 5] }', f"vary = {vary}"))
    done = run_specmon("--config", str(config), "experiment", "grid", "--results-dir",
                       str(tmp_path / "results"), timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"profiles.toml:{config.read_text().splitlines().index(f'vary = {vary}') + 1}: " \
        in done.stderr and problem in done.stderr, done.stderr
    assert not (tmp_path / "results").exists()
