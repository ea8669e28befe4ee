"""``ayo_bench.stats``: the ratio interval that tells a speed-up from noise."""

from __future__ import annotations

import math
import random

import pytest

from ayo_bench import stats


def test_identical_ratios_give_a_zero_width_interval() -> None:
    ci = stats.ratio_interval([1.2, 1.2, 1.2])
    assert ci is not None and ci.n == 3
    assert ci.geomean == pytest.approx(1.2) and ci.low == pytest.approx(1.2) and ci.high == pytest.approx(1.2)
    assert ci.verdict == stats.FASTER


def test_the_interval_matches_a_hand_computed_t_interval() -> None:
    ratios = [1.31, 1.11, 1.21, 1.23]  # advanced_rag's four pairs at 2d9918e
    logs = [math.log(r) for r in ratios]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    half = 3.182 * sd / 2  # t(0.975, 3) * sd / sqrt(4)
    ci = stats.ratio_interval(ratios)
    assert ci is not None
    assert ci.low == pytest.approx(math.exp(mean - half)) and ci.high == pytest.approx(math.exp(mean + half))
    assert ci.verdict == stats.FASTER


def test_four_noisy_pairs_around_parity_cannot_say_slower() -> None:
    ci = stats.ratio_interval([0.96, 0.94, 0.92, 1.01])  # search_augmented at 2d9918e: median 0.95x
    assert ci is not None and ci.low < 1.0 < ci.high
    assert ci.verdict == stats.NO_DIFFERENCE


def test_a_consistent_slowdown_is_called_slower() -> None:
    ci = stats.ratio_interval([0.80, 0.82, 0.79, 0.81, 0.80])
    assert ci is not None and ci.high < 1.0 and ci.verdict == stats.SLOWER


def test_the_interval_covers_the_true_ratio_about_95_percent_of_the_time() -> None:
    rng = random.Random(7)
    covered = 0
    for _ in range(2000):
        ratios = [math.exp(rng.gauss(math.log(1.1), 0.08)) for _ in range(5)]
        ci = stats.ratio_interval(ratios)
        assert ci is not None
        covered += ci.low <= 1.1 <= ci.high
    assert 0.93 < covered / 2000 < 0.97


def test_too_few_or_unusable_ratios_give_no_interval() -> None:
    assert stats.ratio_interval([]) is None
    assert stats.ratio_interval([1.1]) is None
    assert stats.ratio_interval([1.1, float("nan"), 0.0, -2.0]) is None


def test_t95_falls_back_to_the_normal_quantile_and_rejects_zero_degrees() -> None:
    assert stats.t95(1) == pytest.approx(12.706) and stats.t95(30) == pytest.approx(2.042)
    assert stats.t95(200) == pytest.approx(1.96)
    with pytest.raises(ValueError, match="degree of freedom"):
        stats.t95(0)


def test_who_goes_first_is_balanced_seeded_and_not_a_strict_alternation() -> None:
    firsts = stats.first_sides(16, ("stock", "ayo"), seed=0)
    assert firsts.count("stock") == firsts.count("ayo") == 8
    assert firsts == stats.first_sides(16, ("stock", "ayo"), seed=0) != stats.first_sides(16, ("stock", "ayo"), seed=1)
    assert firsts != ["stock", "ayo"] * 8 and firsts != ["ayo", "stock"] * 8
    odd = stats.first_sides(5, ("a", "b"), seed=3)
    assert len(odd) == 5 and abs(odd.count("a") - odd.count("b")) == 1
