"""The laws the planner predicts with: a fitted form, the runs it was fitted on
(its domain), and its uncertainty.

Roles (seed 002 sec. 5):
  dense     eq. 3 in (N1, D1): a dense model trained on D1 tokens
  moe       eq. 3 in (N1, D1): a MoE from scratch, N1 its dense counterpart
  upcycled  eq. 12 in (N1, D1, D2), or eq. 8 / 9 in (D1, D2) at one N1: D1
            tokens before the growth, D2 after it
The default set is seed 002 Table 2 (`default()`), with the domain its runs
cover: N1 from 14.75M to 1.09B (Table 3); D up to 7.4e10 tokens (the longest
run, Table 5: 70,400 iterations of 1,024 x 1,024 tokens) and, as the paper
tabulates no smallest budget, down to 1e9 (its fits and ablations sit at 2B+:
sec. 4.2's 2.3B, Fig. 8's 2B); 8 experts, top-2, upcycled from dense. Only
the upcycled law has a published error: 0.015 nats validation RMS (sec. 5).

`load(path)` reads a `scaling_laws fit --out` file instead: its form decides
the role (chinchilla_joint gives dense and moe, chinchilla the `--kind` it was
fitted with, joint / mul / add upcycled), its rows the domain, and its
uncertainty is the spread of its bootstrap refits (`--bootstrap`), else its
leave-one-out RMS (`--loo`).
"""
import dataclasses
import json
import os

import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import forms, presets

ROLES = ('dense', 'moe', 'upcycled')
FAR = 10.0    # a point this many times outside the data is not a prediction
_UPCYCLED = ('joint', 'mul', 'mul_no_interaction', 'add', 'add_no_interaction')
_RANGES = ('N1', 'D1', 'D2')
_SHAPES = ('n_expert', 'top_k', 'source_experts')

TABLE2_DOMAIN = {'N1': (14_751_680.0, 1_085_859_424.0), 'D1': (1e9, 7.4e10),
                 'D2': (1e9, 7.4e10), 'n_expert': [8], 'top_k': [2], 'source_experts': [0]}


@dataclasses.dataclass(frozen=True)
class Law:
  role: str
  form: str
  params: dict
  domain: dict                 # {'N1': (lo, hi), ..., 'n_expert': [values], ...}
  rms: float | None = None     # typical error (nats), when no bootstrap draws
  draws: tuple = ()            # bootstrap parameter sets
  origin: str = ''

  def predict(self, point):
    """(loss, lo, hi) at `point` ({'N1', 'D1', 'D2'}: those the form reads);
    lo and hi are the 2.5 / 97.5 percentiles over bootstrap draws, or loss
    -+ rms, or None."""
    form = forms.get(self.form)
    cols = {k: np.array([float(point[k])]) for k in form.columns}
    loss = float(forms.predict(form, self.params, cols)[0])
    if self.draws:
      values = [float(forms.predict(form, d, cols)[0]) for d in self.draws]
      lo, hi = np.percentile(values, [2.5, 97.5])
      return loss, float(lo), float(hi)
    if self.rms is not None:
      return loss, loss - self.rms, loss + self.rms
    return loss, None, None

  def flags(self, point, shape=None):
    """[(far, text)] for each way `point` (and the model `shape`: n_expert,
    top_k, source_experts) lies outside the runs the law was fitted on; `far`
    when a size or token count is more than FAR times outside."""
    out = []
    for key in _RANGES:
      if key not in point or key not in self.domain:
        continue
      (lo, hi), x = self.domain[key], float(point[key])
      if lo <= x <= hi:
        continue
      factor = lo / x if x < lo else x / hi
      out.append((factor > FAR, f'{key}={x:.3g} is {factor:.3g}x {"below" if x < lo else "above"}'
                                f' the {self.role} law\'s data [{lo:.3g}, {hi:.3g}]'))
    for key, value in (shape or {}).items():
      if key in self.domain and value not in self.domain[key]:
        out.append((False, f'{key}={value}: the {self.role} law was fitted on {key} in '
                           f'{self.domain[key]}'))
    return out


def default():
  """Seed 002 Table 2 (see the module docstring)."""
  def law(role, preset, rms=None):
    keep = ('N1', 'D1', 'D2', 'n_expert', 'top_k', 'source_experts') if role == 'upcycled' \
        else ('N1', 'D1') + (('n_expert', 'top_k') if role == 'moe' else ())
    entry = presets.PRESETS[preset]
    return Law(role, entry['form'], dict(entry['params']),
               {k: TABLE2_DOMAIN[k] for k in keep}, rms, origin=f'seed 002 Table 2 ({preset})')
  return {'dense': law('dense', 'table2_dense'), 'moe': law('moe', 'table2_moe'),
          'upcycled': law('upcycled', 'table2_upcycled', rms=0.015)}


def domain(cols):
  """What a runs table covers: (min, max) of N1, D1, D2 and the values of
  n_expert, top_k, source_experts (the columns it has)."""
  out = {}
  for key in _RANGES:
    v = np.asarray(cols.get(key, []), dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size:
      out[key] = (float(v.min()), float(v.max()))
  for key in _SHAPES:
    v = np.asarray(cols.get(key, []), dtype=float)
    v = v[np.isfinite(v)]
    if v.size:
      out[key] = sorted({int(x) for x in v})
  return out


def _split_joint(entry, path):
  """chinchilla_joint -> dense and moe chinchilla laws sharing E."""
  p, where = entry['params'], f'{path} ({entry["form"]})'
  return [Law(kind, 'chinchilla', {**{k: p[f'{k}_{kind}'] for k in ('A', 'B', 'alpha', 'beta')},
                                   'E': p['E']}, _domain(entry, kind), entry.get('loo_rms'),
              origin=where) for kind in ('dense', 'moe')]


def _domain(entry, role):
  d = {k: (tuple(v) if k in _RANGES else list(v)) for k, v in entry.get('domain', {}).items()}
  if role != 'upcycled':
    d.pop('D2', None)
    d.pop('source_experts', None)
  return d


def load(path):
  """{role: Law} from a `scaling_laws fit --out` file."""
  if not os.path.isfile(path):
    raise ConfigError(f'--law={path}: no such file')
  try:
    with open(path) as f:
      record = json.load(f)
  except (OSError, ValueError) as e:
    raise ConfigError(f'--law={path}: not a JSON file ({e})') from None
  fits = record.get('fits') if isinstance(record, dict) else None
  if not isinstance(fits, list) or not fits or not all(isinstance(e, dict) for e in fits):
    raise ConfigError(f'--law={path}: expected "fits", a list of objects (the output of '
                      'scaling_laws fit --out)')
  best = record.get('best_by_loo')
  if best:
    fits = [e for e in fits if e.get('form') == best]
  if len(fits) != 1:
    raise ConfigError(f'--law={path}: holds {len(fits)} fits; fit one form, or several '
                      'with --loo (the best is used)')
  entries = fits + ([record['joint_e_fit']] if 'joint_e_fit' in record else [])
  out = {}
  for entry in entries:
    form, params = entry.get('form'), entry.get('params')
    if form not in forms.FORMS or not isinstance(params, dict):
      raise ConfigError(f'--law={path}: a fit without a known "form" and "params"')
    bad = [p for p in forms.get(form).params if not isinstance(params.get(p), (int, float))
           or not np.isfinite(params[p])]
    if bad:
      raise ConfigError(f'--law={path}: parameter {bad[0]!r} of form {form!r} is missing or '
                        'not a finite number')
    where = f'{path} ({form})'
    if form == 'chinchilla_joint':
      out.update({law.role: law for law in _split_joint(entry, path)})
      continue
    if form in _UPCYCLED:
      role = 'upcycled'
    elif form == 'chinchilla' and entry.get('kind', record.get('kind')) in ('dense', 'moe'):
      role = entry.get('kind', record.get('kind'))
    elif form == 'chinchilla':
      raise ConfigError(f'--law={path}: a chinchilla fit must say its kind; fit it with '
                        '--kind=dense or --kind=moe')
    else:
      raise ConfigError(f'--law={path}: form {form!r} has no token dependence; the planner '
                        f'needs dense, moe or upcycled laws ({", ".join(_UPCYCLED)}, '
                        'chinchilla, chinchilla_joint)')
    out[role] = Law(role, form, params, _domain(entry, role), entry.get('loo_rms'),
                    tuple(entry.get('draws', ())), origin=where)
  return out
