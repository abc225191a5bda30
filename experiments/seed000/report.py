r"""Seed 000's tables from our sweeps, in the seed's layout, its numbers beside ours.

  python -m experiments.seed000.report --table=3|4|5|8|regime|cpt --workdir=DIR [--arg=ARG]
  python -m experiments.seed000.report --results=DIR/table{N}.json [--out=DIR2]

DIR is the launched sweep of experiments/seed000/table{N}.py (or regime.py,
cpt_length.py for `cpt`; `--arg` is its config argument). Writes DIR/table{N}.md (also printed),
DIR/plots/table{N}.png and DIR/table{N}.json, the results file (the runs'
final losses, transition reports and logged rows: experiments/report.py
`results`) from which `--results` rebuilds the table alone.
A run not finished yet shows as '-'; every row of the sweep is printed.
Efficiencies are eta of seed 000 eq. 4 in percent ('-' where Fixed-2E did
not beat Fixed-E: there is no gap to close).
"""
import math
import os
import time

from absl import flags

from experiments import plots, report, stats, study_cli
from experiments.seed000 import (analysis, base, cpt_length, reference, regime, staged, table3, table4,
                                 table5, table8)
from moe_jax.errors import ConfigError
from moe_jax.workdir import files



def _fmt(x, digits=4):
  return '-' if x is None else f'{x:.{digits}f}'


def _eff(fixed, up, fixed2x):
  e = None if None in (fixed, up, fixed2x) else analysis.eta(fixed, up, fixed2x)
  return '-' if e is None else f'{100 * e:.1f}'


def _md(header, rows):
  return report.markdown(header, rows)


def _loss(runs, name):
  return report.final(runs[name]) if name in runs else None


def report3(runs, arg):
  part_a, part_b = table3.rows(arg)
  fixed, fixed2x = _loss(runs, 'fixed'), _loss(runs, 'fixed2x')
  u = base.unit(base.parse(arg))
  total, tau = 40 * u, 20 * u
  head = ['tau', 'tau/T', 'Fixed-E', 'Upcycled', 'Fixed-2E', 'Eff. %',
          'seed: Fixed-32', 'Upcycled', 'Fixed-64', 'Eff. %']
  rows_a, points = [], []
  for (tau, name), ref in zip(part_a, _nearest(reference.TABLE3A, [t / total for t, _ in part_a])):
    up = _loss(runs, name)
    rows_a.append([tau, f'{tau / total:.3f}', _fmt(fixed), _fmt(up), _fmt(fixed2x),
                   _eff(fixed, up, fixed2x)] + _seed3(ref))
    points.append((tau / total, up))
  head_b = ['CPT', 'tau/T', 'Fixed-E', 'Upcycled', 'Fixed-2E', 'Eff. %',
            'seed: Fixed-32', 'Upcycled', 'Fixed-64', 'Eff. %']
  rows_b, effs = [], []
  for (cpt, names), ref in zip(part_b, _nearest(reference.TABLE3B, [c / tau for c, _ in part_b])):
    f, u, f2 = (_loss(runs, n) for n in names)
    rows_b.append([cpt, f'{tau / (tau + cpt):.2f}', _fmt(f), _fmt(u), _fmt(f2),
                   _eff(f, u, f2)] + _seed3(ref))
    effs.append((cpt / tau, None if None in (f, u, f2) else analysis.eta(f, u, f2)))
  text = ('### Table 3(a): when to upcycle (T fixed)\n\n' + _md(head, rows_a) +
          '\n\n### Table 3(b): how much CPT (tau fixed)\n\n' + _md(head_b, rows_b))
  return text, dict(a=points, b=effs, fixed=fixed, fixed2x=fixed2x)


def _seed3(ref):
  """A Table 3 row of the seed: three losses and its efficiency in percent."""
  return [_fmt(v, 3) for v in ref[:3]] + [f'{ref[3]:.1f}']


def _nearest(ref, fractions):
  """The seed's row closest to each of our fractions (its keys are fractions)."""
  keys = sorted(ref)
  return [ref[min(keys, key=lambda k: abs(k - f))] for f in fractions]


_TABLE4_LABELS = dict(fixed='Fixed-E', fixed2x='Fixed-2E', random='Random', uniform='Uniform',
                      weight_norm='‖w‖²', saliency='‖g‖·‖w‖', grad_norm='‖g‖²',
                      curvature='‖g‖²/H', equal_draw='Equal draw')


def report4(runs, arg):
  cols = ('fixed', 'fixed2x') + table4.STRATEGIES + (
      ('equal_draw',) if 'equal_draw' in table4.strategies(arg) else ())
  head = ['run', 'CPT'] + [_TABLE4_LABELS[c] for c in cols] + ['Eff. uniform %', 'Eff. ‖g‖² %']
  out, by_cpt = [], {}
  for seed, f, names in table4.rows(arg):
    losses = {c: _loss(runs, names[c]) if c in names else None for c in cols}
    eff = [_eff(losses['fixed'], losses[s], losses['fixed2x']) for s in ('uniform', 'grad_norm')]
    out.append([f'seed {seed}', f'{round(100 * f)}%'] + [_fmt(losses[c]) for c in cols] + eff)
    by_cpt.setdefault(f, []).append(losses)
  ref_rows = []
  for f in sorted(by_cpt):
    ref = dict(zip(reference.TABLE4_COLUMNS, reference.TABLE4[f]))
    eff = [_eff(ref['fixed'], ref[s], ref['fixed2x']) for s in ('uniform', 'grad_norm')]
    ref_rows.append(['paper', f'{round(100 * f)}%'] + [_fmt(ref.get(c), 3) for c in cols] + eff)
  means = []
  for f, group in sorted(by_cpt.items()):
    if len(group) > 1:
      cells = []
      for c in cols:
        m, sd = analysis.mean_sd([g[c] for g in group])
        cells.append('-' if m is None else f'{m:.4f} +- {sd:.4f}')
      means.append([f'mean of {len(group)}', f'{round(100 * f)}%'] + cells + ['', ''])
  rule = table4._arg(arg).allocation   # pylint: disable=protected-access
  text = (f'### Table 4: duplication strategies x CPT budget (utility copies: {rule})\n\n' +
          _md(head, out + means + ref_rows))
  return text, by_cpt


def _jump(run):
  """Validation loss after minus before the run's transition (its report), or None."""
  up = (run or {}).get('upcycle') or {}
  return None if None in (up.get('loss_after'), up.get('loss_before')) else (
      up['loss_after'] - up['loss_before'])


def _interval(diff):
  """A paired difference (stats.paired) as its t interval, its one value, or
  '-' where there is none."""
  if not diff['n']:
    return '-'
  return stats.interval_text(diff) if diff['n'] > 1 else f'{diff["mean"]:+.4f}'


def report5(runs, arg):
  """One row per (top-k, E): means over seeds, eta as the ratio of mean gaps,
  sparse - ours and the premise's gap Fixed-E - Fixed-2E (eta means something
  only where it is > 0) paired by seed with their t intervals, and each
  transition's jump."""
  head = ['top-k', 'K/E (target)', 'seeds', 'Fixed-E', 'Fixed-2E', 'Ours (MoE->MoE)',
          'Sparse (dense->MoE)', 'Eff. ours %', 'Sparse - Ours', 'Fixed-E - Fixed-2E',
          'jump ours', 'jump sparse', 'seed (nearest K/E): Fixed-E', 'Fixed-mE', 'Ours',
          'Sparse']
  groups = {}
  for k, _, e, names in table5.rows(arg):
    groups.setdefault((k, e), []).append(names)
  rows, points = [], []
  cols = ('fixed', 'fixed2x', 'upcycled', 'sparse')
  for (k, e), seeds in groups.items():
    ratio = k / (2 * e)
    per_seed = [{c: _loss(runs, n[c]) for c in cols} for n in seeds]
    done = [p for p in per_seed if None not in p.values()]
    means = {c: analysis.mean_sd([p[c] for p in per_seed if p[c] is not None]) for c in cols}
    cell = lambda c: '-' if means[c][0] is None else (
        f'{means[c][0]:.4f}' + (f' +- {means[c][1]:.4f}' if means[c][1] else ''))
    eta = (analysis.eta(*(sum(p[c] for p in done) / len(done) for c in ('fixed', 'upcycled',
                                                                         'fixed2x')))
           if done else None)
    paired = lambda a, b: _interval(stats.paired([p[a] - p[b] for p in done]))
    jumps = {c: analysis.mean_sd([j for j in (_jump(runs.get(n[c])) for n in seeds)
                                  if j is not None])[0] for c in ('upcycled', 'sparse')}
    ref = reference.TABLE5.get(min(reference.TABLE5, key=lambda r: abs(r - ratio)))
    rows.append([k, f'{100 * ratio:.2f}% ({2 * e})', f'{len(done)}/{len(seeds)}'] +
                [cell(c) for c in cols] +
                ['-' if eta is None else f'{100 * eta:.1f}',
                 paired('sparse', 'upcycled'), paired('fixed', 'fixed2x'),
                 _fmt(jumps['upcycled']), _fmt(jumps['sparse'])] + [_fmt(v, 3) for v in ref])
    points.append((k, ratio, {c: means[c][0] for c in cols}))
  return ('### Table 5: activation ratio; expert vs sparse upcycling, top-1 and top-2\n\n' +
          _md(head, rows), points)


def _initial(run):
  """(validation loss right after the transition (its report), training loss
  of the first step logged after it); None before the run got there."""
  tau = (run['config'] or {}).get('upcycle', {}).get('step')
  val = (run['upcycle'] or {}).get('loss_after')
  train = next((r['loss'] for r in run['metrics'] if tau and r['step'] > tau and 'loss' in r),
               None)
  return val, train


def report8(runs, arg):
  table = table8.rows(arg)
  copy = _loss(runs, 'expert=copy')
  fixed, fixed2x = _loss(runs, 'fixed'), _loss(runs, 'fixed2x')
  head = ['kind', 'method', 'initial val', 'final val', 'vs copy', 'Eff. %',
          'seed: variant', 'seed: val', 'seed: vs copy']
  rows, pairs = [], []
  refs = {'expert': reference.TABLE8_EXPERT, 'router': reference.TABLE8_ROUTER}
  for kind in ('expert', 'router', 'utility'):
    for name, run in table[kind]:
      final = _loss(runs, run)
      init = _initial(runs[run]) if run in runs else (None, None)
      label, seed_val = refs.get(kind, {}).get(name, ('', None))
      delta = None if None in (final, copy) else final - copy
      seed_delta = None if seed_val is None else seed_val - reference.TABLE8_EXPERT['copy'][1]
      rows.append([kind, name, _fmt(init[0]), _fmt(final), _fmt(delta, 4),
                   _eff(fixed, final, fixed2x), label, _fmt(seed_val, 5), _fmt(seed_delta, 5)])
      if kind != 'router' or name != 'copy':   # expert=copy counted once
        train_final = next((r['loss'] for r in reversed(runs[run]['metrics'])
                            if 'loss' in r), None) if run in runs else None
        pairs.append((init[0], final, init[1], train_final))
  lines = []
  for kind, (i, j) in (('val', (0, 1)), ('train', (2, 3))):
    ok = [(p[i], p[j]) for p in pairs if None not in (p[i], p[j])]
    seed_rho = reference.SPEARMAN[kind]
    if len(ok) > 2:
      r = stats.spearman(*zip(*ok))
      reading = ('no interval: |rho| = 1' if math.isnan(r['lo']) else
                 'inside our interval: no evidence of a difference'
                 if r['lo'] <= seed_rho <= r['hi'] else 'outside our interval: they differ')
      got = (f'{r["rho"]:.2f} [95% CI {r["lo"]:.2f}, {r["hi"]:.2f}] (n = {len(ok)}; seed 000: '
             f'{seed_rho}, n = {reference.SPEARMAN["n"]}, {reading})')
    else:
      got = f'- (n = {len(ok)}; seed 000: {seed_rho})'
    lines.append(f'Spearman rho, loss right after upcycling vs terminal loss: {kind} {got}')
  bounds = f'Fixed-E {_fmt(fixed)}, Fixed-2E {_fmt(fixed2x)}'
  text = ('### Table 8: expert and router heuristics, one CPT budget\n\n' + bounds + '\n\n' +
          _md(head, rows) + '\n\n' + '\n'.join(lines))
  return text, pairs


def report_regime(runs, arg):
  study = regime
  a = study._arg(arg)   # pylint: disable=protected-access
  head = ['setting', 'T', 'val Fixed-E', 'val Fixed-2E', 'paired gaps', 'mean', 'se',
          '95% t interval', 'p', 'criterion']
  rows, points = [], []
  for t in study.budgets(a):
    pairs = [names for (_, tt), names in sorted(study.runs(arg).items()) if tt == t]
    losses = [(_loss(runs, f), _loss(runs, f2)) for f, f2 in pairs]
    done = [(x, y) for x, y in losses if None not in (x, y)]
    gaps = [x - y for x, y in done]
    p = analysis.paired(gaps) if gaps else None
    t_test = stats.paired(gaps)
    rows.append([a.setting, t, _pm([x for x, _ in done]), _pm([y for _, y in done]),
                 ', '.join(f'{g:+.4f}' for g in gaps) + f' ({len(gaps)}/{len(pairs)})',
                 _fmt(p and p['mean'], 4), _fmt(p and p['se'], 4),
                 f'[{t_test["lo"]:+.4f}, {t_test["hi"]:+.4f}]' if t_test['n'] > 1 else '-',
                 f'{t_test["p"]:.2f}' if t_test['n'] > 1 else '-',
                 'met' if p and p['met'] else 'not met'])
    points.append((t, gaps))
  return f'### Regime study: {a.setting}\n\n' + _md(head, rows), points


def report_cpt(runs, arg):
  """eta against CPT length (ratio of the mean gaps over seeds, bootstrap
  interval), and the procedure arms against the plain upcycled run."""
  head = ['CPT / tau', 'T', 'arm', 'seeds', 'Fixed-E', 'Fixed-2E', 'arm loss',
          'Fixed-E - Fixed-2E', 'eta (ratio of means)', 'arm - Upcycled']
  by_c = {}
  for _, c, names in cpt_length.rows(arg):
    by_c.setdefault(c, []).append(names)
  rows, points = [], []
  for c, seeds in sorted(by_c.items()):
    t = cpt_length.budgets(arg)[c]
    for arm in ('up', 'annealed', 'disjoint'):
      if arm not in seeds[0]:
        continue
      cols = ('fixed', 'fixed2x', arm, 'up')
      done = [[_loss(runs, n[col]) for col in cols] for n in seeds]
      done = [d for d in done if None not in d]
      f, f2, x, up = (list(v) for v in zip(*done)) if done else ([], [], [], [])
      gap = stats.paired([a - b for a, b in zip(f, f2)])
      eta = (stats.ratio_of_means([a - b for a, b in zip(f, x)], [a - b for a, b in zip(f, f2)])
             if done else None)
      vs_up = stats.paired([a - b for a, b in zip(x, up)])
      rows.append([c, t, {'up': 'Upcycled'}.get(arm, arm), f'{len(done)}/{len(seeds)}',
                   _pm(f), _pm(f2), _pm(x), _interval(gap),
                   '-' if eta is None else (
                       f'{eta["estimate"]:.2f}' + (f' [{eta["lo"]:.2f}, {eta["hi"]:.2f}]'
                                                   if len(done) > 1 else '')),
                   '' if arm == 'up' else _interval(vs_up)])
      if arm == 'up' and eta is not None:
        points.append((c, eta['estimate']))
  return ('### CPT length: eta as CPT grows (tau fixed), and two procedure arms\n\n' +
          _md(head, rows), points)


def report_staged(runs, arg):
  """Each arm's final loss per seed, the 4E arms paired by seed, and seed 0's
  curves stitched over the runs each arm grew through."""
  seeds = range(staged._arg(arg).seeds)   # pylint: disable=protected-access
  head = ['arm', 'experts at the end'] + [f'seed {s}' for s in seeds] + ['mean +- sd']
  ends = dict(dense_e='E', dense_e_2e='2E', fixed_e='E')
  rows = []
  for arm in staged.ARMS:
    losses = [_loss(runs, f's{s}_{arm}') for s in seeds]
    rows.append([arm, ends.get(arm, '4E')] + [_fmt(x) for x in losses] +
                [_pm([x for x in losses if x is not None])])
  pairs = []
  for a, b in (('staged', 'dense_4e'), ('staged', 'e_4e'), ('dense_4e', 'e_4e')):
    diffs = [(_loss(runs, f's{s}_{a}'), _loss(runs, f's{s}_{b}')) for s in seeds]
    d = stats.paired([x - y for x, y in diffs if None not in (x, y)])
    pairs.append([f'{a} - {b}', d['n'], stats.interval_text(d) if d['n'] > 1 else
                  _fmt(d['mean']), f'{d["p"]:.2f}' if d['n'] > 1 else '-'])
  curves = {}
  for arm in staged.FINAL + ('fixed_e',):
    points = []
    for name, last in staged.stitched(arm, arg):
      run = runs.get(f's0_{name}') or {}
      first = points[-1][0] if points else -1
      points += [(r['step'], r['val_loss']) for r in run.get('metrics', ())
                 if 'val_loss' in r and first < r['step'] <= (last or math.inf)]
    curves[arm] = points
  text = ('### Staged upcycling against one jump (equal total tokens)\n\n' + _md(head, rows) +
          '\n\nPaired by seed (a - b < 0: a ends lower), 95% t intervals:\n\n' +
          _md(['4E arms', 'seeds', 'a - b', 'p'], pairs))
  return text, (curves, staged.transitions(arg))


def _pm(values):
  mean, sd = analysis.mean_sd(values)
  return '-' if mean is None else f'{mean:.4f} +- {sd:.4f}'


def _plot(number, data, path):
  plt = plots.pyplot()
  if number == '3':
    return _plot3(plt, data, path)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  if number == '4':
    seed0 = [(f, group[0]) for f, group in sorted(data.items())]
    for i, col in enumerate(seed0[0][1] if seed0 else ()):
      pts = [(f, losses[col]) for f, losses in seed0 if losses[col] is not None]
      if pts:
        ax.plot(*zip(*pts), 'o-' if col not in ('fixed', 'fixed2x') else 's--',
                color=f'C{i}', label=_TABLE4_LABELS[col])
    ax.set(xlabel='CPT / tau', ylabel='validation loss (seed 0)')
  elif number == '5':
    for i, col in enumerate(('fixed', 'fixed2x', 'upcycled', 'sparse')):
      for k, style in ((1, 'o-'), (2, 's--')):
        pts = [(r, l[col]) for kk, r, l in data if kk == k and l[col] is not None]
        if pts:
          ax.plot(*zip(*pts), style, color=f'C{i}', label=f'{col}, top-{k}')
    ax.set(xscale='log', xlabel='target K/E', ylabel='validation loss (mean over seeds)')
  elif number == 'cpt':
    if data:
      ax.plot(*zip(*data), 'o-', color='C2', label='Upcycled (ratio of mean gaps)')
    ax.axhline(1, color='k', lw=0.8, ls=':')
    ax.set(xlabel='CPT / tau', ylabel='eta (eq. 4)')
  elif number == 'staged':
    curves, marks = data
    for i, (arm, points) in enumerate(curves.items()):
      if points:
        ax.plot(*zip(*points), 'o-', ms=3, color=f'C{i}', label=arm)
    for t in marks:
      ax.axvline(t, color='k', lw=0.6, ls=':')
    ax.set(xlabel='step (dotted: the transitions t1, t2, t3)', ylabel='validation loss (seed 0)')
  elif number == 'regime':
    for t, gaps in data:
      ax.plot([t] * len(gaps), gaps, 'o', color='C0')
    ax.axhline(0, color='k', lw=0.8)
    ax.set(xlabel='T (steps)', ylabel='val(Fixed-E) - val(Fixed-2E), per seed')
  else:
    pts = [(a, b) for a, b, _, _ in data if None not in (a, b)]
    if pts:
      ax.plot(*zip(*pts), 'o')
    ax.set(xlabel='validation loss right after upcycling', ylabel='terminal validation loss')
  label = number if number in ('regime', 'cpt', 'staged') else f'Table {number}'
  ax.set_title(f'seed 000 at CPU scale: {label}')
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def _plot3(plt, data, path):
  """(a) the upcycled run's final loss against tau / T between the two fixed
  runs; (b) eta against CPT / tau, the seed's beside ours."""
  fig, (ax_a, ax_b) = plt.subplots(1, 2, figsize=(10, 4.2))
  pts = [(x, y) for x, y in data['a'] if y is not None]
  if pts:
    ax_a.plot(*zip(*pts), 'o-', color='C2', label='Upcycled E->2E')
  for key, color, label in (('fixed', 'C0', 'Fixed-E'), ('fixed2x', 'C1', 'Fixed-2E')):
    if data[key] is not None:
      ax_a.axhline(data[key], color=color, ls='--', lw=1, label=label)
  ax_a.set(xlabel='tau / T', ylabel='final validation loss', title='Table 3(a): T fixed')
  pts = [(x, 100 * y) for x, y in data['b'] if y is not None]
  if pts:
    ax_b.plot(*zip(*pts), 'o-', color='C2', label='ours')
  ax_b.plot(sorted(reference.TABLE3B), [reference.TABLE3B[k][3] for k in sorted(reference.TABLE3B)],
            's:', color='gray', label='seed 000')
  ax_b.set(xlabel='CPT / tau', ylabel='eta (eq. 4), %', title='Table 3(b): tau fixed')
  for ax in (ax_a, ax_b):
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=7)
  fig.suptitle('seed 000 at CPU scale: Table 3')
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


STUDIES = {'3': report3, '4': report4, '5': report5, '8': report8, 'regime': report_regime,
           'cpt': report_cpt, 'staged': report_staged}


def _render(number, runs, arg, plot_dir=None):
  """(markdown of the table, its plot's path or None) from {name: run}."""
  text, data = STUDIES[number](runs, arg or None)
  if plot_dir is None:
    return text, None
  os.makedirs(plot_dir, exist_ok=True)
  return text, _plot(number, data, os.path.join(plot_dir, f'table{number}.png'))


def _save(number, text, png, runs, out, where):
  text = (f'{text}\n\n![table {number}]({report.PLOTS_DIR}/{os.path.basename(png)})\n\n'
          f'({len(runs)} runs in {where}, {time.strftime("%Y-%m-%d %H:%M")})\n')
  files.write_text(os.path.join(out, f'table{number}.md'), text)
  return text


def write(number, workdir, arg=''):
  """Writes WORKDIR/table{N}.md, plots/table{N}.png and table{N}.json (the
  results file); returns the markdown."""
  number = str(number)
  if number not in STUDIES:
    raise ConfigError(f'--table={number} is not one of {tuple(STUDIES)}')
  runs = report.load_runs(workdir)
  report.write_results(os.path.join(workdir, f'table{number}.json'), runs, study=number,
                       arg=arg or '')
  by_name = {r['name']: r for r in runs}
  text, png = _render(number, by_name, arg, os.path.join(workdir, report.PLOTS_DIR))
  return _save(number, text, png, runs, workdir, workdir)


def from_results(path):
  """The table (markdown, no plot) of a results file `write` wrote."""
  runs, extra = report.read_results(path)
  return _render(str(extra.get('study')), {r['name']: r for r in runs}, extra.get('arg'))[0]


def rebuild(path, out=None):
  """The table of a results file alone; with `out`, also table{N}.md and its plot there."""
  runs, extra = report.read_results(path)
  number = str(extra.get('study'))
  if number not in STUDIES:
    raise ConfigError(f'--results={path}: its study {number!r} is not one of {tuple(STUDIES)}')
  if out is None:
    return from_results(path)
  text, png = _render(number, {r['name']: r for r in runs}, extra.get('arg'),
                      os.path.join(out, report.PLOTS_DIR))
  return _save(number, text, png, runs, out, path)


if __name__ == '__main__':
  study_cli.run(write, rebuild, STUDIES, study_flag='table', option=lambda: flags.DEFINE_string(
      'arg', '', "The sweep's config argument (e.g. 'small')."))
