"""Seed 002's fits on a runs table of our own: Table 1's comparison of dataset
forms, Table 2's joint laws and D* (eq. 13) at our sizes.

Everything goes through moe_jax.scaling_laws (what `python -m
moe_jax.scaling_laws fit` runs); this module only picks the rows and the order
of seed 002 sec. 5: E from a joint fit of the dense and MoE-from-scratch runs
(one E for both, eq. 3 each), then every law refitted with that E fixed. A fit
the rows cannot support (too few runs, a column with one value) is recorded
with its reason instead of a number.
"""
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import dstar, fit, forms, presets, table

DATASET_FORMS = ('mul', 'mul_no_interaction', 'add', 'add_no_interaction')
# Table 1, the (n_expert, n_TopK) = (8, 2) column: leave-one-out RMS (nats).
TABLE1_8X2 = {'mul': 0.0031, 'mul_no_interaction': 0.0095, 'add': 0.0093,
              'add_no_interaction': 0.0113}
TABLE2 = {kind: presets.PRESETS[f'table2_{kind}']['params'] for kind in ('dense', 'moe',
                                                                        'upcycled')}
LAWS = (('dense', 'chinchilla'), ('moe', 'chinchilla'), ('upcycled', 'joint'))
FLOORS = (0.0, 0.5, 1.0)   # nats: plausible floors E below our losses (1.4 to 3.4)


def rows(cols, kind=None, n1=None):
  """The rows of one kind (and one dense size N1)."""
  keep = np.ones(len(cols['loss']), bool)
  if kind is not None:
    keep &= cols['kind'] == kind
  if n1 is not None:
    keep &= cols['N1'] == n1
  return {k: v[keep] for k, v in cols.items()}


def _fit(form_name, cols, fixed=None, loo=True, n_boot=0, seed=0):
  """dict(params, loo_rms, ci95, n) of one fit, or dict(error=reason)."""
  form = forms.get(form_name)
  try:
    result = fit.fit(form, cols, fixed=fixed, seed=seed)
    out = dict(params=result.params, n=result.n, loo_rms=None, ci95={})
    if loo:
      out['loo_rms'] = fit.loo_rms(form, cols, result)
    if n_boot:
      out['draws'] = fit.bootstrap_draws(form, cols, result, n_boot=n_boot, seed=seed)
      out['ci95'] = fit.bootstrap(form, cols, result, draws=out['draws'])
  except ConfigError as e:
    return dict(error=str(e), n=len(cols['loss']))
  return out


def dataset_forms(cols, loo=True):
  """{N1: {form: fit}}: eqs. 8 and 9, with and without the interaction term,
  on the upcycled runs of each dense size (seed 002 Table 1)."""
  up = rows(cols, 'upcycled')
  return {float(n1): {name: _fit(name, rows(up, n1=n1), loo=loo) for name in DATASET_FORMS}
          for n1 in np.unique(up['N1'])}


def joint_laws(cols, n_boot=200, seed=0, loo=True):
  """Table 2 of our runs: {'E': fit of the shared E, 'dense' | 'moe' |
  'upcycled': fit with that E fixed} (eq. 3, eq. 3, eq. 12)."""
  both = {k: v[np.isin(cols['kind'], ('dense', 'moe'))] for k, v in cols.items()}
  out = {'E': _fit('chinchilla_joint', both, loo=False, n_boot=n_boot, seed=seed)}
  if 'error' in out['E']:
    return out
  e = out['E']['params']['E']
  for kind, form in LAWS:
    out[kind] = _fit(form, rows(cols, kind), fixed={'E': e}, loo=loo, n_boot=n_boot,
                     seed=seed)
  return out


def dstar_at(laws, n1s, lo=1e3, hi=1e13):
  """{N1: eq. 13's crossings where the MoE from scratch overtakes upcycling,
  the first being D*} from our MoE and upcycled laws ([] when there is none
  in [lo, hi] tokens; None when a law is missing)."""
  if any('params' not in laws.get(k, {}) for k in ('moe', 'upcycled')):
    return {float(n): None for n in n1s}
  return {float(n): dstar.solve(laws['moe']['params'], laws['upcycled']['params'], n, lo, hi,
                                falling=True)
          for n in n1s}


def dstar_bootstrap(laws, n1s, lo=1e3, hi=1e13, level=0.95):
  """What the fits' bootstrap draws say about D*: the i-th MoE draw paired
  with the i-th upcycled draw (resamples of disjoint runs), eq. 13 solved per
  pair. dict(n (pairs), by_n1={N1: dict(lo, hi (percentile interval over the
  pairs that cross), crossed (their share))}, falls (share of the pairs
  crossing at the smallest and the largest N1 where D* is lower at the
  largest), n_both); None without draws."""
  moe, up = (laws.get(k, {}).get('draws') for k in ('moe', 'upcycled'))
  if not moe or not up:
    return None
  n1s = [float(n) for n in n1s]
  per_pair = [[(dstar.solve(m, u, n, lo, hi, falling=True) or [None])[0] for n in n1s]
              for m, u in zip(moe, up)]
  by_n1 = {}
  for j, n in enumerate(n1s):
    ds = [d[j] for d in per_pair if d[j] is not None]
    q = np.percentile(ds, [50 * (1 - level), 50 * (1 + level)]) if ds else (None, None)
    by_n1[n] = dict(lo=None if q[0] is None else float(q[0]),
                    hi=None if q[1] is None else float(q[1]), crossed=len(ds) / len(per_pair))
  both = [d for d in per_pair if d[0] is not None and d[-1] is not None]
  return dict(n=len(per_pair), by_n1=by_n1, n_both=len(both),
              falls=float(np.mean([d[-1] < d[0] for d in both])) if both else None)


def dstar_floors(cols, n1s, floors=FLOORS):
  """{E: dstar_at} with the MoE and upcycled laws refitted with E held at each
  floor: how far D* leans on the floor (point estimates)."""
  out = {}
  for e in floors:
    laws = {kind: _fit(form, rows(cols, kind), fixed={'E': max(e, 1e-12)}, loo=False)
            for kind, form in LAWS if kind != 'dense'}
    out[float(e)] = dstar_at(laws, n1s)
  return out


def diagonal(cols):
  """[(N1, D, MoE-from-scratch loss at D, upcycled loss at D1 = D2 = D)]:
  eq. 13's two sides wherever the runs hold both, no law in between."""
  moe, up = rows(cols, 'moe'), rows(cols, 'upcycled')
  out = []
  for n1, d1, d2, loss in zip(up['N1'], up['D1'], up['D2'], up['loss']):
    scratch = moe['loss'][(moe['N1'] == n1) & (moe['D1'] == d1)]
    if d1 == d2 and len(scratch):
      out.append((float(n1), float(d1), float(scratch[0]), float(loss)))
  return sorted(out)


def exponent_at(params, d1):
  """The upcycled law's effective D2 exponent alpha2 - alpha3 log D1 (sec. 4.1.1)."""
  return params['alpha2'] - params['alpha3'] * np.log(d1)


KEY = ('kind', 'N1', 'D1', 'D2')   # what makes two rows the same run


def run_key(cols, i):
  return (str(cols['kind'][i]),) + tuple(float(cols[k][i]) for k in KEY[1:])


def union(tables):
  """(cols, merged): the rows of `tables` (column dicts) as one table, one
  row per (kind, N1, D1, D2) with the mean loss of the rows that share it,
  and [dict(kind, N1, D1, D2, losses)] of those merged (a run of one table
  rerun in another)."""
  groups = {}
  for part in tables:
    for i in range(len(part['loss'])):
      groups.setdefault(run_key(part, i), []).append(float(part['loss'][i]))
  cols = table.from_rows([dict(zip(KEY, k), loss=float(np.mean(v))) for k, v in groups.items()])
  return cols, [dict(zip(KEY, k), losses=v) for k, v in groups.items() if len(v) > 1]


def fit_on(train):
  """({kind: params} of Table 2's laws, {N1: {form: params}} of Table 1's
  forms) fitted on `train` as the docs fit them (no leave-one-out); a fit
  the rows cannot support is left out."""
  laws = joint_laws(train, n_boot=0, loo=False)
  by_size = dataset_forms(train, loo=False)
  return ({k: laws[k]['params'] for k, _ in LAWS if 'params' in laws.get(k, {})},
          {n1: {f: v['params'] for f, v in per.items() if 'params' in v}
           for n1, per in by_size.items()})


def extrapolate(train, test, laws, by_size):
  """Seed 002 Fig. 6's test: each row of `test` that `train` does not hold,
  against the Table 2 law of its kind (`laws`, fitted on `train`) and, for
  an upcycled row, each Table 1 form fitted at its N1 (`by_size`).

  dict(rows=[dict(kind, N1, D1, D2, loss, beyond, predicted={law: loss})],
  summary={law: dict(n, rms, max)}), errors predicted - measured in nats,
  max the largest |error|, `beyond` the largest of D1 / (the longest D1 of
  its kind in `train`) and, upcycled, D2 / (the longest D2)."""
  seen = {run_key(train, i) for i in range(len(train['loss']))}
  out, errors = [], {}
  for i in range(len(test['loss'])):
    kind, n1, d1, d2 = key = run_key(test, i)
    if key in seen:
      continue
    ran = rows(train, kind)
    at = {'N1': np.array([n1]), 'D1': np.array([d1]), 'D2': np.array([d2])}
    axes = ('D1', 'D2') if kind == 'upcycled' else ('D1',)
    beyond = float(max(at[k][0] / ran[k].max() for k in axes)) if len(ran['loss']) else None
    candidates = {kind: (dict(LAWS)[kind], laws.get(kind))}
    if kind == 'upcycled':
      candidates.update({f: (f, p) for f, p in by_size.get(n1, {}).items()})
    predicted = {law: float(forms.predict(forms.get(form), p, at)[0])
                 for law, (form, p) in candidates.items() if p is not None}
    loss = float(test['loss'][i])
    for law, p in predicted.items():
      errors.setdefault(law, []).append(p - loss)
    out.append(dict(zip(KEY, key), loss=loss, beyond=beyond, predicted=predicted))
  summary = {law: dict(n=len(e), rms=float(np.sqrt(np.mean(np.square(e)))),
                       max=float(np.max(np.abs(e)))) for law, e in errors.items()}
  return dict(rows=sorted(out, key=lambda r: tuple(r[k] for k in KEY)), summary=summary)
