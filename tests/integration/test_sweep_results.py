"""Result files: a meta line, one level line per finished level; bad files give one line naming file:line."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.loadgen.lines import append_line
from specmon.model.sweeps.results import (
    ClientHealth,
    LevelResult,
    Stats,
    SweepMeta,
)
from specmon.model.text.secrets import REDACTED, redact
from specmon.sources.resultfiles import read_results

REQUIRED_LEVEL_KEYS = {
    "concurrency", "requests_ok", "requests_failed", "duration_s", "output_tokens", "output_throughput",
    "request_throughput", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "tokens_per_chunk", "client",
}


def level(c: int, tput: float) -> LevelResult:
    s = Stats(1.0, 1.0, 2.0, 3.0)
    return LevelResult(concurrency=c, requests_ok=4, requests_failed=0, duration_s=2.0, output_tokens=int(tput * 2),
                       output_throughput=tput, request_throughput=2.0, ttft_ms=s, tpot_ms=s, itl_ms=s, e2e_ms=s,
                       tokens_per_chunk=2.5, client=ClientHealth(0.1, 100, 0.5, False), errors={"timeout": 1})


def meta(**kw: object) -> SweepMeta:
    return SweepMeta(url="http://127.0.0.1:1", model="m", workload={"levels": [1, 2]}, profile="base",
                     specmon_version="0.1.0", created_at="2026-11-29T00:00:00Z", **kw)  # type: ignore[arg-type]


def test_round_trip_with_required_keys(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    append_line(path, meta().to_dict())
    append_line(path, level(1, 90.0).to_dict())
    append_line(path, level(2, 170.0).to_dict())
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines[0]["type"] == "meta"
    assert REQUIRED_LEVEL_KEYS <= set(lines[1])
    assert set(lines[1]["ttft_ms"]) == {"mean", "p50", "p90", "p99"}
    assert set(lines[1]["client"]) >= {"cpu_s", "chunks", "loop_lag_ms_p99", "bound"}
    res = read_results(path)
    assert res.meta == meta()
    assert res.levels == (level(1, 90.0), level(2, 170.0))
    assert res.label == "base"


def test_api_keys_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    server = {"api_key": "abc123", "max_total_num_tokens": 1000, "hf_token": "x", "note": "key sk-live-0123456789abc",
              "args": ["--api-key", "mysecretvalue"]}
    append_line(path, meta(server=server).to_dict(), secrets=["mysecretvalue"])
    text = path.read_text()
    assert "abc123" not in text and "mysecretvalue" not in text and "sk-live" not in text
    got = read_results(path).meta.server
    assert got["api_key"] == REDACTED and got["max_total_num_tokens"] == 1000
    assert redact({"Authorization": "Bearer zz"}) == {"Authorization": REDACTED}


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        ('{"type":"meta","schema":1,"url":"u"}\nnot json\n', ":2: not JSON"),
        ('{"type":"level","concurrency":1}\n', ":1: level line before the meta line"),
        ('{"type":"meta","schema":1,"url":"u"}\n{"type":"level","concurrency":"x"}\n', ":2: level: concurrency must be an integer"),
        ('{"type":"meta","schema":9,"url":"u"}\n', ":1: unsupported schema 9"),
        ("", ":1: no meta line"),
    ],
)
def test_bad_files_name_file_and_line(tmp_path: Path, content: str, expect: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        read_results(path)
    msg = str(err.value)
    assert msg.startswith(str(path)) and expect in msg and "\n" not in msg


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        read_results(tmp_path / "nope.jsonl")


def test_server_summary_keeps_kind_kv_tokens_and_speculation() -> None:
    from specmon.model.sweeps.results import summarize_server

    sglang = summarize_server({"data": [{"id": "m", "max_model_len": 4096}]},
                              {"max_total_num_tokens": 1000, "mem_fraction_static": 0.8, "speculative_algorithm": "EAGLE3",
                               "speculative_num_steps": 3, "api_key": "k", "internal_states": [{"avg_spec_accept_length": 2.5}]},
                              None, None)
    assert sglang["kind"] == "sglang" and sglang["kv_cache_tokens"] == 1000 and sglang["mem_fraction"] == 0.8
    assert sglang["speculative"] == {"algorithm": "EAGLE3", "num_steps": 3}
    assert sglang["avg_spec_accept_length_at_start"] == 2.5 and "api_key" not in sglang
    metrics = ('vllm:cache_config_info{block_size="16",gpu_memory_utilization="0.9",num_gpu_blocks="2000"} 1.0\n'
               'vllm:spec_decode_num_drafts_total{engine="0"} 5.0\n')
    vllm = summarize_server({"data": [{"id": "m", "owned_by": "vllm"}]}, None, {"version": "0.11.0"}, metrics)
    assert vllm == {"kind": "vllm", "version": "0.11.0", "kv_cache_tokens": 32000, "mem_fraction": 0.9,
                    "speculative": {"enabled": True}}
    assert summarize_server({}, None, None, None) == {"kind": "unknown"}


@pytest.mark.slow
def test_failed_append_leaves_the_file_ending_at_its_last_whole_line(tmp_path: Path) -> None:
    """A write that runs out of space (here the kernel's file-size limit, EFBIG, in a child process: the same
    short write as a full disk) left a torn last line; the append is now all or nothing."""
    path = tmp_path / "r.jsonl"
    append_line(path, meta().to_dict())
    before = path.read_bytes()
    script = (
        "import resource, sys\n"
        "from specmon.loadgen.lines import append_line\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({len(before) + 40}, resource.RLIM_INFINITY))\n"
        "try:\n"
        f"    append_line({str(path)!r}, {{'type': 'level', 'pad': 'x' * 4000}})\n"
        "except OSError as exc:\n"
        "    print(exc.errno)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == str(errno.EFBIG), done.stdout + done.stderr
    assert path.read_bytes() == before
    assert read_results(path).meta.url == meta().url
