"""Scaling laws and costs of upcycling (seeds 000, 002) from the command line.

  python -m moe_jax.scaling_laws fit --runs=runs.csv --form=mul,add --loo
  python -m moe_jax.scaling_laws predict --params=table2_upcycled --at=D1=1e10,D2=1e10,N1=1e9
  python -m moe_jax.scaling_laws dstar --n1=1e8,1e9,7e9 --plot=dstar.png
  python -m moe_jax.scaling_laws optimal --d1=2e12 --c2=1e23
  python -m moe_jax.scaling_laws cost --s_E=2.1 --s_mE=4.1 --T=567000 --tau=378000 --devices=64
  python -m moe_jax.scaling_laws collect /sweep/*/ --out=runs.jsonl

Every subcommand prints JSON on stdout (collect: a JSON-lines runs table);
`--params` takes a preset (table2_dense, table2_moe, table2_upcycled) or a JSON
file written by `fit --out`. Bad input (a flag, a number that is not finite or
out of range, a table or fit file that does not read) prints `error:
<message>` on one line and exits 2, before any output file is written; output
files are written atomically, and are new files: an existing one is replaced
only with --overwrite; an input (--runs, a --params file, a WORKDIR), another
output of the same command or a path inside a workdir never
(moe_jax/containment.py).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

from moe_jax import atomic, containment
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import (collect, cost, dstar, fit, forms, optimal, plots, presets,
                                  table)
from moe_jax.json_file import read_json


class _Parser(argparse.ArgumentParser):
  """argparse with its errors on one line (no usage text); subparsers inherit it."""

  def error(self, message):
    print(f'error: {self.prog.split()[-1]}: {message}', file=sys.stderr)
    sys.exit(2)


def _number(text, low=None, strict=False, high=None):
  """`text` as a finite float within [low, high] (low excluded if strict)."""
  try:
    value = float(text)
  except ValueError:
    raise ConfigError(f'{text!r} is not a number') from None
  if not math.isfinite(value):
    raise ConfigError(f'{text!r} is not a finite number')
  if low is not None and (value < low or (strict and value == low)):
    raise ConfigError(f'{text!r} must be {">" if strict else ">="} {low:g}')
  if high is not None and value > high:
    raise ConfigError(f'{text!r} must be <= {high:g}')
  return value


def _flag_type(integer=False, **bounds):
  """An argparse type: a finite number within `bounds` (see _number)."""
  def parse(text):
    try:
      value = _number(text, **bounds)
    except ConfigError as e:
      raise argparse.ArgumentTypeError(str(e)) from None
    if integer and value != int(value):
      raise argparse.ArgumentTypeError(f'{text!r} is not an integer')
    return int(value) if integer else value
  return parse


_POSITIVE = _flag_type(low=0, strict=True)
_NON_NEGATIVE = _flag_type(low=0)
_FRACTION = _flag_type(low=0, high=1)
_COUNT = _flag_type(integer=True, low=0)
_POSITIVE_COUNT = _flag_type(integer=True, low=1)


def _floats(text, flag):
  """Comma-separated finite positive numbers (at least one)."""
  values = text.split(',')
  if not text.strip() or not all(v.strip() for v in values):
    raise ConfigError(f'{flag}: expected comma-separated numbers, got {text!r}')
  try:
    return [_number(v, low=0, strict=True) for v in values]
  except ConfigError as e:
    raise ConfigError(f'{flag}: {e}') from None


def _assignments(items, flag):
  """{NAME: finite number} from NAME=NUMBER items (comma-separated, repeatable)."""
  out = {}
  for item in items or []:
    for part in filter(None, item.split(',')):
      key, eq, value = part.partition('=')
      if not eq or not key:
        raise ConfigError(f'{flag}: expected NAME=NUMBER, got {part!r}')
      if key in out:
        raise ConfigError(f'{flag}: {key} is given twice')
      try:
        out[key] = _number(value)
      except ConfigError as e:
        raise ConfigError(f'{flag}: {key}: {e}') from None
  return out


def _check_outputs(args, outputs, sources=()):
  """Refuses output paths that cannot be written, before anything is computed:
  the shared rule (moe_jax/containment.py: each a new file unless --overwrite,
  never an input of the command, never two on one path, never inside a
  workdir), then each path's format. `outputs`: (path, flag, formats)."""
  for path, flag, _ in outputs:
    if path is not None and not path:
      raise ConfigError(f'{flag}={path!r} is not a file path')
  containment.output_files([(path, flag) for path, flag, _ in outputs], args.overwrite, sources)
  for path, flag, formats in outputs:
    ext = os.path.splitext(path or '')[1][1:].lower()
    if formats and ext and ext not in formats:
      raise ConfigError(f'{flag}={path}: .{ext} is not one of the formats {list(formats)}')


def _load_params(spec, form_name=None):
  """(form, params) from a preset name or a JSON file written by `fit --out`."""
  if spec in presets.PRESETS:
    entry = presets.PRESETS[spec]
  elif os.path.isfile(spec):
    entry = read_json(spec)
    fits = entry.get('fits', [entry])
    if not isinstance(fits, list) or not all(isinstance(e, dict) for e in fits):
      raise ConfigError(f'--params {spec}: "fits" is not a list of objects')
    if form_name:
      fits = [e for e in fits if e.get('form') == form_name]
    elif len(fits) > 1:
      best = entry.get('best_by_loo')
      fits = [e for e in fits if e.get('form') == best] if best else fits
    if len(fits) != 1 or 'params' not in fits[0] or 'form' not in fits[0]:
      raise ConfigError(f'--params {spec}: expected one fit with form and params '
                        f'(use --form to pick one)')
    entry = fits[0]
  else:
    raise ConfigError(f'--params {spec!r} is neither a preset {sorted(presets.PRESETS)} '
                      f'nor a file')
  form, params = forms.get(entry['form']), entry['params']
  bad = [p for p in form.params if not isinstance(params, dict) or not isinstance(
      params.get(p), (int, float)) or not math.isfinite(params[p])]
  if bad:
    raise ConfigError(f'--params {spec}: parameter {bad[0]!r} of form {form.name!r} is missing '
                      'or not a finite number')
  return form, params


def _plot_path(path, name, many):
  root, ext = os.path.splitext(path)
  return f'{root}_{name}{ext or ".png"}' if many else path


def cmd_fit(args):
  names = args.form.split(',')
  for name in names:
    forms.get(name)   # an unknown form before the table is read
  _check_outputs(args, [(args.out, '--out', None)] + [
      (args.plot and _plot_path(args.plot, name, len(names) > 1), '--plot', plots.FORMATS)
      for name in names], sources=[(args.runs, '--runs', 'runs table')])
  every = table.load(args.runs)
  out = fit.fit_table(every, names, args.kind, _assignments(args.fix, '--fix'), args.joint_e,
                      args.loo, args.bootstrap, args.max_inits, args.method, args.seed)
  if args.plot:
    cols = table.select(every, args.kind)
    for entry in out['fits']:
      plots.fit_curves(forms.get(entry['form']), entry['params'], cols,
                       _plot_path(args.plot, entry['form'], len(names) > 1))
  if args.out:
    atomic.write_text(args.out, json.dumps(out, indent=1))
  return out


def cmd_predict(args):
  form, params = _load_params(args.params, args.form)
  if args.runs:
    cols = table.load(args.runs)
  else:
    points = [_assignments([a], '--at') for a in args.at or []]
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
  _check_outputs(args, [(args.plot, '--plot', plots.FORMATS)], sources=[
      (spec, flag, 'fit JSON') for spec, flag in ((args.moe, '--moe'), (args.upcycled, '--upcycled'))
      if os.path.isfile(spec)])
  if args.lo >= args.hi:
    raise ConfigError(f'--lo={args.lo:g} must be below --hi={args.hi:g}')
  n1 = _floats(args.n1, '--n1')
  rows, first = [], []
  for n in n1:
    roots = dstar.solve(moe_params, upc_params, n, lo=args.lo, hi=args.hi)
    falls = dstar.solve(moe_params, upc_params, n, lo=args.lo, hi=args.hi, falling=True)
    first.append(falls[0] if falls else np.nan)
    rows.append({'N1': n, 'D_star': falls[0] if falls else None, 'crossings': roots,
                 'eq2': float(dstar.eq2(n))})
  out = {'moe': moe_params, 'upcycled': upc_params, 'dstar': rows}
  if np.isfinite(first).sum() >= 3:
    out['eq2_shape_fit'] = dstar.fit_eq2(n1, first)
  if args.plot:
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
  if tau > args.T:
    raise ConfigError(f'the transition step tau={tau:g} exceeds --T={args.T:g}')
  out = cost.upcycling_cost(args.s_E, args.s_mE, args.T, tau, args.devices)
  losses = (args.loss_fixed_E, args.loss_upcycled, args.loss_fixed_mE)
  if any(v is not None for v in losses):
    if any(v is None for v in losses):
      raise ConfigError('eta needs --loss_fixed_E, --loss_upcycled and --loss_fixed_mE')
    out['eta'] = cost.efficiency(*losses)
  return out


def cmd_collect(args):
  _check_outputs(args, [(args.out, '--out', None)],   # collecting only reads the workdirs
                 sources=[(workdir, 'a WORKDIR', 'workdir') for workdir in args.workdirs])
  rows = collect.collect(args.workdirs)
  text = ''.join(json.dumps(r) + '\n' for r in rows)
  if args.out:
    atomic.write_text(args.out, text)
  return text



def parser():
  p = _Parser(prog='python -m moe_jax.scaling_laws', description=__doc__,
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
  s.add_argument('--bootstrap', type=_COUNT, default=0, help='resamples for 95%% intervals')
  s.add_argument('--max_inits', type=_POSITIVE_COUNT, default=64)
  s.add_argument('--method', default='BFGS', choices=('BFGS', 'L-BFGS-B'))
  s.add_argument('--seed', type=_COUNT, default=0)
  s.add_argument('--plot', help='PNG path (one per form, suffixed, for several forms)')
  s.add_argument('--out', help='also write the JSON here (for --params)')
  s.add_argument('--overwrite', action='store_true', help='replace existing outputs')
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
  s.add_argument('--lo', type=_POSITIVE, default=1e6, help='search range for D (tokens)')
  s.add_argument('--hi', type=_POSITIVE, default=1e14)
  s.add_argument('--plot', help='PNG path for the D* curve')
  s.add_argument('--overwrite', action='store_true', help='replace existing outputs')
  s.set_defaults(run=cmd_dstar)

  s = sub.add_parser('optimal', help='compute-optimal D2 and N1 (seed 002 eq. 14)')
  s.add_argument('--params', default='table2_upcycled', help='joint law: preset or fit JSON')
  s.add_argument('--d1', type=_POSITIVE, required=True, help='dense tokens already spent')
  s.add_argument('--c2', type=_POSITIVE, required=True, help='FLOPs budget of upcycled training')
  s.add_argument('--n2_over_n1', type=_POSITIVE, default=optimal.MIXTRAL_N2_OVER_N1)
  s.set_defaults(run=cmd_optimal)

  s = sub.add_parser('cost', help='expert-upcycling cost (seed 000 eqs. 1-2) and eta (eq. 4)')
  s.add_argument('--s_E', type=_POSITIVE, required=True, help='seconds per step, E experts')
  s.add_argument('--s_mE', type=_POSITIVE, required=True, help='seconds per step, mE experts')
  s.add_argument('--T', type=_POSITIVE, required=True, help='total steps')
  s.add_argument('--tau', type=_NON_NEGATIVE, help='transition step')
  s.add_argument('--tau_fraction', type=_FRACTION, help='transition step as a fraction of T')
  s.add_argument('--devices', type=_POSITIVE, default=1, help='accelerators per step')
  s.add_argument('--loss_fixed_E', type=_POSITIVE)
  s.add_argument('--loss_upcycled', type=_POSITIVE)
  s.add_argument('--loss_fixed_mE', type=_POSITIVE)
  s.set_defaults(run=cmd_cost)

  s = sub.add_parser('collect', help='runs table (JSON lines) from moe_jax workdirs')
  s.add_argument('workdirs', nargs='+')
  s.add_argument('--out', help='also write the table here')
  s.add_argument('--overwrite', action='store_true', help='replace existing outputs')
  s.set_defaults(run=cmd_collect)
  return p


def main(argv=None):
  args = parser().parse_args(argv)
  try:
    out = args.run(args)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  except OSError as e:   # a disk full or gone read-only while an output was written
    outputs = [p for p in (getattr(args, 'out', None), getattr(args, 'plot', None)) if p]
    print(f'error: {e.filename or " or ".join(outputs) or "an output"}: cannot write '
          f'({e.strerror or e})', file=sys.stderr)
    return 1
  sys.stdout.write(out if isinstance(out, str) else json.dumps(out, indent=1) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
