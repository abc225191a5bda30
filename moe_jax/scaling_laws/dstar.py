"""D*: the token budget beyond which training a MoE from scratch beats upcycling.

Seed 002 eq. 13 defines D* for a dense size N1 by
    L^MoE_N1(D*) = L^Upc_N1(D1 = D*, D2 = D*),
with L^MoE the MoE-from-scratch Chinchilla law (eq. 3, in N1) and L^Upc the
joint upcycling law (eq. 12). The paper solves it numerically and summarises the
solution by eq. 2:
    D* ~ 4 (N1 / 1e9)^(-0.7 + 0.04 log(N1 / 1e9))  billion tokens.
`solve` is the numerical solution, `eq2` the paper's formula, and `fit_eq2`
fits eq. 2's shape to numerical solutions of one's own laws.

What Table 2's rounded parameters give (tests/scaling_laws/test_dstar.py): the
difference L^MoE - L^Upc crosses zero twice on D in [1e6, 1e14]; the lower
crossing is D* (below it upcycling wins). It is 3.0B at N1 = 1e9 against eq.
2's 4B, within a factor 1.4 of eq. 2 for N1 in [3e8, 7e10], and there is no
crossing for N1 = 1e8. Fitting eq. 2's shape to it over N1 in [1e9, 1e11]
returns eq. 2's exponents (-0.70, 0.039) with a prefactor of 3.0B instead of 4B.
D* is very sensitive to the parameters: the curves meet at a shallow angle, so
perturbing Table 2 within its printed digits alone moves D*(1e9) several-fold;
4B is well inside that band.
"""
import numpy as np
from scipy import optimize

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import forms

EQ2 = {'scale': 4e9, 'p': -0.7, 'q': 0.04}   # seed 002 eq. 2, D* in tokens


def eq2(n1, scale=EQ2['scale'], p=EQ2['p'], q=EQ2['q']):
  """Seed 002 eq. 2: D* ~ scale * (N1/1e9)^(p + q log(N1/1e9)), in tokens."""
  x = np.asarray(n1, float) / 1e9
  return scale * x ** (p + q * np.log(x))


def gap(moe_params, upcycled_params, n1, d):
  """L^MoE(D) - L^Upc(D1 = D, D2 = D) at dense size n1 (eq. 13's two sides)."""
  d = np.atleast_1d(np.asarray(d, float))
  n = np.full_like(d, n1)
  moe = forms.predict(forms.get('chinchilla'), moe_params, {'D1': d, 'N1': n})
  upc = forms.predict(forms.get('joint'), upcycled_params, {'D1': d, 'D2': d, 'N1': n})
  return moe - upc


def solve(moe_params, upcycled_params, n1, lo=1e6, hi=1e14, points=400, falling=False):
  """Every D in [lo, hi] where eq. 13 holds, ascending. With `falling` only
  those where the gap falls through zero, upcycling ahead below and the MoE
  from scratch above: D* is the first of those. (Fitted laws can also cross
  the other way far outside their data: our CPU grid's did near 1e4 tokens.)

  Brackets sign changes of the gap on a log grid of `points`, then refines
  each by Brent's method in log D.
  """
  if not 0 < lo < hi:
    raise ConfigError(f'D* search range must satisfy 0 < lo < hi, got [{lo}, {hi}]')
  if n1 <= 0:
    raise ConfigError(f'N1 must be > 0, got {n1}')
  log_d = np.linspace(np.log(lo), np.log(hi), points)
  g = gap(moe_params, upcycled_params, n1, np.exp(log_d))
  roots = []
  for i in np.flatnonzero(np.sign(g[:-1]) * np.sign(g[1:]) < 0):
    if falling and g[i] < 0:
      continue
    f = lambda x: gap(moe_params, upcycled_params, n1, np.exp(x))[0]
    roots.append(float(np.exp(optimize.brentq(f, log_d[i], log_d[i + 1], xtol=1e-12))))
  return roots


def fit_eq2(n1, d_star):
  """Least-squares (scale, p, q) of eq. 2's shape through (N1, D*) points.

  log D* = log scale + p x + q x^2 with x = log(N1/1e9): linear in the three.
  """
  n1, d_star = np.asarray(n1, float), np.asarray(d_star, float)
  ok = np.isfinite(d_star)
  if ok.sum() < 3:
    raise ConfigError(f'fitting eq. 2 needs D* at 3 or more N1 values, got {ok.sum()}')
  x = np.log(n1[ok] / 1e9)
  coef = np.linalg.lstsq(np.stack([np.ones_like(x), x, x * x], 1), np.log(d_star[ok]),
                         rcond=None)[0]
  return {'scale': float(np.exp(coef[0])), 'p': float(coef[1]), 'q': float(coef[2])}
