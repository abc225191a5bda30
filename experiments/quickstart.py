r"""The README's main job: seed 000's comparison at CPU scale, summarised.

  python -m experiments.quickstart --workdir=/tmp/moe_jax_quickstart [--parallel=2]

launches the sweep of configs/quickstart.py (Fixed-E, Upcycled E->2E at tau by
uniform duplication, Fixed-2E, sparse-upcycled dense->2E at tau; several
seeds; two runs at a time), then prints per arm the final validation loss as mean +- sd over
seeds, the corpus' unigram entropy, the paired gap val(Fixed-E) -
val(Fixed-2E) per seed, the upcycling efficiency eta (seed 000 eq. 4) per
seed, and the cost of the upcycled run relative to Fixed-2E by seed 000's
cost model (eqs. 1-2) with the step times these runs measured. The table
goes to WORKDIR/quickstart.json too, the loss curves (tau marked) to
WORKDIR/quickstart.png. Interrupted, it resumes where it stopped; launched
again when done, it only prints.
"""
import os
import sys

from absl import flags

from configs import quickstart
from experiments import launch, plots, report
from experiments.seed000 import analysis
from moe_jax import cli
from moe_jax.data import pipeline
from moe_jax.scaling_laws import cost
from moe_jax.workdir import files

_WORKDIR = flags.DEFINE_string('workdir', '/tmp/moe_jax_quickstart', 'Where the runs go.')
_ARG = flags.DEFINE_string('arg', '', "configs/quickstart.py's argument, e.g. 'small' or "
                           "'steps=2000,seeds=5'.")
_PARALLEL = flags.DEFINE_integer('parallel', 2, 'Runs at a time (one per core).')

_LABELS = {'fixed': 'Fixed-E', 'upcycled': 'Upcycled E->2E', 'fixed2x': 'Fixed-2E',
           'sparse': 'sparse dense->2E'}


def summarise(workdir, arg=''):
  """The quickstart's numbers from its finished runs (a dict, JSON-ready)."""
  config = quickstart.get_config(arg)
  names = quickstart.runs(arg)
  runs = {r['name']: r for r in report.load_runs(workdir)}
  losses = {arm: {} for arm in quickstart.ARMS}
  for name, (arm, seed) in names.items():
    losses[arm][seed] = analysis.final_loss(runs[name])
  seeds = sorted(losses['fixed'])
  gaps = [losses['fixed'][s] - losses['fixed2x'][s] for s in seeds]
  etas = [analysis.eta(losses['fixed'][s], losses['upcycled'][s], losses['fixed2x'][s])
          for s in seeds]
  s_e = analysis.mean_sd([analysis.step_seconds(runs[f'fixed_s{s}']) for s in seeds])[0]
  s_2e = analysis.mean_sd([analysis.step_seconds(runs[f'fixed2x_s{s}']) for s in seeds])[0]
  steps, tau = config.total_steps, config.total_steps // 2
  prices = cost.upcycling_cost(s_e, s_2e, steps, tau)
  tokenizer = pipeline.tokenizer_for(config, os.path.join(workdir, next(iter(names))))
  return dict(
      steps=steps, tau=tau, experts=config.moe.num_experts, seeds=seeds,
      losses={arm: [by_seed[s] for s in seeds] for arm, by_seed in losses.items()},
      unigram_entropy=pipeline.validation_entropy(config, tokenizer),
      gap=dict(analysis.paired(gaps), per_seed=gaps),
      eta=dict(per_seed=etas, mean_sd=analysis.mean_sd(etas)),
      step_seconds=dict(fixed=s_e, fixed2x=s_2e),
      cost=dict(C_up_over_C_fs=prices['C_up'] / prices['C_fs'],
                saving_fraction=prices['saving_fraction']))


def _pm(values):
  mean, sd = analysis.mean_sd(values)
  return f'{mean:.4f} +- {sd:.4f}'


def text(s):
  """The printed summary of `summarise`'s dict."""
  e, n = s['experts'], len(s['seeds'])
  out = [f'seed 000 at CPU scale: E={e} -> 2E={2 * e} experts, top-2, T={s["steps"]} steps, '
         f'tau={s["tau"]}; validation loss (nats/byte), mean +- sd over {n} seeds']
  for arm in quickstart.ARMS:
    out.append(f'  {_LABELS[arm]:<18}{_pm(s["losses"][arm])}')
  out.append(f'  {"unigram":<18}{s["unigram_entropy"]:.4f}            (entropy of the '
             'validation split: a model that ignores context)')
  g = s['gap']
  out.append('\npaired gap val(Fixed-E) - val(Fixed-2E) per seed: '
             + ', '.join(f'{x:+.4f}' for x in g['per_seed'])
             + f'\n  mean {g["mean"]:+.4f}, standard error {g["se"]:.4f}: '
             + ('Fixed-2E is better in every seed by more than 2 standard errors'
                if g['met'] else 'NOT the regime criterion (every seed > 0 and mean > 2 se)'))
  etas = s['eta']['per_seed']
  out.append('upcycling efficiency eta (seed 000 eq. 4; 1: Upcycled matches Fixed-2E, '
             '0: no better than Fixed-E) per seed: '
             + ', '.join('undefined' if x is None else f'{x:.2f}' for x in etas))
  missing = [seed for seed, x in zip(s['seeds'], etas) if x is None]
  if missing:
    out.append(f'  eta is undefined for seed(s) {missing}: Fixed-2E did not beat Fixed-E '
               'there, so there is no gap to close')
  mean, sd = s['eta']['mean_sd']
  if mean is not None:
    out.append(f'  eta = {mean:.2f} +- {sd:.2f} over the seeds where it is defined')
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


def main(argv):
  del argv
  workdir = os.path.abspath(os.path.expanduser(_WORKDIR.value))
  spec = f'{quickstart.__file__}:{_ARG.value}' if _ARG.value else quickstart.__file__
  # Runs of one shape compile once: a JAX compilation cache the runs share.
  os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', os.path.join(workdir, '.jax_cache'))
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')
  os.environ.setdefault('JAX_COMPILATION_CACHE_MAX_SIZE', str(2**30))
  code = cli.run_reporting_errors(launch.launch, spec, workdir, 'local', _PARALLEL.value)
  if code:
    sys.exit(code)
  summary = cli.run_reporting_errors(summarise, workdir, _ARG.value)
  png = plot(workdir, _ARG.value, os.path.join(workdir, 'quickstart.png'))
  files.write_json(os.path.join(workdir, 'quickstart.json'), summary)
  print('\n' + text(summary) + f'\n\ncurves: {png}\ntable: {os.path.join(workdir, "quickstart.json")}')


if __name__ == '__main__':
  cli.run_app(main)
