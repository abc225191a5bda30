"""The scaling-law functional forms of seed 002, written for LogSumExp fitting.

Every form is L = sum_k exp(t_k) where each t_k is *linear* in the fitted
vector theta (scale factors A, B, F, E enter as their logs, exponents as
themselves). So log L = logsumexp_k(X_k theta + c_k), the fit of seed 002
section 4.1 ("fitting the logarithm of the loss via the LogSumExp trick"), and
its gradient is sum_k softmax_k X_k: exact and cheap, no autodiff needed.

We use the forms without the "+1" of seed 002 footnote 1 and eqs. 8, 9, 17,
18 (their second lines): the paper itself writes them so, as D and N are 1e6+.
`log` is the natural log throughout (with it Table 2's parameters give
D*(1e9) = 3.0B against the paper's ~4B; see dstar.py).

Variables come from runs-table columns (table.py): dense / MoE-from-scratch
runs put their training tokens in D1 and the dense-equivalent size in N1 (seed
002 Table 2 fits the MoE law "with variable N1 instead of N2").
"""
import dataclasses
from typing import Callable

import numpy as np

from moe_jax.errors import ConfigError


def is_scale(param):
  """A, B, F, E (and A_dense, ...) are positive factors fitted as logs."""
  return param[0] in 'ABFE'


@dataclasses.dataclass(frozen=True)
class Form:
  name: str
  equation: str
  columns: tuple       # runs-table columns it reads besides `loss`; plots use the last as x
  params: tuple        # the paper's parameter names, in the paper's order
  # cols -> [(coefficients {param: per-row array or scalar}, offset)], one per
  # summand; t_k = sum_p coeff[p] * theta[p] + offset.
  terms: Callable = dataclasses.field(repr=False)
  fixed: tuple = ()    # ((param, value), ...) held fixed by the form itself

  @property
  def fixed_params(self):
    return dict(self.fixed)


def _chinchilla(c):
  lnD, lnN = np.log(c['D1']), np.log(c['N1'])
  return [({'A': 1.0, 'alpha': -lnD}, 0.0), ({'B': 1.0, 'beta': -lnN}, 0.0),
          ({'E': 1.0}, 0.0)]


def _d2_power(c):
  return [({'A': 1.0, 'alpha': -np.log(c['D2'])}, 0.0), ({'E': 1.0}, 0.0)]


def _chinchilla_joint(c):
  # Dense and MoE-from-scratch Chinchilla laws sharing one E (seed 002 sec. 5:
  # "we first estimate E from a joint fit of dense and MoE scaling laws").
  # A row's terms of the other kind get offset -inf: exp(-inf) = 0.
  lnD, lnN = np.log(c['D1']), np.log(c['N1'])
  terms = []
  for kind in ('dense', 'moe'):
    on = c['kind'] == kind
    off = np.where(on, 0.0, -np.inf)
    terms += [({f'A_{kind}': on * 1.0, f'alpha_{kind}': -lnD * on}, off),
              ({f'B_{kind}': on * 1.0, f'beta_{kind}': -lnN * on}, off)]
  return terms + [({'E': 1.0}, 0.0)]


def _multiplicative_terms(x1, x2, p):
  """exp(A - p1 x1 - p2 x2 + p3 x1 x2) + exp(E); x1, x2 the logs of the two axes."""
  return [({'A': 1.0, f'{p}1': -x1, f'{p}2': -x2, f'{p}3': x1 * x2}, 0.0), ({'E': 1.0}, 0.0)]


def _additive_terms(x1, x2, p):
  """exp(A - p1 x1) + exp(F - p2 x2 + p3 x1 x2) + exp(E); x1, x2 as above."""
  return [({'A': 1.0, f'{p}1': -x1}, 0.0), ({'F': 1.0, f'{p}2': -x2, f'{p}3': x1 * x2}, 0.0),
          ({'E': 1.0}, 0.0)]


def _law(terms, axis1, axis2, p):
  """A form's terms over the logs of two columns of the fit table."""
  return lambda c: terms(np.log(c[axis1]), np.log(c[axis2]), p)


def _config(c):
  lnP, lnN2 = np.log(c['P']), np.log(c['N2'])
  return [({'A': 1.0, 'beta1': -lnP}, 0.0), ({'F': 1.0, 'beta2': -lnN2}, 0.0),
          ({'E': 1.0}, 0.0)]


_multiplicative = _law(_multiplicative_terms, 'D1', 'D2', 'alpha')
_additive = _law(_additive_terms, 'D1', 'D2', 'alpha')
_config_multiplicative = _law(_multiplicative_terms, 'P', 'N2', 'beta')
_config_additive = _law(_additive_terms, 'P', 'N2', 'beta')


def _joint(c):
  lnD1, lnD2, lnN1 = np.log(c['D1']), np.log(c['D2']), np.log(c['N1'])
  return [({'A': 1.0, 'alpha1': -lnD1, 'alpha2': -lnD2, 'alpha3': lnD1 * lnD2}, 0.0),
          ({'B': 1.0, 'beta': -lnN1}, 0.0),
          ({'E': 1.0}, 0.0)]


_CHINCHILLA_JOINT_PARAMS = ('A_dense', 'B_dense', 'alpha_dense', 'beta_dense',
                            'A_moe', 'B_moe', 'alpha_moe', 'beta_moe', 'E')

def _with_no_interaction(form, param):
  """`form` and its `NAME_no_interaction` variant, `param` held at 0."""
  return form, dataclasses.replace(
      form, name=f'{form.name}_no_interaction',
      equation=f"{form.equation.split(':')[0]} with {param} = 0", fixed=((param, 0.0),))


FORMS = {f.name: f for f in [
    Form('chinchilla', 'seed 002 eq. 3: L = A D^-alpha + B N^-beta + E',
         ('N1', 'D1'), ('A', 'B', 'alpha', 'beta', 'E'), _chinchilla),
    Form('d2_power', 'seed 002 eq. 7: at one D1, L = A D2^-alpha + E',
         ('D2',), ('A', 'alpha', 'E'), _d2_power),
    Form('chinchilla_joint', 'seed 002 sec. 5: eq. 3 for dense and moe rows, one E',
         ('kind', 'N1', 'D1'), _CHINCHILLA_JOINT_PARAMS, _chinchilla_joint),
    *_with_no_interaction(Form(
        'mul', 'seed 002 eq. 8: L = A D1^-alpha1 D2^(-alpha2 + alpha3 log D1) + E',
        ('D1', 'D2'), ('A', 'alpha1', 'alpha2', 'alpha3', 'E'), _multiplicative), 'alpha3'),
    *_with_no_interaction(Form(
        'add', 'seed 002 eq. 9: L = A D1^-alpha1 + F D2^(-alpha2 + alpha3 log D1) + E',
        ('D1', 'D2'), ('A', 'alpha1', 'F', 'alpha2', 'alpha3', 'E'), _additive), 'alpha3'),
    # Eq. 11 is eq. 18 with beta3 = 0 (the paper's best model-configuration law).
    Form('config', 'seed 002 eq. 11: L = A P^-beta1 + F N2^-beta2 + E',
         ('P', 'N2'), ('A', 'beta1', 'F', 'beta2', 'E'), _config),
    *_with_no_interaction(Form(
        'config_mul', 'seed 002 eq. 17: L = A P^-beta1 N2^(-beta2 + beta3 log P) + E',
        ('P', 'N2'), ('A', 'beta1', 'beta2', 'beta3', 'E'), _config_multiplicative), 'beta3'),
    Form('config_add', 'seed 002 eq. 18: L = A P^-beta1 + F N2^(-beta2 + beta3 log P) + E',
         ('P', 'N2'), ('A', 'beta1', 'F', 'beta2', 'beta3', 'E'), _config_additive),
    # Eq. 12 writes the N1 exponent beta2; Table 2 and eq. 14 call it beta.
    Form('joint', 'seed 002 eq. 12: L = A D1^-alpha1 D2^(-alpha2 + alpha3 log D1) '
         '+ B N1^-beta + E', ('N1', 'D1', 'D2'),
         ('A', 'alpha1', 'alpha2', 'alpha3', 'B', 'beta', 'E'), _joint),
]}


def get(name):
  if name not in FORMS:
    raise ConfigError(f'form {name!r} is not one of {sorted(FORMS)}')
  return FORMS[name]


def design(form, cols, fixed):
  """Builds X [K, n, p_free] and offsets c [K, n]: log L = logsumexp_k(X theta + c).

  Parameters in `fixed` (paper units, not logs) move into the offsets, so the
  fit only sees the free ones (returned as the third value, in form order).
  """
  free = [p for p in form.params if p not in fixed]
  n = len(cols['loss'])
  terms = form.terms(cols)
  X = np.zeros((len(terms), n, len(free)))
  c = np.zeros((len(terms), n))
  for k, (coeffs, offset) in enumerate(terms):
    c[k] += offset
    for p, coeff in coeffs.items():
      if p in fixed:
        theta_p = np.log(fixed[p]) if is_scale(p) else fixed[p]
        # 0 * -inf would poison masked rows; those rows are -inf already.
        c[k] += np.where(np.asarray(coeff) == 0, 0.0, np.asarray(coeff) * theta_p)
      else:
        X[k, :, free.index(p)] += coeff
  return X, c, free


def log_predict(X, c, theta):
  """log L per row and its Jacobian d log L / d theta [n, p]."""
  t = np.einsum('knp,p->kn', X, theta) + c
  tmax = t.max(axis=0)
  w = np.exp(t - tmax)
  total = w.sum(axis=0)
  w /= total
  return tmax + np.log(total), np.einsum('kn,knp->np', w, X)


def to_theta(params, names):
  return np.array([np.log(params[p]) if is_scale(p) else params[p] for p in names])


def from_theta(theta, names):
  return {p: float(np.exp(v)) if is_scale(p) else float(v) for p, v in zip(names, theta)}


def predict(form, params, cols):
  """L for each row of `cols`, with `params` a full {name: value} dict."""
  missing = [p for p in form.params if p not in params]
  if missing:
    raise ConfigError(f'form {form.name!r} needs parameters {missing}')
  fixed = {p: params[p] for p in form.params}
  X, c, _ = design(form, dict(cols, loss=np.zeros(len(cols[form.columns[-1]]))), fixed)
  return np.exp(log_predict(X, c, np.zeros(0))[0])
