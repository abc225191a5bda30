"""Numbers of seed 000's comparisons from a sweep's runs (`report.load_runs`).

  runs = {r['name']: r for r in report.load_runs(DIR)}
  eta(l_fixed, l_upcycled, l_fixed2x)              # seed 000 eq. 4, None where undefined
  paired(gaps)                                     # mean, sd, se, and the regime criterion
  step_seconds(run)                                # median seconds per training step

The regime criterion (issue 22): Fixed-2E beats Fixed-E in every one of >= 3
seeds and the mean paired gap exceeds twice its standard error.
"""
import math

import numpy as np


def curve(run, metric='val_loss'):
  """[(step on the sweep's common axis, metric)]: a run grown from another
  run's checkpoint starts at that step."""
  return [(run['start_step'] + row['step'], row[metric]) for row in run['metrics']
          if metric in row]


def eta(fixed, upcycled, fixed2x):
  """Seed 000 eq. 4, the share of the Fixed-E -> Fixed-mE gap the upcycled run
  closes; None when Fixed-mE did not beat Fixed-E (there is no gap to close)."""
  gap = fixed - fixed2x
  return (fixed - upcycled) / gap if gap > 0 else None


def mean_sd(values):
  """(mean, sample standard deviation; 0 for one value) of the non-None values."""
  xs = np.asarray([v for v in values if v is not None], np.float64)
  if not len(xs):
    return None, None
  return float(xs.mean()), float(xs.std(ddof=1)) if len(xs) > 1 else 0.0


def paired(gaps):
  """Paired gaps val(Fixed-E) - val(Fixed-2E), one per seed: dict(n, mean, sd,
  se, positive (every gap > 0), met (positive, n >= 3 and mean > 2 se))."""
  xs = np.asarray(gaps, np.float64)
  n = len(xs)
  mean, sd = mean_sd(xs)
  se = sd / math.sqrt(n) if n > 1 else float('inf')
  positive = bool(n and np.all(xs > 0))
  return dict(n=n, mean=mean, sd=sd, se=se, positive=positive,
              met=positive and n >= 3 and mean > 2 * se)


def step_seconds(run):
  """Median seconds per training step over the logged intervals, the first
  (which holds compilation) left out; None if it logged too little."""
  per_step = run['tokens_per_step']
  rates = [row['tokens_per_s'] for row in run['metrics'] if row.get('tokens_per_s')][1:]
  return float(np.median([per_step / r for r in rates])) if rates else None
