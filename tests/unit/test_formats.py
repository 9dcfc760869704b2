"""The peer-format adapters (specmon.model.sweeps.formats), each against its fixtures: every registered format reads
its real files (tests/fixtures/interop/real/SOURCES and ../README.md say where each comes from) as itself and no
other, and writes a real specmon sweep that reads back as itself with the sweep's levels. The CLI's view of the same
files is tests/integration/test_interop.py's and tests/integration/test_interop_real.py's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from paths import FIXTURES

import specmon.model.sweeps
from specmon.model.sweeps.formats import BY_NAME, FORMATS, detect, parse_any_results
from specmon.sources.resultfiles import read_any_results, read_records, read_results

INTEROP = FIXTURES / "interop"
REAL = INTEROP / "real"
SWEEP = REAL / "vllm025-sweep-er0080" / "SERVE--max_num_seqs=4-BENCH--max_concurrency=2-num_prompts=8"
# Each format's files, in each layout it is read from (JSON, appended lines, summary list, YAML, CSV).
FIXTURES = {
    "vllm": [REAL / "vllm025-bench_serve_v0.25.1.json", REAL / "vllm-bench-serve-2026-01-glm47-fp8-c100.json",
             REAL / "vllm09-benchmark_serving-llmd-3deployments.jsonl", SWEEP / "summary.json", SWEEP / "run=1.json",
             INTEROP / "vllm-llama-eagle3.jsonl"],
    "sglang": [REAL / "sglang059-h100-qwen3.5-27b-in8192.jsonl", REAL / "sglang055-qwen2.5-3b-agg-c8.jsonl",
               REAL / "sglang055-056-qwen2.5-3b-pd-1p1d-c64.jsonl", REAL / "sglang04-h200-deepseek_dp_mla_output.jsonl",
               INTEROP / "sglang-llama-eagle3.jsonl"],
    "guidellm": [INTEROP / "guidellm-sim-concurrent.json", INTEROP / "guidellm-sim-poisson.json",
                 REAL / "guidellm03-benchmarks_stripped.json", REAL / "guidellm03-benchmarks_stripped.yaml",
                 REAL / "guidellm05-sanity-concurrent4.json", REAL / "guidellm08-sim-concurrent.csv"],
}
SPECMON_SWEEPS = [INTEROP / "specmon-sweep" / "closed.jsonl", INTEROP / "specmon-sweep" / "open.jsonl"]


def test_every_registered_format_has_fixture_tests_here() -> None:
    assert set(FIXTURES) == set(BY_NAME) == {f.name for f in FORMATS}


@pytest.mark.parametrize("name", list(FIXTURES))
def test_each_format_reads_its_real_files_as_itself_and_no_other_format_claims_them(name: str) -> None:
    fmt = BY_NAME[name]
    for path in FIXTURES[name]:
        text = path.read_text(encoding="utf-8")
        result = parse_any_results(text, str(path))
        assert result.meta.tool == name, path
        assert result.levels, path
        claimed = [f.name for f in FORMATS if f.read_layout(text, str(path)) is not None]
        if claimed:   # a layout other than JSON objects (CSV, a summary list): only its own format takes it
            assert claimed == [name], path
        else:
            found, objs, _ = detect(text, str(path))
            assert found is fmt, path
            others = [f.name for f in FORMATS if f is not fmt and all(f.claims(o) for _, o in objs)]
            # SGLang's keys are a subset of what a vLLM run may carry: vLLM's claim is asked first, so a vLLM run
            # is never SGLang's; nothing else may claim another format's file.
            assert others in ([], ["sglang"] if name == "vllm" else []), path


@pytest.mark.parametrize("name", list(FIXTURES))
@pytest.mark.parametrize("src", SPECMON_SWEEPS, ids=[p.stem for p in SPECMON_SWEEPS])
def test_each_format_writes_a_real_sweep_that_reads_back_as_itself(tmp_path: Path, name: str, src: Path) -> None:
    fmt = BY_NAME[name]
    sweep = read_results(src)
    records = read_records(str(src.with_name(src.stem + ".requests.jsonl"))) if fmt.needs_records else []
    out = tmp_path / f"{src.stem}{fmt.out_suffix}"
    written = fmt.write(sweep, records)
    assert len(written) > 1 if fmt.out_folder else [n for n, _ in written] == [""]
    for rel, text in written:
        path = out / rel if rel else out
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    back = read_any_results(out)
    assert back.meta.tool == name
    assert [(lv.concurrency, lv.rate, lv.requests_ok, lv.output_tokens) for lv in back.levels] == \
        [(lv.concurrency, lv.rate, lv.requests_ok, lv.output_tokens) for lv in sweep.levels]
    assert [lv.output_throughput for lv in back.levels] == \
        pytest.approx([lv.output_throughput for lv in sweep.levels], abs=5e-4)
    # What it cannot hold is said, and what it says it holds it does not drop.
    lost = fmt.cannot_hold(sweep)
    assert "client health" in lost
    assert ("tokens per chunk" in lost) == (not any(lv.tokens_per_chunk for lv in back.levels))


def _calls(root: Path, names: set[str]) -> list[str]:
    """Where a module under `root` calls a function or method of one of `names`."""
    return [f"{path.relative_to(root)}:{node.lineno}: {name}" for path in sorted(root.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call)
            for name in [node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")]
            if name in names]


def test_the_sweeps_model_walks_no_folder_and_the_formats_open_no_file() -> None:
    """Reading result folders and files from disk is specmon.sources.resultfiles's; model/sweeps parses text
    (interop.py, which said it was pure, walked folders with rglob and read files)."""
    sweeps = Path(specmon.model.sweeps.__file__).parent
    assert _calls(sweeps, {"rglob", "glob", "iterdir", "walk", "listdir", "scandir", "is_dir"}) == []
    assert _calls(sweeps / "formats", {"open", "read_text", "read_bytes", "read_capped"}) == []


def test_a_specmon_sweep_cut_short_reads_the_same_as_text_or_as_a_file(tmp_path: Path) -> None:
    """A sweep killed mid-append keeps its whole levels, whichever door its text comes in by."""
    text = SPECMON_SWEEPS[0].read_text()
    torn = text[: text.rindex("\n", 0, len(text) - 1) + 30]   # the last level's line cut after 29 characters
    (tmp_path / "torn.jsonl").write_text(torn)
    from_text = parse_any_results(torn, str(tmp_path / "torn.jsonl"))
    assert from_text == read_results(tmp_path / "torn.jsonl") == read_any_results(tmp_path / "torn.jsonl")
    assert len(from_text.levels) == len(read_results(SPECMON_SWEEPS[0]).levels) - 1
    assert from_text.notes and "last line is cut short" in from_text.notes[0]
