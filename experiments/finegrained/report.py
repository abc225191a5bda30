r"""The fine-grained upcycling study's report (experiments/finegrained/study.py).

  python -m experiments.finegrained.report --workdir=DIR
  python -m experiments.finegrained.report --results=DIR/finegrained.json [--out=DIR2]

Final validation loss per arm (mean over seeds), and each claim of arXiv
2410.07524 as a mean paired difference over seeds with its 95 % Student-t
interval (experiments/stats.py): 'agrees' when the whole interval is below
0, 'disagrees' when it is above, 'inconclusive' when it holds 0, 'not run'
with fewer than two seeds of both arms. Writes finegrained.md,
finegrained.json (the results file, with provenance) and
plots/finegrained.png into DIR.
"""
import os

import numpy as np

from experiments import plots, report, stats, study_cli
from experiments.finegrained import study
from moe_jax import atomic

RESULTS_FILE, REPORT, PLOT = 'finegrained.json', 'finegrained.md', 'finegrained.png'


def claim_pairs(granularities):
  """[(claim, paper, arm a, arm b)]: the claim is val(a) - val(b) < 0."""
  out = []
  for kind, what in (('', ''), ('_shared', ', with a shared expert')):
    for g in granularities[1:]:
      out.append((f'higher granularity helps{what}: G={g} beats G=1', 'arXiv 2410.07524',
                  f'g{g}{kind}', f'g1{kind}'))
  for g in granularities:
    out.append((f'softmax-then-top-k beats top-k-then-softmax at G={g}', 'arXiv 2410.07524',
                f'g{g}', f'g{g}_topk_softmax'))
  for g in granularities:
    out.append((f'a shared expert helps at G={g} (equal active and total parameters)', '',
                f'g{g}_shared', f'g{g}'))
  return out


def _by_arm(runs):
  """{arm: {seed: final val loss}} of the runs that are done."""
  out = {}
  for name, run in runs.items():
    if '_s' not in name:
      continue
    arm, seed = name.rsplit('_s', 1)
    value = report.final(run)
    if value is not None:
      out.setdefault(arm, {})[int(seed)] = value
  return out


def claims(runs, granularities=study.GRANULARITIES):
  """[dict(claim, paper, a, b, estimate, verdict)] over the seeds both arms ran."""
  arms, out = _by_arm(runs), []
  for claim, paper, a, b in claim_pairs(granularities):
    seeds = sorted(set(arms.get(a, {})) & set(arms.get(b, {})))
    d = stats.paired([arms[a][s] - arms[b][s] for s in seeds])
    out.append(dict(claim=claim, paper=paper, a=a, b=b, estimate=d,
                    verdict=stats.verdict((d['lo'], d['hi']), high=0.0) if d['n'] > 1
                    else 'not run'))
  return out


def render(runs, plot_dir=None):
  """The markdown; the plot too when `plot_dir` is given."""
  arms = _by_arm(runs)
  rows = [[arm, len(v), f'{np.mean(list(v.values())):.4f}',
           ' / '.join(f'{v[s]:.4f}' for s in sorted(v))] for arm, v in sorted(arms.items())]
  dense = report.final(runs['dense']) if 'dense' in runs else None
  table = report.markdown(['arm', 'seeds', 'final val loss (mean)', 'per seed'], rows)
  claim_rows = [[c['claim'], c['paper'] or '(ours)', f"val({c['a']}) - val({c['b']})",
                 stats.interval_text(c['estimate']) if c['estimate']['n'] > 1 else '-',
                 c['verdict']] for c in claims(runs)]
  text = '\n\n'.join([
      f'Dense source: final val loss {dense if dense is None else f"{dense:.4f}"}',
      table, 'Claims (paired over seeds, 95% t intervals; < 0 agrees)',
      report.markdown(['claim', 'paper', 'difference', 'estimate', 'verdict'], claim_rows)])
  if arms and plot_dir:
    _plot(arms, os.path.join(plot_dir, PLOT))
  return text


def _plot(arms, path):
  plt = plots.pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  for kind, marker in zip(study.KINDS, 'osd'):
    gs = [g for g in study.GRANULARITIES if f'g{g}{kind}' in arms]
    for i, g in enumerate(gs):
      v = arms[f'g{g}{kind}']
      ax.scatter([g] * len(v), list(v.values()), marker=marker, color=f'C{len(kind)}',
                 alpha=0.5, label=(kind.strip('_') or 'softmax_then_topk') if i == 0 else None)
    ax.plot(gs, [np.mean(list(arms[f'g{g}{kind}'].values())) for g in gs], color=f'C{len(kind)}')
  ax.set_xscale('log', base=2)
  ax.set_xlabel('granularity G')
  ax.set_ylabel('final val loss')
  ax.legend()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  plots.save(fig, path)
  plt.close(fig)


def _save(runs, out):
  """finegrained.md and plots/finegrained.png written into `out`; the markdown."""
  os.makedirs(out, exist_ok=True)
  text = render(runs, os.path.join(out, report.PLOTS_DIR))
  atomic.write_text(os.path.join(out, REPORT), text + '\n')
  return text


def write(sweep_dir):
  """finegrained.json (results), finegrained.md and the plot, into the sweep."""
  runs = {r['name']: r for r in report.load_runs(sweep_dir)}
  report.write_results(os.path.join(sweep_dir, RESULTS_FILE), list(runs.values()),
                       claims=[dict(c, estimate=dict(c['estimate'])) for c in claims(runs)])
  return _save(runs, sweep_dir)


def rebuild(path, out=None):
  """The report of a results file alone: printed, or with `out` written there."""
  runs, _ = report.read_results(path)
  runs = {r['name']: r for r in runs}
  return render(runs) if out is None else _save(runs, out)


if __name__ == '__main__':
  study_cli.run(write, rebuild)
