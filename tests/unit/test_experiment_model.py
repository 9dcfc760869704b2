"""The pure parts of experiments: acceptance from /metrics and log lines, the verdict (mean ± spread, crossover with
its uncertainty, confound warnings) and the resume plan read from result files."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.loadgen.lines import append_line
from specmon.model.config import builtin_config
from specmon.model.experiments.experiment import (
    ExperimentState,
    ExperimentStatus,
    PassFile,
    ProfileStatus,
    counted,
    next_file_name,
    remaining,
)
from specmon.model.experiments.verdict import ProfileRuns, summarize
from specmon.model.server.acceptance import LevelAcceptance, LevelWindow, MetricsSample, parse_metrics
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta, SweepResult, whole_lines
from specmon.orchestration.measure.experiment import save_state
from specmon.sim.engine import Counters, Snapshot
from specmon.sim.metrics import metrics_text
from specmon.sim.options import SimConfig
from specmon.sources.experimentfiles import done_levels, load_state


def sample(at: float, cfg: SimConfig, snap: Snapshot, counters: Counters) -> MetricsSample:
    """A scrape of the sim's real /metrics text (the same function its HTTP handler serves)."""
    return MetricsSample(at, parse_metrics(metrics_text(cfg, snap, counters)))


def test_vllm_acceptance_is_the_counter_delta_over_the_level() -> None:
    cfg = SimConfig(flavor="vllm", spec="eagle3", spec_steps=3)
    snap = Snapshot(running=4, queued=2, used_tokens=1000, kv_tokens=400_000, last_gen_tps=0.0, last_accept_len=None)
    before = Counters(generation_tokens=5000, spec_verify_calls=2000, spec_draft_tokens=6000,
                      spec_accepted_tokens=3000, spec_accepted_per_pos=[1500, 1000, 500])
    # Over the level: 1000 verify steps yielded 2500 tokens -> accept length 2.5, 1500 of 3000 drafts accepted.
    after = dataclasses.replace(before, generation_tokens=7500, spec_verify_calls=3000, spec_draft_tokens=9000,
                                spec_accepted_tokens=4500, spec_accepted_per_pos=[2200, 1500, 800])
    window = LevelWindow()
    window.add_sample(sample(10.0, cfg, snap, before))
    window.add_sample(sample(12.0, cfg, dataclasses.replace(snap, queued=6), after))
    result = window.result(client_tokens_per_chunk=2.45)
    assert result.metrics_accept_len == pytest.approx(2.5)
    assert result.metrics_accept_rate == pytest.approx(0.5)
    assert result.server_tok_s == pytest.approx(2500 / 2.0)
    assert (result.queue_mean, result.queue_max) == (4.0, 6.0)
    assert not result.disagree


def test_sglang_acceptance_averages_the_gauge_and_skips_the_zero_before_the_first_batch() -> None:
    cfg = SimConfig(flavor="sglang", spec="eagle3")
    counters = Counters()
    snaps = [Snapshot(8, 0, 10, 400_000, 300.0, accept) for accept in (None, 2.8, 3.2)]
    window = LevelWindow()
    for i, snap in enumerate(snaps):
        window.add_sample(sample(float(i), cfg, snap, counters))
    window.add_log(2.9, 0.63)
    window.add_log(3.1, 0.70)
    result = window.result(client_tokens_per_chunk=3.0)
    assert result.metrics_accept_len == pytest.approx(3.0)
    assert result.log_accept_len == pytest.approx(3.0) and result.log_lines == 2
    assert result.running_mean == 8.0
    assert result.disagreement == pytest.approx(0.0, abs=1e-9)


def test_sources_that_disagree_by_more_than_ten_percent_are_flagged() -> None:
    fine = LevelAcceptance(log_accept_len=3.0, metrics_accept_len=2.8, client_tokens_per_chunk=2.95)
    off = dataclasses.replace(fine, client_tokens_per_chunk=2.6)   # 3.0 / 2.6 = +15 %
    baseline = LevelAcceptance(client_tokens_per_chunk=1.0)
    assert not fine.disagree and off.disagree
    assert baseline.disagreement is None and not baseline.disagree
    assert LevelAcceptance.from_dict(off.to_dict()) == off


def test_prometheus_parser_sums_label_sets_strips_total_and_skips_positions() -> None:
    text = ('# TYPE vllm:spec_decode_num_drafts counter\n'
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
            'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5.0\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 7.0\n'
            'plain_metric 3\nbroken{ 1\n')
    parsed = parse_metrics(text)
    assert parsed["vllm:spec_decode_num_drafts"] == [10.0, 5.0]
    assert "vllm:spec_decode_num_accepted_tokens_per_pos" not in parsed
    assert parsed["plain_metric"] == [3.0]


def level(c: int, tok_s: float, bound: bool = False, tpc: float | None = 1.0) -> LevelResult:
    return LevelResult(concurrency=c, requests_ok=10, requests_failed=0, duration_s=2.0, output_tokens=int(tok_s * 2),
                       output_throughput=tok_s, request_throughput=5.0, ttft_ms=Stats(), tpot_ms=Stats(),
                       itl_ms=Stats(), e2e_ms=Stats(), tokens_per_chunk=tpc, client=ClientHealth(bound=bound))


def sweep(profile: str, points: dict[int, float], kv: int = 400_000, spec: bool = False, **server: object) -> SweepResult:
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", profile=profile,
                     workload={"levels": list(points), "output_len": 64, "warmup_requests": 2},
                     server={"kv_cache_tokens": kv, "mem_fraction": 0.88,
                             "speculative": {"algorithm": "EAGLE3"} if spec else None, **server})
    return SweepResult(None, meta, tuple(level(c, v, tpc=3.0 if spec else 1.0) for c, v in points.items()))


BASE = {1: 90.0, 2: 170.0, 4: 300.0, 8: 470.0}
EAGLE = {1: 150.0, 2: 230.0, 4: 280.0, 8: 300.0}


def runs(base: list[dict[int, float]], eagle: list[dict[int, float]], kv_eagle: int = 400_000) -> list[ProfileRuns]:
    return [ProfileRuns("base", [(i + 1, sweep("base", p)) for i, p in enumerate(base)]),
            ProfileRuns("eagle", [(i + 1, sweep("eagle", p, kv=kv_eagle, spec=True)) for i, p in enumerate(eagle)])]


def test_mean_spread_crossover_and_verdict() -> None:
    shifted = {c: v + 10 for c, v in EAGLE.items()}
    lower = {c: v - 10 for c, v in EAGLE.items()}
    summary = summarize(runs([BASE, BASE, BASE], [EAGLE, shifted, lower]), repeats=3)
    eagle = summary.profiles[1]
    assert eagle.level(4).mean == pytest.approx(280.0) and eagle.level(4).spread == pytest.approx(10.0)
    assert summary.profiles[0].level(4).spread == pytest.approx(0.0)
    x = summary.crossover
    assert x is not None and x.bracket == (2, 4) and (x.ahead_below, x.ahead_above) == ("eagle", "base")
    # Means: diff +60 at C=2, -20 at C=4 -> 2 + 2 * 60 / 80 = 3.5; shifting the EAGLE curve by +-10 moves it.
    assert x.concurrency == pytest.approx(3.5)
    assert x.plus_minus == pytest.approx(2 + 2 * 70 / 80 - 3.5)
    assert summary.verdict == "eagle is faster up to C≈3.5 (±0.25); base beyond"
    assert not any("repeat" in w for w in summary.warnings)


def test_one_repeat_gives_the_bracket_as_uncertainty_and_warns() -> None:
    summary = summarize(runs([BASE], [EAGLE]), repeats=1)
    assert summary.crossover is not None and summary.crossover.plus_minus == pytest.approx(1.0)
    assert any("only 1 repeat" in w for w in summary.warnings)


def test_no_crossover_says_who_leads() -> None:
    summary = summarize(runs([BASE], [{c: v * 2 for c, v in BASE.items()}]))
    assert summary.crossover is None
    assert summary.verdict == "eagle is faster than base at every measured level (C=1..8); no crossover"


def test_client_bound_level_is_a_warning() -> None:
    r = runs([BASE], [EAGLE])
    bound = dataclasses.replace(r[1].results[0][1], levels=(level(1, 150.0), level(2, 230.0, bound=True)))
    summary = summarize([r[0], ProfileRuns("eagle", [(1, bound)])])
    assert "eagle: client-bound at C=2 (the load generator was the bottleneck)" in summary.warnings


def test_kv_tokens_more_than_ten_percent_apart_is_a_confound_and_equal_is_not() -> None:
    apart = summarize(runs([BASE] * 3, [EAGLE] * 3, kv_eagle=350_000), repeats=3)   # 400k vs 350k: 14 %
    assert [w for w in apart.warnings if "KV" in w] == ["KV tokens 400k ≠ 350k"]
    equal = summarize(runs([BASE] * 3, [EAGLE] * 3, kv_eagle=400_000), repeats=3)
    assert equal.warnings == ()
    close = summarize(runs([BASE] * 3, [EAGLE] * 3, kv_eagle=380_000), repeats=3)   # 5 %: not a confound
    assert not any("KV" in w for w in close.warnings)


def test_versions_and_env_differences_are_warnings() -> None:
    a = ProfileRuns("base", [(1, sweep("base", BASE, version="0.5.23"))], setup={"env": {"NCCL_DEBUG": "WARN"}})
    b = ProfileRuns("eagle", [(1, sweep("eagle", EAGLE, spec=True, version="0.5.24"))],
                    setup={"env": {"NCCL_DEBUG": "INFO"}})
    warnings = summarize([a, b]).warnings
    assert "server versions differ: base 0.5.23, eagle 0.5.24" in warnings
    assert "eagle vs base: differs: NCCL_DEBUG: WARN vs INFO [env: launch]" in warnings   # the shared rule (model.machine.env)


def write_sweep(path: Path, result: SweepResult, levels: int) -> None:
    append_line(path, result.meta.to_dict())
    for lv in result.levels[:levels]:
        append_line(path, lv.to_dict())


def test_resume_plan_comes_from_the_level_lines_on_disk(tmp_path: Path) -> None:
    spec = builtin_config().experiment("demo")
    state = ExperimentState(tmp_path, spec, "2026-11-30T12:00:00Z")
    points = {c: 100.0 for c in spec.sweep.levels}
    write_sweep(tmp_path / "demo-baseline.pass1.jsonl", sweep("demo-baseline", points), len(points))
    write_sweep(tmp_path / "demo-baseline.pass2.jsonl", sweep("demo-baseline", points), 2)   # killed in level 3
    (tmp_path / "demo-baseline.pass3.jsonl").write_text('{"type": "meta", "sch')   # killed inside its first line
    state = state.with_profile("demo-baseline", files=(PassFile(1, "demo-baseline.pass1.jsonl"),
                                                       PassFile(2, "demo-baseline.pass2.jsonl"),
                                                       PassFile(3, "demo-baseline.pass3.jsonl")))
    save_state(state)
    state = load_state(tmp_path)
    levels = spec.sweep.levels
    assert done_levels(state, "demo-baseline") == {(1, c) for c in levels} | {(2, c) for c in levels[:2]}
    plan = remaining(state, done_levels(state, "demo-baseline"))
    assert plan[0] == (2, levels[2:])
    assert [p for p, _ in plan] == list(range(2, spec.repeats + 1))
    assert (3, levels) in plan   # the torn file holds nothing finished
    assert next_file_name(state, "demo-baseline", 2) == "demo-baseline.pass2.r2.jsonl"
    assert remaining(state, done_levels(state, "demo-eagle3")) == [(p, levels) for p in range(1, spec.repeats + 1)]


def test_the_resume_plan_is_worked_out_from_the_files_text_without_reading_a_disk() -> None:
    """The rules (a torn file's whole lines, the levels that count, what is left) take text; sources reads it."""
    spec = builtin_config().experiment("demo")
    levels = spec.sweep.levels
    points = {c: 100.0 for c in levels}
    result = sweep("demo-baseline", points)
    lines = [json.dumps(result.meta.to_dict())] + [json.dumps(lv.to_dict()) for lv in result.levels]
    text = "\n".join(lines[:3]) + "\n" + lines[3][:20]   # killed inside level 3's line
    state = ExperimentState(Path("/nowhere"), spec, "2026-11-30T12:00:00Z").with_profile(
        "demo-baseline", files=(PassFile(1, "p1.jsonl"), PassFile(2, "p2.jsonl")),
        discarded=(("p1.jsonl", levels[1]),))
    got = counted(state, "demo-baseline", {"p1.jsonl": whole_lines(text, "p1.jsonl"),
                                            "p2.jsonl": whole_lines('{"type": "meta", "sch', "p2.jsonl")})
    assert [(p, [lv.concurrency for lv in r.levels]) for p, r in got] == [(1, [levels[0]])]   # level 2 discarded
    done = {(p, lv.concurrency) for p, r in got for lv in r.levels}
    assert remaining(state, done)[0] == (1, levels[1:])


def test_experiment_and_profile_statuses_are_typed_words_and_an_unknown_one_is_refused_naming_the_file(
        tmp_path: Path) -> None:
    spec = builtin_config().experiment("demo")
    state = ExperimentState(tmp_path, spec, "2026-11-30T12:00:00Z").with_profile("demo-baseline",
                                                                                 status=ProfileStatus.SKIPPED)
    save_state(dataclasses.replace(state, status=ExperimentStatus.ABORTED))
    saved = json.loads((tmp_path / "experiment.json").read_text())
    assert (saved["status"], saved["profiles"]["demo-baseline"]["status"]) == ("aborted", "skipped")   # the same words
    loaded = load_state(tmp_path)
    assert loaded.finished and loaded.profile("demo-baseline").status is ProfileStatus.SKIPPED
    saved["status"] = "paused"   # a hand edit: once read as a running (resumable) experiment
    (tmp_path / "experiment.json").write_text(json.dumps(saved))
    with pytest.raises(UserError, match=r"experiment\.json: not a readable experiment state \(unknown experiment "
                                        r"status 'paused'\)"):
        load_state(tmp_path)
