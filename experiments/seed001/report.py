r"""Seed 001's studies from our sweeps: the schedule comparison and the routing analysis.

  python -m experiments.seed001.report --study=schedule --workdir=DIR
  python -m experiments.seed001.report --study=routing --workdir=DIR [--batches=N]

DIR is the launched sweep of experiments/seed001/{schedule,routing}.py.
Writes DIR/seed001_<study>.md (also printed) and DIR/plots/seed001_*.png; the
routing study also writes DIR/plots/routing_<run>.{png,json} (`inspect
--routing` of each MoE's final checkpoint). A run not finished shows as '-'.
"""
import os

from absl import flags
import numpy as np

from experiments import report, runner, sweep
from experiments.seed002 import report as seed002_report
from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.eval import routing

STUDIES = ('schedule', 'routing')
ROUTED = ('up_single', 'scratch')
_fmt = seed002_report.fmt


def _last(run, key):
  return next((r[key] for r in reversed(run['metrics']) if key in r), None)


def _moe_health(run):
  """(load CV averaged over MoE layers, dead experts summed over layers) at
  the last logged step, and the most dead experts any logged step had."""
  last = run['metrics'][-1] if run['metrics'] else {}
  cv = [v for k, v in last.items() if k.startswith('moe/') and k.endswith('/cv')]
  dead = lambda row: sum(v for k, v in row.items() if k.startswith('moe/') and k.endswith('/dead'))
  return (float(np.mean(cv)) if cv else None, dead(last) if cv else None,
          max((dead(r) for r in run['metrics']), default=None))


def schedule_report(sweep_dir, runs, _):
  body = []
  for name in ('up_single', 'up_three_phase'):
    run = runs.get(name)
    if run is None or not run['metrics']:
      body.append([name, '-', '-', '-', '-'])
      continue
    cv, dead, most = _moe_health(run)
    body.append([name, _fmt(_last(run, 'val_loss')), _fmt(cv), dead, most])
  dense = _last(runs['dense'], 'val_loss') if 'dense' in runs else None
  path = seed002_report.curves_plot(
      runs, ['up_single', 'up_three_phase'], {},
      os.path.join(sweep_dir, 'plots', 'seed001_schedule.png'),
      'upcycled training: one phase vs seed 001\'s three phases', cv=True)
  return [(f'One phase vs three phases after dense -> MoE (the dense source ends at val loss '
           f'{_fmt(dense)})',
           report.markdown(['run', 'final val loss', 'load CV at the end (mean over layers)',
                            'dead experts at the end', 'most dead experts at a logged step'],
                           body))], [path]


def routing_report(sweep_dir, runs, batches):
  summary, details, pngs = [], [], []
  for name in ROUTED:
    if runner.status(os.path.join(sweep_dir, name)).get('state') != 'done':
      summary.append([name, '-', '-', '-'])
      continue
    plot = os.path.join(sweep_dir, 'plots', f'routing_{name}.png')
    text, path, result = routing.inspect_checkpoint(os.path.join(sweep_dir, name), batches, plot)
    cv, dead, _ = _moe_health(runs[name])
    for layer, r in result['layers'].items():
      top = {g: max(r['share'][g]) for g in routing.GROUPS if r['share'][g] is not None}
      summary.append([name, layer, f'{r["mi_bits"]:.3f}',
                      ', '.join(f'{g} {100 * s:.0f}%' for g, s in top.items())])
    details.append((f'{name}: routing by token type and load over training', text))
    pngs.append(path)
  return [('Routing: I(char class; expert) and each group\'s most used expert (share of its '
           'top-k assignments; 12.5% = uniform over 8 experts)',
           report.markdown(['run', 'layer', 'MI (bits)', 'top expert share by group'],
                           summary))] + details, pngs


def write(study, sweep_dir, batches=None):
  """Writes DIR/seed001_<study>.md and its plots; returns the markdown."""
  if study not in STUDIES:
    raise ConfigError(f'--study={study!r} is not one of {STUDIES}')
  sweep.read(sweep_dir)   # a launched sweep, or a one-line error
  runs = {r['name']: r for r in report.load_runs(sweep_dir)}
  os.makedirs(os.path.join(sweep_dir, 'plots'), exist_ok=True)
  sections, pngs = (schedule_report if study == 'schedule' else routing_report)(
      sweep_dir, runs, batches)
  return seed002_report.save(sweep_dir, f'seed001_{study}', f'seed 001, {study}', sections, pngs)


def main(argv):
  del argv
  f = flags.FLAGS
  print(cli.run_reporting_errors(write, f.study, os.path.abspath(f.workdir), f.batches))


if __name__ == '__main__':
  flags.DEFINE_enum('study', None, list(STUDIES), 'Which study the sweep is.', required=True)
  flags.DEFINE_string('workdir', None, 'The launched sweep directory.', required=True)
  flags.DEFINE_integer('batches', None, 'Validation batches to route (default: the config\'s).')
  cli.run_app(main)
