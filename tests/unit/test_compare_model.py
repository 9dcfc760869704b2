"""Aligning sweeps and finding the concurrency where speculation stops paying."""

from __future__ import annotations

import dataclasses

import pytest

from specmon.model.sweeps.compare import (
    ComparedRun,
    align,
    compare_results,
    confound_warnings,
    crossover,
    crossover_words,
    find_crossover,
)
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta, SweepResult


def lv(c: int, tput: float) -> LevelResult:
    return LevelResult(concurrency=c, requests_ok=1, requests_failed=0, duration_s=1.0, output_tokens=int(tput),
                       output_throughput=tput, request_throughput=1.0, ttft_ms=Stats(), tpot_ms=Stats(),
                       itl_ms=Stats(), e2e_ms=Stats(), tokens_per_chunk=None, client=ClientHealth())


BASE = [lv(1, 90), lv(10, 600), lv(30, 760), lv(100, 770)]
SPEC = [lv(1, 200), lv(10, 500), lv(30, 350), lv(100, 350)]


def test_crossover_interpolates_between_bracketing_levels() -> None:
    # diff at C=1: +110, at C=10: -100 -> 1 + 9 * 110/210
    x = find_crossover(BASE, SPEC)
    assert x is not None and x.b_ahead_before
    assert x.concurrency == pytest.approx(1 + 9 * 110 / 210)
    assert crossover(SPEC, BASE) == pytest.approx(x.concurrency)


def test_no_crossover_when_one_stays_ahead() -> None:
    assert crossover(BASE, [lv(c.concurrency, c.output_throughput * 1.2) for c in BASE]) is None
    assert crossover([], SPEC) is None


def test_exact_tie_is_the_crossover() -> None:
    assert crossover([lv(1, 100), lv(5, 100), lv(9, 100)], [lv(1, 150), lv(5, 100), lv(9, 50)]) == 5.0


def test_align_keeps_missing_levels_and_ratio() -> None:
    rows = align(BASE, SPEC[:2])
    assert [r.load for r in rows] == [1, 10, 30, 100]
    assert rows[0].ratio() == pytest.approx(200 / 90)
    assert rows[2].levels[1] is None and rows[2].ratio() is None


def test_confounded_comparison_is_flagged_only_when_settings_differ() -> None:
    same = [ComparedRun("a", 0.85, 1000), ComparedRun("b", 0.85, 1000)]
    assert confound_warnings(same) == []
    mem = [ComparedRun("a", 0.85, 1000), ComparedRun("b", 0.8, 1000)]
    assert confound_warnings(mem) == ["mem_fraction_static 0.85 ≠ 0.8"]
    kv = [ComparedRun("a", 0.85, 1_200_000), ComparedRun("b", 0.85, 900_000)]
    assert confound_warnings(kv) == ["KV tokens 1.2M ≠ 900k"]
    within_10_percent = [ComparedRun("a", 0.85, 1_000_000), ComparedRun("b", 0.85, 1_090_000)]
    assert confound_warnings(within_10_percent) == []
    unknown = [ComparedRun("a", 0.85, None), ComparedRun("b", None, 5)]
    assert confound_warnings(unknown) == []


def test_runs_of_different_models_are_a_confounded_comparison_and_unnamed_models_are_not() -> None:
    runs = [ComparedRun("base", model="meta-llama/Llama-3.1-8B-Instruct"), ComparedRun("spec", model="Qwen/Qwen3-8B")]
    assert confound_warnings(runs) == ["different models: base meta-llama/Llama-3.1-8B-Instruct ≠ spec Qwen/Qwen3-8B"]
    assert confound_warnings([ComparedRun("a", model="m"), ComparedRun("b", model="m")]) == []
    assert confound_warnings([ComparedRun("a", model="m"), ComparedRun("b", model=None),
                              ComparedRun("c", model="")]) == []


def test_client_bound_levels_are_named_per_run() -> None:
    runs = [ComparedRun("base", client_bound=()), ComparedRun("spec", client_bound=(32, 64))]
    assert confound_warnings(runs) == ["spec: client-bound at C=32,64 (the load generator was the bottleneck)"]


def sweep(label: str, levels: list[LevelResult], path: str | None = None) -> SweepResult:
    return SweepResult(path, SweepMeta(url="", model=None, workload={}, profile=label), tuple(levels))


def test_crossover_words_name_who_leads_on_each_side() -> None:
    assert crossover_words(5.46, "demo-eagle3", "demo-baseline") == "eagle3 ahead below C≈5.46, baseline ahead above"
    assert crossover_words(12.0, "base", "spec") == "base ahead below C≈12, spec ahead above"


def test_comparison_says_the_crossover_or_who_stays_ahead_in_words() -> None:
    assert compare_results([sweep("demo-baseline", BASE), sweep("demo-eagle3", SPEC)]).crossover_text() == \
        "eagle3 ahead below C≈5.71, baseline ahead above"
    faster = [lv(c.concurrency, c.output_throughput * 1.2) for c in BASE]
    assert compare_results([sweep("base", BASE), sweep("spec", faster)]).crossover_text() == \
        "no crossover in C=1..100: spec ahead throughout"
    assert compare_results([sweep("base", BASE)]).crossover_text() is None


def test_a_sweep_whose_every_request_failed_fails_the_comparison() -> None:
    """The one rule behind `sweep`, `demo --headless` and the TUI: a file of failures is not a measurement."""
    failed = [dataclasses.replace(lv(c, 0.0), requests_ok=0, requests_failed=8, errors={"http_4xx": 8})
              for c in (1, 4)]
    result = sweep("spec", failed, path="results/spec.jsonl")
    assert result.failure == "sweep measured nothing: all 16 requests failed (http_4xx 16); see results/spec.jsonl"
    assert sweep("base", BASE).failure is None
    one_ok = [failed[0], dataclasses.replace(failed[1], requests_ok=1)]
    assert sweep("spec", one_ok).failure is None
    comparison = compare_results([sweep("base", BASE), result])
    assert comparison.failures == ("spec: " + result.failure,)
    assert compare_results([sweep("base", BASE), sweep("spec", SPEC)]).failures == ()

