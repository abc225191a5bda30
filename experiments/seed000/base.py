"""What seed 000's table sweeps share: the model, the step grid and WSD branches.

The model is the regime of configs/quickstart.py (the study in
docs/seed000.md). Steps are counted in units u: pre-training to the
transition is tau = 20 u, and the longest run is T_max = 2 tau (CPT = 100%).
Fixed-E and Fixed-2E are each one long run whose checkpoints (every u, all
kept) feed the rest:

  Fixed at T < T_max   a WSD decay branch (seed 002's checkpoint reuse): the
                       long run's state at T - D, decayed over D = min(0.2 T,
                       T - tau) steps; the same run as one trained to T
  Upcycled at (t, T)   the long Fixed-E run's state at step t, grown there in
                       the run (expand_experts) and trained to T, decaying over
                       the same last D steps
  annealed source      a decay branch of the long run that ends at t (its last
                       10% decayed, seed 000 §5.1: "each training stage
                       concludes with a 10% annealing phase"); an upcycled
                       run may grow it instead of the stable-phase state

so every row of a table shares one schedule shape and one data order, and no
step before a branch point is trained twice. `:small` shrinks the model and
u to seconds for CI.
"""
from configs import common, quickstart

UNIT_STEPS = 40    # u: tau = 800 and T_max = 1600 steps at full size


def parse(arg, **more):
  """The table's argument: `small`, `seeds`, and the table's own keys."""
  return common.parse_arg(arg, small=False, seeds=3, **more)


def unit(arg):
  return 1 if arg.small else UNIT_STEPS


def config(arg, experts=None):
  """Fixed-E of the regime, T_max steps, checkpoints every u kept, and
  expand_experts options (utility allocation by ||g||^2, seed 000's default;
  sweeps override allocation, metric and heuristics)."""
  u = unit(arg)
  base = 'small' if arg.small else ''
  if experts:
    base += (',' if base else '') + f'experts={experts}'
  config = quickstart.get_config(base)
  every = 5 if arg.small else u   # every branch point of the small sweeps is a multiple of 5
  config.update(total_steps=40 * u, checkpoint_every_steps=every, log_every_steps=min(every, 25),
                eval_every_steps=8 * every)
  config.ckpt.keep_every = every
  # copy's option dicts are empty, so a sweep names any heuristic (its default
  # variant, Table 8's best) without option keys of another heuristic.
  config.upcycle.args = common.expand_args(allocation='utility')
  config.upcycle.args.utility_metric = 'grad_norm'   # a key the sweeps override
  if arg.small:
    config.upcycle.args.utility_batches = 2
  return config


def decay_steps(total, tau):
  """D: the last 20% of the run, but never before the transition at tau."""
  return min(round(0.2 * total), total - tau)


def fixed(h, long_run, total, tau, name):
  """The point of a fixed-size run of `total` steps that decays like the
  upcycled runs of that budget: a branch of `long_run` (which itself is the
  run at T_max = 2 tau)."""
  d = decay_steps(total, tau)
  return {'name': name, 'resume_from': h.run(long_run, step=total - d),
          'config.total_steps': total, 'config.opt.decay_fraction': d / total,
          'config.ckpt.keep_every': 0}


def upcycled(h, source, tau, total, name, overrides=None):
  """The point of `source`'s state at tau grown in the run (expand_experts) and
  trained to `total`; `overrides` maps config keys ('upcycle.args.allocation')
  to values."""
  d = decay_steps(total, tau)
  point = {'name': name, 'resume_from': h.run(source, step=tau),
           'config.upcycle.step': tau, 'config.upcycle.recipe': 'expand_experts',
           'config.total_steps': total, 'config.opt.decay_fraction': d / total,
           'config.ckpt.keep_every': 0}
  point.update({f'config.{k}': v for k, v in (overrides or {}).items()})
  return point


ANNEAL_FRACTION = 0.1   # seed 000 §5.1


def annealed(h, long_run, tau, name, fraction=ANNEAL_FRACTION):
  """The point of `long_run` annealed at tau: its state at tau - A decayed over
  the last A = fraction * tau steps to end at tau, whose step-tau checkpoint
  an upcycled run then grows (`upcycled(h, name, tau, ...)` with a rewarm)."""
  a = max(1, round(fraction * tau))
  return {'name': name, 'resume_from': h.run(long_run, step=tau - a),
          'config.total_steps': tau, 'config.opt.decay_fraction': a / tau,
          'config.ckpt.keep_every': 0}
