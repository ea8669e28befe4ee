"""How sure a measured speed-up is: a confidence interval for the per-pair ratio.

``ayo compare`` runs stock and Ayo on each of a few questions per app, so each question gives
one ratio stock/Ayo. On a shared 2-core machine the same requests take ±10-15 % longer
or shorter from one minute to the next (``benchmarks/noise_floor.py`` measures it), so a median
of four ratios cannot tell 0.95x from 1.0x. The interval here can: a two-sided Student-t
interval on the mean of the log-ratios (ratios multiply, so their logs are what averages),
reported as the geometric mean and its bounds. An interval that contains 1.0 means "no
difference this run can show", and the README says so instead of calling 0.95x "slower".
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

# Two-sided 95 % quantiles of Student's t by degrees of freedom (no SciPy needed at run time).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z95 = 1.960

FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no measurable difference"


@dataclass(frozen=True)
class RatioInterval:
    """Geometric mean of ``n`` ratios and its 95 % confidence interval (``low``..``high``)."""

    n: int
    geomean: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """``faster`` / ``slower`` when the whole interval is above / below 1.0."""
        if self.low > 1.0:
            return FASTER
        if self.high < 1.0:
            return SLOWER
        return NO_DIFFERENCE

    def as_dict(self) -> dict[str, float | int | str]:
        return {"n": self.n, "geomean": self.geomean, "ci95_low": self.low, "ci95_high": self.high,
                "verdict": self.verdict}


def t95(degrees_of_freedom: int) -> float:
    """The two-sided 95 % quantile of Student's t (the normal one past 30 degrees of freedom)."""
    if degrees_of_freedom < 1:
        raise ValueError(f"t95 needs at least 1 degree of freedom, got {degrees_of_freedom}")
    return _T95[degrees_of_freedom - 1] if degrees_of_freedom <= len(_T95) else _Z95


def ratio_interval(ratios: list[float]) -> RatioInterval | None:
    """The 95 % interval of the geometric-mean ratio; ``None`` below two positive ratios (no spread)."""
    logs = [math.log(r) for r in ratios if r > 0 and math.isfinite(r)]
    if len(logs) < 2:
        return None
    mean = statistics.fmean(logs)
    half = t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioInterval(len(logs), math.exp(mean), math.exp(mean - half), math.exp(mean + half))


def first_sides(n: int, sides: tuple[str, str], seed: int = 0) -> list[str]:
    """Which side runs first in each of ``n`` pairs: as many pairs each way (one more at random when
    ``n`` is odd), in a seeded random order.

    Not a strict A B / B A alternation: that puts one side at runs 1, 4, 5, 8, ... and the other
    at 2, 3, 6, 7, ..., and anything on the machine with a period of about four runs then reads
    as a speed-up. Measured with ``benchmarks/noise_floor.py`` (identical requests on both sides):
    strict alternation gave A/A ratios of 1.09x [1.02-1.18] and 1.09x [1.00-1.18] in two runs of
    8 pairs, this order 0.99x [0.95-1.04], 0.92x [0.84-1.01] and 1.00x [0.94-1.07]: the machine's
    drift alone moves an 8-pair A/A ratio by up to ~9 %, so the evidence against the alternation
    is weak; a random order simply cannot alias.
    """
    rng = random.Random(seed)
    firsts = [sides[0], sides[1]] * (n // 2) + ([rng.choice(sides)] if n % 2 else [])
    rng.shuffle(firsts)
    return firsts
