"""End to end against `specmon sim`: the measured throughput curve and the crossover match the sim's model.

The sim (a real subprocess) follows a deterministic continuous-batching model (specmon.sim.model); its EAGLE-3 mode
sends several tokens per SSE chunk. With accept length 4 the speculative server wins at low concurrency and loses
above ~4: the sweep must find that crossover within 10 % and every level's output throughput within 10 % of the
model. Each level runs two full waves of 96-token requests (a few seconds per mode).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from simproc import start_sim

from specmon.loadgen.workload import Workload
from specmon.model.sweeps.compare import crossover
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep
from specmon.sim.model import StepModel, baseline_model, eagle3_model
from specmon.sources.resultfiles import read_results

pytestmark = pytest.mark.slow

LEVELS = (1, 2, 3, 4, 6, 8)
OUTPUT_LEN = 96
ACCEPT_LEN = 4.0


async def sweep(url: str, out: Path) -> list[LevelResult]:
    """One sweep per level with exactly two waves of C requests (a partial wave would bias a closed loop)."""
    levels = []
    for i, c in enumerate(LEVELS):
        wl = Workload(levels=(c,), requests_per_level=2 * c, warmup_requests=2 if i == 0 else 0,
                      input_len=32, output_len=OUTPUT_LEN)
        result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=out.with_name(f"{out.stem}-{c}.jsonl")))
        assert read_results(result.path or "").levels == result.levels
        levels.extend(result.levels)
    return levels


def model_levels(model: StepModel) -> list[LevelResult]:
    return [LevelResult(concurrency=c, requests_ok=1, requests_failed=0, duration_s=1.0, output_tokens=0,
                        output_throughput=model.total_tps(c), request_throughput=0.0, ttft_ms=Stats(), tpot_ms=Stats(),
                        itl_ms=Stats(), e2e_ms=Stats(), tokens_per_chunk=None, client=ClientHealth())
            for c in LEVELS]


@pytest.mark.timeout(240)
async def test_throughput_curve_and_crossover_match_the_sim_model(tmp_path: Path) -> None:
    with start_sim("--spec", "none", flavor="sglang") as base_sim, \
         start_sim("--spec", "eagle3", "--accept-len", str(ACCEPT_LEN), "--spec-steps", "3", flavor="vllm") as spec_sim:
        base, spec = await asyncio.gather(sweep(base_sim.url, tmp_path / "base.jsonl"),
                                          sweep(spec_sim.url, tmp_path / "eagle3.jsonl"))
    for measured, model in ((base, baseline_model()), (spec, eagle3_model(ACCEPT_LEN))):
        for lv in measured:
            assert lv.requests_failed == 0 and lv.usage_missing == 0
            assert lv.output_tokens == 2 * lv.concurrency * OUTPUT_LEN      # from usage, exactly
            assert lv.output_throughput == pytest.approx(model.total_tps(lv.concurrency), rel=0.10), lv.concurrency
    # Tokens per chunk: 1 without speculation, the accept length with it (a client-side accept proxy).
    assert all(lv.tokens_per_chunk == 1.0 for lv in base)
    assert all(lv.tokens_per_chunk == pytest.approx(ACCEPT_LEN, rel=0.05) for lv in spec)
    # Under speculation ITL is a per-chunk gap, several times TPOT.
    assert spec[0].itl_ms.p50 / spec[0].tpot_ms.p50 == pytest.approx(ACCEPT_LEN, rel=0.25)
    expected = crossover(model_levels(baseline_model()), model_levels(eagle3_model(ACCEPT_LEN)))
    measured_x = crossover(base, spec)
    assert expected is not None and measured_x is not None
    assert measured_x == pytest.approx(expected, rel=0.10)
