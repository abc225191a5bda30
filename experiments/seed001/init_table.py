"""Seed 001's init-strategy table from the runs of experiments/seed001/init.py.

Every arm is compared with `copy` seed by seed (the arms of a seed share the
dense source, the router draw and the data), so each claim is a mean paired
difference with its Student-t interval (experiments/stats.py). Expert health
is seed 001's monitor (moe_jax/models/router.py `health`) of the load each
MoE layer logged at the run's last step.
"""
import os

import numpy as np

from experiments import report, stats
from experiments.seed001 import init as init_sweep
from experiments.seed002 import report as seed002_report
from moe_jax.eval import routing

_fmt = seed002_report.fmt

# (claim as seed 001 states it, arm a, arm b): the claim is val(a) - val(b) < 0.
LOSS_CLAIMS = (
    ('noise 0.01 std(W) breaks symmetry: better than plain copy', 'noise_0.01', 'copy'),
    ('noise 0.001 is too little: 0.01 beats it', 'noise_0.01', 'noise_0.001'),
    ('noise 0.1 destroys the dense knowledge: 0.01 beats it', 'noise_0.01', 'noise_0.1'),
    ('duplicate + noise (0.01) beats subset init (97% vs 94% of native)', 'noise_0.01', 'subset'),
    ('duplicate + noise (0.01) beats random permute (97% vs 95%)', 'noise_0.01', 'permute'),
    ('upcycling beats random experts at the same budget', 'copy', 'random'),
)
COLLAPSE = 0.8   # seed 001: without the balance loss, 80%+ of tokens go to 1-2 experts


def _last(run, key):
  return next((r[key] for r in reversed(run['metrics']) if key in r), None)


def _layers(row):
  return sorted(k.split('/')[1] for k in row if k.startswith('moe/') and k.endswith('/load'))


def health(run):
  """At the run's last logged step, over MoE layers: dict(cv (mean), dead_1pct
  (sum), healthy (share of layers), top2 (mean share of the load on the two
  busiest experts)), from router.health of each layer's logged load."""
  row = run['metrics'][-1] if run['metrics'] else {}
  hs = [routing.layer_health(row[f'moe/{l}/load']) for l in _layers(row)]
  if not hs:
    return None
  top2 = [float(np.sum(np.sort(row[f'moe/{l}/load'])[-2:])) for l in _layers(row)]
  return dict(cv=float(np.mean([h['cv'] for h in hs])),
              dead_1pct=int(sum(h['dead_1pct'] for h in hs)),
              healthy=float(np.mean([h['healthy'] for h in hs])), top2=float(np.mean(top2)))


def recovery_step(run, target):
  """The first evaluated step whose val loss is at or below `target` (the
  dense source's), or None."""
  return next((r['step'] for r in run['metrics'] if r.get('val_loss', np.inf) <= target), None)


def _seeds(runs):
  return sorted({int(n.rsplit('_s', 1)[1]) for n in runs if '_s' in n and
                 n.rsplit('_s', 1)[0] in init_sweep.ARMS})


def _val(runs, arm, seed):
  run = runs.get(init_sweep.run_name(arm, seed))
  return _last(run, 'val_loss') if run and run['metrics'] else None


def _h(runs, arm, seed):
  run = runs.get(init_sweep.run_name(arm, seed))
  return health(run) if run and run['metrics'] else None


def _paired(runs, a, b):
  diffs = []
  for s in _seeds(runs):
    va, vb = _val(runs, a, s), _val(runs, b, s)
    if va is not None and vb is not None:
      diffs.append(va - vb)
  return stats.paired(diffs)


def claims(runs):
  """[(claim, estimate dict, text, verdict)] of seed 001's init claims."""
  out = []
  for claim, a, b in LOSS_CLAIMS:
    d = _paired(runs, a, b)
    out.append((f'{claim}: val({a}) - val({b}) < 0', d, stats.interval_text(d),
                stats.verdict((d['lo'], d['hi']), high=0.0) if d['n'] > 1 else 'not run'))
  top2 = [h['top2'] for s in _seeds(runs)
          if (h := _h(runs, 'copy_no_balance', s)) is not None]
  d = stats.paired(top2)
  out.append((f'without the balance loss the router collapses: load on the two busiest '
              f'experts >= {COLLAPSE:.0%} (copy_no_balance, mean over layers)', d,
              stats.interval_text(d, key='mean'),
              stats.verdict((d['lo'], d['hi']), low=COLLAPSE) if d['n'] > 1 else 'not run'))
  pairs = [(_h(runs, 'subset', s), _h(runs, 'copy', s)) for s in _seeds(runs)]
  dead = [a['dead_1pct'] - b['dead_1pct'] for a, b in pairs if a and b]
  d = stats.paired(dead)
  out.append(('subset init risks dead experts: dead (under 1% of the load, summed over '
              'layers) subset - copy > 0', d, stats.interval_text(d, digits=2),
              stats.verdict((d['lo'], d['hi']), low=1e-9) if d['n'] > 1 else 'not run'))
  return out


def init_report(runs, routed, plot_dir):
  del routed
  dense = _last(runs['dense'], 'val_loss') if runs.get('dense') else None
  seeds = _seeds(runs)
  claim_rows = [[c, text, v] for c, _, text, v in claims(runs)]
  body = []
  for arm in init_sweep.ARMS:
    vals = [v for s in seeds if (v := _val(runs, arm, s)) is not None]
    hs = [h for s in seeds if (h := _h(runs, arm, s)) is not None]
    rec = [recovery_step(runs[init_sweep.run_name(arm, s)], dense) for s in seeds
           if dense is not None and _val(runs, arm, s) is not None]
    d = _paired(runs, arm, 'copy')
    mean = lambda k, f='.4f': f'{np.mean([h[k] for h in hs]):{f}}' if hs else '-'
    body.append([arm, len(vals), _fmt(float(np.mean(vals))) if vals else '-',
                 '-' if arm == 'copy' or d['n'] < 2 else stats.interval_text(d),
                 ' / '.join('-' if r is None else str(r) for r in rec) or '-',
                 mean('cv'), mean('top2'), mean('dead_1pct', '.1f'), mean('healthy', '.0%')])
  path = seed002_report.curves_plot(
      runs, [init_sweep.run_name(a, 0) for a in init_sweep.ARMS], {},
      os.path.join(plot_dir, 'seed001_init.png'), 'upcycled training by expert init (seed 0)', cv=True)
  return [('Seed 001\'s claims on expert init (paired over seeds; 95% t intervals)',
           report.markdown(['claim', 'ours', 'verdict'], claim_rows)),
          (f'Init strategies after dense -> MoE (the dense source ends at val loss {_fmt(dense)}; '
           f'final val loss mean over {len(seeds)} seeds; health at the last step, mean over '
           'seeds, from router.health)',
           report.markdown(['arm', 'seeds', 'final val loss', 'minus copy, paired',
                            'first eval step at the dense loss, per seed', 'load CV',
                            'load on the top-2 experts', 'dead (under 1%, summed over layers)',
                            'healthy layers'], body))], [path]
