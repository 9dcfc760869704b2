"""A tuning grid seen from outside the runner (issue 36 item 5): `specmon compare` on a grid (an experiment directory
with a grid, or a `vllm bench sweep serve` folder of several server settings) shows every setting as a series and
the bands verdict; `specmon report` on such a folder gives the bands too, and its chart shows every setting, the best
envelope and the bands."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from paths import FIXTURES
from test_chart_looks import NS
from test_experiment_model import sweep, write_sweep

from specmon.model.config import builtin_config
from specmon.model.experiments.experiment import ExperimentState, PassFile
from specmon.orchestration.measure.experiment import save_state

VLLM_RUNS = FIXTURES / "interop" / "vllm-llama-base"
# Output tok/s of the second setting over the first's, by max_concurrency: ahead at C 1-4, far behind at C 16.
SMALL_BATCH = {1: 1.20, 4: 1.16, 16: 0.60}


def serve_sweep_folder(root: Path, new_names: bool) -> Path:
    """The folder `vllm bench sweep serve --serve-params '[{"max_num_seqs": 256}, {"max_num_seqs": 16}]'
    --bench-params (max_concurrency 1, 4, 16) --num-runs 2 -o ROOT` leaves: ROOT/TIMESTAMP/ holds a folder per
    (server, bench) combination, named `SERVE--max_num_seqs=256-BENCH--max_concurrency=1` (vLLM joins the parts
    "SERVE-", the settings, "BENCH-", ... with "-"; before that rename, `SERVE-max_num_seqs=256-BENCH-...`), with
    run=N.json per repeat (the `vllm bench serve` result plus run_number and the server settings), warmup.json and
    summary.json (the list of the runs). Settings are run in the order given: 256 first, 16 a day later, so the
    first setting by name is not the first run. Repeats 2 % apart."""
    exp = root / "20261201_120000"
    dash = "-" if new_names else ""
    for day, seqs in ((28, 256), (29, 16)):
        for src in sorted(VLLM_RUNS.glob("*.json")):
            base = json.loads(src.read_text())
            c = base["max_concurrency"]
            comb = exp / f"SERVE-{dash}max_num_seqs={seqs}-BENCH-{dash}max_concurrency={c}"
            comb.mkdir(parents=True)
            factor = SMALL_BATCH[c] if seqs == 16 else 1.0
            (comb / "warmup.json").write_text(json.dumps(dict(base, num_prompts=4), indent=4))
            runs = [dict(base, output_throughput=base["output_throughput"] * factor * (1 + 0.02 * n), run_number=n,
                         max_num_seqs=seqs, max_concurrency=c, date=f"202611{day}-10{c:02d}0{n}")
                    for n in range(2)]
            for n, run in enumerate(runs):
                (comb / f"run={n}.json").write_text(json.dumps(run, indent=4))
            (comb / "summary.json").write_text(json.dumps(runs, indent=4))
    (exp / "summary.csv").write_text(",run_number\n0,0\n")
    return root


def specmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("new_names", [True, False], ids=["SERVE--k=v", "SERVE-k=v"])
def test_a_vllm_sweep_serve_folder_of_two_settings_compares_as_a_grid_with_the_bands_verdict(
        tmp_path: Path, new_names: bool) -> None:
    """compare read only the first setting of such a folder (the other "left out as another workload"): no grid."""
    folder = serve_sweep_folder(tmp_path / "out", new_names)
    done = specmon("compare", str(folder), "--no-chart")
    assert done.returncode == 0, done.stderr
    head = done.stdout.splitlines()[0]
    # Both settings as series, the first run (256) the reference, named by the folder's settings.
    assert head.split() == ["C", "max_num_seqs=256", "tok/s", "max_num_seqs=16", "tok/s",
                            "max_num_seqs=16/max_num_seqs=256"], done.stdout
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict"))
    assert "baseline serve max_num_seqs=256" in verdict
    assert verdict.split(": ", 1)[1].startswith("C 1-4: max_num_seqs=16 (+18 % over baseline ±"), verdict
    assert verdict.endswith("; C >= 16: baseline"), verdict

    flipped = specmon("compare", str(folder), "--baseline", "max_num_seqs=16", "--json")
    assert flipped.returncode == 0, flipped.stderr
    grid = json.loads(flipped.stdout)["grid"]
    assert grid["baseline"] == "serve max_num_seqs=16"
    assert [(b["levels"], b["best"]) for b in grid["bands"]] == [([1, 4], "serve max_num_seqs=16"),
                                                                 ([16], "serve max_num_seqs=256")]
    assert grid["verdict"].startswith("C 1-4: baseline; C >= 16: max_num_seqs=256 (+67 % over baseline ±")

    unknown = specmon("compare", str(folder), "--baseline", "max_num_seqs=99")
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.strip() == ("specmon: error: --baseline 'max_num_seqs=99': not a setting of this grid; "
                                      "one of: 'max_num_seqs=256', 'max_num_seqs=16'"), unknown.stderr


@pytest.mark.slow
def test_report_of_a_serve_settings_folder_draws_every_setting_the_best_envelope_and_the_bands(tmp_path: Path) -> None:
    """report took such a folder as one sweep of its first setting: no grid, no bands, one curve."""
    pytest.importorskip("matplotlib")
    folder = serve_sweep_folder(tmp_path / "out", new_names=True)
    out = tmp_path / "r" / "report.md"
    done = specmon("report", str(folder), "--image", "svg", "--out", str(out))
    assert done.returncode == 0, done.stderr
    md = out.read_text().replace("\\_", "_").replace("&gt;", ">")   # Markdown's escapes
    assert "**Verdict:** C 1-4: max_num_seqs=16 (+18 % over baseline ±2.2); C >= 16: baseline" in md
    assert "## Best setting per load band" in md, md
    svg = ET.parse(out.with_suffix(".svg")).getroot()
    groups = {g.get("id"): g for g in svg.iter(f"{NS}g") if g.get("id")}
    assert {"throughput-serve max_num_seqs=256", "throughput-serve max_num_seqs=16"} <= set(groups)
    # The envelope: one line through the best setting's mean at each of the 3 levels (M, then 2 L).
    (path,) = [p for p in groups["best-envelope"].iter(f"{NS}path")]
    assert path.get("d", "").count("L") == 2, path.get("d")
    # Two bands, shaded and named.
    assert {"band-0", "band-1"} <= set(groups) and "band-2" not in groups
    assert {"band-label-0", "band-label-1"} <= set(groups)   # each band's range and leader, over its shading


@pytest.mark.slow
def test_compare_on_a_grid_experiment_directory_shows_every_variant_and_the_bands(tmp_path: Path) -> None:
    """compare took an experiment directory for a folder of vLLM result files and refused it."""
    spec = builtin_config().experiment("demo-grid")
    assert spec.baseline == "demo-baseline" and len(spec.profiles) == 7
    levels = {1: 100.0, 4: 300.0, 16: 600.0}
    best_low, best_high = spec.profiles[5], spec.profiles[3]   # steps=5 topk=1 at C 1, steps=3 topk=1 at C 4
    gain = {best_low: {1: 1.5, 4: 1.0, 16: 0.7}, best_high: {1: 1.2, 4: 1.1, 16: 0.8}}
    state = ExperimentState(tmp_path, spec, "2026-12-05T09:00:00Z")
    for profile in spec.profiles:
        for pass_no, wobble in ((1, 0.99), (2, 1.01)):
            points = {c: v * gain.get(profile, {1: 0.9, 4: 0.9, 16: 0.9})[c] * wobble
                      if profile != spec.baseline else v * wobble for c, v in levels.items()}
            name = f"{profile}.pass{pass_no}.jsonl"
            write_sweep(tmp_path / name, sweep(profile, points), len(points))
            state = state.with_profile(profile, files=(*state.profile(profile).files, PassFile(pass_no, name)),
                                       status="done")
    save_state(state)
    done = specmon("compare", str(tmp_path), "--no-chart")
    assert done.returncode == 0, done.stderr
    head = done.stdout.splitlines()[0]
    assert head.split()[:5] == ["C", "demo-baseline", "tok/s", "steps=1", "topk=1"], head
    verdict = next(line for line in done.stdout.splitlines() if line.startswith("verdict"))
    # Error bars: sample spreads of x*0.99, x*1.01 combined, e.g. C 1: sqrt(1.41² + 2.12²) / 100 = 2.5 %.
    assert verdict.split(": ", 1)[1] == ("C 1: steps=5 topk=1 (+50 % over baseline ±2.5); "
                                         "C 4: steps=3 topk=1 (+10 % over baseline ±2.1); C >= 16: baseline"), verdict
