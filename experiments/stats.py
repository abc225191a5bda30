"""The statistics every report states its claims with: an estimate and its interval.

  paired(diffs)                          # mean paired difference over seeds, se, t interval
  bootstrap(statistic, cols, seed=0)     # percentile interval of a derived quantity (eta, D*)
  ratio_of_means(num, den)               # e.g. eta = mean(closed gap) / mean(gap), resampled
  wilson(k, n)                           # interval of an accuracy
  spearman(x, y)                         # rank correlation with a Fisher-z interval
  verdict(interval, low=, high=)         # 'agrees' | 'disagrees' | 'inconclusive'

Why intervals and not "better in every seed": with n = 3 seeds a mean that is
2.7 standard errors from 0 still has a two-sided t interval that contains 0
(t_{0.975, 2} = 4.30), and a ratio of two noisy gaps can be anything. Every
function returns plain floats in a dict, ready for a results file. The
bootstrap draws its resamples exactly as scipy.stats.bootstrap does (paired,
percentile method), so a test can hold the two together.
"""
import math

import numpy as np
from scipy import stats as sp

from moe_jax.eval import harness

LEVEL = 0.95
N_RESAMPLES = 10_000


def paired(diffs, level=LEVEL):
  """Mean of per-seed paired differences with its standard error, the
  Student-t interval and the two-sided p-value of 'the mean is 0'.

  dict(n, mean, sd, se, lo, hi, p, all_positive, all_negative); with fewer
  than two differences the interval is (-inf, inf) and p is 1."""
  xs = np.asarray([d for d in diffs if d is not None], np.float64)
  n = len(xs)
  mean = float(xs.mean()) if n else math.nan
  sd = float(xs.std(ddof=1)) if n > 1 else math.nan
  out = dict(n=n, mean=mean, sd=sd, se=math.inf, lo=-math.inf, hi=math.inf, p=1.0,
             all_positive=bool(n and np.all(xs > 0)), all_negative=bool(n and np.all(xs < 0)))
  if n < 2:
    return out
  se = sd / math.sqrt(n)
  half = float(sp.t.ppf((1 + level) / 2, n - 1)) * se
  p = 2 * float(sp.t.sf(abs(mean) / se, n - 1)) if se > 0 else float(mean == 0)
  out.update(se=se, lo=mean - half, hi=mean + half, p=p)
  return out


def bootstrap(statistic, cols, level=LEVEL, n_resamples=N_RESAMPLES, seed=0):
  """Percentile bootstrap of `statistic(*cols, axis=-1)` over units (seeds,
  runs): the columns are resampled together, as rows of one table.

  `statistic` must take arrays of shape (..., n) and reduce the last axis.
  Returns dict(estimate, lo, hi, n, n_resamples, seed). The resamples are
  scipy.stats.bootstrap's (paired=True, method='percentile') with
  rng=np.random.default_rng(seed): the same indices, the same quantiles."""
  return _bootstrap(statistic, cols, level, n_resamples, seed)[0]


def _bootstrap(statistic, cols, level, n_resamples, seed):
  """(bootstrap's dict, the resampled indices (n_resamples, n)), so a caller
  can derive more from the same draws."""
  cols = [np.asarray(c, np.float64) for c in cols]
  n = len(cols[0])
  if n == 0 or any(len(c) != n for c in cols):
    raise ValueError(f'bootstrap: columns of lengths {[len(c) for c in cols]}')
  rng = np.random.default_rng(seed)
  idx = rng.integers(0, n, (n_resamples, n))
  with np.errstate(divide='ignore', invalid='ignore'):
    draws = np.asarray(statistic(*(c[idx] for c in cols), axis=-1), np.float64)
    estimate = float(statistic(*cols, axis=-1))
  alpha = (1 - level) / 2
  lo, hi = np.quantile(draws, [alpha, 1 - alpha])
  return dict(estimate=estimate, lo=float(lo), hi=float(hi), n=n, n_resamples=n_resamples,
              seed=seed), idx


def _ratio(num, den, axis=-1):
  return np.mean(num, axis=axis) / np.mean(den, axis=axis)


def ratio_of_means(num, den, level=LEVEL, n_resamples=N_RESAMPLES, seed=0):
  """mean(num) / mean(den) with a paired bootstrap interval: seed 000's eta
  over seeds is mean(val Fixed-E - val Upcycled) / mean(val Fixed-E - val
  Fixed-2E). A mean of per-seed ratios would divide by noise-level gaps.
  Adds `den_nonpositive`: the share of resamples whose mean(den) <= 0 (there
  the ratio means nothing: e.g. no gap to close), over the same resamples."""
  out, idx = _bootstrap(_ratio, [num, den], level, n_resamples, seed)
  den = np.asarray(den, np.float64)
  out['den_nonpositive'] = float(np.mean(den[idx].mean(axis=-1) <= 0))
  return out


def wilson(correct, n, level=LEVEL):
  """Wilson's score interval of an accuracy: dict(k, n, p, lo, hi)."""
  z = float(sp.norm.ppf((1 + level) / 2))
  lo, hi = harness.wilson(correct, n, z)
  return dict(k=int(correct), n=int(n), p=correct / n if n else math.nan, lo=lo, hi=hi)


def fisher_interval(r, n, level=LEVEL, variance=1.0):
  """tanh(atanh(r) -+ z sqrt(variance / (n - 3))): Fisher's interval of a
  correlation (variance 1: Pearson's); (-1, 1) for n <= 3, and (nan, nan)
  where |r| = 1, whose z is infinite: no interval, not a point."""
  if n <= 3:
    return -1.0, 1.0
  if 1 - abs(r) < 1e-12:   # scipy's rho of a perfect ranking can be 1 - 1e-16
    return math.nan, math.nan
  z = float(sp.norm.ppf((1 + level) / 2))
  half = z * math.sqrt(variance / (n - 3))
  return math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)


def spearman(x, y, level=LEVEL):
  """Spearman's rho with Bonett and Wright's (2000) Fisher-z interval
  (variance 1 + rho^2 / 2 over n - 3): dict(rho, lo, hi, n)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  n = len(x)
  rho = float(sp.spearmanr(x, y)[0]) if n > 2 else math.nan
  if math.isnan(rho):
    return dict(rho=rho, lo=-1.0, hi=1.0, n=n)
  lo, hi = fisher_interval(rho, n, level, variance=1 + rho * rho / 2)
  return dict(rho=rho, lo=lo, hi=hi, n=n)


def verdict(interval, low=-math.inf, high=math.inf):
  """Whether an interval (lo, hi) supports a claim 'the quantity lies in
  [low, high]': 'agrees' if all of it does, 'disagrees' if none of it does,
  'inconclusive' otherwise (it straddles an edge)."""
  lo, hi = interval
  if lo >= low and hi <= high:
    return 'agrees'
  if hi < low or lo > high:
    return 'disagrees'
  return 'inconclusive'


def interval_text(d, digits=4, key='mean'):
  """'+0.0181 [95% CI -0.0107, +0.0470]' of a dict with `key`, lo, hi."""
  f = lambda v: f'{v:+.{digits}f}'
  return f'{f(d[key])} [{round(100 * LEVEL)}% CI {f(d["lo"])}, {f(d["hi"])}]'
