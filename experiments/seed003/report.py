r"""Seed 003's tables and plots from a sweep of experiments/seed003/*.py.

  python -m experiments.seed003.report --workdir=DIR
  python -m experiments.seed003.report --results=DIR/seed003.json [--out=DIR2]

writes DIR/seed003.md (and prints it) with one section per study whose runs
DIR holds, DIR/plots/seed003_<study>.png, and DIR/seed003.json, the results
file (experiments/report.py `results`, with each run's run.json and the width
runs' copy drift; for equal_flops.py's runs also their paired comparisons with
verdicts, the FLOPs check and the bases' norms) from which `--results`
rebuilds the report alone. Losses are validation losses (nats/token); FLOPs are training FLOPs (analysis.py). Works on unfinished
sweeps: a run not done yet has no final loss.
"""
import math
import os
import re
import tempfile
import time

from experiments import plots, report, stats as study_stats, study_cli
from experiments.seed003 import analysis, common
from moe_jax.workdir import files

REPORT_FILE, RESULTS_FILE = 'seed003.md', 'seed003.json'


def _f(value, fmt='.4f'):
  return '' if value is None else format(value, fmt)


def _d(before, after):
  return '' if None in (before, after) else f'{after - before:+.4f}'


def _table(header, rows):
  return report.markdown(header, rows) if rows else '(no runs yet)'


def _interval(lo_hi):
  lo, hi = lo_hi
  return ('(no 95% interval: |rho| = 1)' if math.isnan(lo) else
          f'[95% CI {lo:+.2f}, {hi:+.2f}]')


def _legend(ax):
  if ax.get_legend_handles_labels()[0]:   # runs not done yet draw nothing
    ax.legend(fontsize=7)


def _curves(ax, runs, title, base=None):
  if base is not None and base['info']:
    ax.plot(*zip(*analysis.curve(base)), 'k-', lw=1, label=base['name'])
  for r in runs:
    points = analysis.curve(r)
    if points:
      ax.plot(*zip(*points), 'o-', ms=2, lw=1, label=r['name'])
  ax.set(xlabel='training FLOPs (sunk + additional)', ylabel='val loss', title=title)
  _legend(ax)


def _profiles(ax, profiles):
  for name, profile in profiles.items():
    if profile:
      ax.plot(list(profile), list(profile.values()), 'o-', ms=3, label=name)
  ax.set(xlabel='layer', ylabel='mean weight-matrix norm', title='layer-wise norms, last eval')
  _legend(ax)


def _figure(path, panels, width=5.0):
  plt = plots.pyplot()
  fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 4), squeeze=False)
  for ax, draw in zip(axes[0], panels):
    draw(ax)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return os.path.basename(path)


def depth(runs, plot_dir):
  rows = analysis.depth_rows(runs)
  last = (runs.get(common.BASE) or {}).get('total_steps')
  table = _table(
      ['grown at', 'method', 'loss before', 'right after', 'jump', 'final', 'total FLOPs'],
      [[f'{r["step"]}' + (' (converged)' if r['step'] == last else ''), r['method'],
        _f(r['before']), _f(r['after']), _d(r['before'], r['after']), _f(r['final']),
        _f(r['total'], '.3g')] for r in rows])
  gaps = {}
  for r in rows:
    gaps.setdefault(r['step'], {})[r['method']] = r['final']
  lines = [f'- grown at {s}: final loss stack - interposition = {v["stack"] - v["interpose"]:+.4f}'
           for s, v in gaps.items() if None not in v.values()]
  steps = sorted(gaps, reverse=True)
  png = _figure(os.path.join(plot_dir, 'seed003_depth.png'), [
      lambda ax, s=s: _curves(ax, [runs[f'{m}@{s}'] for m in ('interpose', 'stack')],
                              f'grown at step {s}', runs.get(common.BASE))
      for s in steps])
  names = [common.BASE] + [f'{m}@{s}' for s in steps for m in ('interpose', 'stack')]
  profiles = {n: analysis.norm_profile(runs[n]) for n in names if n in runs}
  norm_png = _figure(os.path.join(plot_dir, 'seed003_norms.png'),
                     [lambda ax: _profiles(ax, profiles)], width=6)
  return ('Stack vs interposition (Fig. 3)', table + '\n\n' + '\n'.join(lines), [png, norm_png])


def width(runs, plot_dir):
  rows = analysis.width_rows(runs)
  table = _table(['alpha', 'loss before', 'right after', 'jump', 'final', 'copy drift'],
                 [[f'{r["alpha"]:g}', _f(r['before']), _f(r['after']), _d(r['before'], r['after']),
                   _f(r['final']), _f(r['drift'], '.3g')] for r in rows])
  png = _figure(os.path.join(plot_dir, 'seed003_width.png'), [
      lambda ax: _curves(ax, [runs[r['run']] for r in rows], 'width growth, noise alpha',
                         runs.get(common.BASE))])
  note = ('copy drift: mean ||w_new - w_orig|| / ||w_orig|| of the new experts against the '
          'experts they copy, at the last checkpoint.')
  return 'Width growth noise (Fig. 4)', table + '\n\n' + note, [png]


def retention(runs, plot_dir):
  rows = analysis.retention_rows(runs)
  table = _table(['norm', 'growth', 'loss before', 'right after', 'jump', 'max abs dlogits',
                  'final', 'steps after'],
                 [[r['norm'], r['growth'], _f(r['before']), _f(r['after']),
                   _d(r['before'], r['after']), _f(r['dlogits'], '.3g'), _f(r['final']),
                   runs[r['run']]['total_steps'] or ''] for r in rows])

  def bars(ax):
    for i, position in enumerate(('pre', 'post')):
      got = [r for r in rows if r['norm'] == position and r['after'] is not None]
      ax.bar([j + 0.4 * i for j in range(len(got))], [r['after'] - r['before'] for r in got],
             width=0.4, label=f'{position}-norm')
      ax.set_xticks(range(len(got)), [r['growth'] for r in got])
    ax.set(ylabel='loss right after growth - before', title='immediate retention')
    _legend(ax)

  return 'Immediate retention, pre- vs post-norm (Fig. 5, App. C)', table, [
      _figure(os.path.join(plot_dir, 'seed003_retention.png'), [bars])]


def sunk(runs, plot_dir, budget):
  rows = analysis.sunk_rows(runs, budget)
  table = _table(['grown at', 'sunk FLOPs', 'additional FLOPs', 'total FLOPs', 'right after',
                  'final'],
                 [['scratch' if r['run'] == common.SCRATCH else r['step'], _f(r['sunk'], '.3g'),
                   _f(None if r['total'] is None else r['total'] - r['sunk'], '.3g'),
                   _f(r['total'], '.3g'), _f(r['after']), _f(r['final'])] for r in rows])
  corr = analysis.correlation(rows)
  text = table + '\n\n' + (
      f'sunk FLOPs vs final loss over {corr["n"]} runs: Pearson r = {corr["pearson"]:+.3f}, '
      f'Spearman rho = {corr["spearman"]:+.3f} {_interval(corr["spearman_ci95"])} (negative: '
      'more sunk cost, lower loss)'
      if corr else 'correlation: fewer than three finished runs')
  grown_runs = [runs[r['run']] for r in rows]

  def scatter(ax):
    done = [r for r in rows if r['final'] is not None]
    ax.plot([r['sunk'] for r in done], [r['final'] for r in done], 'o')
    ax.set(xlabel='sunk FLOPs', ylabel='final val loss', title=f'fixed {budget} budget')

  png = _figure(os.path.join(plot_dir, f'seed003_sunk_{budget}.png'), [
      lambda ax: _curves(ax, grown_runs, f'fixed {budget} budget', runs.get(common.BASE)),
      scatter])
  title = ('Sunk cost, fixed additional budget (Fig. 7, Table 1)' if budget == 'additional' else
           'Sunk cost, fixed total budget (Fig. 8, Table 2)')
  return title, text, [png]


def _paired_table(rows, claim='claim'):
  """The rows of analysis.paired_rows: means, a - b by seed with its interval, verdict."""
  return _table(
      ['a - b', 'seeds', 'mean a', 'mean b', 'a - b (paired)', 'p', claim, 'verdict'],
      [[r['label'], f'{r["n"]}/{len(r["pairs"])}', _f(r['a']), _f(r['b']),
        study_stats.interval_text(r['diff']) if r['n'] else '', _f(r['diff']['p'], '.3f'),
        r['claim'], r['verdict'] or ''] for r in rows])


def regime(runs, plot_dir):
  rows = analysis.regime_rows(runs)
  table = _paired_table(rows, 'claim (a - b < 0)')
  curves = {}
  for r in rows:
    if 'series' in r:
      arm, scratch, n = r['series']
      curves.setdefault(arm, {})[n] = r['a']
      curves.setdefault(scratch, {})[n] = r['b']

  def draw(ax):
    for name, points in sorted(curves.items()):
      points = sorted((n, v) for n, v in points.items() if v is not None)
      if points:
        ax.plot(*zip(*points), 'o--' if name.startswith('scratch') else 'o-', label=name)
    ax.set(xlabel='steps after growth (scratch: the same total tokens)',
           ylabel='final val loss, mean over seeds', title='growth of a trained base')
    _legend(ax)

  png = _figure(os.path.join(plot_dir, 'seed003_regime.png'), [draw], width=6)
  note = ('Final validation loss; a - b paired by seed with its 95% t interval; the verdict '
          'holds the claim against the interval (agrees: all of it below 0).')
  return "Growth in seed 003's regime (issue 36)", table + '\n\n' + note, [png]


def _mean(values):
  """The mean, once every value is in (None before)."""
  values = list(values)
  return None if None in values else sum(values) / len(values)


def _norm_table(profiles):
  layers = sorted({i for p in profiles.values() for i in p})
  return _table(['base'] + [f'layer {i}' for i in layers],
                [[name] + [_f(p.get(i), '.3f') for i in layers] for name, p in profiles.items()])


def _equal_flops_plot(runs, plot_dir, seed, n):
  """Seed `seed`'s curves at the longest budget `n` on a FLOPs axis, and the bases' norms."""
  arms = [runs.get(f'{a}_{n}_s{seed}') for a in ('interpose_stable', 'interpose_annealed',
                                                  'stack_annealed', 'scratch_total',
                                                  'scratch_additional')]
  return _figure(os.path.join(plot_dir, 'seed003_equal_flops.png'), [
      lambda ax: _curves(ax, [r for r in arms if r], f'+{n}, seed {seed}',
                         runs.get(f'base_stable_s{seed}')),
      lambda ax: _profiles(ax, analysis.base_norms(runs))])


def equal_flops(runs, plot_dir):
  """experiments/seed003/equal_flops.py: per-seed losses, growth - scratch at
  equal additional and equal total FLOPs paired by seed, the FLOPs check,
  and the bases' layer-wise norms."""
  seeds, budgets = analysis.equal_flops_seeds(runs)
  losses = _table(
      ['run'] + [f'seed {s}' for s in seeds] + ['mean', 'training FLOPs'],
      [[a['arm']] + [_f(a['losses'].get(s)) for s in seeds] +
       [_f(_mean(a['losses'].values())), _f(a['flops'], '.4g')]
       for a in analysis.equal_flops_losses(runs)])
  gaps = analysis.flops_gaps(runs)
  check = (f'FLOPs check: scratch_total - (base + growth) is at most '
           f'{max(abs(g["steps"]) for g in gaps):.2f} steps of scratch over {len(gaps)} pairs.'
           if gaps else 'FLOPs check: no pair has run yet.')
  note = ('Final validation loss (nats/token); a - b paired by seed with its 95% t interval; '
          'the verdict holds the claim (a - b < 0 unless it says otherwise) against the '
          'interval: agrees if all of it lies in the claim, disagrees if none does. "On par" '
          '(Fig. 8) has no margin in the paper: there inconclusive is what it predicts. '
          'Training FLOPs: 3 x forward FLOPs per token x tokens, the base\'s included.')
  text = '\n\n'.join([losses, _paired_table(analysis.equal_flops_rows(runs)), note, check,
                       'Layer-wise weight norms of the bases at their last eval (the paper\'s '
                       'Fig. 2 signature: rising with depth):',
                       _norm_table(analysis.base_norms(runs))])
  return ('Growth against scratch at equal FLOPs (Figs. 3, 7, 8; issue 63)', text,
          [_equal_flops_plot(runs, plot_dir, seeds[0], budgets[-1])])


def render(runs, plot_dir):
  """The report's sections (markdown) from {name: run}; plots go to `plot_dir`."""
  os.makedirs(plot_dir, exist_ok=True)
  studies = [(depth, analysis.depth_rows), (width, analysis.width_rows),
             (retention, analysis.retention_rows),
             (lambda r, d: sunk(r, d, 'additional'), lambda r: analysis.sunk_rows(r, 'additional')),
             (lambda r, d: sunk(r, d, 'total'), lambda r: analysis.sunk_rows(r, 'total')),
             (regime, lambda r: any(re.fullmatch(r'base_s\d+', n) for n in r)),
             (equal_flops, lambda r: analysis.equal_flops_seeds(r)[0])]
  parts = []
  for section, rows in studies:
    if not rows(runs):
      continue
    title, text, pngs = section(runs, plot_dir)
    parts.append(f'## {title}\n\n{text}\n\n' + '\n'.join(
        f'![{p}]({report.PLOTS_DIR}/{p})' for p in pngs))
  return '\n\n'.join(parts)


def _save(runs, out, name):
  text = render(runs, os.path.join(out, report.PLOTS_DIR))
  text = (f'# Seed 003 at CPU scale: {name}, {time.strftime("%Y-%m-%d %H:%M")}\n\n'
          f'{text}\n')
  files.write_text(os.path.join(out, REPORT_FILE), text)
  return text


def _claims(runs):
  """What the results file adds for equal_flops.py's runs: its comparisons with
  their verdicts and the FLOPs check, so a reader needs no report code."""
  if not analysis.equal_flops_seeds(runs)[0]:
    return {}
  return dict(equal_flops=analysis.equal_flops_rows(runs), flops_check=analysis.flops_gaps(runs),
              base_norms=analysis.base_norms(runs))


def write(sweep_dir):
  """Writes seed003.md, its plots and seed003.json into `sweep_dir`; returns the markdown."""
  runs = analysis.load(sweep_dir)
  report.write_results(os.path.join(sweep_dir, RESULTS_FILE), list(runs.values()),
                       **_claims(runs))
  return _save(runs, sweep_dir, os.path.basename(sweep_dir.rstrip('/')))


def from_results(path):
  """The sections of a results file's report (its plots drawn and dropped)."""
  runs, _ = report.read_results(path)
  with tempfile.TemporaryDirectory() as plot_dir:
    return render({r['name']: r for r in runs}, plot_dir)


def rebuild(path, out=None):
  """The report of a results file alone; with `out`, seed003.md and plots there."""
  if out is None:
    return from_results(path)
  runs, _ = report.read_results(path)
  return _save({r['name']: r for r in runs}, out, path)


if __name__ == '__main__':
  study_cli.run(write, rebuild)
