r"""Seed 001's studies from our sweeps: the schedule comparison and the routing analysis.

  python -m experiments.seed001.report --study=schedule --workdir=DIR
  python -m experiments.seed001.report --study=routing --workdir=DIR [--batches=N]
  python -m experiments.seed001.report --study=init --workdir=DIR
  python -m experiments.seed001.report --study=seeds --workdir=DIR
  python -m experiments.seed001.report --results=DIR/seed001_<study>.json [--out=DIR2]

DIR is the launched sweep of experiments/seed001/{schedule,routing,init,seeds}.py.
Writes DIR/seed001_<study>.md (also printed), DIR/plots/seed001_*.png and
DIR/seed001_<study>.json, the results file (the runs, and for the routing
study each routed checkpoint's `inspect --routing` result) from which
`--results` rebuilds the report alone; the routing study also writes
DIR/plots/routing_<run>.{png,json} (`inspect --routing` of each MoE's final
checkpoint). A run not finished shows as '-'.
"""
import os
import tempfile

from absl import flags
import numpy as np

from experiments import report, runner, stats, study_cli, sweep
from experiments.seed001 import init_table
from experiments.seed002 import report as seed002_report
from moe_jax.errors import ConfigError
from moe_jax.eval import routing
from moe_jax.workdir import files

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


def schedule_report(runs, routed, plot_dir):
  del routed
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
      os.path.join(plot_dir, 'seed001_schedule.png'),
      'upcycled training: one phase vs seed 001\'s three phases', cv=True)
  return [(f'One phase vs three phases after dense -> MoE (the dense source ends at val loss '
           f'{_fmt(dense)})',
           report.markdown(['run', 'final val loss', 'load CV at the end (mean over layers)',
                            'dead experts at the end', 'most dead experts at a logged step'],
                           body))], [path]


# seeds.py's comparisons, paired by seed: (label, run a, run b, what seed 001
# says of a - b, the sign it gives a - b).
PAIRS = (
    ('three phases - one phase (schedule)', 'up_three_phase', 'up_single',
     'lower: the phases help (no number given)', -1),
    ('upcycled - scratch, equal MoE steps', 'up_single', 'scratch_up',
     'lower: upcycling saves the MoE steps of a small budget', -1),
    ('upcycled - scratch, equal total steps', 'up_single', 'scratch',
     'higher: "even at equal training budgets, native MoE still wins"', +1),
)
SEEDED = ('dense', 'up_single', 'up_three_phase', 'scratch_up', 'scratch')


def _seeds(runs):
  return sorted({int(n.rsplit('_s', 1)[1]) for n in runs if n.startswith('dense_s')})


def seeds_report(runs, routed, plot_dir):
  """Final validation losses per seed, and each of PAIRS as a paired mean
  difference with its t interval."""
  del routed
  seeds = _seeds(runs)
  loss = lambda name, s: (_last(runs[f'{name}_s{s}'], 'val_loss')
                          if f'{name}_s{s}' in runs else None)
  body = [[name] + [_fmt(loss(name, s)) for s in seeds] for name in SEEDED]
  pairs = []
  for label, a, b, claim, sign in PAIRS:
    diffs = [loss(a, s) - loss(b, s) for s in seeds
             if loss(a, s) is not None and loss(b, s) is not None]
    d = stats.paired(diffs)
    bounds = dict(high=0.0) if sign < 0 else dict(low=0.0)
    verdict = stats.verdict((d['lo'], d['hi']), **bounds) if d['n'] > 1 else 'not run'
    pairs.append([label, d['n'], ', '.join(f'{x:+.4f}' for x in diffs),
                  stats.interval_text(d) if d['n'] > 1 else '-', f"{d['p']:.2f}", claim,
                  verdict])
  names = [f'{n}_s{seeds[0]}' for n in ('up_single', 'up_three_phase', 'scratch_up')] if seeds else []
  path = seed002_report.curves_plot(runs, names, {}, os.path.join(plot_dir, 'seed001_seeds.png'),
                                    f'seed {seeds[0] if seeds else "-"}: upcycled runs and '
                                    'scratch at equal MoE steps', cv=True)
  return [('Final validation loss per seed',
           report.markdown(['run'] + [f'seed {s}' for s in seeds], body)),
          ('Paired by seed (a - b: below 0, a is better; verdict on the sign seed 001 gives)',
           report.markdown(['comparison', 'seeds', 'per seed', 'mean [95% CI]', 'p',
                            'seed 001', 'verdict'], pairs))], [path]


def route(sweep_dir, batches):
  """{run: (markdown, result)} of `inspect --routing` of each finished routed
  run's last checkpoint (its JSON to DIR/plots/routing_<run>.json; routing_report
  draws the heatmap beside it, as it does for a rebuild)."""
  out = {}
  for name in ROUTED:
    if runner.status(os.path.join(sweep_dir, name)).get('state') == 'done':
      text, _, result = routing.inspect_checkpoint(os.path.join(sweep_dir, name), batches)
      files.write_json(os.path.join(sweep_dir, report.PLOTS_DIR, f'routing_{name}.json'), result)
      out[name] = (text, result)
  return out


def routing_report(runs, routed, plot_dir):
  summary, details, pngs = [], [], []
  for name in ROUTED:
    if name not in routed:
      summary.append([name, '-', '-', '-', '-'])
      continue
    text, result = routed[name]
    path = routing.heatmap(result, os.path.join(plot_dir, f'routing_{name}.png'),
                           f'{name} @ step {result["step"]}')
    for layer, r in result['layers'].items():
      top = {g: max(r['share'][g]) for g in routing.GROUPS if r['share'][g] is not None}
      h = r.get('health')
      summary.append([name, layer, f'{r["mi_bits"]:.3f}',
                      ', '.join(f'{g} {100 * s:.0f}%' for g, s in top.items()),
                      '-' if h is None else f'CV {h["cv"]:.3f}, {h["dead_1pct"]} dead, '
                      f'{"healthy" if h["healthy"] else "not healthy"}'])
    details.append((f'{name}: routing by token type and load over training', text))
    pngs.append(path)
  del runs
  return [('Routing: I(char class; expert) and each group\'s most used expert (share of its '
           'top-k assignments; 12.5% = uniform over 8 experts)',
           report.markdown(['run', 'layer', 'MI (bits)', 'top expert share by group',
                            'health (seed 001: dead = under 1% of the load)'], summary))] + details, pngs


STUDIES = {'schedule': schedule_report, 'routing': routing_report,
           'init': init_table.init_report, 'seeds': seeds_report}


def write(study, sweep_dir, batches=None):
  """Writes DIR/seed001_<study>.md, its plots and seed001_<study>.json (the
  results file); returns the markdown."""
  if study not in STUDIES:
    raise ConfigError(f'--study={study!r} is not one of {tuple(STUDIES)}')
  sweep.read(sweep_dir)   # a launched sweep, or a one-line error
  runs = report.load_runs(sweep_dir)
  plot_dir = os.path.join(sweep_dir, report.PLOTS_DIR)
  os.makedirs(plot_dir, exist_ok=True)
  routed = route(sweep_dir, batches) if study == 'routing' else {}
  report.write_results(os.path.join(sweep_dir, f'seed001_{study}.json'), runs, study=study,
                       routed=routed)
  sections, pngs = STUDIES[study]({r['name']: r for r in runs}, routed, plot_dir)
  return seed002_report.save(sweep_dir, f'seed001_{study}', f'seed 001, {study}', sections, pngs)


def _from_file(path):
  runs, extra = report.read_results(path)
  study = extra.get('study')
  if study not in STUDIES:
    raise ConfigError(f'--results={path}: its study {study!r} is not one of {tuple(STUDIES)}')
  return study, {r['name']: r for r in runs}, extra.get('routed') or {}


def from_results(path):
  """The sections of a results file's report, as markdown (plots drawn and dropped)."""
  study, runs, routed = _from_file(path)
  with tempfile.TemporaryDirectory() as plot_dir:
    return seed002_report.sections_md(STUDIES[study](runs, routed, plot_dir)[0])


def rebuild(path, out=None):
  """The report of a results file alone; with `out`, its markdown and plots there."""
  if out is None:
    return from_results(path)
  study, runs, routed = _from_file(path)
  plot_dir = os.path.join(out, report.PLOTS_DIR)
  os.makedirs(plot_dir, exist_ok=True)
  sections, pngs = STUDIES[study](runs, routed, plot_dir)
  return seed002_report.save(out, f'seed001_{study}', f'seed 001, {study} (from '
                             f'{os.path.basename(path)})', sections, pngs)


if __name__ == '__main__':
  study_cli.run(write, rebuild, STUDIES, option=lambda: flags.DEFINE_integer(
      'batches', None, 'Validation batches to route (default: the config\'s).'))
