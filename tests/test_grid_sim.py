"""A tuning grid end to end on `specmon sim`, run as the installed command: the baseline and two variants of the
demo EAGLE-3 profile launched, swept and stopped in turn by the experiment runner, to a verdict whose bands match
the sim's ground truth (computed from its model without running); `specmon report` on the result directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from ports import free_port
from test_experiment_sim import SPECMON, port_is_free, run_specmon, write_config
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
    done = subprocess.run([SPECMON, "--config", str(config_path), "experiment", "grid", "--json",
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
    variant = next(p for p in result["profiles"] if p["profile"] == "demo-eagle3 steps=5")
    assert variant["setup"]["command"][-2:] == ["--speculative-num-steps", "5"]
    # The bands match the model's: which levels each covers and who leads it (ties may be named beside).
    measured = [(tuple(b["levels"]), b["best"]) for b in result["grid"]["bands"]]
    assert measured == [(b.levels, b.leader) for b in expected.bands], (result["verdict"], expected.sentence)
    assert result["verdict"].startswith("C 1-2: steps=5 (+") and result["verdict"].endswith("; C >= 16: baseline")
    # The report: the verdict table (Markdown) and each variant's setup.
    report = run_specmon(tmp_path, "report", str(directory))
    assert report.returncode == 0, report.stderr
    text = (directory / "report.md").read_text()
    assert "## Best setting per load band" in text and "| C >= 16 | baseline | – | – |" in text
    assert "| 1 | steps=5 | +" in text
    for name, steps in (("demo-eagle3 steps=1", "1"), ("demo-eagle3 steps=5", "5")):
        assert f"- **{name}**" in text and f"--speculative-num-steps {steps}`" in text
    assert all(port_is_free(p) for p in used)
