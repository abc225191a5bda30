"""Fitting a form to a runs table the way seed 002 does (sec. 4.1, sec. 5).

Objective: the Huber loss (delta = 1e-3) between the LogSumExp prediction of
log L and the observed log L, minimised by BFGS from a grid of initialisations
(the best end point wins). Forms are compared by their leave-one-out RMS error
(seed 002 Table 1; in nats of loss), and parameter uncertainty is a percentile
bootstrap over runs. Refits inside leave-one-out and the bootstrap start from
the full-data optimum instead of the whole grid: they are small perturbations of
the same problem, and this keeps them fast.
"""
import dataclasses
import itertools

import numpy as np
from scipy import optimize

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import forms, laws, table

HUBER_DELTA = 1e-3

# Initial values per kind of parameter, in theta units (logs for A, B, F, E).
_GRID = {'scale': (0.0, 2.5, 5.0), 'E': (-1.5, 0.0), 'exponent': (0.05, 0.2, 0.5),
         'interaction': (0.0, 1e-3)}


def _grid_values(param):
  if param == 'E':
    return _GRID['E']
  if forms.is_scale(param):
    return _GRID['scale']
  if param in ('alpha3', 'beta3'):
    return _GRID['interaction']
  return _GRID['exponent']


@dataclasses.dataclass
class Fit:
  form: str
  params: dict          # every parameter of the form, fixed ones included
  fixed: dict
  objective: float      # summed Huber loss at the optimum
  n: int                # runs used
  theta: np.ndarray = dataclasses.field(repr=False)   # free params, theta units


def huber(r, delta=HUBER_DELTA):
  a = np.abs(r)
  return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def _objective(X, c, log_loss, delta):
  def f(theta):
    log_pred, jac = forms.log_predict(X, c, theta)
    r = log_pred - log_loss
    # d huber / d r = clip(r, -delta, delta).
    return huber(r, delta).sum(), np.clip(r, -delta, delta) @ jac
  return f


def _minimise(f, starts, method):
  best = None
  for theta0 in starts:
    res = optimize.minimize(f, theta0, jac=True, method=method,
                            options={'gtol': 1e-12, 'maxiter': 2000})
    if np.all(np.isfinite(res.x)) and np.isfinite(res.fun) and (best is None or res.fun < best.fun):
      best = res
  return best


def _prepare(form, cols, fixed):
  fixed = dict(form.fixed_params, **(fixed or {}))
  unknown = sorted(set(fixed) - set(form.params))
  if unknown:
    raise ConfigError(f'fixed parameter {unknown[0]!r} is not one of form '
                      f'{form.name!r} parameters {list(form.params)}')
  table.check(cols, form.columns, f'form {form.name!r}')
  X, c, free = forms.design(form, cols, fixed)
  n = len(cols['loss'])
  if n <= len(free):
    raise ConfigError(f'form {form.name!r} has {len(free)} free parameters; it needs at '
                      f'least {len(free) + 1} runs, got {n}')
  if np.linalg.matrix_rank(X.reshape(-1, len(free))) < len(free):
    # E.g. eq. 12 on runs of one N1: only B N1^-beta as a whole is determined.
    flat = [k for k in form.columns if k != 'kind' and len(np.unique(cols[k])) == 1]
    raise ConfigError(f'form {form.name!r}: parameters are not identifiable from these runs'
                      + (f' (column {flat[0]!r} takes a single value)' if flat else ''))
  return fixed, X, c, free


def fit(form, cols, fixed=None, delta=HUBER_DELTA, method='BFGS', max_inits=64, seed=0):
  """Fits `form` (a forms.Form) to the runs in `cols`; returns a Fit.

  The initialisation grid is the product of per-parameter values (_GRID); when
  it has more than `max_inits` points a seeded random subset is used.
  """
  fixed, X, c, free = _prepare(form, cols, fixed)
  grid = list(itertools.product(*[_grid_values(p) for p in free]))
  if len(grid) > max_inits:
    pick = np.random.default_rng(seed).choice(len(grid), max_inits, replace=False)
    grid = [grid[i] for i in sorted(pick)]
  f = _objective(X, c, np.log(cols['loss']), delta)
  best = _minimise(f, [np.array(g) for g in grid], method)
  if best is None:
    raise ConfigError(f'form {form.name!r}: no initialisation converged to a finite fit')
  params = dict(fixed, **forms.from_theta(best.x, free))
  return Fit(form.name, {p: params[p] for p in form.params}, fixed, float(best.fun),
             len(cols['loss']), best.x)


def _refit(form, cols, fixed, theta0, delta, method):
  _, X, c, free = _prepare(form, cols, fixed)
  best = _minimise(_objective(X, c, np.log(cols['loss']), delta), [theta0], method)
  if best is None:
    raise ConfigError(f'form {form!r}: a leave-one-out or bootstrap refit did not converge '
                      'to finite parameters')
  return dict(fixed, **forms.from_theta(best.x, free))


def _rows(cols, idx):
  return {k: v[idx] for k, v in cols.items()}


def loo_rms(form, cols, result, delta=HUBER_DELTA, method='BFGS'):
  """Leave-one-out RMS error of the predicted loss (nats), seed 002 Table 1."""
  n = len(cols['loss'])
  if n - 1 <= len(result.theta):
    raise ConfigError(f'form {form.name!r}: leave-one-out needs at least '
                      f'{len(result.theta) + 2} runs, got {n}')
  errors = []
  for i in range(n):
    rest = np.delete(np.arange(n), i)
    params = _refit(form, _rows(cols, rest), result.fixed, result.theta, delta, method)
    errors.append(forms.predict(form, params, _rows(cols, [i]))[0] - cols['loss'][i])
  return float(np.sqrt(np.mean(np.square(errors))))


def bootstrap_draws(form, cols, result, n_boot=100, seed=0, delta=HUBER_DELTA, method='BFGS'):
  """The parameters refitted to `n_boot` resamples of the runs (with
  replacement): a sample of what the data allow (the planner's error bars).

  A resample that cannot determine the parameters (a kind's rows all drawn at
  one size, say) is drawn again, as the percentile bootstrap does; fewer than
  `n_boot` usable resamples in 10 x `n_boot` draws is an error."""
  rng = np.random.default_rng(seed)
  n = len(cols['loss'])
  draws, tries = [], 0
  while len(draws) < n_boot:
    if tries == 10 * n_boot:
      raise ConfigError(f'form {form.name!r}: only {len(draws)} of {tries} bootstrap resamples '
                        f'of the {n} runs determine its parameters; need {n_boot}')
    tries += 1
    try:
      draws.append(_refit(form, _rows(cols, rng.integers(0, n, n)), result.fixed,
                          result.theta, delta, method))
    except ConfigError:
      continue
  return draws


def bootstrap(form, cols, result, n_boot=100, level=0.95, seed=0, delta=HUBER_DELTA,
              method='BFGS', draws=None):
  """Percentile bootstrap interval {param: (lo, hi)} for every free parameter
  (from `draws` of bootstrap_draws when given)."""
  if draws is None:
    draws = bootstrap_draws(form, cols, result, n_boot, seed, delta, method)
  lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
  return {p: tuple(float(q) for q in np.percentile([d[p] for d in draws], [lo, hi]))
          for p in form.params if p not in result.fixed}


def dense_and_moe(cols):
  """The rows of kind dense or moe (all rows of a table without kinds)."""
  if 'kind' not in cols:
    return cols
  return {k: v[np.isin(cols['kind'], ('dense', 'moe'))] for k, v in cols.items()}


def joint_e(cols, **kwargs):
  """E of seed 002 sec. 5: the joint dense + MoE Chinchilla fit's shared E."""
  both = dense_and_moe(cols)
  for kind in ('dense', 'moe'):
    if 'kind' not in both or not (both['kind'] == kind).any():
      raise ConfigError(f'runs table: the joint E fit needs rows of kind {kind!r}')
  return fit(forms.get('chinchilla_joint'), both, **kwargs)


def fit_table(every, names, kind='all', fixed=None, joint_e_fit=False, loo=False, bootstrap_n=0,
              max_inits=64, method='BFGS', seed=0):
  """What `scaling_laws fit` writes: {'kind', 'fits': [one entry per form of
  `names`: params, fixed, objective, n, domain, and loo_rms / ci95 and draws
  when asked], 'best_by_loo', 'joint_e_fit'} for the rows of `kind` of the
  runs table `every`. `joint_e_fit` first fixes E by a joint dense + MoE fit
  of all rows (seed 002 sec. 5); `fixed` holds other parameters. The kind
  and domain (what the runs cover) tell the planner what a fit may predict."""
  fit_forms = [forms.get(name) for name in names]
  fixed = dict(fixed or {})
  known = {p for form in fit_forms for p in form.params}
  unknown = sorted(set(fixed) - known)
  if unknown:
    raise ConfigError(f'--fix {unknown[0]}: not a parameter of form {",".join(names)!r} '
                      f'(parameters: {", ".join(sorted(known))})')
  cols = table.select(every, kind)
  out = {'kind': kind, 'fits': []}
  if joint_e_fit:
    e_fit = joint_e(every, max_inits=max_inits, method=method)
    fixed['E'] = e_fit.params['E']
    out['joint_e_fit'] = {'form': e_fit.form, 'params': e_fit.params, 'n': e_fit.n,
                          'domain': laws.domain(dense_and_moe(every))}
  for name, form in zip(names, fit_forms):
    result = fit(form, cols, fixed={k: v for k, v in fixed.items() if k in form.params},
                 method=method, max_inits=max_inits, seed=seed)
    entry = {'form': name, 'equation': form.equation, 'params': result.params,
             'fixed': result.fixed, 'huber_objective': result.objective, 'n': result.n,
             'domain': laws.domain(cols)}
    if loo:
      entry['loo_rms'] = loo_rms(form, cols, result, method=method)
    if bootstrap_n:
      draws = bootstrap_draws(form, cols, result, n_boot=bootstrap_n, seed=seed, method=method)
      entry['ci95'] = bootstrap(form, cols, result, draws=draws)
      entry['draws'] = draws
    out['fits'].append(entry)
  if loo:
    out['best_by_loo'] = min(out['fits'], key=lambda e: e['loo_rms'])['form']
  return out
