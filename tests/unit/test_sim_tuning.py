"""The sim models the settings a tuning grid varies (sim.model): draft steps, top-k, memory fraction. Pure: the
model's monotonic properties, the options that select them, and the demo grid's ground truth (its verdict computed
from the model without running anything), which must be non-trivial for the demo and the end-to-end test to mean
anything."""

from __future__ import annotations

import argparse

import pytest
from test_experiment_sim import sim_config

from specmon.model.config import Config, builtin_config
from specmon.model.experiments.bands import GridVerdict, grid_verdict
from specmon.model.experiments.verdict import LevelSummary, ProfileSummary
from specmon.sim import model as m
from specmon.sim.options import SimConfig, add_arguments, config_from_args


def sim(*argv: str) -> SimConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return config_from_args(parser.parse_args(list(argv)))


def test_more_draft_steps_accept_more_tokens_with_diminishing_returns() -> None:
    for reference in (1.5, 2.2, 3.0, 3.6):
        lengths = [m.tuned_accept_len(reference, n, 1) for n in range(1, 9)]
        gains = [b - a for a, b in zip(lengths, lengths[1:])]
        assert all(g > 0 for g in gains) and gains == sorted(gains, reverse=True), (reference, lengths)
        assert all(1.0 <= length <= n + 1 for n, length in zip(range(1, 9), lengths))
        assert m.tuned_accept_len(reference, 3, 1) == reference   # the reference itself is unchanged
        assert m.tuned_accept_len(reference, 3, 1) == pytest.approx(m.tuned_accept_len(reference + 1e-12, 3, 1))


def test_a_wider_topk_raises_acceptance_slightly_and_costs_compute_per_step() -> None:
    for n in (1, 3, 5):
        by_k = [m.tuned_accept_len(3.0, n, k) for k in (1, 2, 4, 8)]
        assert by_k == sorted(by_k) and by_k[2] < 1.15 * by_k[0]     # slightly: under 15 % at top-k 4
    costs = [m.step_costs(3, k) for k in (1, 2, 4, 8)]
    assert [c[0] for c in costs] == sorted(c[0] for c in costs) and [c[1] for c in costs] == sorted(c[1] for c in costs)
    # The batch-wide (verify) cost grows faster than the per-step base: top-k hurts most at high load.
    assert costs[2][1] / costs[0][1] > costs[2][0] / costs[0][0]


def test_more_draft_steps_cost_more_per_step_and_win_only_at_low_load() -> None:
    models = {n: m.eagle3_model(m.tuned_accept_len(3.0, n, 1), spec_steps=n) for n in (1, 3, 5)}
    assert models[1].step_time(8) < models[3].step_time(8) < models[5].step_time(8)
    assert models[5].total_tps(1) > models[3].total_tps(1) > models[1].total_tps(1)
    assert models[5].total_tps(24) < models[3].total_tps(24) < models[1].total_tps(24)
    assert m.step_costs(m.REFERENCE_STEPS, 1) == (1.0, 1.0)


def test_a_smaller_memory_fraction_gives_a_smaller_kv_cache_and_admits_fewer() -> None:
    kv = [m.kv_tokens_for(400_000, f) for f in (0.6, 0.7, 0.8, 0.88, 0.95)]
    assert kv == sorted(kv) and kv[3] == 400_000
    queue = [6_000] * 64
    admitted = [m.admit_count(queue, 0, 0, k, 64) for k in kv]
    assert admitted == sorted(admitted) and admitted[0] < admitted[-1] == 64


def test_the_options_select_the_tuned_model() -> None:
    tuned = sim("--spec", "eagle3", "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                "--mem-fraction-static", "0.69")
    assert (tuned.spec_steps, tuned.spec_topk) == (5, 4)
    assert tuned.accept_len == pytest.approx(m.tuned_accept_len(m.DEFAULT_ACCEPT_LEN, 5, 4))
    assert tuned.kv_tokens == m.kv_tokens_for(SimConfig().kv_tokens, 0.69) == 200000
    # --kv-tokens sets the cache outright, whatever the fraction (as SGLang's --max-total-tokens).
    assert sim("--kv-tokens", "123456", "--mem-fraction-static", "0.4").kv_tokens == 123456
    assert tuned.step_model().max_tokens_per_step == 6
    assert sim("--spec", "eagle3", "--spec-steps", "5").spec_steps == 5      # the older spelling still works
    plain = sim("--spec", "eagle3")
    assert (plain.accept_len, plain.kv_tokens) == (m.DEFAULT_ACCEPT_LEN, SimConfig().kv_tokens)


def truth(config: Config, name: str, levels: tuple[int, ...] | None = None) -> GridVerdict:
    """A grid's verdict from the sim's model: each profile's steady-state throughput per level, no noise."""
    spec = config.experiment(name)
    assert spec.baseline is not None
    sweep = spec.sweep
    summaries = []
    for profile in spec.profiles:
        cfg = sim_config(config.profile(profile))
        # The model's steady state holds only while the KV cache never binds (one request: prompt + output tokens).
        assert max(sweep.levels) * (sweep.input_len * 2 + sweep.output_len) < cfg.kv_tokens
        model = cfg.step_model()
        summaries.append(ProfileSummary(profile, None, tuple(
            LevelSummary(c, (model.total_tps(c),)) for c in levels or sweep.levels)))
    return grid_verdict(summaries, spec.baseline)


def test_the_demo_grids_ground_truth_is_non_trivial() -> None:
    verdict = truth(builtin_config(), "demo-grid")
    leaders = [b.leader for b in verdict.bands]
    assert len(verdict.bands) >= 3, verdict.sentence
    assert leaders[-1] == "demo-baseline"                               # saturation: no speculation
    assert leaders[0] == "demo-eagle3 steps=5 topk=1"                   # C=1: the deepest draft
    assert "demo-eagle3 steps=3 topk=1" in leaders                      # in between: a shallower one
    assert verdict.sentence == ("C 1-2: steps=5 topk=1 (+53 % over baseline); C 4: steps=3 topk=1 (+15 % over "
                                "baseline); C >= 8: baseline")
