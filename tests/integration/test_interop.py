"""Results from and for other tools: vLLM, SGLang and guidellm files read by `compare` and the overlay, `export`.

Fixtures (tests/fixtures/interop/README.md says where each comes from): guidellm's is its real output against
`specmon sim`; vLLM's and SGLang's are written from their documented result layouts.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from paths import FIXTURES
from process_support import run_specmon

from specmon.errors import UserError
from specmon.loadgen.lines import append_line
from specmon.model.sweeps.formats import parse_any_results
from specmon.model.sweeps.results import (
    ClientHealth,
    LevelResult,
    Stats,
    SweepMeta,
    SweepResult,
)
from specmon.sources.resultfiles import read_any_results, read_results

INTEROP = FIXTURES / "interop"
GUIDELLM = INTEROP / "guidellm-sim-concurrent.json"
VLLM_DIR = INTEROP / "vllm-llama-base"
VLLM_APPENDED = INTEROP / "vllm-llama-eagle3.jsonl"
SGLANG = INTEROP / "sglang-llama-eagle3.jsonl"


def compared(*paths: Path, cwd: Path) -> dict[str, dict[float, float]]:
    """`specmon compare --json`: each file's output throughput per concurrency (or rate), by label."""
    done = run_specmon("compare", "--json", *map(str, paths), cwd=cwd)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    labels = [f["label"] for f in data["files"]]
    x = data["mode"]
    return {lb: {row[x]: row["output_throughput"][i] for row in data["levels"]
                 if row["output_throughput"][i] is not None} for i, lb in enumerate(labels)}


def guidellm_console_throughput(name: str = "guidellm-sim-concurrent") -> dict[float, float]:
    """guidellm's own summary: the "Output Tokens Per Sec" column of its Server Throughput table, per streams
    (concurrent@N) or rate (poisson@R)."""
    text = (INTEROP / f"{name}.console.txt").read_text()
    table = text.split("Server Throughput Statistics")[1]
    out = {}
    for m in re.finditer(r"^\| (?:concurrent|poisson)@([\d.]+) +\|(.*)\|$", table, re.M):
        cells = [c.strip() for c in m.group(2).split("|")]
        out[float(m.group(1))] = float(cells[4])   # Concurrency Mdn, Mean, Requests/s, Input tok/s, Output tok/s
    return out


def flat_objects(path: Path) -> list[dict[str, object]]:
    """vLLM/SGLang objects as their own Python scripts load them (one per line, `Infinity` allowed)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- round trips: the peer's own summary, through `specmon compare` --------------------------------------------
@pytest.mark.slow
def test_guidellm_real_report_gives_guidellms_own_throughput_per_level(tmp_path: Path) -> None:
    own = guidellm_console_throughput()
    assert sorted(own) == [1, 2, 4, 8]
    ours = compared(GUIDELLM, VLLM_DIR, cwd=tmp_path)["guidellm-sim-concurrent"]
    assert sorted(ours) == [1, 2, 4, 8]
    for c, tput in own.items():
        assert round(ours[c], 1) == tput, c


@pytest.mark.slow
def test_guidellm_real_poisson_report_compares_on_the_rate_axis(tmp_path: Path) -> None:
    own = guidellm_console_throughput("guidellm-sim-poisson")
    assert sorted(own) == [1.0, 2.0, 4.0]
    vllm = write_vllm_rates(tmp_path / "vllm-rates.json", (1.0, 2.0, 4.0))
    ours = compared(INTEROP / "guidellm-sim-poisson.json", vllm, cwd=tmp_path)
    assert {r: round(t, 1) for r, t in ours["guidellm-sim-poisson"].items()} == own
    result = read_any_results(INTEROP / "guidellm-sim-poisson.json")
    assert result.mode == "rate"
    assert all(lv.concurrency == 10240 for lv in result.levels)   # guidellm's default cap, as its report says


@pytest.mark.slow
def test_vllm_files_give_the_output_throughput_vllm_printed(tmp_path: Path) -> None:
    # vLLM prints "Output token throughput (tok/s)" from the same `output_throughput` it saves.
    own_base = {o["max_concurrency"]: o["output_throughput"]
                for f in sorted(VLLM_DIR.glob("*.json")) for o in flat_objects(f)}
    own_spec = {o["max_concurrency"]: o["output_throughput"] for o in flat_objects(VLLM_APPENDED)}
    ours = compared(VLLM_DIR, VLLM_APPENDED, cwd=tmp_path)
    assert ours["vllm-llama-base"] == pytest.approx(own_base, abs=1e-9)
    assert ours["vllm-llama-eagle3"] == pytest.approx(own_spec, abs=1e-9)
    assert sorted(own_base) == [1, 4, 16]


@pytest.mark.slow
def test_sglang_jsonl_gives_its_output_throughput_and_compares_with_vllm(tmp_path: Path) -> None:
    own = {o["max_concurrency"]: o["output_throughput"] for o in flat_objects(SGLANG)}
    done = run_specmon("compare", "--no-chart", str(VLLM_DIR), str(SGLANG), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    ours = compared(VLLM_DIR, SGLANG, cwd=tmp_path)["sglang-llama-eagle3"]
    assert ours == pytest.approx(own, abs=1e-9)
    # Speculation pays at low concurrency and stops paying between C=4 and C=16.
    assert re.search(r"crossover sglang-llama-eagle3 vs vllm-llama-base: C≈\d+(\.\d+)? \(sglang-llama-eagle3 ahead "
                     r"below", done.stdout)
    # What each file lacks is said once, on stderr, naming the file.
    notes = done.stderr.splitlines()
    assert len(notes) == 2
    assert notes[1].startswith(f"specmon: note: {SGLANG}: read as SGLang bench_serving output; it has no failed")


@pytest.mark.slow
def test_peer_files_mix_with_specmons_own_results_without_workload_noise(tmp_path: Path) -> None:
    own = write_specmon(tmp_path / "eagle3.jsonl")
    done = run_specmon("compare", "--no-chart", str(VLLM_DIR), str(own), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "crossover eagle3 vs vllm-llama-base" in done.stdout
    # A vLLM file names its workload in vLLM's terms: no "workload input_len: x ≠ None" lines from that.
    assert "workload" not in done.stdout


# ---- field mapping ---------------------------------------------------------------------------------------------
def test_vllm_fields_map_onto_specmon_levels() -> None:
    result = read_any_results(VLLM_DIR)
    assert result.meta.tool == "vllm" and result.meta.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert result.meta.created_at == "2026-11-28T10:15:02"
    lv = result.levels[1]
    raw = flat_objects(next(VLLM_DIR.glob("*concurrency4-*.json")))[0]
    assert lv.concurrency == 4 and lv.requests_ok == raw["completed"] == 64 and lv.requests_failed == 0
    assert lv.duration_s == raw["duration"] and lv.output_tokens == raw["total_output_tokens"]
    assert lv.total_throughput == raw["total_token_throughput"]
    assert lv.ttft_ms == Stats(raw["mean_ttft_ms"], raw["median_ttft_ms"], None, raw["p99_ttft_ms"])  # type: ignore[arg-type]
    assert lv.itl_ms.p50 == raw["median_itl_ms"] and lv.tpot_ms.p99 == raw["p99_tpot_ms"]
    assert lv.e2e_ms == Stats()   # not in vLLM's default --percentile-metrics
    assert lv.tokens_per_chunk is None and lv.achieved_concurrency is None


def test_sglang_fields_map_onto_specmon_levels() -> None:
    result = read_any_results(SGLANG)
    raw = flat_objects(SGLANG)[2]
    lv = result.levels[2]
    assert result.meta.tool == "sglang" and result.meta.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert lv.concurrency == 16 and lv.requests_ok == raw["completed"]
    assert lv.total_throughput == raw["total_throughput"]
    assert lv.e2e_ms == Stats(raw["mean_e2e_latency_ms"], raw["median_e2e_latency_ms"],  # type: ignore[arg-type]
                              raw["p90_e2e_latency_ms"], raw["p99_e2e_latency_ms"])
    assert lv.achieved_concurrency == raw["concurrency"]   # SGLang's "Concurrency" is Little's law, as ours


def test_guidellm_fields_map_onto_specmon_levels() -> None:
    result = read_any_results(GUIDELLM)
    report = json.loads(GUIDELLM.read_text())
    b = report["benchmarks"][2]
    m = b["metrics"]
    lv = result.levels[2]
    assert result.meta.tool == "guidellm" and result.meta.url == "http://127.0.0.1:31999"
    assert lv.concurrency == b["config"]["strategy"]["streams"] == 4
    assert lv.requests_ok == m["request_totals"]["successful"] == 16
    assert lv.output_tokens == m["output_token_count"]["successful"]["total_sum"]
    # guidellm's ITL is per output token after the first: specmon's TPOT. It has no per-chunk ITL.
    itl = m["inter_token_latency_ms"]["successful"]
    assert lv.tpot_ms == Stats(itl["mean"], itl["median"], itl["percentiles"]["p90"], itl["percentiles"]["p99"])
    assert lv.itl_ms == Stats()
    assert lv.e2e_ms.p99 == pytest.approx(m["request_latency"]["successful"]["percentiles"]["p99"] * 1000)
    assert lv.tokens_per_chunk == m["output_tokens_per_iteration"]["successful"]["mean"]
    assert lv.achieved_concurrency == m["request_concurrency"]["successful"]["mean"]


def test_the_format_is_told_from_the_content_not_the_name(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(GUIDELLM.read_text())
    (tmp_path / "b.json").write_text(SGLANG.read_text())
    assert read_any_results(tmp_path / "a.txt").meta.tool == "guidellm"
    assert read_any_results(tmp_path / "b.json").meta.tool == "sglang"
    own = write_specmon(tmp_path / "c.json")
    assert read_any_results(own).meta.tool is None


# ---- export and re-read ----------------------------------------------------------------------------------------
def write_specmon(path: Path, profile: str = "eagle3", rates: tuple[float, ...] = ()) -> Path:
    """A specmon result: closed loop at C=1, 4, 16, or open loop at `rates` capped at C=32 (burstiness 0.5, an SLO)."""
    workload: dict[str, object] = {"api": "chat", "input_len": 1024, "output_len": 512}
    if rates:
        workload.update({"mode": "rate", "rates": list(rates), "burstiness": 0.5, "max_concurrency": 32})
    append_line(path, SweepMeta(url="http://127.0.0.1:1", model="org/Model-8B", workload=workload, profile=profile,
                                created_at="2026-11-29T10:11:12Z").to_dict())
    points = [(32, r, 991.74) for r in rates] or [(c, None, t) for c, t in ((1, 330.0), (4, 740.5), (16, 1370.25))]
    for c, rate, t in points:
        append_line(path, LevelResult(
            concurrency=c, rate=rate, requests_ok=8 * c, requests_failed=c // 4, duration_s=12.5,
            output_tokens=int(t * 12.5), output_throughput=t, request_throughput=0.64 * c, input_tokens=1024 * 8 * c,
            total_throughput=t * 3, ttft_ms=Stats(20.5 + c, 19.0 + c, 30.25 + c, 41.0 + c),
            tpot_ms=Stats(3.1, 3.0, 3.5, 4.25), itl_ms=Stats(8.5, 8.25, 11.0, 15.5),
            e2e_ms=Stats(1600.0, 1590.5, 1700.0, 1800.75), tokens_per_chunk=2.75, achieved_concurrency=c * 0.98,
            goodput=None if rate is None else rate * 0.75, good_share=None if rate is None else 0.75,
            client=ClientHealth(cpu_s=0.5, chunks=100),
        ).to_dict())
    return path


CARRIED = ("concurrency", "requests_ok", "duration_s", "output_tokens", "input_tokens", "output_throughput",
           "request_throughput", "total_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def assert_reads_back_the_same(src: Path, exported: Path, tool: str) -> SweepResult:
    """The exported file, read back, has every carried field of every level as the original."""
    original, again = read_results(src), read_any_results(exported)
    assert again.meta.tool == tool
    assert [{k: getattr(lv, k) for k in CARRIED} for lv in again.levels] == \
        [{k: getattr(lv, k) for k in CARRIED} for lv in original.levels]
    return again


@pytest.mark.slow
def test_export_vllm_writes_one_file_per_level_that_reads_back_the_same(tmp_path: Path) -> None:
    src = write_specmon(tmp_path / "eagle3.jsonl")
    done = run_specmon("export", str(src), "--format", "vllm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "eagle3-vllm"
    # `vllm bench sweep serve`'s layout: a folder per load with run=0.json and the summary.json its plot reads.
    assert sorted(p.name for p in out.iterdir()) == sorted(f"BENCH-max_concurrency={c}" for c in (1, 4, 16))
    assert done.stdout.split() == [str(out / f"BENCH-max_concurrency={c}" / n) for c in (1, 4, 16)
                                   for n in ("run=0.json", "summary.json")]
    # `vllm bench sweep plot`'s own reading: every run of every **/summary.json.
    plotted = [run for path in out.rglob("**/summary.json") for run in json.loads(path.read_text())]
    assert {r["max_concurrency"]: r["output_throughput"] for r in plotted} == {
        lv.concurrency: lv.output_throughput for lv in read_results(src).levels}
    # What a vLLM user's script reads, by vLLM's names.
    o = json.loads((out / "BENCH-max_concurrency=16" / "run=0.json").read_text())
    assert o["run_number"] == 0
    assert o["max_concurrency"] == 16 and o["request_rate"] == "inf" and o["output_throughput"] == 1370.25
    assert (o["mean_ttft_ms"], o["median_ttft_ms"], o["p90_ttft_ms"], o["p99_ttft_ms"]) == (36.5, 35.0, 46.25, 57.0)
    assert o["mean_e2el_ms"] == 1600.0 and o["p99_tpot_ms"] == 4.25 and o["median_itl_ms"] == 8.25
    assert o["completed"] == 128 and o["failed"] == 4 and o["total_token_throughput"] == 1370.25 * 3
    # Re-read (the directory as one sweep): the same numbers.
    again = assert_reads_back_the_same(src, out, "vllm")
    assert [lv.requests_failed for lv in again.levels] == [0, 1, 4]


@pytest.mark.slow
def test_export_sglang_writes_jsonl_that_reads_back_the_same(tmp_path: Path) -> None:
    src = write_specmon(tmp_path / "eagle3.jsonl")
    target = tmp_path / "out" / "bench.jsonl"
    target.parent.mkdir()
    done = run_specmon("export", str(src), "--format", "sglang", "--out", str(target), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = flat_objects(target)
    assert [o["max_concurrency"] for o in lines] == [1, 4, 16]
    assert lines[0]["request_rate"] == float("inf") and lines[0]["backend"] == "sglang-oai-chat"
    assert lines[2]["p99_e2e_latency_ms"] == 1800.75 and lines[2]["concurrency"] == pytest.approx(15.68)
    assert lines[0]["random_input_len"] == 1024 and lines[0]["total_throughput"] == 990.0
    again = assert_reads_back_the_same(src, target, "sglang")
    assert [lv.achieved_concurrency for lv in again.levels] == [0.98, 3.92, 15.68]


@pytest.mark.slow
def test_export_of_a_peer_file_converts_it(tmp_path: Path) -> None:
    # guidellm's real report, written for vLLM users: the throughput guidellm printed survives.
    done = run_specmon("export", str(GUIDELLM), "--format", "vllm", "--out", str(tmp_path / "g"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = {o["max_concurrency"]: round(o["output_throughput"], 1)
           for f in (tmp_path / "g").rglob("summary.json") for o in json.loads(f.read_text())}
    assert got == guidellm_console_throughput()


@pytest.mark.slow
def test_export_never_overwrites(tmp_path: Path) -> None:
    src = write_specmon(tmp_path / "eagle3.jsonl")
    target = tmp_path / "taken.jsonl"
    target.write_text("keep me\n")
    done = run_specmon("export", str(src), "--format", "sglang", "--out", str(target), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == f"specmon: error: {target}: exists; not overwritten (choose another --out)"
    assert target.read_text() == "keep me\n"


# ---- open loop: levels at a request rate --------------------------------------------------------------------
@pytest.mark.slow
def test_open_loop_results_export_and_read_back_at_their_rates(tmp_path: Path) -> None:
    src = write_specmon(tmp_path / "open.jsonl", "open", rates=(2.0, 4.5))
    done = run_specmon("export", str(src), "--format", "vllm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "open-vllm"
    assert sorted(p.name for p in out.iterdir()) == [
        "BENCH-request_rate=2-max_concurrency=32", "BENCH-request_rate=4.5-max_concurrency=32"]
    o = json.loads((out / "BENCH-request_rate=4.5-max_concurrency=32" / "run=0.json").read_text())
    assert (o["request_rate"], o["max_concurrency"], o["burstiness"], o["request_goodput"]) == (4.5, 32, 0.5, 3.375)
    again = assert_reads_back_the_same(src, out, "vllm")
    assert again.mode == "rate" and [lv.rate for lv in again.levels] == [2.0, 4.5]
    assert [lv.goodput for lv in again.levels] == [1.5, 3.375]
    assert again.meta.workload["max_concurrency"] == 32
    sg = tmp_path / "open.sglang.jsonl"
    assert run_specmon("export", str(src), "--format", "sglang", cwd=tmp_path).returncode == 0
    assert [o["request_rate"] for o in flat_objects(sg)] == [2.0, 4.5]
    assert [lv.rate for lv in assert_reads_back_the_same(src, sg, "sglang").levels] == [2.0, 4.5]


def write_vllm_rates(path: Path, rates: tuple[float, ...]) -> Path:
    """`vllm bench serve --request-rate R --append-result` runs (uncapped), from the C=4 fixture's numbers."""
    o = flat_objects(next(VLLM_DIR.glob("*concurrency4-*.json")))[0]
    runs = [{**o, "request_rate": r, "max_concurrency": None, "request_goodput": r * 0.9} for r in rates]
    path.write_text("\n".join(json.dumps(r) for r in runs))
    return path


def test_an_uncapped_vllm_rate_run_is_an_open_loop_level_without_a_cap(tmp_path: Path) -> None:
    result = read_any_results(write_vllm_rates(tmp_path / "appended.json", (8.0, 2.0)))
    assert result.mode == "rate" and result.meta.workload["rates"] == [2.0, 8.0]
    assert [(lv.rate, lv.concurrency, lv.goodput) for lv in result.levels] == [(2.0, 0, 1.8), (8.0, 0, 7.2)]


# ---- malformed files: one line naming the file and what was expected ------------------------------------------
def _vllm_without(key: str) -> str:
    o = flat_objects(next(VLLM_DIR.glob("*concurrency1-*.json")))[0]
    del o[key]
    return json.dumps(o)


def _guidellm_without_output_rate() -> str:
    report = json.loads(GUIDELLM.read_text())
    del report["benchmarks"][1]["metrics"]["output_tokens_per_second"]
    return json.dumps(report)


def _sglang_second_line_torn() -> str:
    lines = SGLANG.read_text().splitlines()
    return lines[0] + "\n" + lines[1][:40] + "\n"


BAD = [
    ("empty.json", lambda: "", "{p}: empty file; expected a specmon sweep result"),
    ("other.json", lambda: '{"hello": "world"}', "{p}: not a result file specmon reads; expected a specmon sweep result"),
    ("list.json", lambda: "[1, 2]", "{p}: not a result file specmon reads; expected a specmon sweep result"),
    ("v.json", lambda: _vllm_without("output_throughput"), "{p}: output_throughput: missing; expected a number"),
    ("v2.json", lambda: _vllm_without("completed"), "{p}: completed: missing; expected an integer"),
    ("mixed.jsonl", lambda: _vllm_without("date") + "\n" + _vllm_without("date").replace('"inf"', "4.0"),
     "{p}: mixes open-loop runs ({p}:2: a request rate) and fixed-concurrency runs ({p}:1: request_rate inf)"),
    ("ramp.json", lambda: _vllm_without("date")[:-1] + ', "ramp_up_strategy": "linear"}',
     "{p}: a ramp-up run (ramp_up_strategy 'linear') has no one request rate to place it at"),
    ("g.json", _guidellm_without_output_rate, "{p}: benchmarks[1].metrics.output_tokens_per_second: missing"),
    ("s.jsonl", _sglang_second_line_torn, "{p}:2: not JSON; expected one JSON object per line"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "content", "message"), BAD, ids=[b[0] for b in BAD])
def test_malformed_peer_files_give_one_line_errors(tmp_path: Path, name: str, content, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / name
    bad.write_text(content())
    done = run_specmon("compare", str(VLLM_DIR), str(bad), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("specmon: error: " + message.format(p=bad)), lines[0]
    with pytest.raises(UserError):
        parse_any_results(content(), str(bad))


def test_a_binary_file_and_a_directory_of_other_files_are_refused(tmp_path: Path) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01\x02")
    with pytest.raises(UserError, match=rf"^{re.escape(str(blob))}:1: a NUL byte at offset 0: not a text file"):
        read_any_results(blob)
    d = tmp_path / "mixed"
    d.mkdir()
    shutil.copy(next(VLLM_DIR.glob("*.json")), d / "a.json")
    (d / "b.json").write_text(GUIDELLM.read_text())
    with pytest.raises(UserError, match=r"b\.json: not a `vllm bench serve --save-result` file .*found guidellm"):
        read_any_results(d)
