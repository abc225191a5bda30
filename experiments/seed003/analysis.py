"""Seed 003's numbers from a sweep's runs (`experiments.report.load_runs`):
FLOPs, curves on a FLOPs axis, losses around growth, the four studies' rows,
and how far copied experts drifted from their originals.

  runs = analysis.load(DIR)            # {name: run}, each with its run.json
  analysis.depth_rows(runs)            # Fig. 3: stack vs interposition
  analysis.width_rows(runs)            # Fig. 4: width-growth noise alpha
  analysis.retention_rows(runs)        # Fig. 5 / App. C: loss right after growth
  analysis.sunk_rows(runs, 'additional'), analysis.sunk_rows(runs, 'total')
  analysis.correlation(rows)           # Tables 1-2: sunk FLOPs vs final loss
  analysis.regime_rows(runs)           # regime.py: paired comparisons over seeds
  analysis.equal_flops_rows(runs)      # equal_flops.py: growth vs scratch at equal FLOPs
  analysis.flops_gaps(runs), analysis.base_norms(runs)

FLOPs are our accounting's: training FLOPs = 3 x forward FLOPs per token
(run.json `flops_per_token`, moe_jax/models/accounting.py) x tokens. A grown
run's sunk FLOPs are its source's (run.json `source`: the base's model and
the tokens it trained to the step it was grown from). Runs a study needs but
the sweep lacks (or that have not logged yet) are left out of its rows.
"""
import itertools
import os
import re

import numpy as np
from scipy import stats

from experiments import report, stats as study_stats
from experiments.seed003 import common
from moe_jax.workdir import files

_GROWN = re.compile(r'(post_)?(interpose|stack|width_a[0-9.e-]+|total_interpose)@(\d+)')

# What each comparison answers, on its own terms. Seed 003 compares growth
# with scratch at a fixed additional budget (Fig. 7) and at fixed total FLOPs
# (Fig. 8), not at equal tokens, where scratch spends 20-33 % more FLOPs;
# it finds noise's LM loss similar to exact copies (the gain is downstream);
# and it makes no claim on the order of depth and width growth.
_SCRATCH = 'growth beats scratch at equal tokens (not the paper\'s axis)'
_NOISE = 'noise beats copies on LM loss (the paper: similar)'
_ORDER = 'depth first beats width first (no claim of the paper)'



def load(sweep_dir):
  """{name: run dict of report.load_runs, plus `info` (run.json or None) and,
  for a finished width-growth run, `drift` (`expert_drift` of its last
  checkpoint): all the report reads, so a results file of these dicts
  rebuilds it without the checkpoints."""
  runs = {}
  for run in report.load_runs(sweep_dir):
    path = os.path.join(sweep_dir, run['name'], files.RUN)
    run['info'] = files.read_json(path) if os.path.exists(path) else None
    m = _GROWN.fullmatch(run['name'])
    if m and not m.group(1) and m.group(2).startswith('width_a') and run['state'] == 'done':
      run['drift'] = expert_drift(os.path.join(sweep_dir, run['name']))
    runs[run['name']] = run
  return runs


def _per_token(model):
  return 3 * model['flops_per_token']


def sunk_flops(run):
  """Training FLOPs of the checkpoint the run grew from (0: from scratch)."""
  source = (run['info'] or {}).get('source')
  if not source or 'model' not in source:
    return 0.0
  return float(_per_token(source['model']) * source['tokens'])


def step_flops(run):
  """Training FLOPs of one of the run's own steps."""
  info = run['info']
  return float(_per_token(info['model']) * info['tokens_per_step'])


def curve(run, metric='val_loss'):
  """[(total FLOPs: sunk + own, metric)] at the run's logged steps."""
  if not run['info']:
    return []
  sunk, per_step = sunk_flops(run), step_flops(run)
  return [(sunk + row['step'] * per_step, row[metric]) for row in run['metrics'] if metric in row]


def jump(run):
  """(loss before, loss right after growth) on the same validation batches, or Nones."""
  up = run['upcycle']
  return (up['loss_before'], up['loss_after']) if up else (None, None)


def grown(runs, kind):
  """{step: run} of the runs named `<kind>@<step>`."""
  out = {}
  for name, run in runs.items():
    m = _GROWN.fullmatch(name)
    if m and (m.group(1) or '') + m.group(2) == kind:
      out[int(m.group(3))] = run
  return dict(sorted(out.items()))


def _row(run, **extra):
  before, after = jump(run)
  return dict(extra, run=run['name'], sunk=sunk_flops(run) if run['info'] else None,
              before=before, after=after, final=report.final(run),
              total=curve(run)[-1][0] if curve(run) else None)


def depth_rows(runs):
  """Fig. 3: interposition and stacking from each step both were grown at."""
  inter, stack = grown(runs, 'interpose'), grown(runs, 'stack')
  steps = sorted(set(inter) & set(stack), reverse=True)
  return [_row(r, step=s, method=m) for s in steps for m, r in (('interpose', inter[s]),
                                                                ('stack', stack[s]))]


def width_rows(runs):
  """Fig. 4: one row per alpha of the width runs grown from one step."""
  rows = []
  for name, run in runs.items():
    m = _GROWN.fullmatch(name)
    if m and not m.group(1) and m.group(2).startswith('width_a'):
      alpha = float(m.group(2)[len('width_a'):])
      rows.append(_row(run, alpha=alpha, step=int(m.group(3)), drift=run.get('drift')))
  return sorted(rows, key=lambda r: r['alpha'])


def retention_rows(runs):
  """Fig. 5 / App. C: per norm position and growth of the converged checkpoint
  (its base's last step), the loss right after growth."""
  rows = []
  for position, prefix, base in (('pre', '', common.BASE), ('post', 'post_', common.BASE_POST)):
    last = (runs.get(base) or {}).get('total_steps')
    for method in ('interpose', 'stack', f'width_a{common.RETENTION_ALPHA:g}'):
      run = grown(runs, prefix + method).get(last)
      if run:
        rows.append(_row(run, norm=position, growth=method, step=last,
                         dlogits=(run['upcycle'] or {}).get('max_abs_dlogits')))
  return rows


def sunk_rows(runs, budget):
  """Figs. 7-8: scratch (zero sunk cost) and the interposed runs of the
  `additional` or `total` budget, by sunk FLOPs."""
  kind = 'interpose' if budget == 'additional' else 'total_interpose'
  rows = [_row(runs[common.SCRATCH], step=0)] if common.SCRATCH in runs else []
  return rows + [_row(r, step=s) for s, r in grown(runs, kind).items()]


_ARM = re.compile(r'(stack|interpose|width_a[0-9.e-]+)_(\d+)_s(\d+)')


def regime_pairs(runs):
  """The comparisons of experiments/seed003/regime.py, each a dict(label,
  claim, pairs=[(run a, run b) per seed]) where a - b < 0 is the claim; a
  grown arm against its scratch also names (`series`) the two curves and the
  steps after growth."""
  seeds = sorted(int(n[len('base_s'):]) for n in runs if re.fullmatch(r'base_s\d+', n))
  base = {s: runs[f'base_s{s}']['total_steps'] for s in seeds}
  arms = sorted({(m.group(1), int(m.group(2))) for m in map(_ARM.fullmatch, runs) if m})

  def pairs(a, b, n=0):   # a base not started yet has no total: its seed is left out
    return [(a.format(s=s, total=base[s] + n), b.format(s=s, total=base[s] + n))
            for s in seeds if base[s] is not None]

  out = []
  for arm, n in arms:
    scratch = 'scratch_' + ('width' if arm.startswith('width') else 'depth')
    out.append(dict(label=f'{arm} +{n} - {scratch} (same tokens)', claim=_SCRATCH,
                    pairs=pairs(f'{arm}_{n}_s{{s}}', f'{scratch}_{{total}}_s{{s}}', n),
                    series=(arm, scratch, n)))
  for n in sorted({n for _, n in arms}):
    out.append(dict(label=f'interpose - stack, +{n}', claim='interposition beats stacking',
                    pairs=pairs(f'interpose_{n}_s{{s}}', f'stack_{n}_s{{s}}')))
    alphas = [a for a, m in arms if m == n and a.startswith('width_a')]
    if len(alphas) == 2:
      out.append(dict(label=f'{alphas[1]} - {alphas[0]}, +{n}', claim=_NOISE,
                      pairs=pairs(f'{alphas[1]}_{n}_s{{s}}', f'{alphas[0]}_{n}_s{{s}}')))
  out.append(dict(label='depth_width - width_depth', claim=_ORDER,
                  pairs=pairs('depth_width_s{s}', 'width_depth_s{s}')))
  for order in ('depth_width', 'width_depth'):
    out.append(dict(label=f'{order} - scratch_both (same tokens)', claim=_SCRATCH,
                    pairs=pairs(f'{order}_s{{s}}', 'scratch_both_s{s}')))
  return out


def paired_rows(runs, comparisons):
  """The comparisons (dicts with `pairs` = [(run a, run b) per seed] and the
  claim's range of a - b, `low` and `high`, default (-inf, 0]) with the means
  of a and b over the seeds where both finished, a - b paired by seed
  (experiments/stats.py) and the claim's verdict on its interval."""
  rows = []
  for c in comparisons:
    done = [(report.final(runs[a]), report.final(runs[b]))
            for a, b in c['pairs'] if a in runs and b in runs]
    done = [(x, y) for x, y in done if None not in (x, y)]
    d = study_stats.paired([x - y for x, y in done])
    claim = dict(low=c.get('low', -np.inf), high=c.get('high', 0.0))
    rows.append(dict(c, n=len(done), a=float(np.mean([x for x, _ in done])) if done else None,
                     b=float(np.mean([y for _, y in done])) if done else None, diff=d,
                     verdict=study_stats.verdict((d['lo'], d['hi']), **claim) if done else None))
  return rows


def regime_rows(runs):
  """`paired_rows` of `regime_pairs`."""
  return paired_rows(runs, regime_pairs(runs))


def correlation(rows):
  """Pearson r and Spearman rho of (sunk FLOPs, final loss) over the finished
  rows, rho with its interval (experiments/stats.py; none where |rho| = 1);
  None with fewer than three."""
  xy = [(r['sunk'], r['final']) for r in rows if r['final'] is not None and r['sunk'] is not None]
  if len(xy) < 3:
    return None
  x, y = np.asarray(xy).T
  rho = study_stats.spearman(x, y)
  return dict(n=len(xy), pearson=float(stats.pearsonr(x, y)[0]), spearman=rho['rho'],
              spearman_ci95=[rho['lo'], rho['hi']])


def expert_drift(run_dir):
  """How far width growth's new experts moved from the experts they copy, at the
  run's last checkpoint: mean over MoE layers, experts and wi_0/wi_1/wo of
  ||w_new - w_orig|| / ||w_orig|| (layout 'append': expert E + e copies e).
  Exact copies with identical router columns get identical gradients, so at
  alpha=0 this stays 0: the copies never specialise."""
  from moe_jax.eval import restore   # pylint: disable=g-import-not-at-top
  params = restore.load(run_dir).params
  ratios = []
  for name, layer in params.items():
    experts = layer.get('moe', {}).get('experts') if name.startswith('layers_') else None
    for w in (experts or {}).values():
      w = np.asarray(w)
      half = w.shape[0] // 2
      diff = np.linalg.norm((w[half:] - w[:half]).reshape(half, -1), axis=1)
      ratios += list(diff / np.linalg.norm(w[:half].reshape(half, -1), axis=1))
  return float(np.mean(ratios)) if ratios else None


def norm_profile(run):
  """{layer index: mean weight norm} at the run's last eval (norms/layers_i/weights)."""
  rows = [row for row in run['metrics'] if 'val_loss' in row]
  if not rows:
    return {}
  keys = (re.fullmatch(r'norms/layers_(\d+)/weights', k) for k in rows[-1])
  return dict(sorted((int(m.group(1)), rows[-1][m.group(0)]) for m in keys if m))


_EQUAL = re.compile(r'(interpose|stack)_(stable|annealed)_(\d+)_s(\d+)')
_EQUAL_BASE = re.compile(r'base_(stable|annealed)_s(\d+)')
_EQUAL_SCRATCH = re.compile(r'scratch_(total|additional)_(\d+)_s(\d+)')
_FIG7 = 'growth beats scratch at equal additional FLOPs (Fig. 7)'
_FIG8 = 'growth on par with or better than scratch at equal total FLOPs (Fig. 8)'
_FIG3 = 'interposition beats stacking from a converged (annealed) checkpoint (Fig. 3)'
_FIG3_STABLE = 'interposition beats stacking (Fig. 3), here from a stable base'
_STABLE = 'a constant-LR checkpoint grows at least as well as an annealed one (sec. 4.1)'


def total_flops(run):
  """Training FLOPs behind the run's last logged step: its source's and its own
  (None before it wrote run.json)."""
  return sunk_flops(run) + step_flops(run) * run['step'] if run['info'] else None


def equal_flops_seeds(runs):
  """The seeds of experiments/seed003/equal_flops.py's runs, and their budgets n."""
  grown = [m for m in map(_EQUAL.fullmatch, runs) if m]
  return sorted({int(m.group(4)) for m in grown}), sorted({int(m.group(3)) for m in grown})


def equal_flops_pairs(runs):
  """equal_flops.py's comparisons, each a dict(label, claim, pairs=[(a, b) per
  seed], low, high): the claim is low <= a - b <= high."""
  seeds, budgets = equal_flops_seeds(runs)
  pairs = lambda a, b: [(f'{a}_s{s}', f'{b}_s{s}') for s in seeds]
  out = []
  for n in budgets:
    for base in ('stable', 'annealed'):
      for kind, claim in (('additional', _FIG7), ('total', _FIG8)):
        out.append(dict(label=f'interpose_{base} +{n} - scratch_{kind}', claim=claim,
                        pairs=pairs(f'interpose_{base}_{n}', f'scratch_{kind}_{n}')))
    for base, claim in (('annealed', _FIG3), ('stable', _FIG3_STABLE)):
      out.append(dict(label=f'interpose - stack, {base} base, +{n}', claim=claim,
                      pairs=pairs(f'interpose_{base}_{n}', f'stack_{base}_{n}')))
    out.append(dict(label=f'interpose, annealed - stable base, +{n}', claim=_STABLE, low=0.0,
                    high=np.inf, pairs=pairs(f'interpose_annealed_{n}', f'interpose_stable_{n}')))
  return out


def equal_flops_rows(runs):
  """`paired_rows` of `equal_flops_pairs`."""
  return paired_rows(runs, equal_flops_pairs(runs))


def equal_flops_losses(runs):
  """Per arm (grown, scratch and base runs of equal_flops.py, without the seed
  suffix): dict(arm, losses={seed: final val loss}, flops=training FLOPs of
  its first finished seed)."""
  arms = {}
  for name, run in runs.items():
    m = next((m for m in (r.fullmatch(name) for r in (_EQUAL, _EQUAL_BASE, _EQUAL_SCRATCH))
              if m), None)
    if m:
      arm = arms.setdefault(name.rsplit('_s', 1)[0], dict(losses={}, flops=None))
      arm['losses'][int(m.groups()[-1])] = report.final(run)
      arm['flops'] = arm['flops'] or (total_flops(run) if _done(run) else None)
  return [dict(a, arm=k) for k, a in sorted(arms.items())]


def _done(run):
  return run is not None and run['state'] == 'done' and run['info'] is not None


def flops_gaps(runs):
  """Per budget n, base and seed, the training FLOPs of scratch_total against
  the interposed run's (base + growth), as trained: dict(n, base, seed,
  growth, scratch, steps: the gap in steps of scratch). Finished pairs only."""
  seeds, budgets = equal_flops_seeds(runs)
  out = []
  for n, base, s in itertools.product(budgets, ('stable', 'annealed'), seeds):
    grown, scratch = runs.get(f'interpose_{base}_{n}_s{s}'), runs.get(f'scratch_total_{n}_s{s}')
    if _done(grown) and _done(scratch):
      g, t = total_flops(grown), total_flops(scratch)
      out.append(dict(n=n, base=base, seed=s, growth=g, scratch=t,
                      steps=(t - g) / step_flops(scratch)))
  return out


def base_norms(runs):
  """{base run: norm_profile} of equal_flops.py's stable and annealed bases."""
  return {name: norm_profile(run) for name, run in sorted(runs.items())
          if _EQUAL_BASE.fullmatch(name)}
