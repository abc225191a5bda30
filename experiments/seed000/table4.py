r"""Seed 000 Table 4 at CPU scale: duplication strategies x CPT budget.

  python -m experiments.launch --config=experiments/seed000/table4.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=4 --workdir=DIR

The Fixed-E run's state at tau = 20 u grown E -> 2E and trained to T = tau +
CPT, CPT = 25 ... 100% of tau (experiments/seed000/base.py), by each strategy:
  random       the new experts Kaiming-initialised (expert_heuristic=random)
  uniform      every expert copied once (seed 000 §4.1)
  weight_norm, saliency, grad_norm, curvature
               utility-based, greedy with replacement (§4.2, utility.py):
               ||w||^2, ||g||.||w||, ||g||^2, ||g||^2/H
beside Fixed-E and Fixed-2E decayed at T. The 25% row is repeated for seeds
1 .. seeds-1 (`s{seed}_*`; their Fixed runs are their own, T steps).
`:small`: the 100% row (no decay branches), two strategies, one seed, a tiny
model (CI).
"""
from experiments.seed000 import base

STRATEGIES = ('random', 'uniform', 'weight_norm', 'saliency', 'grad_norm', 'curvature')
CPT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def _arg(arg):
  return base.parse(arg)


def strategy(name):
  """The config overrides of a duplication strategy."""
  if name == 'random':
    return {'upcycle.args.allocation': 'uniform', 'upcycle.args.expert_heuristic': 'random'}
  if name == 'uniform':
    return {'upcycle.args.allocation': 'uniform'}
  return {'upcycle.args.allocation': 'utility', 'upcycle.utility_metric': name}


def rows(arg=None):
  """[(seed, CPT fraction, {column: run name})], column in fixed, fixed2x and STRATEGIES."""
  a = _arg(arg)
  strategies = ('random', 'curvature') if a.small else STRATEGIES
  seeds = 1 if a.small else a.seeds
  out = []
  for f in ((1.0,) if a.small else CPT_FRACTIONS):   # small: the long runs are the bounds
    cpt = round(100 * f)
    out.append((0, f, dict({'fixed': 'fixed' if f == 1 else f'cpt={cpt}_fixed',
                            'fixed2x': 'fixed2x' if f == 1 else f'cpt={cpt}_fixed2x'},
                           **{s: f'cpt={cpt}_{s}' for s in strategies})))
  for seed in range(1, seeds):
    out.append((seed, 0.25, dict({'fixed': f's{seed}_fixed', 'fixed2x': f's{seed}_fixed2x'},
                                 **{s: f's{seed}_cpt=25_{s}' for s in strategies})))
  return out


def get_config(arg=None):
  return base.config(_arg(arg))


def get_hyper(h, arg=None):
  a = _arg(arg)
  u = base.unit(a)
  tau, e = 20 * u, get_config(arg).moe.num_experts
  points = [{'name': 'fixed'}, {'name': 'fixed2x', 'config.moe.num_experts': 2 * e}]
  for seed, f, names in rows(arg):
    total = tau + round(f * tau)
    if seed:   # own Fixed runs of T steps; stable through tau (D = T - tau)
      d = base.decay_steps(total, tau)
      for arm, experts in (('fixed', e), ('fixed2x', 2 * e)):
        points.append({'name': names[arm], 'config.seed': seed, 'config.total_steps': total,
                       'config.opt.decay_fraction': d / total,
                       'config.moe.num_experts': experts})
      source = names['fixed']
    else:
      source = 'fixed'
      if f != 1:
        points += [base.fixed(h, 'fixed', total, tau, names['fixed']),
                   dict(base.fixed(h, 'fixed2x', total, tau, names['fixed2x']),
                        **{'config.moe.num_experts': 2 * e})]
    for s, name in names.items():
      if s not in ('fixed', 'fixed2x'):
        point = base.upcycled(h, source, tau, total, name, strategy(s))
        points.append(dict(point, **{'config.seed': seed}) if seed else point)
  return points
