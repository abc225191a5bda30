r"""How long must CPT be? Seed 000's eta as CPT grows from 1x to 4x tau (issue 35).

  python -m experiments.launch --config=experiments/seed000/cpt_length.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=cpt --workdir=DIR

The regime's model (experiments/seed000/base.py) and tau = 20 u = 800 steps;
for each seed s and each CPT = c x tau in `cpt` (default 1+2+4, T = 1600,
2400, 4000):
  s{s}_fixed, s{s}_fixed2x     Fixed-E and Fixed-2E, one long run each to the
                               largest T (checkpoints every u kept)
  s{s}_T={T}_fixed, ..._fixed2x  their WSD decay branches at each smaller T
  s{s}_T={T}_up                the long Fixed-E run's state at tau grown E -> 2E
                               (expand_experts, uniform, in the run) and
                               trained to T, decaying over the same last D steps
and at CPT = `arms_at` x tau (default 2) the two procedure arms of the review:
  s{s}_annealed_src            Fixed-E annealed at tau: a decay branch of the
                               long run over its last 10% before tau (seed 000
                               §5.1 anneals every stage)
  s{s}_T={T}_annealed          ... grown at tau and trained to T, rewarming over
                               opt.warmup_steps (its learning rate starts at
                               the decayed value)
  s{s}_pretrain                Fixed-E to tau on the pretrain part of the data
                               (data.part=pretrain, moe_jax/data/corpus.py),
                               its learning rate held at the peak
  s{s}_T={T}_disjoint          ... grown at tau and trained to T on the cpt
                               part (data.part=cpt: documents it never saw; the
                               trainer starts that stream from its beginning)
The Fixed runs of every row read the whole training split. `:small` is
one seed, CPT 2x tau (the two arms, no decay branch: the full size's are
checked by tests/experiments/test_seed000.py), a tiny model (CI), whose
annealed source decays its last quarter instead of 10 % (tau - 5 steps: a
checkpoint of the small sweeps' every 5, not one every 2 steps).
"""
from experiments.seed000 import base


def _arg(arg):
  a = base.parse(arg, cpt='1+2+4', arms_at=2)
  if a.small:
    a.update(cpt='2', seeds=1)
  return a


def multiples(arg=None):
  a = _arg(arg)
  return tuple(sorted({int(c) for c in str(a.cpt).split('+') if c}))


def budgets(arg=None):
  """{CPT multiple c: T = tau + c tau}."""
  tau = 20 * base.unit(_arg(arg))
  return {c: tau + c * tau for c in multiples(arg)}


def rows(arg=None):
  """[(seed, c, {column: run name})], columns fixed, fixed2x, up and, at
  c = arms_at, annealed and disjoint."""
  a = _arg(arg)
  out, longest = [], max(multiples(arg))
  for s in range(a.seeds):
    for c, t in budgets(arg).items():
      names = {arm: f's{s}_{arm}' if c == longest else f's{s}_T={t}_{arm}'
               for arm in ('fixed', 'fixed2x')}
      names['up'] = f's{s}_T={t}_up'
      if c == a.arms_at:
        names.update(annealed=f's{s}_T={t}_annealed', disjoint=f's{s}_T={t}_disjoint')
      out.append((s, c, names))
  return out


SMALL_ANNEAL_FRACTION = 0.25   # :small, tau = 20: the annealed source starts at step 15


def get_config(arg=None):
  """Fixed-E of the regime to the largest T; the checkpoints of
  experiments/seed000/base.py (every u, every 5 steps at :small) kept."""
  a = _arg(arg)
  config = base.config(a)
  config.upcycle.args.allocation = 'uniform'
  longest = max(budgets(arg).values())
  config.update(total_steps=longest, eval_every_steps=longest // 5)
  config.opt.decay_fraction = base.decay_steps(longest, 20 * base.unit(a)) / longest
  return config


def get_hyper(h, arg=None):
  a = _arg(arg)
  config = get_config(arg)
  tau, e = 20 * base.unit(a), config.moe.num_experts
  points = []
  for s in range(a.seeds):
    points += [{'name': f's{s}_fixed', 'config.seed': s},
               {'name': f's{s}_fixed2x', 'config.seed': s, 'config.moe.num_experts': 2 * e}]
  for s, c, names in rows(arg):
    t, seed = budgets(arg)[c], {'config.seed': s}
    if names['fixed'] != f's{s}_fixed':
      points += [dict(base.fixed(h, f's{s}_fixed', t, tau, names['fixed']), **seed),
                 dict(base.fixed(h, f's{s}_fixed2x', t, tau, names['fixed2x']), **seed,
                      **{'config.moe.num_experts': 2 * e})]
    points.append(dict(base.upcycled(h, f's{s}_fixed', tau, t, names['up']), **seed))
    if 'annealed' in names:
      fraction = SMALL_ANNEAL_FRACTION if a.small else base.ANNEAL_FRACTION
      points.append(dict(base.annealed(h, f's{s}_fixed', tau, f's{s}_annealed_src', fraction),
                         **seed))
      points.append(dict(base.upcycled(h, f's{s}_annealed_src', tau, t, names['annealed'], {
          'opt.rewarm_steps': config.opt.warmup_steps}), **seed))
      points.append({'name': f's{s}_pretrain', 'config.seed': s, 'config.total_steps': tau,
                     'config.opt.decay_fraction': 0.0, 'config.data.part': 'pretrain',
                     'config.ckpt.keep_every': 0})
      points.append(dict(base.upcycled(h, f's{s}_pretrain', tau, t, names['disjoint'], {
          'data.part': 'cpt'}), **seed))
  return points
