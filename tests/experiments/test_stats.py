"""experiments/stats.py against textbook values: scipy's t test and bootstrap
on fixed data, Wilson intervals from the literature, Fisher's interval of
Pearson's r as scipy computes it."""
import math

import numpy as np
import pytest
from scipy import stats as sp

from experiments import stats

# The quickstart's committed per-seed gaps (docs/seed000/quickstart.json).
GAPS = [0.03096071258187294, 0.008351478725671768, 0.015089530497789383]


def test_paired_matches_scipy_t_interval_and_p():
  got = stats.paired(GAPS)
  res = sp.ttest_1samp(GAPS, 0.0)
  ci = res.confidence_interval(0.95)
  assert got['lo'] == pytest.approx(ci.low, rel=1e-12)
  assert got['hi'] == pytest.approx(ci.high, rel=1e-12)
  assert got['p'] == pytest.approx(res.pvalue, rel=1e-12)
  # the reading: 2.7 standard errors, p about 0.11, an interval holding 0
  assert got['mean'] / got['se'] == pytest.approx(2.706, abs=1e-3)
  assert 0.10 < got['p'] < 0.12 and got['lo'] < 0 < got['hi']
  assert got['all_positive'] and not got['all_negative']


def test_paired_one_value_has_no_interval():
  got = stats.paired([0.5])
  assert got['n'] == 1 and got['lo'] == -math.inf and got['hi'] == math.inf and got['p'] == 1.0


@pytest.mark.parametrize('seed', [0, 7])
def test_bootstrap_equals_scipy_percentile_bootstrap(seed):
  rng = np.random.default_rng(123)
  x, y = rng.normal(1.0, 0.3, 11), rng.normal(2.0, 0.5, 11)
  got = stats.ratio_of_means(x, y, n_resamples=2000, seed=seed)
  want = sp.bootstrap((x, y), lambda a, b, axis: np.mean(a, axis) / np.mean(b, axis),
                      paired=True, vectorized=True, method='percentile', n_resamples=2000,
                      rng=np.random.default_rng(seed)).confidence_interval
  assert (got['lo'], got['hi']) == pytest.approx((want.low, want.high), rel=1e-12)
  assert got['estimate'] == pytest.approx(x.mean() / y.mean())


def test_ratio_of_mean_gaps_of_the_quickstart():
  closed = [0.008469894528389, 0.010327886790037, 0.004035964608192]
  eta = stats.ratio_of_means(closed, GAPS)
  assert eta['estimate'] == pytest.approx(sum(closed) / sum(GAPS))
  assert eta['lo'] < eta['estimate'] < eta['hi']
  # three seeds: the resamples are the 10 multisets of them; the interval spans
  # the per-seed ratios' range, not more
  per_seed = [c / g for c, g in zip(closed, GAPS)]
  assert min(per_seed) - 1e-12 <= eta['lo'] and eta['hi'] <= max(per_seed) + 1e-12
  assert eta['den_nonpositive'] == 0.0   # every gap is positive


def test_ratio_counts_resamples_without_a_denominator():
  # one of two units has a negative gap: the resamples (b, b) have mean(den) < 0
  got = stats.ratio_of_means([1.0, 1.0], [2.0, -3.0], n_resamples=4000, seed=3)
  assert got['den_nonpositive'] == pytest.approx(0.75, abs=0.03)   # (b,b), (a,b), (b,a)


@pytest.mark.parametrize('k, n, lo, hi', [
    (0, 10, 0.0, 0.2775),        # Newcombe (1998) Table I / Agresti-Coull (1998)
    (5, 10, 0.2366, 0.7634),
    (81, 263, 0.2553, 0.3662),   # Newcombe (1998), example 81/263
    (15, 148, 0.0624, 0.1605),   # Newcombe (1998), example 15/148
])
def test_wilson_known_values(k, n, lo, hi):
  got = stats.wilson(k, n)
  assert (got['lo'], got['hi']) == pytest.approx((lo, hi), abs=1e-4)
  assert got['p'] == pytest.approx(k / n)


def test_fisher_interval_is_scipy_pearson_interval():
  rng = np.random.default_rng(0)
  x = rng.normal(size=23)
  y = x + rng.normal(size=23)
  res = sp.pearsonr(x, y)
  ci = res.confidence_interval(0.95)
  assert stats.fisher_interval(res.statistic, 23) == pytest.approx((ci.low, ci.high), rel=1e-9)


def test_a_perfect_rank_correlation_has_no_fisher_interval():
  got = stats.spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1])
  assert got['rho'] == pytest.approx(-1.0) and math.isnan(got['lo']) and math.isnan(got['hi'])
  assert stats.verdict((got['lo'], got['hi']), low=0.0) == 'inconclusive'
  assert stats.fisher_interval(0.5, 3) == (-1.0, 1.0)


def test_spearman_rho_and_interval():
  rng = np.random.default_rng(1)
  x = rng.normal(size=23)
  y = x + 2 * rng.normal(size=23)
  got = stats.spearman(x, y)
  assert got['rho'] == pytest.approx(sp.spearmanr(x, y)[0])
  plain = stats.fisher_interval(got['rho'], 23)
  # Bonett-Wright's variance (1 + rho^2 / 2) widens Fisher's interval
  assert got['lo'] < plain[0] < got['rho'] < plain[1] < got['hi']
  # the Table 8 reading of the issue: rho 0.59 over 23 runs does not exclude 0.80
  lo, hi = stats.fisher_interval(0.59, 23, variance=1 + 0.59 ** 2 / 2)
  assert lo < 0.59 < 0.80 < hi


@pytest.mark.parametrize('interval, want', [((0.1, 0.3), 'agrees'), ((-0.3, -0.1), 'disagrees'),
                                            ((-0.1, 0.3), 'inconclusive')])
def test_verdict(interval, want):
  assert stats.verdict(interval, low=0.0) == want


def test_verdict_two_sided():
  assert stats.verdict((0.95, 1.0), low=0.9, high=1.1) == 'agrees'
  assert stats.verdict((0.2, 0.6), low=0.9, high=1.1) == 'disagrees'
  assert stats.verdict((0.2, 1.2), low=0.9, high=1.1) == 'inconclusive'
