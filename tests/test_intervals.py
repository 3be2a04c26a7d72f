"""Tests for intervals: the t quantile against tabulated values, the interval's edges,
and its coverage by simulation at the book's seed counts (the claim a "95%" interval makes)."""

import math

import numpy as np
import pytest

from dyckbook.experiment.intervals import coverage, interval, intervals, t_quantile


@pytest.mark.parametrize("df, expected", [(1, 12.7062047), (2, 4.3026527), (3, 3.1824463),
                                          (4, 2.7764451), (9, 2.2621572), (30, 2.0422725)])
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-6)
    assert t_quantile(0.5, df) == pytest.approx(0.0, abs=1e-9)


def _normal(rng, shape):
    return np.clip(rng.normal(0.9, 0.03, shape), 0, 1)


def _skewed(rng, shape):  # mass against the bound, a long tail below: accuracies near 1
    return 1 - rng.exponential(0.01, shape)


@pytest.mark.parametrize("draw, mean", [(_normal, 0.9), (_skewed, 0.99)], ids=["normal", "skewed"])
@pytest.mark.parametrize("n_seeds", [5, 10])
def test_coverage_at_the_books_seed_counts(draw, mean, n_seeds):
    # the percentile bootstrap this replaced covers 0.84 (normal) and 0.76 (skewed) at 5 seeds
    assert coverage(draw, mean, n_seeds, n_sim=2000, seed=1) >= 0.93


def test_two_clumps_do_not_explode_the_interval():
    """Four solved seeds and two failed ones: wide, but not the whole range."""
    lo, hi = interval([0.9, 0.95, 1.0, 0.99, 0.5, 0.55])
    assert 0.05 < lo < 0.6 and hi == 1.0


def test_coverage_can_fail():
    """The check is not vacuous: a nominal 50% interval does not pass it."""
    assert coverage(_normal, 0.9, 5, n_sim=2000, level=0.5) < 0.8


def test_interval_edges():
    assert all(math.isnan(v) for v in interval([]))
    assert interval([0.7]) == (0.0, 1.0)  # one seed: no spread known, the whole range
    assert interval([0.7], bounds=(-1.0, 1.0)) == (-1.0, 1.0)
    for n in range(2, 12):
        for v in (0.99, 0.95, 0.9, 0.6, 0.02):
            assert interval([v] * n) == (v, v)
    lo, hi = interval([0.98, 0.99, 1.0, 1.0, 0.97])
    assert 0.9 < lo < 0.97 and hi == 1.0  # clipped at the bound
    with pytest.raises(ValueError, match="must not hold NaN"):
        interval([0.5, math.nan])
    with pytest.raises(ValueError, match="level must be in"):
        interval([0.5, 0.6], level=1.0)


def test_interval_is_shift_equivariant_and_batched_equals_single():
    rng = np.random.default_rng(3)
    values = rng.uniform(0.3, 0.6, (6, 5))
    low, high = intervals(values)
    for row, lo, hi in zip(values, low, high):
        assert interval(row.tolist()) == pytest.approx((lo, hi))
        shifted = interval((row + 0.2).tolist())
        assert shifted == pytest.approx((lo + 0.2, hi + 0.2))
    # wider than Student-t alone, never narrower
    mean, se = values.mean(1), values.std(1, ddof=1) / math.sqrt(5)
    t = t_quantile(0.975, 4)
    assert (low <= mean - t * se + 1e-12).all() and (high >= mean + t * se - 1e-12).all()


@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-1.0, 1.0), (0.0, math.inf)])
def test_the_mean_lies_in_its_interval_whatever_the_values(bounds):
    """Issue 64: a clipped interval showed "-0.001 [0.000, 0.001]". Values within their bounds,
    however bunched against a bound or spread, keep their mean inside the interval."""
    rng = np.random.default_rng(11)
    lo_b, hi_b = bounds
    top = 1.0 if math.isinf(hi_b) else hi_b
    for n in (2, 3, 5, 10):
        for scale in (1e-3, 0.05, 0.5):
            for centre in (lo_b, top, (lo_b + top) / 2):
                values = np.clip(centre + scale * rng.standard_normal((40, n)), lo_b, top)
                low, high = intervals(values, bounds=bounds)
                mean = values.mean(axis=1)
                assert (low <= mean + 1e-12).all() and (mean <= high + 1e-12).all()


def test_values_outside_their_bounds_are_an_error_not_clipped():
    """A drop of accuracy can be negative: read as an accuracy (bounds [0, 1]) its interval
    would be clipped above its mean; it must name its bounds instead."""
    drops = [-0.002, -0.001, 0.0, 0.001, -0.001]
    with pytest.raises(ValueError, match=r"values must lie within bounds \(0.0, 1.0\): got values "
                                         r"from -0.002 to 0.001"):
        interval(drops)
    lo, hi = interval(drops, bounds=(-1.0, 1.0))
    assert lo < np.mean(drops) < hi
    with pytest.raises(ValueError, match="bounds must be"):
        interval([0.5, 0.6], bounds=(1.0, 0.0))
