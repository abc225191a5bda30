"""Compute-optimal upcycling: D2 and N1 for a FLOPs budget C2 (seed 002 eq. 14),
and the total-FLOPs comparison of Fig. 16 (dense, MoE, dense-then-upcycled).

With a dense model trained on D1 tokens available, upcycled training costs
C2 = 6 N2 D2 FLOPs and N2 = r N1 (r = 1.75 for 8 experts, top-2: eqs. 4-5).
Minimising eq. 12 at fixed D1 along C2 gives (appendix F.3)
    D2_opt = G (C2 / 6r)^a,   N1_opt = G^-1 (C2 / 6r)^b,
    G = (A_eff alpha_eff / (B beta))^(1 / (alpha_eff + beta)),
    a = beta / (alpha_eff + beta),   b = alpha_eff / (alpha_eff + beta),
    A_eff = A D1^-alpha1,   alpha_eff = alpha2 - alpha3 log D1,
so D2_opt grows as N1_opt^(beta / alpha_eff) (F.3 prints the exponent without
its parentheses). `closed_form` is that solution; `numerical` minimises eq. 12
on the constraint directly and is its reference.
"""
import numpy as np
from scipy import optimize

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import forms

MIXTRAL_N2_OVER_N1 = 1.75   # (4 + 12 * 2) / 16, seed 002 eqs. 4-5 with top-2


def _check(params, d1, c2, n2_over_n1):
  for name, value in (('D1', d1), ('C2', c2), ('n2_over_n1', n2_over_n1)):
    if not value > 0:
      raise ConfigError(f'{name} must be > 0, got {value}')
  missing = [p for p in ('A', 'alpha1', 'alpha2', 'alpha3', 'B', 'beta') if p not in params]
  if missing:
    raise ConfigError(f'compute-optimal allocation needs eq. 12 parameters; missing {missing}')
  alpha_eff = params['alpha2'] - params['alpha3'] * np.log(d1)
  if alpha_eff <= 0:
    raise ConfigError(f'alpha_eff = alpha2 - alpha3 log D1 = {alpha_eff:.4g} <= 0 at '
                      f'D1={d1:g}: eq. 12 has no compute-optimal D2 there')
  return alpha_eff


def closed_form(params, d1, c2, n2_over_n1=MIXTRAL_N2_OVER_N1):
  """Seed 002 eq. 14 / appendix F.3 for eq. 12 parameters `params`."""
  alpha_eff = _check(params, d1, c2, n2_over_n1)
  beta = params['beta']
  a_eff = params['A'] * d1 ** -params['alpha1']
  g = (a_eff * alpha_eff / (params['B'] * beta)) ** (1 / (alpha_eff + beta))
  a, b = beta / (alpha_eff + beta), alpha_eff / (alpha_eff + beta)
  k = c2 / (6 * n2_over_n1)
  d2, n1 = g * k ** a, k ** b / g
  loss = forms.predict(forms.get('joint'), params,
                       {'D1': np.array([d1]), 'D2': np.array([d2]), 'N1': np.array([n1])})[0]
  return {'D2_opt': float(d2), 'N1_opt': float(n1), 'loss': float(loss), 'G': float(g),
          'a': float(a), 'b': float(b), 'A_eff': float(a_eff), 'alpha_eff': float(alpha_eff),
          'D2_vs_N1_exponent': float(beta / alpha_eff)}


def numerical(params, d1, c2, n2_over_n1=MIXTRAL_N2_OVER_N1):
  """Minimises eq. 12 over log D2 with N1 = C2 / (6 r D2): the slow reference."""
  _check(params, d1, c2, n2_over_n1)
  k = c2 / (6 * n2_over_n1)

  def loss(log_d2):
    d2 = np.exp(log_d2)
    return forms.predict(forms.get('joint'), params, {
        'D1': np.array([d1]), 'D2': np.array([d2]), 'N1': np.array([k / d2])})[0]

  res = optimize.minimize_scalar(loss, bounds=(np.log(k) * 0.05, np.log(k) * 0.95),
                                 method='bounded', options={'xatol': 1e-10})
  return {'D2_opt': float(np.exp(res.x)), 'N1_opt': float(k / np.exp(res.x)),
          'loss': float(res.fun)}


def chinchilla_optimal(params, c, flops_per_param_token=6.0, bounds=None):
  """Eq. 3 at its compute optimum for C = k N D FLOPs (k = 6 for dense; 6 r for
  a MoE law written in N1, as Table 2's): L = A (C/k)^-alpha N^alpha + B N^-beta
  + E is least at N_opt = (beta B / (alpha A))^(1 / (alpha + beta)) (C/k)^(alpha /
  (alpha + beta)). `bounds` ({'N': (lo, hi), 'D': (lo, hi)}, e.g. the fitted
  runs' ranges) keeps the optimum inside them: L is unimodal in log N along
  the budget, so the bounded optimum is N_opt clipped into the feasible N.
  Returns dict(N_opt, D_opt, loss), or None when no (N, D) in bounds spends C."""
  if not c > 0:
    raise ConfigError(f'C must be > 0, got {c}')
  a, b, alpha, beta = params['A'], params['B'], params['alpha'], params['beta']
  k = c / flops_per_param_token
  n = (beta * b / (alpha * a)) ** (1 / (alpha + beta)) * k ** (alpha / (alpha + beta))
  if bounds:
    (n_lo, n_hi), (d_lo, d_hi) = bounds['N'], bounds['D']
    lo, hi = max(n_lo, k / d_hi), min(n_hi, k / d_lo)
    if lo > hi:
      return None
    n = min(max(n, lo), hi)
  d = k / n
  return {'N_opt': float(n), 'D_opt': float(d),
          'loss': float(a * d ** -alpha + b * n ** -beta + params['E'])}


def _upcycled_loss(params, c, n2_over_n1, x):
  """Eq. 12 at x = (log N1, logit f): the dense stage spends f C (6 N1 D1), the
  upcycled stage (1 - f) C (6 r N1 D2)."""
  n1, f = np.exp(x[0]), 1 / (1 + np.exp(-x[1]))
  d1, d2 = f * c / (6 * n1), (1 - f) * c / (6 * n2_over_n1 * n1)
  cols = {'D1': np.array([d1]), 'D2': np.array([d2]), 'N1': np.array([n1])}
  return float(forms.predict(forms.get('joint'), params, cols)[0]), n1, d1, d2


def upcycled_total_optimal(params, c, n2_over_n1=MIXTRAL_N2_OVER_N1):
  """Seed 002 Fig. 16: eq. 12 at its optimum over (N1, D1, D2) when the dense
  and the upcycled stage share C = 6 N1 D1 + 6 r N1 D2 FLOPs (no sunk cost:
  the dense model is trained for the purpose). Nelder-Mead from a few starts;
  `upcycled_total_grid` is the slow reference. Returns dict(N1_opt, D1_opt,
  D2_opt, dense_share, loss)."""
  if not c > 0:
    raise ConfigError(f'C must be > 0, got {c}')
  best = None
  for log_n in np.log(c / 6) * np.array([0.3, 0.5, 0.7]):
    for logit in (-2.0, 0.0, 2.0):
      res = optimize.minimize(lambda x: _upcycled_loss(params, c, n2_over_n1, x)[0],
                              np.array([log_n, logit]), method='Nelder-Mead',
                              options={'xatol': 1e-8, 'fatol': 1e-12, 'maxiter': 4000})
      if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
        best = res
  loss, n1, d1, d2 = _upcycled_loss(params, c, n2_over_n1, best.x)
  return {'N1_opt': n1, 'D1_opt': d1, 'D2_opt': d2, 'dense_share': float(6 * n1 * d1 / c),
          'loss': loss}


def upcycled_total_grid(params, c, n2_over_n1=MIXTRAL_N2_OVER_N1, points=401, bounds=None):
  """`upcycled_total_optimal` by brute force over a grid of (log N1, dense
  share): the reference its optimiser is tested against, and the optimum
  inside `bounds` ({'N1' | 'D1' | 'D2': (lo, hi)}, e.g. the fitted runs'
  ranges: outside them a fitted eq. 12 may have alpha2 - alpha3 log D1 < 0
  and reward D2 -> 0). None when no grid point in bounds spends C."""
  bounds = bounds or {}
  n_lo, n_hi = bounds.get('N1', (np.exp(np.log(c / 6) * 0.05), np.exp(np.log(c / 6) * 0.95)))
  log_n = np.linspace(np.log(n_lo), np.log(n_hi), points)
  shares = np.linspace(0.0025, 0.9975, points)
  ln, f = np.meshgrid(log_n, shares, indexing='ij')
  n1 = np.exp(ln.ravel())
  d1, d2 = f.ravel() * c / (6 * n1), (1 - f.ravel()) * c / (6 * n2_over_n1 * n1)
  inside = np.ones(n1.shape, bool)
  for name, v in (('D1', d1), ('D2', d2)):
    if name in bounds:
      inside &= (v >= bounds[name][0]) & (v <= bounds[name][1])
  if not inside.any():
    return None
  loss = np.where(inside, forms.predict(forms.get('joint'), params,
                                        {'D1': d1, 'D2': d2, 'N1': n1}), np.inf)
  i = int(np.argmin(loss))
  return {'N1_opt': float(n1[i]), 'D1_opt': float(d1[i]), 'D2_opt': float(d2[i]),
          'dense_share': float(f.ravel()[i]), 'loss': float(loss[i])}


def compute_optimal_comparison(dense, moe, upcycled, budgets, n2_over_n1=MIXTRAL_N2_OVER_N1,
                               bounds=None):
  """Seed 002 Fig. 16 as rows: for each total FLOPs C in `budgets`, the
  compute-optimal loss of dense (eq. 3, C = 6 N D), of a MoE from scratch
  (eq. 3 in N1, C = 6 r N1 D) and of dense-then-upcycled training (eq. 12,
  both stages in C). `dense`, `moe`, `upcycled` are parameter dicts; with
  `bounds` ({'dense': {'N', 'D'}, 'moe': {'N', 'D'}, 'upcycled': {'N1', 'D1',
  'D2'}}) every optimum stays inside them (a None loss: nothing there spends C)."""
  rows = []
  b = bounds or {}
  for c in budgets:
    up = (upcycled_total_grid(upcycled, c, n2_over_n1, bounds=b['upcycled']) if bounds else
          upcycled_total_optimal(upcycled, c, n2_over_n1))
    dense_opt = chinchilla_optimal(dense, c, bounds=b.get('dense'))
    moe_opt = chinchilla_optimal(moe, c, 6 * n2_over_n1, bounds=b.get('moe'))
    rows.append({'C': float(c), 'dense': dense_opt and dense_opt['loss'],
                 'moe': moe_opt and moe_opt['loss'], 'upcycled': up and up['loss'],
                 'upcycled_dense_share': up and up['dense_share']})
  return rows
