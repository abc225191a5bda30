r"""The README's main job: seed 000's comparison at CPU scale, summarised.

  python -m experiments.quickstart --workdir=/tmp/moe_jax_quickstart [--parallel=2]

launches the sweep of configs/quickstart.py (Fixed-E, Upcycled E->2E at tau by
uniform duplication, Fixed-2E, sparse-upcycled dense->2E at tau; several
seeds; two runs at a time), then prints per arm the final validation loss as mean +- sd over
seeds, the corpus' unigram entropy, four paired differences over seeds with
their 95% t intervals (Fixed-E - Fixed-2E, Upcycled - Fixed-2E, Fixed-E -
Upcycled, sparse - Upcycled; experiments/stats.py), the upcycling efficiency eta (seed 000 eq.
4) as the ratio of mean gaps with a seeded bootstrap interval (per seed as
detail), and the cost of the upcycled run relative to Fixed-2E by seed 000's
cost model (eqs. 1-2) with the step times these runs measured. The table
goes to WORKDIR/quickstart.json too, the loss curves (tau marked) to
WORKDIR/quickstart.png. Interrupted, it resumes where it stopped; launched
again when done, it only prints.

  python -m experiments.quickstart --results=docs/seed000/quickstart.json

prints the summary of a saved quickstart.json (its per-seed final losses are
all the statistics need), launching and writing nothing.
"""
import os
import sys

from absl import flags

from configs import quickstart
from experiments import launch, plots, provenance, report, stats
from experiments.seed000 import analysis
from moe_jax import cli
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import cost
from moe_jax.workdir import files


_LABELS = {'fixed': 'Fixed-E', 'upcycled': 'Upcycled E->2E', 'fixed2x': 'Fixed-2E',
           'sparse': 'sparse dense->2E'}
# The paired tests, each first - second: the regime gap, the upcycled arm
# against each bound (issue 30), and sparse against expert upcycling (seed 000
# Table 5's comparison).
_PAIRS = (('fixed', 'fixed2x'), ('upcycled', 'fixed2x'), ('fixed', 'upcycled'),
          ('sparse', 'upcycled'))


def summarise(workdir, arg=''):
  """The quickstart's numbers from its finished runs (a dict, JSON-ready): the
  per-seed final losses, which is all `text` needs, what it derives, the
  sweep's `arg` (experiments.rerun relaunches runs from it) and provenance."""
  config = quickstart.get_config(arg)
  names = quickstart.runs(arg)
  runs = {r['name']: r for r in report.load_runs(workdir)}
  losses = {arm: {} for arm in quickstart.ARMS}
  for name, (arm, seed) in names.items():
    losses[arm][seed] = report.final(runs[name])
  seeds = sorted(losses['fixed'])
  s_e = analysis.mean_sd([analysis.step_seconds(runs[f'fixed_s{s}']) for s in seeds])[0]
  s_2e = analysis.mean_sd([analysis.step_seconds(runs[f'fixed2x_s{s}']) for s in seeds])[0]
  steps, tau = config.total_steps, config.total_steps // 2
  prices = cost.upcycling_cost(s_e, s_2e, steps, tau)
  tokenizer = pipeline.tokenizer_for(config, os.path.join(workdir, next(iter(names))))
  losses = {arm: [by_seed[s] for s in seeds] for arm, by_seed in losses.items()}
  return dict(
      steps=steps, tau=tau, experts=config.moe.num_experts, seeds=seeds, losses=losses,
      unigram_entropy=pipeline.validation_entropy(config, tokenizer),
      evidence=evidence(losses),
      step_seconds=dict(fixed=s_e, fixed2x=s_2e),
      cost=dict(C_up_over_C_fs=prices['C_up'] / prices['C_fs'],
                saving_fraction=prices['saving_fraction']),
      arg=arg, provenance=provenance.record())


def evidence(losses):
  """The comparisons, from the per-seed final losses alone: the paired
  differences of _PAIRS over seeds (t intervals) and eta as the ratio of the mean gaps
  with a seeded bootstrap interval over seeds (per-seed eta as detail)."""
  fixed, up, fixed2x = (losses[a] for a in ('fixed', 'upcycled', 'fixed2x'))
  diff = lambda a, b: [x - y for x, y in zip(a, b)]
  tests = {f'{_LABELS[a]} - {_LABELS[b]}': dict(stats.paired(diff(losses[a], losses[b])),
                                                per_seed=diff(losses[a], losses[b]))
           for a, b in _PAIRS}
  gaps, closed = diff(fixed, fixed2x), diff(fixed, up)
  eta = dict(per_seed=[analysis.eta(f, u, f2) for f, u, f2 in zip(fixed, up, fixed2x)])
  if len(gaps) > 1 and sum(gaps) > 0:
    eta.update(stats.ratio_of_means(closed, gaps))
  elif gaps and sum(gaps) > 0:
    eta.update(estimate=sum(closed) / sum(gaps))
  return dict(paired=tests, eta=eta)


def _pm(values):
  mean, sd = analysis.mean_sd(values)
  return f'{mean:.4f} +- {sd:.4f}'


def _reading(t, first, second):
  """What a paired difference first - second (a loss gap) supports."""
  if t['n'] < 2:
    return 'one seed: no interval'
  v = stats.verdict((t['lo'], t['hi']), low=0.0)
  return {'agrees': f'{second} is better', 'disagrees': f'{first} is better',
          'inconclusive': 'inconclusive (the interval holds 0)'}[v]


def text(s):
  """The printed summary of `summarise`'s dict (its per-seed losses suffice:
  the statistics are recomputed from them)."""
  e, n = s['experts'], len(s['seeds'])
  ev = evidence(s['losses'])
  out = [f'seed 000 at CPU scale: E={e} -> 2E={2 * e} experts, top-2, T={s["steps"]} steps, '
         f'tau={s["tau"]}; validation loss (nats/byte), mean +- sd over {n} seeds']
  for arm in quickstart.ARMS:
    out.append(f'  {_LABELS[arm]:<18}{_pm(s["losses"][arm])}')
  out.append(f'  {"unigram":<18}{s["unigram_entropy"]:.4f}            (entropy of the '
             'validation split: a model that ignores context)')
  out.append(f'\npaired differences of final validation loss over the {n} seeds (positive: '
             'the second arm is lower), mean [95% t interval], two-sided p:')
  for (a, b), (name, t) in zip(_PAIRS, ev['paired'].items()):
    ci = ('' if t['n'] < 2 else
          f' [{t["lo"]:+.4f}, {t["hi"]:+.4f}], p = {t["p"]:.2f}')
    out.append(f'  {name:<34}{t["mean"]:+.4f}{ci}; per seed '
               + ', '.join(f'{x:+.4f}' for x in t['per_seed'])
               + f': {_reading(t, _LABELS[a], _LABELS[b])}')
  eta = ev['eta']
  out.append('upcycling efficiency eta (seed 000 eq. 4; 1: Upcycled matches Fixed-2E, 0: no '
             'better than Fixed-E) as the ratio of mean gaps,\n  mean(Fixed-E - Upcycled) / '
             'mean(Fixed-E - Fixed-2E): ' + (
                 'undefined (Fixed-2E is not ahead of Fixed-E on average: no gap to close)'
                 if 'estimate' not in eta else f'{eta["estimate"]:.2f}' + (
                     f' [95% bootstrap interval {eta["lo"]:.2f}, {eta["hi"]:.2f}; '
                     f'{eta["n_resamples"]} resamples of the {n} seeds, rng seed {eta["seed"]}]'
                     if 'lo' in eta else ' (one seed: no interval)')))
  if eta.get('den_nonpositive'):
    out.append(f'  in {100 * eta["den_nonpositive"]:.0f}% of the resamples Fixed-2E is not ahead '
               'of Fixed-E on average: eta means nothing there, and the interval is wide for it')
  out.append('  per seed (detail; a seed\'s gap is noise-sized): ' + ', '.join(
      'undefined' if x is None else f'{x:.2f}' for x in eta['per_seed']))
  st, c = s['step_seconds'], s['cost']
  out.append(f'\ncost (seed 000 eqs. 1-2, measured s_E = {st["fixed"]:.3f} s and s_2E = '
             f'{st["fixed2x"]:.3f} s per step): the upcycled run costs '
             f'{c["C_up_over_C_fs"]:.2f} x Fixed-2E ({100 * c["saving_fraction"]:.0f}% saved)')
  return '\n'.join(out)


def plot(workdir, arg, path):
  """Validation loss of every arm (mean over seeds; thin: each seed), tau dotted."""
  plt = plots.pyplot()
  runs = {r['name']: r for r in report.load_runs(workdir)}
  fig, ax = plt.subplots(figsize=(8, 5))
  for i, arm in enumerate(quickstart.ARMS):
    curves = [analysis.curve(runs[n]) for n, (a, _) in quickstart.runs(arg).items() if a == arm]
    for c in curves:
      ax.plot(*zip(*c), color=f'C{i}', lw=0.6, alpha=0.35)
    steps = sorted(set.intersection(*(set(x for x, _ in c) for c in curves)))
    mean = [sum(dict(c)[x] for c in curves) / len(curves) for x in steps]
    ax.plot(steps, mean, 'o-', color=f'C{i}', ms=3, label=_LABELS[arm])
  tau = quickstart.get_config(arg).total_steps // 2
  ax.axvline(tau, color='k', ls=':', lw=1.2, label=f'tau = {tau}')
  ax.set(xlabel='step', ylabel='validation loss (nats/byte)',
         title='seed 000 at CPU scale: mean over seeds (thin: each seed)')
  ax.legend(fontsize=8)
  fig.tight_layout()
  plots.save(fig, path)
  plt.close(fig)
  return path


def read(path):
  """A quickstart.json written by `main`, checked for what `text` reads."""
  if not os.path.isfile(path):
    raise ConfigError(f'--results={path} is not a file')
  summary = files.read_json(path)
  for key in ('steps', 'tau', 'experts', 'seeds', 'losses', 'unigram_entropy', 'step_seconds',
              'cost'):
    if key not in summary:
      raise ConfigError(f'--results={path} has no key {key!r}')
  for arm in quickstart.ARMS:
    got = summary['losses'].get(arm)
    if not isinstance(got, list) or len(got) != len(summary['seeds']) or None in got:
      raise ConfigError(f'--results={path}: losses.{arm} is not one number per seed')
  return summary


def main(argv):
  del argv
  f = flags.FLAGS
  if f.results:
    print(text(cli.run_reporting_errors(read, f.results)))
    return
  workdir = os.path.abspath(os.path.expanduser(f.workdir))
  spec = f'{quickstart.__file__}:{f.arg}' if f.arg else quickstart.__file__
  # Runs of one shape compile once: a JAX compilation cache the runs share.
  os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(workdir, '.jax_cache'))
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
  os.environ.setdefault('JAX_COMPILATION_CACHE_MAX_SIZE', str(2**30))
  code = cli.run_reporting_errors(launch.launch, spec, workdir, 'local', f.parallel)
  if code:
    sys.exit(code)
  summary = cli.run_reporting_errors(summarise, workdir, f.arg)
  png = plot(workdir, f.arg, os.path.join(workdir, 'quickstart.png'))
  files.write_json(os.path.join(workdir, 'quickstart.json'), summary)
  print('\n' + text(summary) + f'\n\ncurves: {png}\ntable: {os.path.join(workdir, "quickstart.json")}')


if __name__ == '__main__':   # flags only here: tests and check_docs import this module
  flags.DEFINE_string('workdir', '/tmp/moe_jax_quickstart', 'Where the runs go.')
  flags.DEFINE_string('arg', '', "configs/quickstart.py's argument, e.g. 'small' or "
                      "'steps=2000,seeds=5'.")
  flags.DEFINE_integer('parallel', 2, 'Runs at a time (one per core).')
  flags.DEFINE_string('results', None, 'A quickstart.json: print its summary from it alone '
                      '(launches and writes nothing).')
  cli.run_app(main)
