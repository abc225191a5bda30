r"""Seed 000's tables from our sweeps, in the seed's layout, its numbers beside ours.

  python -m experiments.seed000.report --table=3|4|5|8|regime --workdir=DIR [--arg=ARG]

DIR is the launched sweep of experiments/seed000/table{N}.py (or regime.py;
`--arg` is its config argument). Writes DIR/table{N}.md (also printed) and
DIR/plots/table{N}.png, next to what `python -m experiments.report` writes.
A run not finished yet shows as '-'; every row of the sweep is printed.
Efficiencies are eta of seed 000 eq. 4 in percent ('-' where Fixed-2E did
not beat Fixed-E: there is no gap to close).
"""
import os
import time

from absl import flags
from scipy import stats

from experiments import plots, report
from experiments.seed000 import analysis, base, reference
from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.workdir import files

TABLES = ('3', '4', '5', '8', 'regime')


def _fmt(x, digits=4):
  return '-' if x is None else f'{x:.{digits}f}'


def _eff(fixed, up, fixed2x):
  e = None if None in (fixed, up, fixed2x) else analysis.eta(fixed, up, fixed2x)
  return '-' if e is None else f'{100 * e:.1f}'


def _md(header, rows):
  return report.markdown(header, rows)


def _loss(runs, name):
  return analysis.final_loss(runs[name]) if name in runs else None


def table3(runs, arg):
  from experiments.seed000 import table3   # pylint: disable=g-import-not-at-top
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
                      curvature='‖g‖²/H')


def table4(runs, arg):
  from experiments.seed000 import table4   # pylint: disable=g-import-not-at-top
  cols = ('fixed', 'fixed2x') + table4.STRATEGIES
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
    ref_rows.append(['paper', f'{round(100 * f)}%'] + [_fmt(ref[c], 3) for c in cols] + eff)
  means = []
  for f, group in sorted(by_cpt.items()):
    if len(group) > 1:
      cells = []
      for c in cols:
        m, sd = analysis.mean_sd([g[c] for g in group])
        cells.append('-' if m is None else f'{m:.4f} +- {sd:.4f}')
      means.append([f'mean of {len(group)}', f'{round(100 * f)}%'] + cells + ['', ''])
  text = ('### Table 4: duplication strategies x CPT budget\n\n' +
          _md(head, out + means + ref_rows))
  return text, by_cpt


def table5(runs, arg):
  from experiments.seed000 import table5   # pylint: disable=g-import-not-at-top
  head = ['K/E (target)', 'Fixed-E', 'Fixed-2E', 'Ours (MoE->MoE)', 'Sparse (dense->MoE)',
          'Eff. ours %', 'seed: Fixed-E', 'Fixed-mE', 'Ours', 'Sparse']
  rows, points = [], []
  top_k = 2
  for e, names in table5.rows(arg):
    ratio = top_k / (2 * e)
    losses = {c: _loss(runs, n) for c, n in names.items()}
    ref = reference.TABLE5.get(min(reference.TABLE5, key=lambda k: abs(k - ratio)))
    rows.append([f'{100 * ratio:.2f}% ({2 * e})'] +
                [_fmt(losses[c]) for c in ('fixed', 'fixed2x', 'upcycled', 'sparse')] +
                [_eff(losses['fixed'], losses['upcycled'], losses['fixed2x'])] +
                [_fmt(v, 3) for v in ref])
    points.append((ratio, losses))
  return ('### Table 5: activation ratio; expert vs sparse upcycling\n\n' + _md(head, rows),
          points)


def _initial(run):
  """(validation loss right after the transition (its report), training loss
  of the first step logged after it); None before the run got there."""
  tau = (run['config'] or {}).get('upcycle', {}).get('step')
  val = (run['upcycle'] or {}).get('loss_after')
  train = next((r['loss'] for r in run['metrics'] if tau and r['step'] > tau and 'loss' in r),
               None)
  return val, train


def table8(runs, arg):
  from experiments.seed000 import table8   # pylint: disable=g-import-not-at-top
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
  rho = {}
  for key, (i, j) in (('val', (0, 1)), ('train', (2, 3))):
    ok = [(p[i], p[j]) for p in pairs if None not in (p[i], p[j])]
    rho[key] = (stats.spearmanr(*zip(*ok))[0], len(ok)) if len(ok) > 2 else (None, len(ok))
  bounds = f'Fixed-E {_fmt(fixed)}, Fixed-2E {_fmt(fixed2x)}'
  lines = [f'Spearman rho, loss right after upcycling vs terminal loss: {kind} '
           f'{_fmt(r, 2)} (n = {n}; seed 000: {reference.SPEARMAN[kind]}, n = '
           f'{reference.SPEARMAN["n"]})' for kind, (r, n) in rho.items()]
  text = ('### Table 8: expert and router heuristics, one CPT budget\n\n' + bounds + '\n\n' +
          _md(head, rows) + '\n\n' + '\n'.join(lines))
  return text, pairs


def regime(runs, arg):
  from experiments.seed000 import regime as study   # pylint: disable=g-import-not-at-top
  a = study._arg(arg)   # pylint: disable=protected-access
  head = ['setting', 'T', 'val Fixed-E', 'val Fixed-2E', 'paired gaps', 'mean', 'se',
          'criterion']
  rows, points = [], []
  for t in study.budgets(a):
    pairs = [names for (_, tt), names in sorted(study.runs(arg).items()) if tt == t]
    losses = [(_loss(runs, f), _loss(runs, f2)) for f, f2 in pairs]
    done = [(x, y) for x, y in losses if None not in (x, y)]
    gaps = [x - y for x, y in done]
    p = analysis.paired(gaps) if gaps else None
    rows.append([a.setting, t, _pm([x for x, _ in done]), _pm([y for _, y in done]),
                 ', '.join(f'{g:+.4f}' for g in gaps) + f' ({len(gaps)}/{len(pairs)})',
                 _fmt(p and p['mean'], 4), _fmt(p and p['se'], 4),
                 'met' if p and p['met'] else 'not met'])
    points.append((t, gaps))
  return f'### Regime study: {a.setting}\n\n' + _md(head, rows), points


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
      pts = [(r, l[col]) for r, l in data if l[col] is not None]
      if pts:
        ax.plot(*zip(*pts), 'o-', color=f'C{i}', label=col)
    ax.set(xscale='log', xlabel='target K/E', ylabel='validation loss')
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
  ax.set_title(f'seed 000 at CPU scale: {number if number == "regime" else "Table " + number}')
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


def write(number, workdir, arg=''):
  """Writes WORKDIR/table{N}.md and plots/table{N}.png; returns the markdown."""
  number = str(number)
  if number not in TABLES:
    raise ConfigError(f'--table={number} is not one of {TABLES}')
  runs = {r['name']: r for r in report.load_runs(workdir)}
  make = regime if number == 'regime' else globals()[f'table{number}']
  text, data = make(runs, arg or None)
  os.makedirs(os.path.join(workdir, report.PLOTS_DIR), exist_ok=True)
  png = _plot(number, data, os.path.join(workdir, report.PLOTS_DIR, f'table{number}.png'))
  text = (f'{text}\n\n![table {number}]({report.PLOTS_DIR}/{os.path.basename(png)})\n\n'
          f'({len(runs)} runs in {workdir}, {time.strftime("%Y-%m-%d %H:%M")})\n')
  files.write_text(os.path.join(workdir, f'table{number}.md'), text)
  return text


def main(argv):
  del argv
  f = flags.FLAGS
  print(cli.run_reporting_errors(write, f.table, os.path.abspath(f.workdir), f.arg))


if __name__ == '__main__':
  flags.DEFINE_enum('table', None, list(TABLES), 'Which table.', required=True)
  flags.DEFINE_string('workdir', None, 'The sweep directory.', required=True)
  flags.DEFINE_string('arg', '', "The sweep's config argument (e.g. 'small').")
  cli.run_app(main)
