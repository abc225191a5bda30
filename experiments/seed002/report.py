r"""Seed 002's studies from our sweeps: tables in the seed's layout, its numbers beside ours.

  python -m experiments.seed002.report --study=grid --workdir=DIR [--arg=small]
  python -m experiments.seed002.report --study=ablations --workdir=DIR [--arg=small]
  python -m experiments.seed002.report --study=seeds --workdir=DIR
  python -m experiments.seed002.report --results=DIR/seed002_<study>.json [--out=DIR2]

DIR is the launched sweep of experiments/seed002/{grid,ablations}.py (`--arg`
its config argument), and for `seeds` one of extend.py with `seeds=N` (eq.
13's D1 = D2 points over seeds, experiments/seed002/dstar_seeds.py). Writes
DIR/seed002_<study>.md (also printed), DIR/plots/seed002_*.png and
DIR/seed002_<study>.json, the results file (the runs, and for the grid and
the seeds the collected rows they read) from which `--results` rebuilds the
report alone. The grid also writes DIR/runs.jsonl, the runs table of `python
-m moe_jax.scaling_laws collect` over its finished runs, and DIR/fits.json
(the fits are seeded: a rebuild refits the same); the seeds write
DIR/seed002_seeds_runs.csv, that table with each run's seed, and keep their
intervals in the results file's `summary`. A run not finished is left out of
the fits and shown as '-'.
"""
import json
import os
import tempfile
import time

from absl import flags
import numpy as np

from experiments import plots, provenance, report, runner, stats, study_cli, sweep
from experiments.seed002 import ablations, dstar_seeds, fits, grid
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import collect, forms, table
from moe_jax.workdir import files

N_BOOT = 200


def fmt(x, digits=4):
  """A number for a table: 4 decimals, or 4 significant digits below 1e-3 and
  from 1e5 on (a bootstrap bound of a law the runs barely determine); '-' for None."""
  if x is None:
    return '-'
  return f'{x:.{digits}g}' if abs(x) < 1e-3 or abs(x) >= 1e5 else f'{x:.{digits}f}'


def _done(sweep_dir):
  """The finished runs' directories, in the sweep's order."""
  names = [r['name'] for r in sweep.read(sweep_dir)['runs']]
  return [os.path.join(sweep_dir, n) for n in names
          if runner.status(os.path.join(sweep_dir, n)).get('state') == 'done']


def collected(sweep_dir):
  """collect.row of every finished run (without its workdir), also written to
  DIR/runs.jsonl."""
  rows = collect.collect(_done(sweep_dir))
  files.write_text(os.path.join(sweep_dir, 'runs.jsonl'),
                   ''.join(json.dumps(r) + '\n' for r in rows))
  return [{k: v for k, v in r.items() if k != 'workdir'} for r in rows]


def seeded(sweep_dir, runs):
  """collect.row of every finished run with its run's name and config.seed
  (the workdir left out), also written to DIR/seed002_seeds_runs.csv."""
  seeds = {r['name']: (r['config'] or {}).get('seed') for r in runs}
  rows = []
  for row in collect.collect(_done(sweep_dir)):
    name = os.path.basename(row.pop('workdir'))
    rows.append(dict(row, run=name, seed=seeds[name]))
  files.write_text(os.path.join(sweep_dir, dstar_seeds.RUNS_CSV), dstar_seeds.runs_csv(rows))
  return rows


def _grid_runs_md(cols):
  head = ['kind', 'N1', 'D1 (tokens)', 'D2 (tokens)', 'val loss']
  order = np.lexsort((cols['D2'], cols['D1'], cols['N1'], cols['kind']))
  return report.markdown(head, [[cols['kind'][i], f'{cols["N1"][i]:.0f}', f'{cols["D1"][i]:.0f}',
                                 f'{cols["D2"][i]:.0f}', f'{cols["loss"][i]:.4f}']
                                for i in order])


def _table1_md(by_size):
  head = ['form'] + [f'N1={n1:.0f} (n)' for n1 in by_size] + ['seed 002 Table 1, (8,2)']
  body = []
  for name in fits.DATASET_FORMS:
    cells = []
    for per_form in by_size.values():
      f = per_form[name]
      cells.append(f'{f["loo_rms"]:.4f} ({f["n"]})' if f.get('loo_rms') is not None
                   else f'- ({f["n"]})')
    body.append([name] + cells + [fits.TABLE1_8X2[name]])
  notes = sorted({f'{name}: {f["error"]}' for per_form in by_size.values()
                  for name, f in per_form.items() if 'error' in f})
  return report.markdown(head, body) + ''.join(f'\n\n- not fitted: {n}' for n in notes)


def _param_cell(f, p):
  if 'params' not in f:
    return '-'
  value = f['params'][p]
  lo_hi = f.get('ci95', {}).get(p)
  return fmt(value) + (f' [{fmt(lo_hi[0], 3)}, {fmt(lo_hi[1], 3)}]' if lo_hi else '')


def _table2_md(laws):
  head = ['law', 'A', 'B', 'alpha / alpha1', 'alpha2', 'alpha3', 'beta', 'E', 'n', 'LOO RMS']
  body = []
  for kind, _ in fits.LAWS:
    f = laws.get(kind, laws['E'])
    alpha = 'alpha' if kind != 'upcycled' else 'alpha1'
    ours = [_param_cell(f, p) if p in (f.get('params') or {}) else '—'
            for p in ('A', 'B', alpha, 'alpha2', 'alpha3', 'beta', 'E')]
    body.append([f'{kind} (ours)'] + ours + [f.get('n', '-'), fmt(f.get('loo_rms'))])
    t = fits.TABLE2[kind]
    body.append([f'{kind} (seed 002)'] + [fmt(t[p], 3) if p in t else '—' for p in
                                          ('A', 'B', alpha, 'alpha2', 'alpha3', 'beta', 'E')]
                + ['', ''])
  notes = [f'{k}: {v["error"]}' for k, v in laws.items() if 'error' in v]
  return report.markdown(head, body) + ''.join(f'\n\n- not fitted: {n}' for n in notes)


def _claims_md(cols, crossings, boot):
  """Seed 002's claims on D*, each with our interval and a verdict."""
  by_n1 = (boot or {}).get('by_n1', {})
  if not by_n1:
    return 'No bootstrap draws: the laws were not fitted.'
  crossed = [by_n1[n]['crossed'] for n in crossings]
  ours = '; '.join(
      f'N1={n:.0f}: ' + ('no crossing' if not roots else
                         f'{roots[0]:.3g} [95% {fmt(by_n1[n]["lo"], 3)}, '
                         f'{fmt(by_n1[n]["hi"], 3)}], {100 * by_n1[n]["crossed"]:.0f}% of draws')
      for n, roots in crossings.items() if roots is not None)
  # A share of the draws, read as an interval's verdict: all, none, or some of them.
  share = lambda lo, hi: 'agrees' if lo >= 0.975 else 'disagrees' if hi <= 0.025 else (
      'inconclusive')
  rows = [['a MoE from scratch overtakes upcycling (D1 = D2 = D) at a finite D*', ours,
           share(min(crossed), max(crossed))]]
  diagonal = [d for _, d, _, _ in fits.diagonal(cols)]
  if diagonal and all(by_n1[n]['lo'] is not None for n in crossings):
    longest = max(diagonal)
    verdicts = [f'N1={n:.0f}: {stats.verdict((by_n1[n]["lo"], by_n1[n]["hi"]), high=longest)}'
                for n in crossings]
    rows.append([f'D* lies inside our runs (D at most {longest:.3g}, the longest D1 = D2)',
                 'the intervals above', '; '.join(verdicts)])
  if boot.get('falls') is not None:
    rows.append([f'D* falls with N1 (eq. 2), smallest against largest of {len(crossings)} sizes',
                 f'lower at the largest N1 in {100 * boot["falls"]:.0f}% of the '
                 f'{boot["n_both"]} draws crossing at both', share(boot['falls'], boot['falls'])])
  return report.markdown(['claim', 'ours', 'verdict'], rows)


def _floors_md(laws, crossings, floors):
  shared = laws.get('E', {}).get('params', {}).get('E')
  rows = [(f'{shared:.3f} (the shared fit)' if shared is not None else '-', crossings)]
  rows += [(f'{e:g}', by) for e, by in floors.items()]
  n1s = list(crossings)
  body = [[e] + ['-' if by[n] is None else ('none' if not by[n] else f'{by[n][0]:.3g}')
                 for n in n1s] for e, by in rows]
  return report.markdown(['E'] + [f'D* at N1={n:.0f}, tokens' for n in n1s], body)


def _diagonal_md(cols):
  body = [[f'{n1:.0f}', f'{d:.0f}', f'{moe:.4f}', f'{up:.4f}', f'{moe - up:+.4f}']
          for n1, d, moe, up in fits.diagonal(cols)]
  if not body:
    return 'No run pairs: the grid holds no upcycled run with D1 = D2 beside a MoE at D.'
  return report.markdown(['N1', 'D, tokens', 'MoE from scratch at D', 'upcycled, D1 = D2 = D',
                          'MoE - upcycled (> 0: upcycling ahead)'], body)


def _dstar_md(cols, crossings, boot):
  head = ['N1', 'D* (eq. 13, our laws), tokens', 'crossings where the MoE overtakes',
          '95% bootstrap interval (share of draws that cross)',
          'eq. 2 at N1 (seed 002), tokens', 'longest D1 + D2 we ran', 'longest D1 = D2 we ran']
  body = []
  for n1, roots in crossings.items():
    up = fits.rows(cols, 'upcycled', n1)
    ran = f'{(up["D1"] + up["D2"]).max():.0f}' if len(up['loss']) else '-'
    diagonal = up['D1'][up['D1'] == up['D2']]
    ran_diagonal = f'{diagonal.max():.0f}' if len(diagonal) else '-'
    d = '-' if roots is None else ('no crossing' if not roots else f'{roots[0]:.3g}')
    b = (boot or {}).get('by_n1', {}).get(n1)
    interval = ('-' if b is None else
                f'[{fmt(b["lo"], 3)}, {fmt(b["hi"], 3)}] ({100 * b["crossed"]:.0f}%)')
    body.append([f'{n1:.0f}', d, '-' if not roots else ', '.join(f'{r:.3g}' for r in roots),
                 interval, f'{float(fits.dstar.eq2(n1)):.3g}', ran, ran_diagonal])
  note = ''
  if boot and boot['falls'] is not None:
    note = (f'\n\nD* lower at the largest N1 than at the smallest in {100 * boot["falls"]:.0f}% '
            f'of the {boot["n_both"]} of {boot["n"]} bootstrap draws that cross at both: '
            + ('it falls with N1, as eq. 2 does' if boot['falls'] >= 0.975 else
               'it rises with N1' if boot['falls'] <= 0.025 else
               'the direction is not determined'))
  return report.markdown(head, body) + note


def _grid_plot(cols, laws, by_size, path):
  """Loss against D2, one panel per dense size, one colour per D1: the runs
  (dots), eq. 12 with our joint parameters (solid), eq. 8 fitted to the size
  alone (dashed); seed 002 Fig. 4 / Fig. 6."""
  plt = plots.pyplot()
  up = fits.rows(cols, 'upcycled')
  sizes = np.unique(up['N1'])
  fig, axes = plt.subplots(1, len(sizes), figsize=(4.5 * len(sizes), 4), squeeze=False)
  for ax, n1 in zip(axes[0], sizes):
    at = fits.rows(up, n1=n1)
    grid_d2 = np.geomspace(at['D2'].min(), at['D2'].max(), 60)
    for i, d1 in enumerate(np.unique(at['D1'])):
      on = at['D1'] == d1
      color = f'C{i}'
      ax.plot(at['D2'][on], at['loss'][on], 'o', color=color, label=f'D1={d1:.3g}')
      curve = {'N1': np.full_like(grid_d2, n1), 'D1': np.full_like(grid_d2, d1), 'D2': grid_d2}
      if 'params' in laws.get('upcycled', {}):
        ax.plot(grid_d2, forms.predict(forms.get('joint'), laws['upcycled']['params'], curve),
                '-', color=color, lw=1)
      mul = by_size.get(float(n1), {}).get('mul', {})
      if 'params' in mul:
        ax.plot(grid_d2, forms.predict(forms.get('mul'), mul['params'], curve), '--',
                color=color, lw=0.8)
    ax.set(xscale='log', xlabel='D2 (tokens after upcycling)', ylabel='val loss',
           title=f'N1 = {n1:.0f}')
    ax.legend(fontsize=7)
  fig.suptitle('upcycled runs: eq. 12, joint fit (solid); eq. 8, this size alone (dashed)',
               fontsize=9)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def _baseline_plot(cols, laws, path):
  """Dense and MoE-from-scratch loss against D per size with eq. 3 (Table 2's E)."""
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(6, 4.5))
  for k, (kind, marker) in enumerate((('dense', 'o'), ('moe', 's'))):
    part = fits.rows(cols, kind)
    for i, n1 in enumerate(np.unique(part['N1'])):
      at = fits.rows(part, n1=n1)
      color = f'C{i}'
      ax.plot(at['D1'], at['loss'], marker, color=color, mfc='none' if k else color,
              label=f'{kind} N1={n1:.0f}')
      if 'params' in laws.get(kind, {}):
        d = np.geomspace(at['D1'].min(), at['D1'].max(), 60)
        ax.plot(d, forms.predict(forms.get('chinchilla'), laws[kind]['params'],
                                 {'N1': np.full_like(d, n1), 'D1': d}),
                '-' if kind == 'dense' else ':', color=color, lw=1)
  ax.set(xscale='log', xlabel='D (tokens)', ylabel='val loss',
         title='dense (filled, solid) and MoE from scratch (open, dotted): eq. 3')
  ax.title.set_fontsize(9)
  ax.legend(fontsize=7)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def grid_fits(rows, arg):
  """The grid's fits (`fitted`) of its collected rows; `:small` draws 20
  bootstrap resamples, not N_BOOT."""
  return fitted(table.from_rows(rows), n_boot=20 if grid.parse(arg).small else N_BOOT)


def fitted(cols, n_boot=N_BOOT):
  """The fits of a runs table, JSON-ready: dataset forms per N1, the joint
  laws with their bootstrap, D*, its bootstrap and its floors.

  The fits are seeded, so one machine refits the same; another CPU need not:
  BFGS walks the flat valley between a law's floor E and its scale, and
  last-bit differences in numpy's exp/log (its SIMD paths differ by CPU) end
  it elsewhere (the extension's dense B, beta and E moved by 12 % between two
  machines of the same kind). So the results file keeps them, and a rebuild
  renders what was fitted."""
  by_size = fits.dataset_forms(cols)
  laws = fits.joint_laws(cols, n_boot=n_boot)
  n1s = np.unique(fits.rows(cols, 'upcycled')['N1'])
  crossings = fits.dstar_at(laws, n1s)
  boot = fits.dstar_bootstrap(laws, n1s)
  floors = fits.dstar_floors(cols, n1s)
  return json.loads(json.dumps(dict(
      dataset_forms={str(k): v for k, v in by_size.items()}, joint=laws,
      dstar={str(k): v for k, v in crossings.items()},
      dstar_bootstrap=boot and dict(boot, by_n1={str(k): v for k, v in boot['by_n1'].items()}),
      dstar_floors={str(e): {str(k): v for k, v in by.items()} for e, by in floors.items()}),
      default=float))


def _float_keys(by):
  return {float(k): v for k, v in by.items()}


def fit_sections(cols, fitted):
  """(title, markdown) of what the fits of `cols` say: the claims on D*,
  Table 1's forms, Table 2's laws, D* and D* at fixed floors."""
  by_size, laws = _float_keys(fitted['dataset_forms']), fitted['joint']
  crossings = _float_keys(fitted['dstar'])
  boot = fitted['dstar_bootstrap'] and dict(fitted['dstar_bootstrap'],
                                            by_n1=_float_keys(fitted['dstar_bootstrap']['by_n1']))
  floors = {float(e): _float_keys(by) for e, by in fitted['dstar_floors'].items()}
  return [
      ('Claims on D* (eq. 13; 95% bootstrap intervals over the fits)',
       _claims_md(cols, crossings, boot)),
      ('Dataset-size forms per dense size, leave-one-out RMS (seed 002 Table 1)',
       _table1_md(by_size)),
      ('Joint laws, E shared (seed 002 Table 2); 95% bootstrap intervals in brackets',
       _table2_md(laws)),
      ('D*: where training a MoE from scratch starts to beat upcycling (eq. 13)',
       _dstar_md(cols, crossings, boot)),
      ('D* with E held at a floor (point estimates)', _floors_md(laws, crossings, floors)),
  ]


def grid_report(runs, rows, arg, plot_dir, fitted=None):
  """(sections, plots, fits) of the grid from its collected rows and, when
  given, the fits `grid_fits` made of them (else fitted here)."""
  del runs   # the fits read the collected rows
  cols = table.from_rows(rows)
  fitted = fitted or grid_fits(rows, arg)
  laws = fitted['joint']
  pngs = [_grid_plot(cols, laws, _float_keys(fitted['dataset_forms']),
                     os.path.join(plot_dir, 'seed002_grid.png')),
          _baseline_plot(cols, laws, os.path.join(plot_dir, 'seed002_baselines.png'))]
  sections = fit_sections(cols, fitted)
  sections.insert(1, ('Runs (collected: runs.jsonl)', _grid_runs_md(cols)))
  sections.append(("Eq. 13's two sides in the runs (D1 = D2 = D; no fit)", _diagonal_md(cols)))
  return sections, pngs, fitted


def ablations_report(runs, rows, arg, plot_dir):
  """(sections, plots, None) of the ablations from {name: run}."""
  del rows, arg
  final = lambda name: (next((row['val_loss'] for row in reversed(runs[name]['metrics'])
                              if 'val_loss' in row), None) if name in runs else None)
  lr_rows = [[label, name, fmt(final(name))] for name, label in ablations.LR_ARMS.items()]
  sched_rows = [[kind, fmt(final(f'{kind}_wsd')), fmt(final(f'{kind}_cosine'))]
                for kind in ('dense', 'moe')]
  pngs = [curves_plot(runs, list(ablations.LR_ARMS), ablations.LR_ARMS,
                       os.path.join(plot_dir, 'seed002_lr.png'),
                       'upcycled training with three LR choices (seed 002 Fig. 8)'),
          curves_plot(runs, [f'{k}_{s}' for k in ('dense', 'moe') for s in ('wsd', 'cosine')],
                       {}, os.path.join(plot_dir, 'seed002_schedules.png'),
                       'WSD vs cosine (seed 002 Fig. 7)')]
  return [('LR of upcycled training (seed 002 App. A.6, Fig. 8: the MoE LR works best)',
           report.markdown(['LR choice', 'run', 'final val loss'], lr_rows)),
          ('WSD vs cosine at one budget (seed 002 App. A.4, Fig. 7: similar)',
           report.markdown(['model', 'WSD val loss', 'cosine val loss'], sched_rows))], pngs, None


def seeds_report(runs, rows, arg, plot_dir):
  """(sections, plots, None) of eq. 13's D1 = D2 points over seeds from the
  collected rows, each with its run's seed."""
  del runs, arg   # the rows hold the losses and seeds
  return (*dstar_seeds.sections(rows, plot_dir), None)


STUDIES = {'grid': grid_report, 'ablations': ablations_report, 'seeds': seeds_report}


def curves_plot(runs, names, labels, path, title, cv=False):
  """Validation loss (top), learning rate and, with `cv`, the expert load CV
  (mean over MoE layers) against the run's steps."""
  plt = plots.pyplot()
  rows = 3 if cv else 2
  fig, axes = plt.subplots(rows, 1, figsize=(7, 3 + 1.5 * rows), sharex=True,
                           gridspec_kw=dict(height_ratios=(3,) + (1,) * (rows - 1)))
  ax, lr_ax = axes[0], axes[1]
  for i, name in enumerate(n for n in names if n in runs and runs[n]['metrics']):
    m = runs[name]['metrics']
    val = [(r['step'], r['val_loss']) for r in m if 'val_loss' in r]
    ax.plot(*zip(*[(r['step'], r['loss']) for r in m]), color=f'C{i}', lw=0.6, alpha=0.5)
    if val:
      ax.plot(*zip(*val), 'o-', color=f'C{i}', ms=3, label=labels.get(name, name))
    lr_ax.plot(*zip(*[(r['step'], r['lr']) for r in m]), color=f'C{i}')
    if cv:
      axes[2].plot([r['step'] for r in m],
                   [np.mean([v for k, v in r.items() if k.startswith('moe/') and
                             k.endswith('/cv')]) for r in m], color=f'C{i}')
  ax.set(ylabel='loss (train thin, val dots)', title=title)
  ax.legend(fontsize=7)
  lr_ax.set(ylabel='LR')
  if cv:
    axes[2].set(ylabel='load CV')
  axes[-1].set(xlabel='step of the run')
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def write(study, sweep_dir, arg=''):
  """Writes DIR/seed002_<study>.md, its plots and seed002_<study>.json (the
  results file); returns the markdown."""
  if study not in STUDIES:
    raise ConfigError(f'--study={study!r} is not one of {tuple(STUDIES)}')
  sweep.read(sweep_dir)   # a launched sweep, or a one-line error
  runs = report.load_runs(sweep_dir)
  rows, extra, cited = None, {}, {}
  if study == 'grid':
    rows = collected(sweep_dir)
    extra = dict(fitted=grid_fits(rows, arg))
  if study == 'seeds':
    rows = seeded(sweep_dir, runs)
    cited = dict(summary=dstar_seeds.summary(rows))   # what docs cite; the report recomputes it
  report.write_results(os.path.join(sweep_dir, f'seed002_{study}.json'), runs, study=study,
                       arg=arg or '', collected=rows, **extra, **cited)
  sections, pngs, fitted = STUDIES[study]({r['name']: r for r in runs}, rows, arg,
                                          _plot_dir(sweep_dir), **extra)
  if fitted is not None:
    files.write_json(os.path.join(sweep_dir, 'fits.json'),
                     dict(fitted, provenance=provenance.record()))
  return save(sweep_dir, f'seed002_{study}', f'seed 002, {study}', sections, pngs)


def _plot_dir(out):
  path = os.path.join(out, report.PLOTS_DIR)
  os.makedirs(path, exist_ok=True)
  return path


def _from_file(path):
  runs, extra = report.read_results(path)
  study = extra.get('study')
  if study not in STUDIES:
    raise ConfigError(f'--results={path}: its study {study!r} is not one of {tuple(STUDIES)}')
  # A grid's results file keeps its fits (`fitted` says why); an older one is refitted.
  fitted = {'fitted': extra['fitted']} if 'fitted' in extra else {}
  return study, {r['name']: r for r in runs}, extra.get('collected'), extra.get('arg'), fitted


def from_results(path):
  """The sections of a results file's report, as markdown (plots drawn and dropped)."""
  study, runs, rows, arg, fitted = _from_file(path)
  with tempfile.TemporaryDirectory() as plot_dir:
    sections = STUDIES[study](runs, rows, arg, plot_dir, **fitted)[0]
  return sections_md(sections)


def rebuild(path, out=None):
  """The report of a results file alone; with `out`, its markdown and plots there."""
  if out is None:
    return from_results(path)
  study, runs, rows, arg, fitted = _from_file(path)
  sections, pngs, _ = STUDIES[study](runs, rows, arg, _plot_dir(out), **fitted)
  return save(out, f'seed002_{study}', f'seed 002, {study} (from {os.path.basename(path)})',
              sections, pngs)


def sections_md(sections):
  return ''.join(f'## {head}\n\n{body}\n\n' for head, body in sections)


def save(sweep_dir, name, title, sections, pngs):
  """Writes DIR/<name>.md: a dated title, the (title, markdown) sections and
  the plots (in DIR/plots); returns the markdown."""
  text = (f'# {title}: {os.path.basename(sweep_dir.rstrip("/"))}, '
          f'{time.strftime("%Y-%m-%d %H:%M")}\n\n' +
          sections_md(sections) +
          '\n'.join(f'![{os.path.basename(p)}](plots/{os.path.basename(p)})' for p in pngs) + '\n')
  files.write_text(os.path.join(sweep_dir, f'{name}.md'), text)
  return text


if __name__ == '__main__':
  study_cli.run(write, rebuild, STUDIES, option=lambda: flags.DEFINE_string(
      'arg', '', "The sweep's config argument (e.g. small)."))
