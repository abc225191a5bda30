r"""Seed 000 Table 4 at CPU scale: duplication strategies x CPT budget.

  python -m experiments.launch --config=experiments/seed000/table4.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=4 --workdir=DIR

The Fixed-E run's state at tau = 20 u grown E -> 2E and trained to T = tau +
CPT, CPT = 25 ... 100% of tau (experiments/seed000/base.py), by each strategy:
  random       the new experts Kaiming-initialised (expert_heuristic=random)
  uniform      every expert copied once (seed 000 §4.1)
  weight_norm, saliency, grad_norm, curvature
               utility-based (§4.2), copies by `allocation` (below):
               ||w||^2, ||g||.||w||, ||g||^2, ||g||^2/H
beside Fixed-E and Fixed-2E decayed at T. Every seed has its own long Fixed-E
and Fixed-2E runs (T = tau + the seed's largest CPT; seed 0's are `fixed` and
`fixed2x`, seed s's `s{s}_fixed`, ...) whose WSD decay branches are the Fixed
runs at smaller T; the upcycled runs grow the long Fixed-E run at tau.

Arguments: `allocation` (dhondt | proportional | sampled: how utility scores
become replica counts, upcycle.args.utility_allocation, moe_jax/upcycle/
utility.py), `cpt` (seed 0's budgets, % of tau, '+'-separated) and
`seed_cpt` (the budgets of seeds 1 .. seeds-1). Issue 35's rerun with the
proportional rule at 25 % and 100 % CPT, 3 seeds:

  python -m experiments.launch \
      --config=experiments/seed000/table4.py:allocation=proportional,cpt=25+100,seed_cpt=25+100 \
      --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=4 --workdir=DIR \
      --arg=allocation=proportional,cpt=25+100,seed_cpt=25+100

`control=True` adds the arm
  equal_draw   the extra copies drawn with replacement with probability 1/E
               (upcycle.args.utility_allocation=equal; ||w||^2 scores, which
               need no gradients, are computed and ignored): `sampled`'s
               randomness without its utility

Issue 71's run, its settings fixed here before it was launched: the seed's
greedy rule, D'Hondt (§5.3.2), at 25 % CPT, seeds 0-5, every strategy and
the equal_draw control, 54 runs:

  python -m experiments.launch \
      --config=experiments/seed000/table4.py:allocation=dhondt,cpt=25,seed_cpt=25,seeds=6,control=True \
      --workdir=DIR --parallel=1
  python -m experiments.seed000.report --table=4 --workdir=DIR \
      --arg=allocation=dhondt,cpt=25,seed_cpt=25,seeds=6,control=True

It answers two open questions of docs/seed000.md: does the seed's own rule
(which at m = 2 gives near-equal utilities their second copy each, i.e.
uniform) reproduce Table 4, and is `sampled`'s 6-seed gain over Uniform
(-0.0084 [-0.0137, -0.0032], docs/seed000/table4_sampled.json) the utility's
or the random counts' (‖g‖² sampled against equal_draw)? Cost, from
table4_sampled.json's wall_s (two runs at a time beside other jobs): 12
Fixed runs of 1,000 steps at ~150 s, 42 upcycled branches of 200 steps at
~60 s, about 4,400 s of run time (1.2 hours) at --parallel=1 on an idle
machine, more beside other jobs.

`:small`: the 100% row (no decay branches), two strategies, one seed, a tiny
model (CI); `small,allocation=proportional` the same with that rule.
"""
from experiments.seed000 import base
from moe_jax.upcycle import utility

STRATEGIES = ('random', 'uniform', 'weight_norm', 'saliency', 'grad_norm', 'curvature')
CPT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def _arg(arg):
  a = base.parse(arg, allocation='dhondt', cpt='25+50+75+100', seed_cpt='25', control=False)
  utility.check_allocation(a.allocation)
  if a.small:
    a.update(cpt='100', seeds=1)
  return a


def _fractions(text):
  out = sorted({int(c) / 100 for c in str(text).split('+') if c})
  if any(not 0 < f <= 1 for f in out):
    raise ValueError(f'CPT budgets {text!r} must be in (0, 100] % of tau')
  return tuple(out)


def strategies(arg=None):
  """The strategies a sweep runs: STRATEGIES (two at `:small`), and
  equal_draw where `control`."""
  a = _arg(arg)
  return (('random', 'curvature') if a.small else STRATEGIES) + (
      ('equal_draw',) if a.control else ())


def strategy(name):
  """The config overrides of a duplication strategy."""
  if name == 'equal_draw':
    return {'upcycle.args.allocation': 'utility', 'upcycle.args.utility_metric': 'weight_norm',
            'upcycle.args.utility_allocation': 'equal'}
  if name == 'random':
    return {'upcycle.args.allocation': 'uniform', 'upcycle.args.expert_heuristic': 'random'}
  if name == 'uniform':
    return {'upcycle.args.allocation': 'uniform'}
  return {'upcycle.args.allocation': 'utility', 'upcycle.args.utility_metric': name}


def _prefix(seed):
  return f's{seed}_' if seed else ''


def plan(arg=None):
  """{seed: its CPT fractions}: seed 0 runs `cpt`, the others `seed_cpt`."""
  a = _arg(arg)
  return {seed: _fractions(a.cpt if not seed else a.seed_cpt) for seed in range(a.seeds)
          if seed == 0 or _fractions(a.seed_cpt)}


def rows(arg=None):
  """[(seed, CPT fraction, {column: run name})], column in fixed, fixed2x and STRATEGIES.
  A seed's longest budget's Fixed runs are its long runs, the others their branches."""
  names = strategies(arg)
  out = []
  for seed, fractions in plan(arg).items():
    p = _prefix(seed)
    for f in fractions:
      cpt = round(100 * f)
      fixed = {arm: p + arm if f == fractions[-1] else f'{p}cpt={cpt}_{arm}'
               for arm in ('fixed', 'fixed2x')}
      out.append((seed, f, dict(fixed, **{s: f'{p}cpt={cpt}_{s}' for s in names})))
  return out


def get_config(arg=None):
  a = _arg(arg)
  config = base.config(a)
  config.upcycle.args.utility_allocation = a.allocation
  return config


def get_hyper(h, arg=None):
  a = _arg(arg)
  u = base.unit(a)
  tau, e = 20 * u, get_config(arg).moe.num_experts
  points = []
  for seed, fractions in plan(arg).items():
    p, longest = _prefix(seed), tau + round(fractions[-1] * tau)
    d = base.decay_steps(longest, tau)
    for arm, experts in (('fixed', e), ('fixed2x', 2 * e)):   # the seed's long runs
      points.append({'name': p + arm, 'config.seed': seed, 'config.total_steps': longest,
                     'config.opt.decay_fraction': d / longest,
                     'config.moe.num_experts': experts})
  for seed, f, names in rows(arg):
    total, p = tau + round(f * tau), _prefix(seed)
    if names['fixed'] != p + 'fixed':   # a shorter budget: decay branches of the long runs
      for arm, experts in (('fixed', e), ('fixed2x', 2 * e)):
        points.append(dict(base.fixed(h, p + arm, total, tau, names[arm]), **{
            'config.seed': seed, 'config.moe.num_experts': experts}))
    for s, name in names.items():
      if s not in ('fixed', 'fixed2x'):
        points.append(dict(base.upcycled(h, p + 'fixed', tau, total, name, strategy(s)),
                           **{'config.seed': seed}))
  return points
