"""A tuning grid's verdict (model.experiments.bands): the best setting per load band, ties within the repeats'
noise named, gains over the baseline with their error bar. Constructed results with a known answer. Pure."""

from __future__ import annotations

from specmon.model.experiments.bands import grid_verdict
from specmon.model.experiments.verdict import LevelSummary, ProfileSummary

LEVELS = (1, 2, 4, 8, 16, 32)


def profile(name: str, means: dict[int, float], noise: float = 1.0) -> ProfileSummary:
    """Three repeats per level: mean ± `noise` (sample spread exactly `noise`)."""
    return ProfileSummary(name, None, tuple(LevelSummary(c, (m - noise, m, m + noise)) for c, m in means.items()))


BASE = profile("base", {1: 100, 2: 190, 4: 350, 8: 600, 16: 800, 32: 900})
FAST = profile("eagle3 steps=5 topk=4", {1: 118, 2: 224, 4: 400, 8: 560, 16: 700, 32: 750})
MID = profile("eagle3 steps=3 topk=1", {1: 110, 2: 205, 4: 380, 8: 640, 16: 790, 32: 800})
NEAR_MID = profile("eagle3 steps=1 topk=1", {1: 105, 2: 200, 4: 370, 8: 639, 16: 700, 32: 700})


def test_bands_name_the_best_setting_per_load_with_gain_and_error_bar() -> None:
    verdict = grid_verdict([BASE, FAST, MID], "base")
    assert [(b.levels, b.leader) for b in verdict.bands] == [
        ((1, 2, 4), "eagle3 steps=5 topk=4"), ((8,), "eagle3 steps=3 topk=1"), ((16, 32), "base")]
    # Gains 18, 17.9, 14.3 % -> mean 16.7; error bar sqrt(1+1)/100 = 1.4 % at C=1 (the largest).
    assert verdict.sentence == ("C 1-4: steps=5 topk=4 (+17 % over baseline ±1.4); C 8: steps=3 topk=1 "
                                "(+7 % over baseline ±0.24); C >= 16: baseline")
    # Under an 80-column chart (two lines): the same bands, the gains without their "over baseline".
    assert verdict.brief == "C 1-4: steps=5 topk=4 (+17 % ±1.4); C 8: steps=3 topk=1 (+7 % ±0.24); C >= 16: baseline"


def test_a_setting_within_the_noise_of_the_best_is_named_as_a_tie() -> None:
    verdict = grid_verdict([BASE, FAST, MID, NEAR_MID], "base")
    c8 = next(w for w in verdict.levels if w.concurrency == 8)
    assert c8.best == "eagle3 steps=3 topk=1" and c8.ties == ("eagle3 steps=1 topk=1",)   # 640 vs 639, noise 1.4
    assert "C 8: steps=3 topk=1 (+7 % over baseline ±0.24; tie: steps=1 topk=1)" in verdict.sentence
    # Wider noise makes C=1's 118 vs 110 a tie as well, and splits that band from C=2..4 where it still is not.
    noisy = [profile(p.profile, {lv.concurrency: lv.mean for lv in p.levels}, noise=6.0 if p is not BASE else 1.0)
             for p in (BASE, FAST, MID)]
    first = grid_verdict(noisy, "base").bands[0]
    assert first.levels == (1,) and first.leader == "eagle3 steps=5 topk=4" and first.ties == ("eagle3 steps=3 topk=1",)


def test_single_runs_have_no_error_bar_and_no_ties_but_exact_equals() -> None:
    single = [ProfileSummary(p.profile, None, tuple(LevelSummary(lv.concurrency, (lv.mean,)) for lv in p.levels))
              for p in (BASE, FAST, MID)]
    verdict = grid_verdict(single, "base")
    assert all(w.plus_minus_pct is None and not w.ties for w in verdict.levels)
    assert verdict.sentence.startswith("C 1-4: steps=5 topk=4 (+17 % over baseline); ")


def test_one_band_over_every_level_and_no_levels() -> None:
    assert grid_verdict([BASE, NEAR_MID], "base").sentence == \
        "C 1-8: steps=1 topk=1 (+6 % over baseline ±1.4); C >= 16: baseline"
    only = grid_verdict([BASE, profile("x a=1", {c: 10 for c in LEVELS})], "base")
    assert only.sentence == "C 1-32: baseline"
    assert grid_verdict([], "base").sentence.startswith("no verdict")
