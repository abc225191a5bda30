"""Seed 002's bottom-up evidence for eq. 8: per-D1 power laws in D2 and how
their exponent and scale move with D1 (sec. 4.1, appendix C.2).

  eq. 7    at one D1:  L(D2) = A D2^-alpha + E            (`per_d1`)
  eq. 10   -alpha(D1) = gamma log D1 + E'                 (`exponent_law`)
  eq. 16   A(D1) proportional to D1^-eta                  (`scale_law`)

Substituting both into eq. 7 gives eq. 8: A D1^-alpha1 D2^(-alpha2 + alpha3
log D1) + E with alpha1 = eta, alpha3 = gamma and alpha2 = -E'. So a table
made by eq. 8 gives back exactly those three numbers (tests/scaling_laws/
test_exponents.py); the seed's reading is gamma > 0: the longer the dense
model trained, the less each upcycled token buys.
"""
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import fit as fit_lib, forms


def per_d1(cols, fixed=None, **fit_kwargs):
  """{D1: Fit of eq. 7} over the rows of `cols` (upcycled runs of one N1),
  one fit per distinct D1. `fixed` holds parameters (e.g. {'E': e}) fixed in
  every fit: a group of four D2 budgets barely determines three parameters."""
  form = forms.get('d2_power')
  out = {}
  for d1 in np.unique(cols['D1']):
    rows = {k: v[cols['D1'] == d1] for k, v in cols.items()}
    if len(rows['loss']) < 2:
      raise ConfigError(f'eq. 7 at D1={d1:g} needs at least 2 runs, got {len(rows["loss"])}')
    out[float(d1)] = fit_lib.fit(form, rows, fixed=fixed, **fit_kwargs)
  return out


def _line(x, y, what):
  """Least-squares y = slope x + intercept: dict(slope, intercept, r2, n)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if len(x) < 2 or len(np.unique(x)) < 2:
    raise ConfigError(f'{what} needs at least 2 distinct D1, got {len(np.unique(x))}')
  slope, intercept = np.polyfit(x, y, 1)
  resid = y - (slope * x + intercept)
  total = np.sum((y - y.mean()) ** 2)
  r2 = 1.0 - np.sum(resid ** 2) / total if total > 0 else 1.0
  return dict(slope=float(slope), intercept=float(intercept), r2=float(r2), n=len(x))


def exponent_law(d1s, alphas):
  """Eq. 10 by least squares: dict(gamma, E_prime, r2, n) with -alpha = gamma
  log D1 + E' (natural log, as eq. 8's interaction)."""
  line = _line(np.log(d1s), -np.asarray(alphas, np.float64), 'eq. 10')
  return dict(gamma=line['slope'], E_prime=line['intercept'], r2=line['r2'], n=line['n'])


def scale_law(d1s, scales):
  """Eq. 16 by least squares on logs: dict(eta, log_c, r2, n) with log A =
  log_c - eta log D1."""
  scales = np.asarray(scales, np.float64)
  if np.any(scales <= 0):
    raise ConfigError(f'eq. 16 needs positive scale factors A, got {scales.tolist()}')
  line = _line(np.log(d1s), np.log(scales), 'eq. 16')
  return dict(eta=-line['slope'], log_c=line['intercept'], r2=line['r2'], n=line['n'])


def bottom_up(cols, fixed=None, **fit_kwargs):
  """Eq. 7 per D1, then eqs. 10 and 16 across D1: dict(per_d1={D1: params},
  eq10, eq16)."""
  fits = per_d1(cols, fixed, **fit_kwargs)
  d1s = sorted(fits)
  return dict(per_d1={d: fits[d].params for d in d1s},
              eq10=exponent_law(d1s, [fits[d].params['alpha'] for d in d1s]),
              eq16=scale_law(d1s, [fits[d].params['A'] for d in d1s]))
