"""Sim lines against real ones: each selected line of a real log (tests/fixtures/real-logs) must appear in the
sim's output with the same template, i.e. identical once every digit run is replaced by N (timestamps, pids,
ports and figures differ; words, punctuation, spacing and field order may not).

The sim runs with the real log's TP layout: TP=1 for the TP=1 logs (no rank in the SGLang prefix), TP=2 for
the TP>1 ones (one `TPn` line per rank)."""

from __future__ import annotations

import re

import httpx
import pytest
from paths import FIXTURES
from simproc import start_sim

# One worker runs the module (--dist loadgroup): its three sims (module fixtures) start once, not once per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sim-real-templates")]

REAL = FIXTURES / "real-logs"
_SPLIT = re.compile(r"\r\n|\r|\n")

# (fixture, substring selecting the real lines whose template the sim must reproduce)
SGLANG_TP1_LINES = [
    ("sglang-decode-batch-comma-format-tp1-22166.log", "Decode batch, "),
    ("sglang-decode-batch-comma-format-tp1-22166.log", "Prefill batch, "),
    ("sglang-decode-batch-comma-format-tp1-22166.log", '"POST /v1/chat/completions HTTP/1.1" 200 OK'),
    ("sglang-single-gpu-capture-progress-11830.log", "Memory pool end."),
]
SGLANG_TP4_LINES = [
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "Init torch distributed begin."),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "Load weight begin."),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "Memory pool end."),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "Loading safetensors checkpoint shards:   0%"),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "INFO:     Started server process"),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "INFO:     Waiting for application startup."),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "INFO:     Application startup complete."),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "INFO:     Uvicorn running on"),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", "The server is fired up and ready to roll!"),
    ("sglang-full-startup-tp4-ready-health-llms-in-clouds.log", '"GET /health HTTP/1.1" 200 OK'),
]
VLLM_LINES = [
    ("vllm-dflash-specdecode-metrics-club3090-93.log", "Engine 000: "),
    ("vllm-dflash-specdecode-metrics-club3090-93.log", "SpecDecoding metrics: "),
    ("vllm-dflash-specdecode-metrics-club3090-93.log", '"POST /v1/chat/completions HTTP/1.1" 200 OK'),
    ("vllm-kimi-linear-tp2-kvcache-28228.log", "GPU KV cache size: "),
    ("vllm-kimi-linear-tp2-kvcache-28228.log", "Maximum concurrency for "),
    ("vllm-kimi-linear-tp2-kvcache-28228.log", "Available KV cache memory: "),
    ("vllm-shards-model-loading-routes-38820.log", "Loading weights took "),
    ("vllm-shards-model-loading-routes-38820.log", "Model loading took "),
    ("vllm-shards-model-loading-routes-38820.log", "Starting vLLM server on "),
    ("vllm-shards-model-loading-routes-38820.log", "Available routes are:"),
    ("vllm-shards-model-loading-routes-38820.log", "Route: /health, Methods: GET"),
    ("vllm-tp2-graph-capture-init-engine-club3090-356.log", "Graph capturing finished in "),
]
# This log's build names the engine `EngineCore` (no _DP0); the sim follows the 0.11+ `EngineCore_DP0` form,
# so only the message after the prefix is compared.
VLLM_MESSAGES = [
    ("vllm-tp2-graph-capture-init-engine-club3090-356.log", "init engine (profile, create kv cache, warmup model) took"),
]


def template(line: str) -> str:
    return re.sub(r"\d+", "N", line)


def message(line: str) -> str:
    """The part after a vLLM `(Proc pid=N) LEVEL date time [file.py:N] ` prefix."""
    return re.sub(r"^\([^)]*\) [A-Z]+ \S+ \S+ \[[^\]]+\] ", "", line)


def real_templates(fixture: str, needle: str) -> set[str]:
    lines = [x for x in (REAL / fixture).read_text(encoding="utf-8").splitlines() if not x.startswith("# ")]
    found = {template(x) for x in lines if needle in x}
    assert found, (fixture, needle)
    return found


def sim_templates(text: str) -> set[str]:
    return {template(piece) for piece in _SPLIT.split(text) if piece}


def check(real: set[str], sim: set[str], needle: str) -> None:
    assert real & sim, f"no sim line shaped like {sorted(real)[0]!r}; sim has " + repr(
        sorted(t for t in sim if needle.split()[0] in t)[:3])


def chat(url: str, n: int) -> None:
    for i in range(n):
        httpx.post(url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": f"request {i}"}], "max_tokens": 40, "ignore_eos": True})


def sglang_run(tp: int) -> set[str]:
    # 4 shards over 0.8 s keep the bar's rate below 10 it/s, as in the real log (tqdm pads it to 5 characters)
    with start_sim("--tp", str(tp), "--decode-log-interval", "3", "--time-scale", "0.2", flavor="sglang") as sim:
        chat(sim.url, 2)
        httpx.get(sim.url + "/health")
        sim.wait_for(r'"GET /health HTTP/1.1" 200 OK')
        return sim_templates(sim.text())


@pytest.fixture(scope="module")
def sglang_tp1_output() -> set[str]:
    return sglang_run(1)


@pytest.fixture(scope="module")
def sglang_tp2_output() -> set[str]:
    return sglang_run(2)


@pytest.fixture(scope="module")
def vllm_output() -> set[str]:
    with start_sim("--tp", "2", "--spec", "eagle3", "--spec-steps", "5", "--accept-len", "2.6",
                   "--stats-interval", "0.3", flavor="vllm") as sim:
        chat(sim.url, 2)
        sim.wait_for(r"SpecDecoding metrics: ", timeout=5)
        return sim_templates(sim.text())


@pytest.mark.parametrize("fixture,needle", SGLANG_TP1_LINES, ids=[n for _, n in SGLANG_TP1_LINES])
def test_sglang_tp1_line_matches_a_real_line(sglang_tp1_output: set[str], fixture: str, needle: str) -> None:
    check(real_templates(fixture, needle), sglang_tp1_output, needle)


@pytest.mark.parametrize("fixture,needle", SGLANG_TP4_LINES, ids=[n for _, n in SGLANG_TP4_LINES])
def test_sglang_tp_ranked_line_matches_a_real_line(sglang_tp2_output: set[str], fixture: str, needle: str) -> None:
    check(real_templates(fixture, needle), sglang_tp2_output, needle)


@pytest.mark.parametrize("fixture,needle", VLLM_LINES, ids=[n for _, n in VLLM_LINES])
def test_vllm_line_matches_a_real_line(vllm_output: set[str], fixture: str, needle: str) -> None:
    check(real_templates(fixture, needle), vllm_output, needle)


@pytest.mark.parametrize("fixture,needle", VLLM_MESSAGES, ids=[n for _, n in VLLM_MESSAGES])
def test_vllm_message_matches_a_real_message(vllm_output: set[str], fixture: str, needle: str) -> None:
    check({message(t) for t in real_templates(fixture, needle)}, {message(t) for t in vllm_output}, needle)
