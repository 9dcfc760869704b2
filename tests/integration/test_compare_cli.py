"""`specmon compare`: side-by-side table, ratio per level, crossover, terminal chart, JSON, bad files."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from process_support import run_specmon

from specmon.loadgen.lines import append_line
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta

pytestmark = pytest.mark.slow


def write_sweep(path: Path, profile: str, tputs: dict[int, float], bound_at: int | None = None,
                server: dict[str, object] | None = None, workload: dict[str, object] | None = None) -> Path:
    append_line(path, SweepMeta(url="http://127.0.0.1:1", model="m", workload=workload or {}, profile=profile,
                                server=server or {}, specmon_version="0.1.0",
                                created_at="2026-11-29T00:00:00Z").to_dict())
    for c, t in tputs.items():
        append_line(path, LevelResult(concurrency=c, requests_ok=4, requests_failed=0, duration_s=1.0,
                                      output_tokens=int(t), output_throughput=t, request_throughput=1.0,
                                      ttft_ms=Stats(), tpot_ms=Stats(), itl_ms=Stats(), e2e_ms=Stats(),
                                      tokens_per_chunk=1.0, client=ClientHealth(bound=c == bound_at)).to_dict())
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    base = write_sweep(tmp_path / "base.jsonl", "baseline", {1: 93.0, 2: 172.0, 4: 298.0, 8: 471.0})
    spec = write_sweep(tmp_path / "spec.jsonl", "eagle3", {1: 128.0, 2: 206.0, 4: 280.0, 8: 379.0}, bound_at=8)
    return base, spec


def test_table_ratio_crossover_and_chart(files: tuple[Path, Path], tmp_path: Path) -> None:
    done = run_specmon("compare", *map(str, files), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    lines = out.splitlines()
    assert lines[0].split() == ["C", "baseline", "tok/s", "eagle3", "tok/s", "eagle3/baseline"]
    assert lines[1].split() == ["1", "93.0", "128.0", "1.38x"]
    assert lines[4].split() == ["8", "471.0", "379.0*", "0.80x"]
    assert "* client-bound level" in out
    # diff +34 at C=2, -18 at C=4: 2 + 2 * 34/52
    assert "crossover eagle3 vs baseline: C≈3.31 (eagle3 ahead below, baseline ahead above)" in out
    assert "output tok/s vs concurrency" in out and "baseline" in out.split("output tok/s vs concurrency")[1]
    assert "\x1b[" not in out   # no colour codes when stdout is not a terminal


def test_json(files: tuple[Path, Path], tmp_path: Path) -> None:
    done = run_specmon("compare", "--json", *map(str, files), cwd=tmp_path)
    data = json.loads(done.stdout)
    assert [f["label"] for f in data["files"]] == ["baseline", "eagle3"]
    assert data["crossover"][0]["concurrency"] == pytest.approx(2 + 2 * 34 / 52)
    assert data["crossover"][0]["ahead_below"] == "eagle3"
    assert data["levels"][0] == {"concurrency": 1, "output_throughput": [93.0, 128.0], "ratio": [pytest.approx(128 / 93)],
                                 "categories": [{}, {}],   # these sweeps' prompts had no categories
                                 "client": [None, None], "handling_ms_p99": [None, None]}   # no flag, no wait recorded


def test_no_crossover_and_same_profile_twice(tmp_path: Path) -> None:
    a = write_sweep(tmp_path / "a.jsonl", "base", {1: 10.0, 2: 20.0})
    b = write_sweep(tmp_path / "b.jsonl", "base", {1: 11.0, 2: 22.0})
    done = run_specmon("compare", "--no-chart", str(a), str(b), cwd=tmp_path)
    assert done.returncode == 0
    assert "crossover base#2 vs base: none in the measured range" in done.stdout


def test_bad_file_names_file_and_line(files: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(files[0].read_text().splitlines()[0] + "\n{\"type\": \"level\", \"concurrency\": 0}\n")
    done = run_specmon("compare", str(files[0]), str(bad), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"specmon: error: {bad}:2: level: concurrency must be >= 1, got 0"


def test_one_file_shows_its_table_and_chart(files: tuple[Path, Path], tmp_path: Path) -> None:
    """The usage says FILE [FILE ...]; one file was refused ("give at least two result files")."""
    done = run_specmon("compare", str(files[0]), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["C", "baseline", "tok/s"] and lines[1].split() == ["1", "93.0"]
    assert "output tok/s vs concurrency" in done.stdout and "crossover" not in done.stdout


def test_kv_tokens_more_than_10_percent_apart_is_a_confounded_comparison(tmp_path: Path) -> None:
    tputs = {1: 90.0, 4: 300.0}
    base = write_sweep(tmp_path / "base.jsonl", "baseline", tputs, server={"kv_cache_tokens": 1_200_000})
    far = write_sweep(tmp_path / "far.jsonl", "eagle3", tputs, server={"kv_cache_tokens": 1_000_000})
    near = write_sweep(tmp_path / "near.jsonl", "eagle3", tputs, server={"kv_cache_tokens": 1_150_000})
    done = run_specmon("compare", "--no-chart", str(base), str(far), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: comparison confounded: KV tokens 1.2M ≠ 1M" in done.stdout.splitlines()
    data = json.loads(run_specmon("compare", "--json", str(base), str(far), cwd=tmp_path).stdout)
    assert data["warnings"] == ["KV tokens 1.2M ≠ 1M"]
    # 4% apart is the same server within noise: no warning.
    done = run_specmon("compare", "--no-chart", str(base), str(near), cwd=tmp_path)
    assert done.returncode == 0 and "warning" not in done.stdout


def test_workload_and_mem_fraction_differences_are_warned(tmp_path: Path) -> None:
    tputs = {1: 90.0, 4: 300.0}
    base = write_sweep(tmp_path / "base.jsonl", "baseline", tputs, server={"mem_fraction": 0.85},
                       workload={"input_len": 128, "output_len": 256, "levels": [1, 4]})
    other = write_sweep(tmp_path / "other.jsonl", "eagle3", tputs, server={"mem_fraction": 0.8},
                        workload={"input_len": 128, "output_len": 64, "levels": [1, 4, 16]})
    out = run_specmon("compare", "--no-chart", str(base), str(other), cwd=tmp_path).stdout.splitlines()
    warnings = [line for line in out if line.startswith("warning:")]
    assert warnings == ["warning: comparison confounded: mem_fraction_static 0.85 ≠ 0.8",
                        "warning: comparison confounded: workload output_len: baseline 256 ≠ eagle3 64"]


def test_torn_last_line_is_reported_and_the_rest_used(files: tuple[Path, Path], tmp_path: Path) -> None:
    """A full disk (or a crash mid-write) left half a level line at the end; compare rejected the whole file."""
    torn = tmp_path / "torn.jsonl"
    whole = files[1].read_text()
    last = whole.splitlines()[-1]
    torn.write_text(whole + last[: len(last) // 2])
    done = run_specmon("compare", "--no-chart", str(files[0]), str(torn), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (f"specmon: warning: {torn}:6: last line is cut short (an interrupted write); "
                                   "left out, the lines before it are used")
    assert done.stdout.splitlines()[4].split() == ["8", "471.0", "379.0*", "0.80x"]


def test_report_of_a_sweep_file_with_a_torn_last_line_says_so_and_uses_the_rest(
        files: tuple[Path, Path], tmp_path: Path) -> None:
    """`report` read a torn file as compare does but kept the note to itself: the cut level vanished unsaid."""
    torn = tmp_path / "torn.jsonl"
    whole = files[1].read_text()
    last = whole.splitlines()[-1]
    torn.write_text(whole + last[: len(last) // 2])
    done = run_specmon("report", "--format", "json", str(files[0]), str(torn), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (f"specmon: warning: {torn}:6: last line is cut short (an interrupted write); "
                                   "left out, the lines before it are used")
    profiles = {p["profile"]: p for p in json.loads(done.stdout)["profiles"]}
    assert [lv["concurrency"] for lv in profiles["eagle3"]["levels"]] == [1, 2, 4, 8]


def test_chart_ticks_are_the_measured_levels(files: tuple[Path, Path], tmp_path: Path) -> None:
    """Issue 10 #5: the log axis was labelled 1.0 1.7 2.8 4.8 8.0, none of them a level that was run."""
    done = run_specmon("compare", *map(str, files), cwd=tmp_path)
    chart = done.stdout.split("output tok/s vs concurrency")[1]
    axis = next(line for line in chart.splitlines() if line.split() == ["1", "2", "4", "8"])
    assert axis, chart
    assert "1.7" not in chart and "2.8" not in chart


def test_report_without_matplotlib_names_the_pip_of_the_python_running_specmon(files: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    """`report` said `pip install 'specmon[report]'`: with the venv not activated, the `pip` found first is another
    Python's (issue 35 #20). matplotlib is kept from importing here (it is installed for the other tests)."""
    no_matplotlib = "import sys; sys.modules['matplotlib'] = None; from specmon.cli import main; sys.exit(main())"
    done = subprocess.run([sys.executable, "-c", no_matplotlib, "report", *map(str, files)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (f"specmon: the chart needs matplotlib ({shlex.quote(sys.executable)} -m pip "
                                           "install matplotlib); writing the report without it")
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "report.png").exists()
