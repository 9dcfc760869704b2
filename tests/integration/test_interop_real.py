"""Real result files of other tools (tests/fixtures/interop/real, SOURCES says where each comes from): every mapped
number equals the file's; and the defects of issue 23 (files refused or misread), each shown on a real or minimal file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from paths import FIXTURES, REPO
from process_support import run_specmon

from specmon.errors import UserError
from specmon.loadgen.lines import append_line
from specmon.model.sweeps.formats import lacks_note, parse_any_results
from specmon.model.sweeps.formats.guidellm_report import guidellm_report
from specmon.model.sweeps.results import CategoryStats, LevelResult, Stats, SweepMeta, SweepResult
from specmon.sources.resultfiles import read_any_results, read_records, read_results

INTEROP = FIXTURES / "interop"
REAL = INTEROP / "real"
SGLANG04 = sorted(REAL.glob("sglang04-*.jsonl"))
GUIDELLM03_JSON = REAL / "guidellm03-benchmarks_stripped.json"
GUIDELLM03_YAML = REAL / "guidellm03-benchmarks_stripped.yaml"
GUIDELLM08 = INTEROP / "guidellm-sim-concurrent.json"
VLLM_ONE = next((INTEROP / "vllm-llama-base").glob("*concurrency4*.json"))


def lines_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- a test per file: every mapped number is the file's -------------------------------------------------------
@pytest.mark.parametrize("path", SGLANG04, ids=[p.name for p in SGLANG04])
def test_sglang_04_era_file_is_read_with_the_files_own_numbers(path: Path) -> None:
    """0.4-era lines carry no request_throughput or total_throughput: the file is read (it was refused whole,
    `request_throughput: missing`), the two derived exactly and said; every other figure is the file's."""
    result = read_any_results(path)
    objs = lines_of(path)
    first = objs[0]
    kept = [o for o in objs if all(o.get(k) == first.get(k) for k in ("dataset_name", "random_input_len",
                                                                       "random_output_len", "random_range_ratio"))]
    assert len(result.levels) == len(kept)
    for lv, o in zip(result.levels, sorted(kept, key=lambda o: float(o["request_rate"]))):  # type: ignore[arg-type]
        assert lv.requests_ok == o["completed"] and lv.requests_failed is None   # SGLang counts no failures
        assert lv.duration_s == o["duration"]
        assert lv.output_tokens == o["total_output_tokens"] and lv.input_tokens == o["total_input_tokens"]
        assert lv.output_throughput == o["output_throughput"]
        assert lv.e2e_ms.mean == o["mean_e2e_latency_ms"] and lv.e2e_ms.p50 == o["median_e2e_latency_ms"]
        assert lv.ttft_ms.p50 == o["median_ttft_ms"] and lv.itl_ms.p50 == o["median_itl_ms"]
        assert lv.ttft_ms.mean is None and lv.tpot_ms.p50 is None
        assert lv.request_throughput == pytest.approx(o["completed"] / o["duration"], rel=1e-12)  # type: ignore[operator]
        assert lv.total_throughput == pytest.approx(
            (o["total_input_tokens"] + o["total_output_tokens"]) / o["duration"], rel=1e-12)  # type: ignore[operator]
        rate = o["request_rate"]
        assert (lv.rate is None and lv.concurrency == o["completed"]) if math.isinf(rate) else lv.rate == rate  # type: ignore[arg-type]
    assert any("request throughput derived as completed / duration" in n for n in result.notes)
    assert (len(kept) < len(objs)) == any("left out" in n for n in result.notes)


@pytest.mark.parametrize("path", [GUIDELLM03_JSON, GUIDELLM03_YAML], ids=["json", "yaml"])
def test_guidellm_03_era_report_json_and_yaml_give_the_reports_numbers(path: Path) -> None:
    """The 0.3-era layout (args.strategy, worker.backend_*): YAML was refused; the model and target were lost."""
    result = read_any_results(path)
    b = json.loads(GUIDELLM03_JSON.read_text())["benchmarks"][0]
    (lv,) = result.levels
    m = b["metrics"]
    assert lv.concurrency == 1 and lv.rate is None   # synchronous
    assert lv.requests_ok == b["request_totals"]["successful"] and lv.requests_failed == b["request_totals"]["errored"]
    assert lv.output_tokens == m["output_token_count"]["successful"]["total_sum"]
    assert lv.input_tokens == m["prompt_token_count"]["successful"]["total_sum"]
    assert lv.output_throughput == m["output_tokens_per_second"]["successful"]["mean"]
    assert lv.request_throughput == m["requests_per_second"]["successful"]["mean"]
    assert lv.ttft_ms.p50 == m["time_to_first_token_ms"]["successful"]["median"]
    assert lv.ttft_ms.p99 == m["time_to_first_token_ms"]["successful"]["percentiles"]["p99"]
    assert lv.tpot_ms.mean == m["inter_token_latency_ms"]["successful"]["mean"]
    assert lv.e2e_ms.p90 == pytest.approx(m["request_latency"]["successful"]["percentiles"]["p90"] * 1000, rel=1e-12)
    assert lv.duration_s == b["duration"]
    assert result.meta.model == b["worker"]["backend_model"] == "example_model"
    assert result.meta.url == b["worker"]["backend_target"] == "example_target"


@pytest.mark.slow
def test_a_plain_install_requires_pyyaml_for_guidellms_yaml_report(tmp_path: Path) -> None:
    """guidellm's YAML report needs PyYAML, which specmon did not declare: a plain `pip install` refused the YAML
    ("reading it needs PyYAML"). The wheel pip builds from this checkout now requires it, and the YAML reads."""
    import sys
    import zipfile

    root = REPO
    src = tmp_path / "src"   # a copy: setuptools writes build/ and *.egg-info beside the sources
    for name in ("specmon", "themes"):
        shutil.copytree(root / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                           str(tmp_path), str(src)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("specmon-*.whl")
    with zipfile.ZipFile(wheel) as z:
        metadata = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert "PyYAML>=6" in requires
    assert read_any_results(GUIDELLM03_YAML).levels == read_any_results(GUIDELLM03_JSON).levels


@pytest.mark.parametrize("path", [GUIDELLM03_JSON, GUIDELLM03_YAML], ids=["json", "yaml"])
def test_guidellm_throughput_is_over_successful_requests_in_every_layout(path: Path) -> None:
    """A real report with an incomplete request (46 of 47 successful): its JSON and YAML were read as "total"
    (1.567 req/s, the cut-off request included) where its CSV (and specmon's own levels) count the successful ones
    (1.548 req/s); every layout now gives the successful figures."""
    m = json.loads(GUIDELLM03_JSON.read_text())["benchmarks"][0]["metrics"]
    (lv,) = read_any_results(path).levels
    rps = m["requests_per_second"]
    assert rps["total"]["mean"] != rps["successful"]["mean"]
    assert lv.request_throughput == rps["successful"]["mean"] == pytest.approx(1.5482, abs=1e-4)
    assert lv.output_throughput == m["output_tokens_per_second"]["successful"]["mean"]
    assert lv.total_throughput == m["tokens_per_second"]["successful"]["mean"]


VLLM025_ONE = REAL / "vllm025-bench_serve_v0.25.1.json"
VLLM025_SPEC = REAL / "vllm025-bench_serve_speculative_v0.25.1.json"
VLLM025_FAILED = REAL / "vllm025-bench_serve_all_requests_failed_v0.25.1.json"
VLLM025_SWEEP = REAL / "vllm025-sweep-er0080"


def assert_vllm_numbers(lv: LevelResult, o: dict[str, object]) -> None:
    """Every figure specmon maps from one `vllm bench serve --save-result` object is the object's own."""
    assert (lv.concurrency, lv.rate) == (o["max_concurrency"], None)   # request_rate "inf"
    assert (lv.requests_ok, lv.requests_failed) == (o["completed"], o["failed"])
    assert lv.duration_s == o["duration"]
    assert (lv.input_tokens, lv.output_tokens) == (o["total_input_tokens"], o["total_output_tokens"])
    assert lv.output_throughput == o["output_throughput"] and lv.request_throughput == o["request_throughput"]
    assert lv.total_throughput == o["total_token_throughput"] and lv.goodput is None
    for stats, stem in ((lv.ttft_ms, "ttft"), (lv.tpot_ms, "tpot"), (lv.itl_ms, "itl"), (lv.e2e_ms, "e2el")):
        assert (stats.mean, stats.p50, stats.p90, stats.p99) == tuple(
            o.get(f"{k}_{stem}_ms") for k in ("mean", "median", "p90", "p99")), stem
    assert lv.accept_length == o.get("spec_decode_acceptance_length")


@pytest.mark.parametrize("path", [VLLM025_ONE, VLLM025_SPEC], ids=["plain", "speculative"])
def test_vllm_025_bench_serve_result_gives_the_files_own_numbers(path: Path) -> None:
    """Payloads vLLM 0.25.1's `vllm bench serve --save-result` wrote (captured by er0080/vllm-benchmarking)."""
    o = json.loads(path.read_text())
    result = read_any_results(path)
    (lv,) = result.levels
    assert_vllm_numbers(lv, o)
    assert result.meta.model == o["model_id"]
    assert result.notes == ()   # nothing derived, nothing left out


@pytest.mark.slow
def test_vllm_025_speculative_result_keeps_acceptance_length_and_rate(tmp_path: Path) -> None:
    (lv,) = read_any_results(VLLM025_SPEC).levels
    assert lv.accept_length == 3.161111111111111
    assert lv.accept_rate == pytest.approx(0.7203703703703704, rel=1e-12)   # the file's 72.037... per cent
    done = run_specmon("compare", "--no-chart", str(VLLM025_ONE), str(VLLM025_SPEC), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("speculative acceptance")[1].splitlines()
    assert table[2].split() == ["2", "3.16"]


def test_vllm_025_result_with_every_request_failed_shows_no_latency() -> None:
    """vLLM writes 0.0 for every latency of a run where nothing completed (the mean of nothing): specmon showed
    TTFT, TPOT and ITL of 0.0 ms; they are absent."""
    o = json.loads(VLLM025_FAILED.read_text())
    assert (o["completed"], o["failed"], o["mean_ttft_ms"]) == (0, 8, 0.0)
    (lv,) = read_any_results(VLLM025_FAILED).levels
    assert (lv.requests_ok, lv.requests_failed, lv.output_throughput) == (0, 8, 0.0)
    assert lv.concurrency == 8   # no max_concurrency, all sent at once: the run's request count
    assert lv.ttft_ms == lv.tpot_ms == lv.itl_ms == lv.e2e_ms == Stats()


@pytest.mark.slow
def test_vllm_file_without_failed_derives_it_from_num_prompts_and_shows_it_in_the_export(tmp_path: Path) -> None:
    """Older vLLM files have no `failed`: the real all-failed run (completed 0 of num_prompts 8) with its `failed`
    key taken out, as vLLM before it wrote the file, was read as 0 failed; now 8, derived and said, and the
    export writes 8."""
    o = json.loads(VLLM025_FAILED.read_text())
    del o["failed"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(o))
    (lv,) = read_any_results(older).levels
    assert (lv.requests_ok, lv.requests_failed) == (0, 8)
    assert "failed requests derived as num_prompts - completed (the file has no failed)" in read_any_results(older).notes
    done = run_specmon("export", str(older), "--format", "vllm", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = [json.loads(f.read_text()) for f in (tmp_path / "out").rglob("run=0.json")]
    assert (run["num_prompts"], run["completed"], run["failed"]) == (8, 0, 8)


@pytest.mark.slow
def test_failed_requests_a_file_does_not_count_are_unknown_not_zero(tmp_path: Path) -> None:
    """A real SGLang line (it counts only completed requests) and a real vLLM run without `failed` or `num_prompts`:
    both were shown as 0 failed (the vLLM export wrote `"failed": 0`); now unknown: None, said in the note, left
    out of the export, `-` in the results table."""
    o = json.loads(VLLM025_ONE.read_text())
    del o["failed"], o["num_prompts"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(o))
    for path in (SGLANG059, bare):
        result = read_any_results(path)
        assert [lv.requests_failed for lv in result.levels] == [None]
        assert "failed requests" in (lacks_note(result) or "")
        out = tmp_path / f"{path.stem}-vllm"
        done = run_specmon("export", str(path), "--format", "vllm", "--out", str(out), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        (run,) = [json.loads(f.read_text()) for f in out.rglob("run=0.json")]
        assert "failed" not in run and "num_prompts" not in run and run["completed"] == result.levels[0].requests_ok
        assert read_any_results(out).levels[0].requests_failed is None   # and it reads back unknown
    from specmon.commands.sweep import render_levels
    header, row = render_levels(read_any_results(bare).levels).splitlines()[:2]
    assert row.split()[header.split().index("fail")] == "-"


def test_vllm_025_sweep_serve_folder_keeps_one_server_setting_and_its_repeats() -> None:
    """A folder `vllm bench sweep serve` 0.25.1 wrote (SERVE--max_num_seqs=4|8-BENCH--max_concurrency=2-...,
    two runs each): the first server setting's two runs are repeats, the other setting is left out and said."""
    first = VLLM025_SWEEP / "SERVE--max_num_seqs=4-BENCH--max_concurrency=2-num_prompts=8"
    runs = json.loads((first / "summary.json").read_text())
    assert [json.loads((first / f"run={n}.json").read_text()) for n in (0, 1)] == runs
    for target in (VLLM025_SWEEP, first, first / "summary.json"):
        result = read_any_results(target)
        assert len(result.levels) == 2
        for lv, o in zip(result.levels, runs):
            assert_vllm_numbers(lv, o)
        assert any("C=2 ran 2 times: output tok/s 93.7, 199.4" in n for n in result.notes)
    notes = read_any_results(VLLM025_SWEEP).notes
    assert any("left out 2 run(s) of another workload" in n and "SERVE--max_num_seqs=8" in n for n in notes)


VLLM025_STAMPED = REAL / "vllm025-repeats-timestamp"


@pytest.mark.slow
def test_vllm_repeats_with_a_timestamp_label_each_are_kept_as_repeats_and_the_label_is_named(tmp_path: Path) -> None:
    """Two real repeats of one load, each saved with its own `--metadata timestamp=...` (SOURCES: derived from the
    er0080 sweep's runs by that one key): the second was left out as "another workload"; now both are repeats, and
    a warning names the label that differed."""
    files = sorted(VLLM025_STAMPED.glob("*.json"))
    objs = [json.loads(f.read_text()) for f in files]
    assert len({o["timestamp"] for o in objs}) == 2
    result = read_any_results(VLLM025_STAMPED)
    assert len(result.levels) == 2
    for lv, o in zip(result.levels, objs):
        assert_vllm_numbers(lv, o)
    assert not any("another workload" in n for n in result.notes)
    assert any("C=2 ran 2 times" in n for n in result.notes)
    assert any("labels differ from run to run" in n and n.endswith(": timestamp") for n in result.notes)
    done = run_specmon("compare", "--json", str(VLLM025_STAMPED), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["levels"]
    assert row["output_throughput"][0] == pytest.approx(sum(o["output_throughput"] for o in objs) / 2)
    assert "another workload" not in done.stderr and "timestamp" in done.stderr


def test_vllm_run_labels_named_as_stamps_never_split_a_sweep_and_a_left_out_run_names_its_file(tmp_path: Path) -> None:
    """`--metadata run=N host=...` repeated at two loads (a label named as a run's stamp groups runs, yet is no
    workload); a `deployment` label still is one, and the warning names the file and line of each run left out."""
    base = json.loads(VLLM025_ONE.read_text())
    runs = [dict(base, max_concurrency=c, run=str(n), host=f"gpu{n}", output_throughput=80.0 + n + c)
            for c in (2, 4) for n in (0, 1)]
    f = tmp_path / "stamped.jsonl"
    f.write_text("".join(json.dumps(o) + "\n" for o in runs))
    for o in runs:
        o["deployment"] = "base"
    g = tmp_path / "deployments.jsonl"
    g.write_text("".join(json.dumps(o) + "\n" for o in runs + [dict(runs[0], deployment="kvcache")]))
    result = read_any_results(f)
    assert [lv.concurrency for lv in result.levels] == [2, 2, 4, 4]
    assert any(n.endswith(": host, run") for n in result.notes)
    split = read_any_results(g)
    assert len(split.levels) == 4
    assert any(n.startswith("left out 1 run(s) of another workload") and f"{g}:5: " in n and "deployment=kvcache" in n
               for n in split.notes)
    # A label of any name with a value of its own on each of three runs stamps runs; on each of two, it may not.
    for labels, kept in ((["a", "b", "c"], 3), (["a", "b"], 1)):
        h = tmp_path / f"{len(labels)}.jsonl"
        h.write_text("".join(json.dumps(dict(base, note=v)) + "\n" for v in labels))
        assert len(read_any_results(h).levels) == kept


VLLM015 = REAL / "vllm-bench-serve-2026-01-glm47-fp8-c100.json"
VLLM07_CUT = REAL / "vllm07-serving_llama8B_tp1_1-cut.json"
SGLANG059 = REAL / "sglang059-h100-qwen3.5-27b-in8192.jsonl"


def test_vllm_015_bench_serve_result_gives_the_files_and_the_consoles_numbers() -> None:
    """A `vllm bench serve --save-result` file (vLLM 0.15 era, with e2el percentiles) and what the same run printed:
    every mapped number is the file's, and rounded as vLLM prints them, the console's."""
    o = json.loads(VLLM015.read_text())
    (lv,) = read_any_results(VLLM015).levels
    assert_vllm_numbers(lv, o)
    console = VLLM015.with_name(VLLM015.stem + ".console.txt").read_text().split("Serving Benchmark Result")[1]
    printed = {name.strip(): float(value) for name, value in
               (line.rsplit(":", 1) for line in console.splitlines() if line.count(":") == 1)}
    mine = {"Successful requests": lv.requests_ok, "Failed requests": lv.requests_failed,
            "Maximum request concurrency": lv.concurrency, "Benchmark duration (s)": lv.duration_s,
            "Total input tokens": lv.input_tokens, "Total generated tokens": lv.output_tokens,
            "Request throughput (req/s)": lv.request_throughput, "Output token throughput (tok/s)": lv.output_throughput,
            "Total token throughput (tok/s)": lv.total_throughput,
            "Mean TTFT (ms)": lv.ttft_ms.mean, "Median TTFT (ms)": lv.ttft_ms.p50, "P99 TTFT (ms)": lv.ttft_ms.p99,
            "Mean TPOT (ms)": lv.tpot_ms.mean, "Median TPOT (ms)": lv.tpot_ms.p50, "P99 TPOT (ms)": lv.tpot_ms.p99,
            "Mean ITL (ms)": lv.itl_ms.mean, "Median ITL (ms)": lv.itl_ms.p50, "P99 ITL (ms)": lv.itl_ms.p99,
            "Mean E2EL (ms)": lv.e2e_ms.mean, "Median E2EL (ms)": lv.e2e_ms.p50, "P99 E2EL (ms)": lv.e2e_ms.p99}
    for name, value in mine.items():
        assert value is not None and round(value, 2) == printed[name], name


def test_vllm_v0_era_file_cut_of_its_counts_is_refused_naming_the_field() -> None:
    """A v0-era file (benchmark_serving.py keys: best_of, no endpoint_type) committed without its counts and
    throughputs: it was "not a result file specmon reads"; now one line names the missing field."""
    with pytest.raises(UserError) as err:
        read_any_results(VLLM07_CUT)
    assert str(err.value) == f"{VLLM07_CUT}: completed: missing; expected an integer"


VLLM09_LLMD = REAL / "vllm09-benchmark_serving-llmd-3deployments.jsonl"


def test_vllm_v0_era_complete_file_gives_its_first_deployments_numbers_and_says_what_it_left_out() -> None:
    """A complete v0-era `benchmark_serving.py --save-result` file (May 2025; `request_goodput:` with its colon, no
    `failed`): three deployments (`--metadata deployment=...`) at 10, 30 and inf req/s, appended. It was refused
    whole (open-loop runs mixed with the inf run); read as pooled, the three deployments would have been repeats.
    Now: the first deployment's two open-loop runs with every mapped number, the rest left out in words."""
    result = read_any_results(VLLM09_LLMD)
    objs = lines_of(VLLM09_LLMD)
    assert result.mode == "rate" and result.meta.model == "meta-llama/Llama-3.2-3B-Instruct"
    assert [lv.rate for lv in result.levels] == [10.0, 30.0]
    for lv, o in zip(result.levels, objs[:2]):
        assert o["deployment"] == "no-features"
        assert (lv.concurrency, lv.requests_ok, lv.requests_failed) == (0, o["completed"], 0)
        assert lv.duration_s == o["duration"]
        assert (lv.output_tokens, lv.input_tokens) == (o["total_output_tokens"], o["total_input_tokens"])
        assert lv.output_throughput == o["output_throughput"]
        assert lv.request_throughput == o["request_throughput"]
        assert lv.total_throughput == o["total_token_throughput"]
        for name, stem in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl")):
            assert getattr(lv, name) == Stats(o[f"mean_{stem}_ms"], o[f"median_{stem}_ms"], None,
                                              o[f"p99_{stem}_ms"]), name
        assert lv.e2e_ms == Stats() and lv.goodput is None
    assert result.notes[0] == "failed requests derived as num_prompts - completed (the file has no failed)"
    result = replace(result, notes=result.notes[1:])
    assert len(result.notes) == 2
    assert result.notes[0].startswith("left out 6 run(s) of another workload than the first line's (dataset, "
                                      "lengths, model, --metadata; not repeats of it")
    assert f"{VLLM09_LLMD}:4: meta-llama/Llama-3.2-3B-Instruct deployment=base;" in result.notes[0]
    assert result.notes[0].endswith(f"{VLLM09_LLMD}:9: meta-llama/Llama-3.2-3B-Instruct deployment=kvcache")
    assert result.notes[1] == (f"left out 1 run(s) at request rate inf with no max_concurrency ({VLLM09_LLMD}:3): "
                               "every request sent at once, no point on the request-rate axis of the other runs")


SGLANG05 = [  # file, the version its server_info names, the model it served
    (SGLANG059, "0.5.9", "/workspace/qwen-3.5-27b"),
    (REAL / "sglang055-qwen2.5-3b-agg-c8.jsonl", "0.5.5.post3", "Qwen/Qwen2.5-3B-Instruct"),
    # behind SGLang's prefill/decode router: server_info holds each side's own (prefill 0.5.5.post3, decode 0.5.6)
    (REAL / "sglang055-056-qwen2.5-3b-pd-1p1d-c64.jsonl", "0.5.5.post3", "Qwen/Qwen2.5-3B-Instruct"),
]


@pytest.mark.parametrize(("path", "version", "model"), SGLANG05, ids=[p.name for p, _, _ in SGLANG05])
def test_sglang_05_bench_serving_line_gives_the_files_own_numbers(path: Path, version: str, model: str) -> None:
    """SGLang 0.5.x bench_serving lines (0.5.9 with --output-details arrays trimmed; 0.5.5.post3 without the p90 E2E
    that 0.5.9 added; a prefill/decode router's, whose server_info has no model_path of its own): every figure."""
    (o,) = lines_of(path)
    info = o["server_info"]
    assert (info.get("version") or info["prefill"][0]["version"]) == version
    result = read_any_results(path)
    (lv,) = result.levels
    assert (lv.concurrency, lv.rate) == (o["max_concurrency"], None)   # request_rate Infinity
    assert (lv.requests_ok, lv.requests_failed) == (o["completed"], None)   # SGLang counts no failures
    assert lv.duration_s == o["duration"]
    assert (lv.input_tokens, lv.output_tokens) == (o["total_input_tokens"], o["total_output_tokens"])
    assert (lv.output_throughput, lv.request_throughput, lv.total_throughput) == (
        o["output_throughput"], o["request_throughput"], o["total_throughput"])
    for stats, stem in ((lv.ttft_ms, "ttft"), (lv.tpot_ms, "tpot"), (lv.itl_ms, "itl"), (lv.e2e_ms, "e2e_latency")):
        assert (stats.mean, stats.p50, stats.p90, stats.p99) == tuple(
            o.get(f"{k}_{stem}_ms") for k in ("mean", "median", "p90", "p99")), stem
    assert lv.achieved_concurrency == o["concurrency"]
    assert lv.accept_length is None and o["accept_length"] is None   # no speculative decoding on those servers
    assert result.meta.model == model
    assert result.notes == ()
    # what the file does not hold is said, not made up: 0.5.5 wrote no p90 at all
    assert ("E2E p90" in (lacks_note(result) or "")) == ("p90_e2e_latency_ms" not in o)


GUIDELLM05 = REAL / "guidellm05-sanity-concurrent4.json"


def test_guidellm_05_report_gives_the_reports_numbers() -> None:
    """A real guidellm 0.5.0.dev0 report (concurrent, 4 streams, 4 requests): every mapped number is the report's."""
    report = json.loads(GUIDELLM05.read_text())
    assert report["metadata"]["guidellm_version"] == "0.5.0.dev0"
    b = report["benchmarks"][0]
    m = b["metrics"]
    result = read_any_results(GUIDELLM05)
    (lv,) = result.levels
    assert (lv.concurrency, lv.rate) == (b["config"]["strategy"]["streams"], None) == (4, None)
    assert (lv.requests_ok, lv.requests_failed) == (m["request_totals"]["successful"], m["request_totals"]["errored"])
    assert lv.output_tokens == round(m["output_token_count"]["successful"]["total_sum"]) == 4096
    assert lv.input_tokens == round(m["prompt_token_count"]["successful"]["total_sum"])
    assert lv.output_throughput == m["output_tokens_per_second"]["successful"]["mean"]
    assert lv.request_throughput == m["requests_per_second"]["successful"]["mean"]
    assert lv.total_throughput == m["tokens_per_second"]["successful"]["mean"]
    ttft = m["time_to_first_token_ms"]["successful"]
    assert (lv.ttft_ms.mean, lv.ttft_ms.p50, lv.ttft_ms.p90, lv.ttft_ms.p99) == (
        ttft["mean"], ttft["median"], ttft["percentiles"]["p90"], ttft["percentiles"]["p99"])
    assert lv.tpot_ms.mean == m["inter_token_latency_ms"]["successful"]["mean"]
    assert lv.e2e_ms.p90 == pytest.approx(m["request_latency"]["successful"]["percentiles"]["p90"] * 1000, rel=1e-12)
    assert lv.tokens_per_chunk == m["output_tokens_per_iteration"]["successful"]["mean"]
    assert lv.achieved_concurrency == m["request_concurrency"]["successful"]["mean"]
    assert lv.duration_s == b["duration"]
    assert (result.meta.model, result.meta.url) == (report["args"]["model"], report["args"]["target"]) == (
        "Qwen/Qwen3-4B-Thinking-2507", "http://0.0.0.0:8000")


def test_guidellm_08_report_keeps_the_auto_detected_model(tmp_path: Path) -> None:
    """guidellm 0.8 keeps an auto-detected model only in benchmarks[].config.backend.model: it was lost."""
    report = json.loads(GUIDELLM08.read_text())
    assert report["config"]["spec"]["backend"].get("model") in (None, "")
    assert report["benchmarks"][0]["config"]["backend"]["model"] == "sim-model"
    assert read_any_results(GUIDELLM08).meta.model == "sim-model"


def test_guidellm_fractional_token_totals_are_rounded_not_cut(tmp_path: Path) -> None:
    report = json.loads(GUIDELLM08.read_text())
    m = report["benchmarks"][0]["metrics"]
    m["output_token_count"]["successful"]["total_sum"] = 1748.9999999999998
    f = tmp_path / "g.json"
    f.write_text(json.dumps(report))
    assert read_any_results(f).levels[0].output_tokens == 1749


TORN_SOURCES = [REAL / "sglang04-h200-llama_3_3_70b_online_output.jsonl", VLLM09_LLMD]


@pytest.mark.slow
@pytest.mark.parametrize("src", TORN_SOURCES, ids=["sglang", "vllm-append"])
def test_peer_jsonl_cut_mid_object_in_its_last_line_is_read_up_to_it_and_said(tmp_path: Path, src: Path) -> None:
    """A real SGLang and a real vLLM --append-result JSONL, cut here mid-object in their second line (as an
    interrupted append leaves them): the file was refused whole (":2: not JSON"); now the whole line before it is
    read, and a warning names the file and the cut line. A bad line that is not the last is still refused."""
    text = src.read_text()
    first, second = text.splitlines()[:2]
    torn = tmp_path / src.name
    torn.write_text(first + "\n" + second[: len(second) // 2])
    result = read_any_results(torn)
    assert len(result.levels) == 1
    whole = read_any_results(src)
    assert result.levels[0] in whole.levels
    note = f"{torn}:2: last line is cut short (an interrupted write); left out, the lines before it are used"
    assert result.notes[0] == note
    done = run_specmon("compare", "--no-chart", str(torn), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"specmon: warning: {note}" in done.stderr.splitlines()
    middle = tmp_path / "middle.jsonl"
    middle.write_text(first + "\n" + second[: len(second) // 2] + "\n" + first + "\n")
    with pytest.raises(UserError, match=rf"^{middle}:2: not JSON; expected one JSON object per line$"):
        read_any_results(middle)


@pytest.mark.slow
# ---- repeats, acceptance --------------------------------------------------------------------------------------
def test_repeats_at_one_load_are_kept_with_their_spread(tmp_path: Path) -> None:
    """Three appended runs at C=4: compare showed the last one only; now their mean, and the spread is said."""
    base = json.loads(VLLM_ONE.read_text())
    runs = [dict(base, output_throughput=t) for t in (500.0, 520.0, 540.0)]
    f = tmp_path / "repeats.jsonl"
    f.write_text("".join(json.dumps(o) + "\n" for o in runs))
    result = read_any_results(f)
    assert [lv.output_throughput for lv in result.levels] == [500.0, 520.0, 540.0]
    assert any("C=4 ran 3 times: output tok/s 500.0, 520.0, 540.0 (mean 520.0 ± 20.0)" in n for n in result.notes)
    done = run_specmon("compare", "--json", str(f), str(VLLM_ONE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["levels"]
    assert row["output_throughput"][0] == pytest.approx(520.0)
    assert "ran 3 times" in done.stderr


@pytest.mark.slow
def test_vllm_and_sglang_accept_length_is_read_and_shown(tmp_path: Path) -> None:
    eagle = INTEROP / "vllm-llama-eagle3.jsonl"
    objs = lines_of(eagle)
    result = read_any_results(eagle)
    by_c = {o["max_concurrency"]: o for o in objs}
    for lv in result.levels:
        assert lv.accept_length == by_c[lv.concurrency]["spec_decode_acceptance_length"]
        assert lv.accept_rate == pytest.approx(by_c[lv.concurrency]["spec_decode_acceptance_rate"] / 100)  # type: ignore[operator]
    sglang = INTEROP / "sglang-llama-eagle3.jsonl"
    s_by_c = {o["max_concurrency"]: o for o in lines_of(sglang)}
    assert [lv.accept_length for lv in read_any_results(sglang).levels] == [
        s_by_c[c]["accept_length"] for c in sorted(s_by_c)]  # type: ignore[type-var]
    done = run_specmon("compare", "--no-chart", str(INTEROP / "vllm-llama-base"), str(eagle), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("speculative acceptance")[1].splitlines()
    assert "vllm-llama-eagle3 accept length" in table[1]
    assert table[2].split() == ["1", f"{by_c[1]['spec_decode_acceptance_length']:.2f}"]


# ---- compare's notes and tables -------------------------------------------------------------------------------
def test_compare_note_says_what_the_file_holds(tmp_path: Path) -> None:
    """vLLM's note always said it had no p90 or E2E: a file run with --metric-percentiles 90,99 and e2el has both."""
    base = json.loads(VLLM_ONE.read_text())
    full = dict(base, p90_ttft_ms=25.0, p90_tpot_ms=6.0, p90_itl_ms=6.1, mean_e2el_ms=2900.0, median_e2el_ms=2890.0,
                p90_e2el_ms=3000.0, p99_e2el_ms=3100.0)
    f = tmp_path / "full.json"
    f.write_text(json.dumps(full))
    note = lacks_note(read_any_results(f))
    assert note is not None
    assert "p90" not in note and "E2E" not in note
    assert "E2E" in (lacks_note(read_any_results(VLLM_ONE)) or "")


@pytest.mark.slow
def test_compare_and_report_warn_in_one_line_when_the_files_served_different_models(tmp_path: Path) -> None:
    """`compare` of a Llama vLLM sweep and a guidellm run against the simulator said nothing: its ratios compare two
    models, not a speculative method. Files of one model (the vLLM base and EAGLE-3 sweeps) get no such line."""
    base, other = INTEROP / "vllm-llama-base", GUIDELLM08
    line = ("different models: vllm-llama-base meta-llama/Llama-3.1-8B-Instruct ≠ guidellm-sim-concurrent "
            "sim-model")
    done = run_specmon("compare", "--no-chart", str(base), str(other), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [w for w in done.stdout.splitlines() if "model" in w] == [f"warning: comparison confounded: {line}"]
    as_json = run_specmon("compare", "--json", str(base), str(other), cwd=tmp_path)
    assert line in json.loads(as_json.stdout)["warnings"]
    report = run_specmon("report", "--format", "json", str(base), str(other), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert line in json.loads(report.stdout)["warnings"]
    same = run_specmon("compare", "--no-chart", str(base), str(INTEROP / "vllm-llama-eagle3.jsonl"), cwd=tmp_path)
    assert "different models" not in same.stdout + same.stderr


@pytest.mark.slow
async def test_overlay_of_a_file_of_another_model_warns_in_one_line(tmp_path: Path) -> None:
    """The TUI overlaid a guidellm run against the simulator on a Llama sweep without a word; a second file of the
    same model adds no warning."""
    from ui_states import demo_config

    from specmon.ui.app import SpecmonApp
    from specmon.ui.bridge import EngineBridge

    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    async with app.run_test(size=(120, 30), notifications=True) as pilot:
        try:
            for path in (INTEROP / "vllm-llama-base", INTEROP / "vllm-llama-eagle3.jsonl", GUIDELLM08):
                await app.engine.overlay(path)  # type: ignore[union-attr]
                await pilot.pause()
            warned = [str(n.message) for n in app._notifications if "model" in str(n.message)]
            assert warned == ["comparison confounded: different models: vllm-llama-base "
                              "meta-llama/Llama-3.1-8B-Instruct ≠ vllm-llama-eagle3 meta-llama/Llama-3.1-8B-Instruct "
                              "≠ guidellm-sim-concurrent sim-model"]
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


@pytest.mark.slow
def test_compare_prints_no_category_rows_for_peer_files(tmp_path: Path) -> None:
    peer = read_any_results(VLLM_ONE)
    mine = tmp_path / "mine.jsonl"
    lv = peer.levels[0]
    append_line(mine, SweepMeta(url="http://x", model="m", workload={"levels": [4]}, profile="mine").to_dict())
    append_line(mine, replace(lv, categories={"code": CategoryStats(4, 400, 100)}).to_dict())
    done = run_specmon("compare", "--no-chart", str(mine), str(VLLM_ONE), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    block = done.stdout.split("acceptance by prompt category")[1].split("crossover")[0]
    assert VLLM_ONE.stem not in block and " - " not in block
    assert "4.00" in block


# ---- bounded numbers ------------------------------------------------------------------------------------------
BAD_NUMBERS = [
    ("output_throughput", "NaN", "output_throughput is NaN"),
    ("mean_ttft_ms", "Infinity", "mean_ttft_ms is Infinity"),
    ("duration", "0", "duration is 0; expected a time > 0"),
    ("total_output_tokens", "-5", "total_output_tokens is -5"),
    ("max_concurrency", "1e18", "max_concurrency must be an integer from 1 to 10000000 or null, got 1e+18"),
    ("output_throughput", "1e308", "output_throughput is 1e+308"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("key", "value", "message"), BAD_NUMBERS, ids=[f"{k}={v}" for k, v, _ in BAD_NUMBERS])
def test_absurd_numbers_are_refused_in_one_line_naming_file_line_and_field(tmp_path: Path, key: str, value: str,
                                                                          message: str) -> None:
    good = VLLM_ONE.read_text().strip()
    base = json.loads(good)
    bad = dict(base)
    bad[key] = "@@"
    f = tmp_path / "bad.jsonl"
    f.write_text(good + "\n" + json.dumps(bad).replace('"@@"', value) + "\n")
    with pytest.raises(UserError) as err:
        read_any_results(f)
    assert str(err.value).startswith(f"{f}:2: {message}")
    for args in (["compare", str(VLLM_ONE), str(f)], ["compare", "--json", str(VLLM_ONE), str(f)],
                 ["export", str(f), "--format", "vllm", "--out", str(tmp_path / "x")]):
        done = run_specmon(*args, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.splitlines() == [f"specmon: error: {err.value}"]
        assert "nan" not in done.stdout.lower() and "inf" not in done.stdout.replace("info", "")


# ---- report ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_report_reads_peer_files_and_says_single_sweeps_cannot_bound_the_crossover(tmp_path: Path) -> None:
    """`report` on a valid vLLM file said "not JSON"; two single sweeps read `C≈9.2 (±6)`, a ± with no meaning."""
    out = tmp_path / "r.md"
    done = run_specmon("report", str(INTEROP / "vllm-llama-base"), str(INTEROP / "vllm-llama-eagle3.jsonl"),
                   "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "not JSON" not in done.stderr
    text = out.read_text()
    verdict = next(line for line in text.splitlines() if line.startswith("**Verdict:**"))
    assert verdict == ("**Verdict:** vllm-llama-eagle3 is faster up to C≈9.2 (somewhere between C=4 and C=16: single "
                       "runs, no spread to bound it closer); vllm-llama-base beyond")
    assert "±" not in verdict
    compare = run_specmon("compare", "--no-chart", str(INTEROP / "vllm-llama-base"), str(INTEROP / "vllm-llama-eagle3.jsonl"),
                      cwd=tmp_path)
    assert "C≈9.2 (" in compare.stdout   # one crossover figure in compare and report
    # The "Acceptance and server view" table ends with its last real column, not an empty one.
    head = next(line for line in text.splitlines() if line.startswith("| profile | C | log |"))
    assert head.endswith("| queue mean/max |")
    # The accept length vLLM recorded, beside specmon's own three sources.
    assert head.startswith("| profile | C | log | metrics | client tok/chunk | file's tool |")
    recorded = {o["max_concurrency"]: o["spec_decode_acceptance_length"]
                for o in lines_of(INTEROP / "vllm-llama-eagle3.jsonl")}
    for c, v in recorded.items():
        assert f"| vllm-llama-eagle3 | {c} | – | – | – | {v:.2f} |" in text


@pytest.mark.slow
def test_report_refuses_open_loop_files_in_one_line(tmp_path: Path) -> None:
    path = REAL / "sglang04-h200-llama_405b_online_output.jsonl"
    done = run_specmon("report", "--format", "json", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].startswith(f"specmon: error: {path}: an open-loop sweep")


@pytest.mark.slow
def test_report_out_refuses_an_existing_file_and_a_symlink_unless_force(tmp_path: Path) -> None:
    files = [str(INTEROP / "vllm-llama-base"), str(INTEROP / "vllm-llama-eagle3.jsonl")]
    victim = tmp_path / "precious.md"
    victim.write_text("keep me")
    link = tmp_path / "link.md"
    link.symlink_to(victim)
    for args in (["--out", str(victim)], ["--format", "json", "--out", str(victim)]):
        done = run_specmon("report", *files, *args, cwd=tmp_path)
        assert done.returncode == 2 and "exists; not overwritten (--force replaces it" in done.stderr
    for args in (["--out", str(link), "--force"], ["--format", "csv", "--out", str(link), "--force"]):
        done = run_specmon("report", *files, *args, cwd=tmp_path)
        assert done.returncode == 2 and f"{link}: a symlink; not written through" in done.stderr
    assert victim.read_text() == "keep me"
    done = run_specmon("report", *files, "--format", "json", "--out", str(victim), "--force", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(victim.read_text())["crossover"]["plus_minus"] is None


HOSTILE_MODEL = "evil\x1b]52;c;cHduZWQ=\x07\x1b[2J<script>alert(1)</script>\n# Injected model"


@pytest.mark.slow
def test_hostile_names_in_peer_files_reach_no_terminal_no_markdown_and_no_spreadsheet(tmp_path: Path) -> None:
    """A real vLLM result whose model_id carries an OSC 52 (clipboard write), a clear-screen, `<script>` and a newline,
    in a file named as a spreadsheet formula with a newline: compare printed the sequences raw, report.md kept the
    script and a `# Injected` heading, the CSV cell started with `=`. Now none reaches a terminal, the Markdown is
    inert text and the cell is text."""
    o = json.loads(VLLM025_ONE.read_text())
    a = tmp_path / "a.json"
    a.write_text(json.dumps(o))
    b = tmp_path / '=HYPERLINK("x")\n# Injected\x1b[2J name.json'
    b.write_text(json.dumps(dict(o, model_id=HOSTILE_MODEL, deployment="x\x1b[31mred")))
    assert "\x1b" not in (read_any_results(b).meta.model or "")   # what the TUI's toasts are given too
    done = run_specmon("compare", "--no-chart", str(a), str(b), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "different models" in done.stdout
    assert not any(c in done.stdout + done.stderr for c in "\x1b\x07\x9b")
    md = tmp_path / "report.md"
    done = run_specmon("report", str(a), str(b), "--out", str(md), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = md.read_text()
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert not any(line.startswith("# Injected") for line in text.splitlines())
    assert not any(c in text for c in "\x1b\x07")
    done = run_specmon("report", "--format", "csv", str(a), str(b), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    cells = [row[0] for row in csv.reader(io.StringIO(done.stdout))][1:]
    assert cells and all(not c.startswith(("=", "+", "-", "@")) for c in cells)
    assert not any(c in done.stdout for c in "\x1b\x07")
    assert '\'=HYPERLINK("x")\\x0a# Injected\\x1b[2J name' in cells


@pytest.mark.slow
def test_export_to_a_dangling_symlink_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """`export --format vllm --out LINK` where LINK points to nothing ended in a FileExistsError traceback."""
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone" / "nowhere")
    done = run_specmon("export", str(VLLM025_ONE), "--format", "vllm", "--out", str(link), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (f"specmon: error: {link}: a symbolic link to nothing (it points to "
                                   f"{tmp_path / 'gone' / 'nowhere'}); not followed (choose another --out)")
    assert not (tmp_path / "gone").exists()


def test_a_peer_file_of_more_runs_than_any_sweep_is_refused_before_it_is_parsed(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A 138 MB JSONL of a million vLLM runs took 88 s and 5.3 GB to read (measured: /usr/bin/time specmon compare);
    now more than MAX_RUNS (10,000) runs in a file or directory are refused in one line before any is parsed (1.2 s,
    371 MB for that file). Here 10,000 real runs and a last line that is not even JSON: the refusal names the count,
    not that line (it was "...:10001: not JSON"); a directory likewise (its cap lowered to 2 here); at the cap, read."""
    import specmon.model.sweeps.formats.base as interop

    line = json.dumps(json.loads(VLLM025_ONE.read_text()))
    f = tmp_path / "many.jsonl"
    f.write_text(f"{line}\n" * 10_000 + '{"output_throughput": cut\n')
    with pytest.raises(UserError) as err:
        read_any_results(f)
    assert str(err.value) == (f"{f}: about 10,001 runs; specmon reads at most 10,000 from one file or directory "
                              "(refused unread: a sweep has tens of levels; split the file)")
    monkeypatch.setattr(interop, "MAX_RUNS", 2)
    d = tmp_path / "dir"
    d.mkdir()
    for n in range(3):
        (d / f"run{n}.json").write_text(line)
    with pytest.raises(UserError, match=r"dir: about 3 runs; specmon reads at most 2 "):
        read_any_results(d)
    (d / "run2.json").unlink()
    f.write_text(f"{line}\n{line}\n")
    assert len(read_any_results(f).levels) == len(read_any_results(d).levels) == 2


# ---- `vllm bench sweep serve` folders -------------------------------------------------------------------------
def sweep_folder(root: Path, runs: int = 2) -> dict[int, list[dict[str, object]]]:
    """The layout `vllm bench sweep serve --bench-params ... --num-runs 2` leaves (vllm/benchmarks/sweep/serve.py):
    EXPERIMENT/BENCH-max_concurrency=C/run=N.json (the result plus run_number and the overrides, indent 4),
    warmup.json, summary.json (the list of the runs); summary.csv beside the combinations. The numbers are the
    vllm-llama-base fixtures', the repeats 2 % apart."""
    exp = root / "20261201_120000"
    written: dict[int, list[dict[str, object]]] = {}
    for src in sorted((INTEROP / "vllm-llama-base").glob("*.json")):
        base = json.loads(src.read_text())
        c = base["max_concurrency"]
        comb = exp / f"BENCH-max_concurrency={c}"
        comb.mkdir(parents=True)
        (comb / "warmup.json").write_text(json.dumps(dict(base, run_number=-1, num_prompts=4), indent=4))
        data = []
        for n in range(runs):
            run = dict(base, output_throughput=base["output_throughput"] * (1 + 0.02 * n), run_number=n,
                       max_concurrency=c)
            (comb / f"run={n}.json").write_text(json.dumps(run, indent=4))
            data.append(run)
        (comb / "summary.json").write_text(json.dumps(data, indent=4))
        written[c] = data
    (exp / "summary.csv").write_text(",run_number\n0,0\n")
    return written


def test_vllm_sweep_serve_folder_is_read_nested_with_its_repeats(tmp_path: Path) -> None:
    """The top folder was "a directory with no .json files", a combination folder and a summary.json "not a result
    file specmon reads"."""
    written = sweep_folder(tmp_path / "out")
    for target in (tmp_path / "out", tmp_path / "out" / "20261201_120000"):
        result = read_any_results(target)
        assert sorted({lv.concurrency for lv in result.levels}) == sorted(written)
        for c, data in written.items():
            mine = [lv for lv in result.levels if lv.concurrency == c]
            assert [lv.output_throughput for lv in mine] == [d["output_throughput"] for d in data]
            assert all(lv.requests_ok == data[0]["completed"] for lv in mine)
        assert any("ran 2 times" in n for n in result.notes)
    comb = tmp_path / "out" / "20261201_120000" / "BENCH-max_concurrency=4"
    for target in (comb, comb / "summary.json"):
        result = read_any_results(target)
        assert [lv.output_throughput for lv in result.levels] == [d["output_throughput"] for d in written[4]]
    (comb / "summary.json").unlink()   # a combination still running: its run=N.json files, warmup left out
    assert len(read_any_results(comb).levels) == 2


# ---- exports --------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_exports_write_the_accept_length_and_read_it_back(tmp_path: Path) -> None:
    eagle = INTEROP / "vllm-llama-eagle3.jsonl"
    done = run_specmon("export", str(eagle), "--format", "vllm", "--out", str(tmp_path / "v"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    plotted = [r for p in (tmp_path / "v").rglob("summary.json") for r in json.loads(p.read_text())]
    want = {o["max_concurrency"]: o["spec_decode_acceptance_length"] for o in lines_of(eagle)}
    assert {r["max_concurrency"]: r["spec_decode_acceptance_length"] for r in plotted} == want
    assert [lv.accept_length for lv in read_any_results(tmp_path / "v").levels] == [want[c] for c in sorted(want)]
    sglang = INTEROP / "sglang-llama-eagle3.jsonl"
    out = tmp_path / "s.jsonl"
    done = run_specmon("export", str(sglang), "--format", "sglang", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [o["accept_length"] for o in lines_of(out)] == [o["accept_length"] for o in lines_of(sglang)]


@pytest.mark.slow
def test_sglang_export_gives_the_prompt_sets_real_input_length_and_says_what_it_cannot_hold(tmp_path: Path) -> None:
    """The built-in prompts were exported as `random_input_len 128` (the sampling setting), their mean being 27.5."""
    src = tmp_path / "builtin.jsonl"
    append_line(src, SweepMeta(url="http://x", model="m", workload={"api": "chat", "input_len": 128, "output_len": 64,
                                                                   "dataset": "builtin", "levels": [2]}).to_dict())
    lv = read_any_results(VLLM_ONE).levels[0]
    append_line(src, replace(lv, requests_ok=4, input_tokens=110, output_tokens=256, tokens_per_chunk=2.5,
                             categories={"code": CategoryStats(4, 256, 100)}).to_dict())
    out = tmp_path / "b.jsonl"
    done = run_specmon("export", str(src), "--format", "sglang", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = lines_of(out)
    assert line["dataset_name"] == "custom"
    assert (line["random_input_len"], line["random_output_len"]) == (28, 64)   # 110 / 4 = 27.5 tokens, rounded
    assert done.stderr.splitlines() == ["specmon: note: the sglang format has no field for: tokens per chunk, "
                                        "acceptance by prompt category (not written)"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["closed.jsonl", "open.jsonl"])
def test_sglang_export_of_a_real_sweep_reads_back_through_compare_as_the_same_sweep(tmp_path: Path, name: str) -> None:
    """`export X --format sglang` then `compare X X.sglang.jsonl`: each line carries its level's own mean prompt
    length as random_input_len (the built-in prompts), and compare left all but the first level out as "another
    workload". Those lengths shape no load outside a random dataset: now every level reads back, ratio 1. (The real
    sweep's levels sent the same 12 prompts, mean 30 tokens each; its last level is given 5 more input tokens per
    request here, as levels of a longer or timed sweep draw other prompts.)"""
    x = tmp_path / name
    lines = (INTEROP / "specmon-sweep" / name).read_text().splitlines()
    last = json.loads(lines[-1])
    last["input_tokens"] += 5 * last["requests_ok"]
    x.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    done = run_specmon("export", str(x), "--format", "sglang", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    back = tmp_path / f"{x.stem}.sglang.jsonl"
    assert len({line["random_input_len"] for line in lines_of(back)}) == 2   # a mean length per level, as before
    done = run_specmon("compare", "--json", str(x), str(back), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "another workload" not in done.stderr
    levels = json.loads(done.stdout)["levels"]
    assert len(levels) == len(read_results(x).levels) == 2
    for row in levels:
        assert row["ratio"] == [pytest.approx(1.0, rel=1e-9)]


@pytest.mark.slow
# ---- the TUI overlay ------------------------------------------------------------------------------------------
async def test_overlay_of_a_guidellm_report_claims_no_client_health(tmp_path: Path) -> None:
    """guidellm records no client health; the overlay's table said `ok` in the client column for every level."""
    from textual.widgets import DataTable
    from ui_states import demo_config

    from specmon.ui.app import SpecmonApp
    from specmon.ui.bridge import EngineBridge

    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    async with app.run_test(size=(160, 48)) as pilot:   # wide enough for the client column beside the long name
        try:
            await app.engine.overlay(GUIDELLM08)  # type: ignore[union-attr]
            for _ in range(100):
                await pilot.pause(0.05)
                table = app.query_one("#sweep-table", DataTable)
                if table.row_count:
                    break
            rows = [table.get_row_at(i) for i in range(table.row_count)]
            assert len(rows) == 4
            client = [str(c.label) for c in table.columns.values()].index("client")
            assert [row[client] for row in rows] == ["—"] * 4, rows   # not recorded, not "ok"
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


def test_guidellm_csv_report_gives_the_same_levels_as_its_json(tmp_path: Path) -> None:
    """guidellm's CSV (written by guidellm 0.8.1's own `guidellm export` from the JSON report) was refused."""
    csv_path = REAL / "guidellm08-sim-concurrent.csv"
    from_csv, from_json = read_any_results(csv_path), read_any_results(GUIDELLM08)
    fields = ("concurrency", "rate", "requests_ok", "requests_failed", "duration_s", "output_tokens", "input_tokens",
              "output_throughput", "request_throughput", "total_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
              "tokens_per_chunk", "achieved_concurrency")
    assert [{k: getattr(lv, k) for k in fields} for lv in from_csv.levels] == \
        [{k: getattr(lv, k) for k in fields} for lv in from_json.levels]
    assert (from_csv.meta.model, from_csv.meta.url) == ("sim-model", "http://127.0.0.1:31999")
    assert from_csv.notes == ("token totals are mean x count (a guidellm CSV holds no totals)",)


def test_vllm_sweep_serve_folder_of_two_server_settings_is_not_pooled_as_repeats(tmp_path: Path) -> None:
    written = sweep_folder(tmp_path / "a", runs=1)
    exp = tmp_path / "a" / "20261201_120000"
    for comb in list(exp.iterdir()):
        if comb.is_dir():
            for serve in ("SERVE-max_num_seqs=64", "SERVE-max_num_seqs=256"):
                shutil.copytree(comb, exp / f"{serve}-{comb.name}")
            shutil.rmtree(comb)
    result = read_any_results(tmp_path / "a")
    assert sorted(lv.concurrency for lv in result.levels) == sorted(written)   # one setting's levels, no repeats
    assert not any("ran 2 times" in n for n in result.notes)
    assert any("left out 3 run(s) of another workload" in n and "SERVE-max_num_seqs=64" in n for n in result.notes)


def test_guidellm_05_report_keeps_args_model_and_target(tmp_path: Path) -> None:
    """guidellm 0.5 keeps the target and model in the report's `args` (GenerativeBenchmarksReport.args in v0.5.0's
    schemas/generative/report.py): both were lost. The real 0.5 report (GUIDELLM05) also has them in each
    benchmark's config.backend; this one, the 0.8 report with them moved to `args` only, shows `args` alone serves."""
    report = json.loads(GUIDELLM08.read_text())
    report.pop("config")
    for b in report["benchmarks"]:
        b["config"].pop("backend")
    report["args"] = {"target": "http://10.0.0.7:8000", "model": "org/model-0.5"}
    f = tmp_path / "g05.json"
    f.write_text(json.dumps(report))
    result = read_any_results(f)
    assert (result.meta.url, result.meta.model) == ("http://10.0.0.7:8000", "org/model-0.5")


# ---- guidellm's own loading code, where a guidellm is installed -------------------------------------------------
GUIDELLM_PYTHON = os.environ.get("SPECMON_GUIDELLM_PYTHON")   # a python with guidellm installed (it needs torch)
SWEEPS = INTEROP / "specmon-sweep"
SWEEP_FILES = [SWEEPS / "closed.jsonl", SWEEPS / "open.jsonl"]

_GUIDELLM_READ = """
import json, sys
from guidellm.benchmark import GenerativeBenchmarksReport
report = GenerativeBenchmarksReport.load_file(sys.argv[1])
print(json.dumps([{"streams": b.config.strategy.streams, "output_tok_s": b.metrics.output_tokens_per_second.total.mean,
                   "ttft_p99": b.metrics.time_to_first_token_ms.successful.percentiles.p99,
                   "model": b.config.backend["model"]} for b in report.benchmarks]))
"""


@pytest.mark.skipif(not GUIDELLM_PYTHON, reason="set SPECMON_GUIDELLM_PYTHON to a python with guidellm installed")
def test_guidellm_report_reads_as_guidellms_own_loader_reads_it() -> None:
    done = subprocess.run([str(GUIDELLM_PYTHON), "-c", _GUIDELLM_READ, str(GUIDELLM08)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.splitlines()[-1])
    ours = read_any_results(GUIDELLM08)
    assert [(lv.concurrency, lv.output_throughput, lv.ttft_ms.p99) for lv in ours.levels] == \
        [(b["streams"], b["output_tok_s"], b["ttft_p99"]) for b in theirs]
    assert {b["model"] for b in theirs} == {ours.meta.model}


# ---- the guidellm export ---------------------------------------------------------------------------------------
def _guidellm_export(src: Path) -> SweepResult:
    report = guidellm_report(read_results(src), read_records(str(src.with_name(src.stem + ".requests.jsonl"))))
    return parse_any_results(json.dumps(report, allow_nan=False), f"{src.stem}.guidellm.json")


@pytest.mark.parametrize("src", SWEEP_FILES, ids=[p.stem for p in SWEEP_FILES])
def test_guidellm_export_of_a_real_sweep_reads_back_with_the_sweeps_numbers(src: Path) -> None:
    """There was no guidellm export. Built from the sweep's per-request records, it reads back (by the same reader
    that reads guidellm's own reports) with the sweep's numbers: counts and tokens exactly, duration, throughputs,
    mean TTFT, tokens per chunk and achieved concurrency to the rounding of specmon's result file."""
    ours, back = read_results(src), _guidellm_export(src)
    assert back.meta.tool == "guidellm" and back.meta.model == ours.meta.model and back.meta.url == ours.meta.url
    assert back.mode == ours.mode
    assert len(back.levels) == len(ours.levels) == 2
    for b, o in zip(back.levels, ours.levels):
        assert (b.concurrency, b.rate, b.requests_ok, b.requests_failed, b.output_tokens, b.input_tokens) == \
            (o.concurrency, o.rate, o.requests_ok, o.requests_failed, o.output_tokens, o.input_tokens)
        assert b.duration_s == pytest.approx(o.duration_s, abs=1e-4)
        for name in ("output_throughput", "request_throughput", "total_throughput"):
            assert getattr(b, name) == pytest.approx(getattr(o, name), abs=5e-4), name   # the file keeps 3-4 decimals
        assert b.ttft_ms.mean == pytest.approx(o.ttft_ms.mean, abs=1e-3)
        assert b.tokens_per_chunk == pytest.approx(o.tokens_per_chunk, rel=1e-4)
        assert b.achieved_concurrency == pytest.approx(o.achieved_concurrency, rel=1e-3)


@pytest.mark.slow
def test_guidellm_export_cli_writes_one_report_and_says_what_it_cannot_hold(tmp_path: Path) -> None:
    src = SWEEP_FILES[1]
    out = tmp_path / "open.guidellm.json"
    done = run_specmon("export", str(src), "--format", "guidellm", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(out)]
    assert done.stderr.splitlines() == [
        "specmon: note: the guidellm format has no field for: over-capacity and behind-schedule flags, acceptance by "
        "prompt category, client health, decode tok/s, guidellm's scheduler timings (queue, resolve and finalize "
        "delays: -1, as guidellm writes them unknown), per-modality summaries (text tokens, words, characters: null), "
        "confidence intervals (not written)"]
    report = json.loads(out.read_text())
    first = report["benchmarks"][0]
    assert first["config"]["strategy"] == {"type_": "poisson", "rate": 4.0, "max_concurrency": 4}
    # Each request is in the report with its own times (open loop: its scheduled time), as guidellm keeps them.
    records = [r for r in lines_of(src.with_name("open.requests.jsonl")) if r.get("rate") == 4.0 and not r.get("warmup")]
    assert len(first["requests"]["successful"]) == len(records) == 16
    assert sorted(r["prompt_tokens"] for r in first["requests"]["successful"]) == \
        sorted(r["prompt_tokens"] for r in records)
    delays = sorted(q["info"]["timings"]["request_start"] - q["info"]["timings"]["targeted_start"]
                    for q in first["requests"]["successful"])
    assert delays == pytest.approx(sorted((r["late_ms"] + r.get("queued_ms", 0.0)) / 1000 for r in records), abs=1e-6)
    again = run_specmon("export", str(src), "--format", "guidellm", "--out", str(out), cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.strip() == \
        f"specmon: error: {out}: exists; not overwritten (choose another --out)"


@pytest.mark.slow
def test_guidellm_export_needs_per_request_records_and_says_so_in_one_line(tmp_path: Path) -> None:
    peer = run_specmon("export", str(VLLM_ONE), "--format", "guidellm", "--out", str(tmp_path / "x.json"), cwd=tmp_path)
    assert peer.returncode == 2
    assert peer.stderr.strip() == (f"specmon: error: {VLLM_ONE}: no per-request records (a guidellm report is built "
                                   "from a specmon sweep's records file, which this result does not name)")
    alone = tmp_path / "closed.jsonl"
    shutil.copy(SWEEP_FILES[0], alone)
    lost = run_specmon("export", str(alone), "--format", "guidellm", cwd=tmp_path)
    assert lost.returncode == 2
    assert lost.stderr.strip() == ("specmon: error: closed.requests.jsonl: no such file (the sweep's per-request "
                                   "records; a guidellm report is built from them)")


_GUIDELLM_RECOMPUTE = """
import json, sys
from guidellm.benchmark import GenerativeBenchmarksReport
from guidellm.schemas.base.statistics import StatusDistributionSummary as S
report = GenerativeBenchmarksReport.load_file(sys.argv[1])
out = []
for b in report.benchmarks:
    ok, bad = b.requests.successful, b.requests.errored
    st, en = b.scheduler_metrics.measure_start_time, b.scheduler_metrics.measure_end_time
    def v(f):
        return S.from_values_function(function=f, successful=ok, incomplete=[], errored=bad)
    def r(f):
        return S.rate_distribution_from_timings_function(function=f, successful=ok, incomplete=[], errored=bad,
                                                         start_time=st, end_time=en)
    # guidellm 0.8.1's own computations (GenerativeMetrics.compile), over the requests as guidellm loaded them.
    theirs = {
        "requests_per_second": r(lambda q: q.request_end_time),
        "request_concurrency": S.concurrency_distribution_from_timings_function(
            function=lambda q: (q.request_start_time, q.request_end_time), successful=ok, incomplete=[], errored=bad,
            start_time=st, end_time=en),
        "request_latency": v(lambda q: q.request_latency or 0.0),
        "request_streaming_iterations_count": v(lambda q: q.info.timings.request_iterations or 0.0),
        "prompt_token_count": v(lambda q: q.prompt_tokens or 0.0),
        "output_token_count": v(lambda q: q.output_tokens or 0.0),
        "total_token_count": v(lambda q: q.total_tokens or 0.0),
        "time_to_first_token_ms": v(lambda q: q.time_to_first_token_ms or 0.0),
        "time_to_first_output_token_ms": v(lambda q: q.time_to_first_output_token_ms or 0.0),
        "time_per_output_token_ms": v(lambda q: (q.time_per_output_token_ms or 0.0, q.output_tokens or 0.0)),
        "inter_token_latency_ms": v(lambda q: (q.inter_token_latency_ms or 0.0, (q.output_tokens or 1.0) - 1.0)),
        "prompt_tokens_per_second": r(lambda q: q.prompt_tokens_timing),
        "output_tokens_per_second": r(lambda q: q.output_tokens_timings),
        "tokens_per_second": r(lambda q: q.total_tokens_timings),
        "output_tokens_per_iteration": v(lambda q: [t for (_x, t) in q.output_tokens_timings]),
        "iter_tokens_per_iteration": v(lambda q: [t for (_x, t) in q.iter_tokens_timings]),
    }
    if b.config.strategy.defines_arrival_schedule:
        theirs["request_dispatch_delay"] = v(lambda q: q.request_dispatch_delay)
        theirs["request_scheduled_latency"] = v(lambda q: q.request_scheduled_latency)
    figures = {}
    for name, summary in theirs.items():
        written, recomputed = getattr(b.metrics, name).model_dump(), summary.model_dump()
        for status in ("successful", "errored", "incomplete", "total"):
            for k in ("mean", "median", "mode", "variance", "min", "max", "count", "total_sum"):
                figures[f"{name}.{status}.{k}"] = (written[status][k], recomputed[status][k])
            for k, c in recomputed[status]["percentiles"].items():
                figures[f"{name}.{status}.{k}"] = (written[status]["percentiles"][k], c)
    out.append({"strategy": b.config.strategy.type_, "streams": getattr(b.config.strategy, "streams", None),
                "rate": getattr(b.config.strategy, "rate", None), "model": b.config.backend["model"],
                "duration": b.duration, "ok": b.metrics.request_totals.successful,
                "output_tok_s": b.metrics.output_tokens_per_second.total.mean,
                "ttft_mean": b.metrics.time_to_first_token_ms.successful.mean, "figures": figures})
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(not GUIDELLM_PYTHON, reason="set SPECMON_GUIDELLM_PYTHON to a python with guidellm installed")
@pytest.mark.parametrize("src", SWEEP_FILES, ids=[p.stem for p in SWEEP_FILES])
def test_guidellm_export_is_loaded_by_guidellms_own_loader_with_guidellms_own_figures(tmp_path: Path, src: Path) -> None:
    """guidellm 0.8.1's loader accepts the export; every figure in it equals what guidellm's own code computes from
    the requests it loaded (so the file is what guidellm would have written for those requests), and its
    throughput, mean TTFT and request count are the sweep's."""
    out = tmp_path / "g.json"
    assert run_specmon("export", str(src), "--format", "guidellm", "--out", str(out), cwd=tmp_path).returncode == 0
    done = subprocess.run([str(GUIDELLM_PYTHON), "-c", _GUIDELLM_RECOMPUTE, str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.splitlines()[-1])
    ours = read_results(src)
    assert len(theirs) == len(ours.levels)
    for b, lv in zip(theirs, ours.levels):
        assert len(b["figures"]) > 500
        for name, (written, recomputed) in b["figures"].items():
            assert written == pytest.approx(recomputed, rel=1e-12, abs=1e-12), name
        assert (b["streams"], b["rate"], b["ok"], b["model"]) == \
            ((lv.concurrency, None, lv.requests_ok, ours.meta.model) if lv.rate is None
             else (None, lv.rate, lv.requests_ok, ours.meta.model))
        assert b["duration"] == pytest.approx(lv.duration_s, abs=1e-4)
        assert b["output_tok_s"] == pytest.approx(lv.output_throughput, rel=1e-5)
        assert b["ttft_mean"] == pytest.approx(lv.ttft_ms.mean, abs=1e-3)
