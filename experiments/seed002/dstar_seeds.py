"""Eq. 13's two sides at D1 = D2 = D over seeds: where the MoE from scratch
overtakes upcycling, each side with a t interval (issue 63).

The report's `--study=seeds` of a sweep of experiments/seed002/extend.py
with `seeds=N` (`:bracket` or `:diagonal`); this module turns its collected
runs into the numbers and the tables, and is no sweep config. Per dense size
N1, budget D and seed, the MoE from scratch trained D tokens is paired with
the model upcycled from that seed's dense run of D tokens and trained D more:
MoE - upcycled below 0 means the MoE has overtaken by D. One seed per run put
D* between 6.55M and 13.1M tokens on margins of 0.008-0.020 nats
(docs/seed002.md), the size of a rerun's drift (docs/rerun_drift.md), so each
margin gets the 95% t interval of its mean over seeds (experiments.stats
`paired`), and the bracket holds only where both ends' intervals leave 0 out.
"""
import csv
import io
import os

from experiments import plots, report, stats

CLAIM = 'the MoE from scratch overtakes upcycling by D (MoE - upcycled < 0)'
RUNS_CSV = 'seed002_seeds_runs.csv'
CSV_COLUMNS = ('kind', 'N1', 'D1', 'D2', 'n_expert', 'top_k', 'seed', 'loss')


def runs_csv(rows):
  """The runs table of the committed docs/seed002/*_runs.csv, with the seed."""
  out = io.StringIO()
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(CSV_COLUMNS)
  for r in rows:
    writer.writerow([r['kind']] + [f'{r[k]:.0f}' for k in CSV_COLUMNS[1:-1]]
                    + [f'{r["loss"]:.6f}'])
  return out.getvalue()


def pairs(rows):
  """{(N1, D): {seed: (MoE from scratch at D, upcycled at D1 = D2 = D)}},
  sorted, wherever a seed holds both sides."""
  moe = {(r['N1'], r['D1'], r['seed']): r['loss'] for r in rows if r['kind'] == 'moe'}
  out = {}
  for r in rows:
    key = (r['N1'], r['D1'], r['seed'])
    if r['kind'] == 'upcycled' and r['D1'] == r['D2'] and key in moe:
      out.setdefault((r['N1'], r['D1']), {})[r['seed']] = (moe[key], r['loss'])
  return {k: dict(sorted(out[k].items())) for k in sorted(out)}


def _point(by_seed):
  """The paired mean of MoE - upcycled over seeds and the verdict on CLAIM."""
  diffs = [moe - up for moe, up in by_seed.values()]
  d = stats.paired(diffs)
  return dict(d, seeds=list(by_seed), diffs=diffs,
              verdict=stats.verdict((d['lo'], d['hi']), high=0.0))


def _bracket(ends):
  """The claim 'D* lies between the smallest and the largest D' (one D: 'D*
  is at most D') from {D: point}: upcycling must be ahead at the first
  (CLAIM disagrees) and the MoE at the last (CLAIM agrees). An end decided
  the other way puts D* outside; an interval holding 0 leaves it open."""
  (lo, low), (hi, high) = min(ends.items()), max(ends.items())
  if lo == hi:
    return dict(low=None, high=hi, verdict=high['verdict'])
  if low['verdict'] == 'disagrees' and high['verdict'] == 'agrees':
    verdict = 'agrees'
  elif low['verdict'] == 'agrees' or high['verdict'] == 'disagrees':
    verdict = 'disagrees'
  else:
    verdict = 'inconclusive'
  return dict(low=lo, high=hi, verdict=verdict)


def summary(rows):
  """JSON-ready: `points` {N1: {D: paired mean, diffs, seeds, verdict}} and
  `bracket` {N1: {low, high (D, tokens), verdict}}, keys as integers in text."""
  points = {}
  for (n1, d), by_seed in pairs(rows).items():
    points.setdefault(f'{n1:.0f}', {})[f'{d:.0f}'] = _point(by_seed)
  return dict(points=points, bracket={
      n1: _bracket({float(d): p for d, p in at.items()}) for n1, at in points.items()})


def _runs_md(by_point):
  body = [[f'{n1:.0f}', f'{d:.0f}', s, f'{moe:.4f}', f'{up:.4f}', f'{moe - up:+.4f}']
          for (n1, d), by_seed in by_point.items() for s, (moe, up) in by_seed.items()]
  return report.markdown(['N1', 'D, tokens', 'seed', 'MoE from scratch at D',
                          'upcycled, D1 = D2 = D', 'MoE - upcycled'], body)


def _points_md(points):
  body = [[n1, d, p['n'], ', '.join(f'{x:+.4f}' for x in p['diffs']), stats.interval_text(p),
           f'{p["p"]:.2f}', p['verdict']]
          for n1, at in points.items() for d, p in at.items()]
  return report.markdown(['N1', 'D, tokens', 'seeds', 'MoE - upcycled per seed',
                          'mean [95% CI]', 'p', 'verdict'], body)


def _bracket_md(points, bracket):
  body = []
  for n1, b in bracket.items():
    at = lambda d: points[n1][f'{d:.0f}']
    if b['low'] is None:
      claim = f'D* is at most {b["high"]:.3g} tokens'
      ours = f'MoE - upcycled at {b["high"]:.3g}: {stats.interval_text(at(b["high"]))}'
    else:
      claim = (f'D* lies between {b["low"]:.3g} and {b["high"]:.3g} tokens (upcycling ahead '
               'at the first, the MoE from scratch at the second)')
      ours = '; '.join(f'MoE - upcycled at {d:.3g}: {stats.interval_text(at(d))}'
                       for d in (b['low'], b['high']))
    body.append([n1, claim, ours, b['verdict']])
  return report.markdown(['N1', 'claim', 'ours', 'verdict'], body)


def _plot(by_point, points, path):
  """MoE - upcycled against D, one panel per N1: each seed (dots), the mean
  with its 95% t interval (bar), 0 (the line D* crosses)."""
  plt = plots.pyplot()
  n1s = sorted({n1 for n1, _ in by_point})
  fig, axes = plt.subplots(1, len(n1s), figsize=(4.5 * len(n1s), 3.8), squeeze=False)
  for ax, n1 in zip(axes[0], n1s):
    for (m, d), by_seed in by_point.items():
      if m != n1:
        continue
      p = points[f'{n1:.0f}'][f'{d:.0f}']
      ax.plot([d] * len(p['diffs']), p['diffs'], 'o', color='C0', mfc='none')
      if p['n'] > 1:
        ax.errorbar([d], [p['mean']], yerr=[[p['mean'] - p['lo']], [p['hi'] - p['mean']]],
                    fmt='s', color='C1', capsize=4)
    ax.axhline(0.0, color='k', lw=0.8)
    ax.set(xscale='log', xlabel='D = D1 = D2 (tokens)', ylabel='MoE - upcycled (nats)',
           title=f'N1 = {n1:.0f}')
  # Two lines: one panel (a single N1) is too narrow for the title on one.
  fig.suptitle('below 0: the MoE from scratch has overtaken upcycling\n'
               '(mean, 95% t interval)', fontsize=9)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def sections(rows, plot_dir):
  """(sections, plots) of the seeds study from its collected rows (each with
  its run's seed)."""
  by_point = pairs(rows)
  if not by_point:
    return [('MoE from scratch against upcycling at D1 = D2 = D, over seeds',
             'No run pairs: no seed holds an upcycled run with D1 = D2 beside a MoE at D.')], []
  s = summary(rows)
  png = _plot(by_point, s['points'], os.path.join(plot_dir, 'seed002_seeds.png'))
  return [
      ('The bracket of D* (eq. 13), over seeds', _bracket_md(s['points'], s['bracket'])),
      (f'Paired by seed: verdict on "{CLAIM}" (95% t intervals)', _points_md(s['points'])),
      ("Eq. 13's two sides per seed (no fit)", _runs_md(by_point)),
  ], [png]
