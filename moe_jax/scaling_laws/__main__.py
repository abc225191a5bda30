"""Scaling laws and costs of upcycling (seeds 000, 002) from the command line.

  python -m moe_jax.scaling_laws fit --runs=runs.csv --form=mul,add --loo
  python -m moe_jax.scaling_laws predict --params=table2_upcycled --at=D1=1e10,D2=1e10,N1=1e9
  python -m moe_jax.scaling_laws dstar --n1=1e8,1e9,7e9 --plot=dstar.png
  python -m moe_jax.scaling_laws optimal --d1=2e12 --c2=1e23
  python -m moe_jax.scaling_laws cost --s_E=2.1 --s_mE=4.1 --T=567000 --tau=378000 --devices=64
  python -m moe_jax.scaling_laws collect /sweep/*/ --out=runs.jsonl

Every subcommand prints JSON on stdout (collect: a JSON-lines runs table);
`--params` takes a preset (table2_dense, table2_moe, table2_upcycled) or a JSON
file written by `fit --out`. Bad input prints `error: <message>` and exits 2.
"""
import argparse
import json
import os
import sys

import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import collect, cost, dstar, fit, forms, optimal, presets, table


def _floats(text):
  try:
    return [float(v) for v in text.split(',') if v]
  except ValueError:
    raise ConfigError(f'expected comma-separated numbers, got {text!r}')


def _assignments(items):
  out = {}
  for item in items or []:
    for part in filter(None, item.split(',')):
      key, eq, value = part.partition('=')
      try:
        out[key] = float(value)
      except ValueError:
        eq = ''
      if not eq:
        raise ConfigError(f'expected NAME=NUMBER, got {part!r}')
  return out


def _load_params(spec, form_name=None):
  """(form, params) from a preset name or a JSON file written by `fit --out`."""
  if spec in presets.PRESETS:
    entry = presets.PRESETS[spec]
  elif os.path.isfile(spec):
    with open(spec) as f:
      entry = json.load(f)
    fits = entry.get('fits', [entry])
    if form_name:
      fits = [e for e in fits if e.get('form') == form_name]
    elif len(fits) > 1:
      best = entry.get('best_by_loo')
      fits = [e for e in fits if e.get('form') == best] if best else fits
    if len(fits) != 1 or 'params' not in fits[0]:
      raise ConfigError(f'--params {spec}: expected one fit with form and params '
                        f'(use --form to pick one)')
    entry = fits[0]
  else:
    raise ConfigError(f'--params {spec!r} is neither a preset {sorted(presets.PRESETS)} '
                      f'nor a file')
  return forms.get(entry['form']), entry['params']


def _plot_path(path, name, many):
  root, ext = os.path.splitext(path)
  return f'{root}_{name}{ext or ".png"}' if many else path


def cmd_fit(args):
  cols = table.select(table.load(args.runs), args.kind)
  fixed = _assignments(args.fix)
  out = {'fits': []}
  if args.joint_e:
    e_fit = fit.joint_e(table.load(args.runs), max_inits=args.max_inits, method=args.method)
    fixed['E'] = e_fit.params['E']
    out['joint_e_fit'] = {'form': e_fit.form, 'params': e_fit.params, 'n': e_fit.n}
  names = args.form.split(',')
  for name in names:
    form = forms.get(name)
    result = fit.fit(form, cols, fixed={k: v for k, v in fixed.items() if k in form.params},
                     method=args.method, max_inits=args.max_inits, seed=args.seed)
    entry = {'form': name, 'equation': form.equation, 'params': result.params,
             'fixed': result.fixed, 'huber_objective': result.objective, 'n': result.n}
    if args.loo:
      entry['loo_rms'] = fit.loo_rms(form, cols, result, method=args.method)
    if args.bootstrap:
      entry['ci95'] = fit.bootstrap(form, cols, result, n_boot=args.bootstrap, seed=args.seed,
                                    method=args.method)
    if args.plot:
      from moe_jax.scaling_laws import plots   # pylint: disable=g-import-not-at-top
      plots.fit_curves(form, result.params, cols, _plot_path(args.plot, name, len(names) > 1))
    out['fits'].append(entry)
  if args.loo:
    out['best_by_loo'] = min(out['fits'], key=lambda e: e['loo_rms'])['form']
  if args.out:
    with open(args.out, 'w') as f:
      json.dump(out, f, indent=1)
  return out


def cmd_predict(args):
  form, params = _load_params(args.params, args.form)
  if args.runs:
    cols = table.load(args.runs)
  else:
    points = [_assignments([a]) for a in args.at or []]
    if not points:
      raise ConfigError('predict needs --runs or at least one --at')
    cols = {k: np.array([p.get(k, np.nan) for p in points]) for k in form.columns}
  cols = dict(cols, loss=np.ones(len(cols[form.columns[-1]])))
  table.check(cols, form.columns, f'form {form.name!r}')
  loss = forms.predict(form, params, cols)
  return {'form': form.name, 'params': params, 'predictions': [
      dict({k: (cols[k][i].item() if hasattr(cols[k][i], 'item') else cols[k][i])
            for k in form.columns}, loss=float(loss[i])) for i in range(len(loss))]}


def cmd_dstar(args):
  moe_form, moe_params = _load_params(args.moe)
  upc_form, upc_params = _load_params(args.upcycled)
  if (moe_form.name, upc_form.name) != ('chinchilla', 'joint'):
    raise ConfigError(f'D* needs a chinchilla MoE law and a joint upcycled law, got '
                      f'{moe_form.name!r} and {upc_form.name!r}')
  n1 = _floats(args.n1)
  rows, first = [], []
  for n in n1:
    roots = dstar.solve(moe_params, upc_params, n, lo=args.lo, hi=args.hi)
    first.append(roots[0] if roots else np.nan)
    rows.append({'N1': n, 'D_star': roots[0] if roots else None, 'crossings': roots,
                 'eq2': float(dstar.eq2(n))})
  out = {'moe': moe_params, 'upcycled': upc_params, 'dstar': rows}
  if np.isfinite(first).sum() >= 3:
    out['eq2_shape_fit'] = dstar.fit_eq2(n1, first)
  if args.plot:
    from moe_jax.scaling_laws import plots   # pylint: disable=g-import-not-at-top
    plots.dstar_curve(n1, first, dstar.eq2(n1), args.plot)
  return out


def cmd_optimal(args):
  form, params = _load_params(args.params)
  if form.name != 'joint':
    raise ConfigError(f'compute-optimal allocation needs a joint (eq. 12) law, got {form.name!r}')
  return dict(optimal.closed_form(params, args.d1, args.c2, args.n2_over_n1),
              D1=args.d1, C2=args.c2)


def cmd_cost(args):
  tau = args.tau if args.tau is not None else (
      args.tau_fraction * args.T if args.tau_fraction is not None else None)
  if tau is None:
    raise ConfigError('cost needs --tau or --tau_fraction')
  out = cost.upcycling_cost(args.s_E, args.s_mE, args.T, tau, args.devices)
  losses = (args.loss_fixed_E, args.loss_upcycled, args.loss_fixed_mE)
  if any(v is not None for v in losses):
    if any(v is None for v in losses):
      raise ConfigError('eta needs --loss_fixed_E, --loss_upcycled and --loss_fixed_mE')
    out['eta'] = cost.efficiency(*losses)
  return out


def cmd_collect(args):
  rows = collect.collect(args.workdirs)
  text = ''.join(json.dumps(r) + '\n' for r in rows)
  if args.out:
    with open(args.out, 'w') as f:
      f.write(text)
  return text


def parser():
  p = argparse.ArgumentParser(prog='python -m moe_jax.scaling_laws', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)

  s = sub.add_parser('fit', help='fit forms to a runs table (Huber on log L, BFGS)')
  s.add_argument('--runs', required=True, help='runs table (.csv or .jsonl)')
  s.add_argument('--form', default='joint', help=f'comma-separated, from {sorted(forms.FORMS)}')
  s.add_argument('--kind', default='all', choices=('all',) + table.KINDS)
  s.add_argument('--fix', action='append', help='NAME=VALUE held fixed (repeatable)')
  s.add_argument('--joint_e', action='store_true',
                 help='fix E from a joint dense + moe fit of the same table (seed 002 sec. 5)')
  s.add_argument('--loo', action='store_true', help='leave-one-out RMS error (nats)')
  s.add_argument('--bootstrap', type=int, default=0, help='resamples for 95%% intervals')
  s.add_argument('--max_inits', type=int, default=64)
  s.add_argument('--method', default='BFGS', choices=('BFGS', 'L-BFGS-B'))
  s.add_argument('--seed', type=int, default=0)
  s.add_argument('--plot', help='PNG path (one per form, suffixed, for several forms)')
  s.add_argument('--out', help='also write the JSON here (for --params)')
  s.set_defaults(run=cmd_fit)

  s = sub.add_parser('predict', help='loss from a fitted or published law')
  s.add_argument('--params', required=True, help='preset name or fit JSON')
  s.add_argument('--form', help='which fit of a multi-form fit JSON')
  s.add_argument('--runs', help='predict for each row of this table')
  s.add_argument('--at', action='append', help='a point, e.g. D1=1e10,D2=1e10,N1=1e9')
  s.set_defaults(run=cmd_predict)

  s = sub.add_parser('dstar', help='D* of seed 002 eq. 13, with eq. 2 beside it')
  s.add_argument('--moe', default='table2_moe', help='MoE-from-scratch chinchilla law')
  s.add_argument('--upcycled', default='table2_upcycled', help='upcycled joint law')
  s.add_argument('--n1', default='1e8,3e8,1e9,3e9,7e9,1e10,7e10', help='dense sizes N1')
  s.add_argument('--lo', type=float, default=1e6, help='search range for D (tokens)')
  s.add_argument('--hi', type=float, default=1e14)
  s.add_argument('--plot', help='PNG path for the D* curve')
  s.set_defaults(run=cmd_dstar)

  s = sub.add_parser('optimal', help='compute-optimal D2 and N1 (seed 002 eq. 14)')
  s.add_argument('--params', default='table2_upcycled', help='joint law: preset or fit JSON')
  s.add_argument('--d1', type=float, required=True, help='dense tokens already spent')
  s.add_argument('--c2', type=float, required=True, help='FLOPs budget of upcycled training')
  s.add_argument('--n2_over_n1', type=float, default=optimal.MIXTRAL_N2_OVER_N1)
  s.set_defaults(run=cmd_optimal)

  s = sub.add_parser('cost', help='expert-upcycling cost (seed 000 eqs. 1-2) and eta (eq. 4)')
  s.add_argument('--s_E', type=float, required=True, help='seconds per step, E experts')
  s.add_argument('--s_mE', type=float, required=True, help='seconds per step, mE experts')
  s.add_argument('--T', type=float, required=True, help='total steps')
  s.add_argument('--tau', type=float, help='transition step')
  s.add_argument('--tau_fraction', type=float, help='transition step as a fraction of T')
  s.add_argument('--devices', type=float, default=1, help='accelerators per step')
  s.add_argument('--loss_fixed_E', type=float)
  s.add_argument('--loss_upcycled', type=float)
  s.add_argument('--loss_fixed_mE', type=float)
  s.set_defaults(run=cmd_cost)

  s = sub.add_parser('collect', help='runs table (JSON lines) from moe_jax workdirs')
  s.add_argument('workdirs', nargs='+')
  s.add_argument('--out', help='also write the table here')
  s.set_defaults(run=cmd_collect)
  return p


def main(argv=None):
  args = parser().parse_args(argv)
  try:
    out = args.run(args)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  sys.stdout.write(out if isinstance(out, str) else json.dumps(out, indent=1) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
