r"""Seed 002's bottom-up exponents and Fig. 16, refitted from a committed runs table.

  python -m experiments.seed002.refit --csv=docs/seed002/grid_runs.csv \
      --out=DIR/seed002_refit.json        # fits, writes the results file, prints
  python -m experiments.seed002.refit --results=DIR/seed002_refit.json   # prints only
  python -m experiments.seed002.refit --csv=docs/seed002/grid_runs.csv \
      --longer=docs/seed002/extend1_runs.csv,docs/seed002/extend_runs.csv,\
docs/seed002/extend_diagonal_runs.csv --out=DIR/seed002_extrapolate.json

From the upcycled rows of each N1: eq. 7 per D1 (L = A D2^-alpha + E), then
eq. 10 (-alpha = gamma log D1 + E') and eq. 16 (A ~ D1^-eta) across D1
(moe_jax/scaling_laws/exponents.py), with the floor E held at each value of
FLOORS: four D2 budgets per D1 barely determine three parameters, and a free
E runs to 0 on our grid. Claims are means over the sizes with t intervals
(experiments/stats.py). Fig. 16 (moe_jax/scaling_laws/optimal.py): the
compute-optimal loss of dense, MoE from scratch and dense-then-upcycled at
equal total FLOPs, from eq. 3 / eq. 12 fitted with E = 0 to all rows of their
kind, each optimum kept inside the N, D1, D2 ranges of the runs (outside them
our eq. 12 has alpha2 - alpha3 log D1 < 0); and from seed 002's own Table 2.

With --longer (tables of longer runs, oldest first): seed 002 Fig. 6's test
instead. Table 2's laws and Table 1's forms (per N1) are fitted on --csv
alone as experiments/seed002/fits.py fits them, and predict every run of the
longer tables that --csv does not hold; then again on --csv and the first
longer tables, predicting the ones after. Last, the union of all the tables
gets the grid report's fits (Table 1, Table 2 with its bootstrap, D*).
"""
import os

from absl import flags
import numpy as np

from experiments import provenance, report, stats
from experiments.seed002 import fits
from experiments.seed002 import report as seed002_report
from moe_jax import cli
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import exponents, fit as fit_lib, forms, optimal, presets, table
from moe_jax.workdir import files

FLOORS = fits.FLOORS       # nats; the grid's best run ends at 1.84
BUDGETS = 5                # Fig. 16 budgets, log-spaced over the runs' FLOPs
TABLE2_BUDGETS = (1e20, 1e22, 1e24)
R = optimal.MIXTRAL_N2_OVER_N1
SEED_FIG6_RMS = 0.015      # nats: seed 002 sec. 5, eq. 12's validation RMS (Fig. 6)
LAW_NAMES = {'dense': 'dense, eq. 3 (Table 2)', 'moe': 'MoE from scratch, eq. 3 (Table 2)',
             'upcycled': 'upcycled, eq. 12 (Table 2; Fig. 6)',
             'mul': 'upcycled, eq. 8 at its N1 (Table 1)',
             'mul_no_interaction': 'upcycled, eq. 8, alpha3 = 0, at its N1',
             'add': 'upcycled, eq. 9 at its N1',
             'add_no_interaction': 'upcycled, eq. 9, alpha3 = 0, at its N1'}


def _floor(e):
  return {'E': max(e, 1e-12)}   # E = 0 as a vanishing scale: log(E) stays finite


def _range(v):
  return float(np.min(v)), float(np.max(v))


def compute(csv_path):
  """The results dict of a runs table (kind, N1, D1, D2, loss columns)."""
  cols = table.load(csv_path)
  table.check(cols, ('kind', 'N1', 'D1'), f'--csv={csv_path}')
  up = table.select(cols, 'upcycled')
  table.check(up, ('D2',), f'--csv={csv_path} (upcycled rows)')
  by_floor = {}
  for e in FLOORS:
    by_floor[str(e)] = {str(float(n1)): exponents.bottom_up(
        {k: v[up['N1'] == n1] for k, v in up.items()}, fixed=_floor(e))
                        for n1 in np.unique(up['N1'])}
  laws, bounds = {}, {}
  for kind, form in (('dense', 'chinchilla'), ('moe', 'chinchilla'), ('upcycled', 'joint')):
    rows = table.select(cols, kind)
    laws[kind] = fit_lib.fit(forms.get(form), rows, fixed=_floor(0.0)).params
    bounds[kind] = ({'N': _range(rows['N1']), 'D': _range(rows['D1'])} if kind != 'upcycled'
                    else {'N1': _range(rows['N1']), 'D1': _range(rows['D1']),
                          'D2': _range(rows['D2'])})
  flops = 6 * up['N1'] * up['D1'] + 6 * R * up['N1'] * up['D2']
  budgets = np.geomspace(flops.min(), flops.max(), BUDGETS)
  table2 = {k: presets.PRESETS[f'table2_{k}']['params'] for k in ('dense', 'moe', 'upcycled')}
  return dict(source=os.path.basename(csv_path), floors=list(FLOORS), bottom_up=by_floor,
              fig16=dict(laws=laws, bounds=bounds, rows=optimal.compute_optimal_comparison(
                  laws['dense'], laws['moe'], laws['upcycled'], budgets, bounds=bounds)),
              fig16_table2=optimal.compute_optimal_comparison(
                  table2['dense'], table2['moe'], table2['upcycled'], TABLE2_BUDGETS))


def _load(path):
  cols = table.load(path)
  table.check(cols, ('kind', 'N1', 'D1'), f'runs table {path}')
  return cols


def _short(path):
  return os.path.basename(path).replace('_runs.csv', '').replace('.csv', '')


def extrapolation(csv_path, longer_paths, n_boot=seed002_report.N_BOOT):
  """The results dict of Fig. 6's test: the runs table `csv_path` (the grid)
  and `longer_paths`, tables of longer runs, oldest first."""
  grid = _load(csv_path)
  longer = [_load(p) for p in longer_paths]
  names = [_short(p) for p in (csv_path, *longer_paths)]
  stages = {}   # by the tables fitted on, joined by '+'
  for i in range(len(longer)):
    train, _ = fits.union([grid] + longer[:i])
    rest, _ = fits.union(longer[i:])
    laws, by_size = fits.fit_on(train)
    stages['+'.join(names[:i + 1])] = dict(
        fitted_on=names[:i + 1], n=len(train['loss']), laws=laws,
        dataset_forms={str(k): v for k, v in by_size.items()},
        **fits.extrapolate(train, rest, laws, by_size))
  every, merged = fits.union([grid] + longer)
  rows = [dict(zip(fits.KEY, fits.run_key(every, i)), loss=float(every['loss'][i]))
          for i in range(len(every['loss']))]
  return dict(source=names[0], longer=names[1:], stages=stages,
              union=dict(rows=rows, merged=merged, n_boot=n_boot,
                         fitted=seed002_report.fitted(every, n_boot)))


def _cell(summary, law):
  s = summary.get(law)
  return '-' if s is None else f'{s["rms"]:.4f} / {s["max"]:.4f} ({s["n"]})'


def _beyond(stage):
  x = [r['beyond'] for r in stage['rows'] if r['beyond'] is not None]
  if not x:
    return '-'
  return f'{min(x):.3g}x' if min(x) == max(x) else f'{min(x):.3g}x to {max(x):.3g}x'


def extrapolation_text(res):
  """The markdown of a results dict of `extrapolation`."""
  stages = list(res['stages'].values())
  first = stages[0]
  out = [f"Seed 002 Fig. 6's test: the laws fitted on {first['fitted_on'][0]} predict the runs of "
         f'{", ".join(res["longer"])} it does not hold; then the fits on it and the first longer '
         'tables predict the tables after. RMS / largest |predicted - measured| (runs predicted), '
         "nats. How far beyond: a run's D1 (or D2) over the longest of its kind in the fit", '']
  head = ['law'] + [f'fit: {" + ".join(s["fitted_on"])} ({s["n"]} runs), predicting '
                    f'{_beyond(s)} beyond' for s in stages]
  body = [[name] + [_cell(s['summary'], law) for s in stages]
          + [f'{SEED_FIG6_RMS} (RMS)' if law == 'upcycled' else '']
          for law, name in LAW_NAMES.items()]
  out += [report.markdown(head + ['seed 002 (Fig. 6)'], body), '']
  table1 = list(fits.DATASET_FORMS)
  body = []
  for r in first['rows']:
    p, law = r['predicted'], r['predicted'].get(r['kind'])
    err = lambda x: '-' if x is None else f'{x - r["loss"]:+.4f}'
    body.append([r['kind'], f'{r["N1"]:.0f}', f'{r["D1"]:.0f}', f'{r["D2"]:.0f}',
                 '-' if r['beyond'] is None else f'{r["beyond"]:.3g}', f'{r["loss"]:.4f}',
                 '-' if law is None else f'{law:.4f}', err(law)] + [err(p.get(f)) for f in table1])
  out += [f'Per run, fitted on {first["fitted_on"][0]}: measured, the Table 2 law of its kind '
          "(predicted, error) and the error of each Table 1 form fitted at its N1", '',
          report.markdown(['kind', 'N1', 'D1', 'D2', "x the fit's longest", 'measured',
                           'Table 2 law', 'error'] + table1, body), '']
  u = res['union']
  spread = max((max(m['losses']) - min(m['losses']) for m in u['merged']), default=0.0)
  out += [f'The union of {", ".join([res["source"]] + res["longer"])}: {len(u["rows"])} runs '
          f'({len(u["merged"])} held by two tables, their loss the mean: they differ by up to '
          f'{spread:.4f} nats), fitted as the grid report fits ({u["n_boot"]} bootstrap '
          'resamples)', '']
  cols = table.from_rows(u['rows'])
  for title, md in seed002_report.fit_sections(cols, u['fitted']):
    out += [f'Union: {title}', '', md, '']
  return '\n'.join(out).rstrip() + '\n'


def _claims(res):
  zero = res['bottom_up'][str(0.0)]
  gammas = [v['eq10']['gamma'] for v in zero.values()]
  etas = [v['eq16']['eta'] for v in zero.values()]
  g, e = stats.paired(gammas), stats.paired(etas)
  rows = [['the eq. 7 exponent falls as D1 grows: gamma > 0 in eq. 10 (E = 0; mean over '
           f'{g["n"]} sizes)', stats.interval_text(g), stats.verdict((g['lo'], g['hi']), low=0.0)],
          [f'the eq. 7 scale falls as a power of D1: eta > 0 in eq. 16 (E = 0; mean over '
           f'{e["n"]} sizes)', stats.interval_text(e, digits=3),
           stats.verdict((e['lo'], e['hi']), low=0.0)]]
  gaps = [r['upcycled'] - min(r['dense'], r['moe']) for r in res['fig16']['rows']
          if None not in (r['upcycled'], r['dense'], r['moe'])]
  rows.append(['Fig. 16: at equal total FLOPs, compute-optimal dense or MoE beats '
               'dense-then-upcycled (upcycled - best of the two; our laws, inside the runs\' '
               'ranges)', ', '.join(f'{x:+.4f}' for x in gaps) + ' (point estimates over '
               f'{len(gaps)} budgets; no interval)', 'inconclusive'])
  return rows


def text(res):
  """The markdown of a results dict."""
  out = [f'Claims (from {res["source"]}; 95% t intervals over model sizes)', '',
         report.markdown(['claim', 'ours', 'verdict'], _claims(res)), '']
  body = []
  for e, sizes in res['bottom_up'].items():
    for n1, r in sizes.items():
      per = ', '.join(f'{float(d):.0f}: {p["alpha"]:.4f}' for d, p in r['per_d1'].items())
      body.append([e, f'{float(n1):.0f}', per, f'{r["eq10"]["gamma"]:.4f}',
                   f'{r["eq10"]["E_prime"]:.4f}', f'{r["eq10"]["r2"]:.3f}',
                   f'{r["eq16"]["eta"]:.3f}', f'{r["eq16"]["r2"]:.3f}'])
  out += ['Eq. 7 per D1, eqs. 10 and 16 across D1 (upcycled runs of each N1)', '',
          report.markdown(['E fixed', 'N1', 'alpha of eq. 7 by D1 (tokens)', 'gamma (eq. 10)',
                           "E' (eq. 10)", 'r2', 'eta (eq. 16)', 'r2'], body), '']
  fmt = lambda v: '-' if v is None else f'{v:.4f}'
  rows = [[f'{r["C"]:.3g}', fmt(r['dense']), fmt(r['moe']), fmt(r['upcycled']),
           fmt(r['upcycled_dense_share'])] for r in res['fig16']['rows']]
  rows += [[f'{r["C"]:.3g} (Table 2)', fmt(r['dense']), fmt(r['moe']), fmt(r['upcycled']),
            fmt(r['upcycled_dense_share'])] for r in res['fig16_table2']]
  out += ['Fig. 16: compute-optimal loss at total FLOPs C (ours: eq. 3 / eq. 12 fitted with '
          'E = 0, optima inside the runs\' ranges; Table 2: seed 002\'s own laws, unbounded)', '',
          report.markdown(['C (FLOPs)', 'dense', 'MoE from scratch', 'dense then upcycled',
                           'upcycled: share of C in the dense stage'], rows)]
  return '\n'.join(out) + '\n'


def from_results(path):
  res = files.read_json(path)
  return (extrapolation_text if 'stages' in res else text)(res)


def _main(argv):
  del argv
  f = flags.FLAGS
  if bool(f.csv) == bool(f.results):
    raise ConfigError('give one of --csv (fit, with --out) or --results (print)')
  if f.results:
    return from_results(f.results)
  if not f.out:
    raise ConfigError('--csv needs --out (the results file to write)')
  if not os.path.isfile(f.csv):
    raise ConfigError(f'--csv={f.csv} is not a file')
  if os.path.exists(f.out):
    raise ConfigError(f'--out={f.out} exists; remove it first')
  for path in f.longer or ():
    if not os.path.isfile(path):
      raise ConfigError(f'--longer: {path} is not a file')
  res = extrapolation(f.csv, f.longer) if f.longer else compute(f.csv)
  files.write_json(f.out, dict(res, provenance=provenance.record()))
  return (extrapolation_text if f.longer else text)(res)


def main(argv):
  print(cli.run_reporting_errors(_main, argv), end='')


if __name__ == '__main__':
  flags.DEFINE_string('csv', None, 'A runs table (CSV or JSON lines) to fit.')
  flags.DEFINE_string('out', None, 'The results file --csv writes.')
  flags.DEFINE_string('results', None, 'A results file to print.')
  flags.DEFINE_list('longer', None, 'Tables of longer runs, oldest first: Fig. 6\'s test '
                    'of the laws fitted on --csv.')
  cli.run_app(main)
