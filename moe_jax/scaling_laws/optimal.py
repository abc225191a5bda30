"""Compute-optimal upcycling: D2 and N1 for a FLOPs budget C2 (seed 002 eq. 14).

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
