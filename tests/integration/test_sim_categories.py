"""Acceptance by prompt category, end to end: `specmon sim --accept-by-category` against a sweep of the built-in set.

The sim (a real subprocess) recognises each built-in prompt by its text and gives its request the configured accept
length; the sweep reports tokens per chunk per category, which must match the configuration within a tolerance
derived from the sample:
- sampling: were acceptance random per verify step, as on a real server, a step's token count X lies in
  [1, K + 1] (K draft tokens) with mean a, so Var X <= (a - 1)(K + 1 - a) (Bhatia-Davis); the category's mean over
  its N verify steps (its chunks) then has a standard error of at most sqrt((a - 1)(K + 1 - a) / N); we allow 4 of
  them (the sim's steps are less random than that, so this is generous, not tight);
- truncation: each request's last step is cut to the output length, losing at most K tokens out of `OUTPUT_LEN`,
  which lowers tokens per chunk by at most K x a / OUTPUT_LEN.
With OUTPUT_LEN 128 and 50 requests per category the windows are 0.22 to 0.28 wide (code: 3.42..3.70 around 3.6;
chat: 1.67..1.89 around 1.8) and no two of them overlap, so a mix-up of categories cannot pass.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from simproc import start_sim

from specmon.loadgen.workload import RequestFactory, Workload
from specmon.model.server.acceptance import LevelWindow, MetricsSample, parse_metrics
from specmon.model.workload.datasets import load_dataset
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep

pytestmark = pytest.mark.slow

CONFIG = {"code": 3.6, "maths": 3.0, "translation": 2.6, "summarisation": 2.2, "chat": 1.8}
SPEC_STEPS = 3
OUTPUT_LEN = 128


def _scrape(url: str) -> MetricsSample:
    return MetricsSample(time.monotonic(), parse_metrics(httpx.get(url + "/metrics", timeout=10).text))


@pytest.mark.timeout(300)
async def test_sweep_of_the_builtin_set_reports_the_sims_acceptance_per_category(tmp_path: Path) -> None:
    dataset = load_dataset("builtin")
    per_category = len(dataset.entries) // len(CONFIG)
    option = ",".join(f"{k}={v}" for k, v in CONFIG.items())
    # A cheap step (0.1 x the default cost) and a batch of 64 keep 250 requests of 128 tokens to a few seconds.
    with start_sim("--spec", "eagle3", "--spec-steps", str(SPEC_STEPS), "--spec-step-cost", "0.1",
                   "--max-running-requests", "64", "--accept-by-category", option, flavor="vllm") as sim:
        window = LevelWindow()
        window.add_sample(_scrape(sim.url))
        # One full pass over the set: exactly 50 requests of each category.
        wl = Workload(levels=(64,), requests_per_level=len(dataset.entries), warmup_requests=0,
                      output_len=OUTPUT_LEN, dataset="builtin", seed=9)
        result = await run_sweep(SweepSpec(url=sim.url, workload=wl, out_path=tmp_path / "r.jsonl"))
        window.add_sample(_scrape(sim.url))
    (level,) = result.levels
    assert level.requests_failed == 0 and level.usage_missing == 0
    assert set(level.categories) == set(CONFIG)
    for name, a in CONFIG.items():
        c = level.categories[name]
        assert c.requests == per_category and c.output_tokens == per_category * OUTPUT_LEN
        se = math.sqrt((a - 1) * (SPEC_STEPS + 1 - a) / c.chunks)
        truncation = SPEC_STEPS * a / OUTPUT_LEN
        low, high = a - truncation - 4 * se, a + 4 * se
        assert c.tokens_per_chunk is not None and low <= c.tokens_per_chunk <= high, (name, c, (low, high))
    # The server's own acceptance (vLLM counters over the level) is the token-weighted mix of the categories, and
    # the client's level-wide tokens per chunk agrees with it (a chunk per verify step; merged steps would raise it).
    served = window.result(level.tokens_per_chunk)
    total_steps = sum(per_category * OUTPUT_LEN / a for a in CONFIG.values())
    assert served.metrics_accept_len == pytest.approx(len(CONFIG) * per_category * OUTPUT_LEN / total_steps, rel=0.03)
    assert level.tokens_per_chunk == pytest.approx(served.metrics_accept_len, rel=0.03)
    # Each request's record carries its prompt's category, in the seeded order the factory gives.
    assert result.meta.records is not None
    records = [json.loads(line) for line in Path(result.meta.records).read_text().splitlines()]
    factory = RequestFactory(wl, "m", dataset)
    assert [r["category"] for r in sorted(records, key=lambda r: r["i"])] == [factory.category(i) for i in range(len(records))]
    assert Counter(r["category"] for r in records) == {name: per_category for name in CONFIG}
    # The meta line says which prompts were sent and how they were sampled.
    assert result.meta.dataset is not None and result.meta.dataset["sha256"] == dataset.sha256
    assert (result.meta.workload["dataset"], result.meta.workload["seed"]) == ("builtin", 9)


def test_sim_rejects_a_bad_category_option() -> None:
    def sim(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specmon", "sim", *args], capture_output=True, text=True, timeout=60)

    done = sim("--spec", "eagle3", "--accept-by-category", "coding=3")
    assert done.returncode == 2 and "unknown category 'coding' (the built-in prompt set has chat, code" in done.stderr
    done = sim("--spec", "eagle3", "--accept-by-category", "code=0.8")
    assert done.returncode == 2 and "code=0.8 must be in [1, 4] (spec-steps + 1)" in done.stderr
    assert "for an acceptance rate r give 1 + r x spec-steps" in done.stderr
    done = sim("--accept-by-category", "code=3")
    assert done.returncode == 2 and "--accept-by-category needs --spec eagle3" in done.stderr
