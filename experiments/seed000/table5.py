r"""Seed 000 Table 5 at CPU scale: activation ratio, expert vs sparse upcycling.

  python -m experiments.launch --config=experiments/seed000/table5.py --workdir=DIR --parallel=2
  python -m experiments.seed000.report --table=5 --workdir=DIR

Top-2 (the seed's Table 5 is top-1) and uniform duplication; for each target
of 2E = 8, 16, 32, 64 experts (K/E = 25% ... 3.1%, the seed's four rows):
  moe_E            Fixed-E and Fixed-2E: `moe_{n}` trained T_max = 40 u steps
  up_E             expert upcycling: moe_E's state at tau = 20 u grown to 2E
                   (expand_experts in the run) and trained to T_max
  sparse_2E        sparse upcycling: the dense run's state at tau (MLP width
                   of one expert) grown to 2E exact copies (dense_to_moe in
                   the run) and trained to T_max
The dense run is shared by every row. `:small`: the row 2 -> 4, a tiny model (CI).
"""
from configs import quickstart
from experiments.seed000 import base

EXPERTS = (4, 8, 16, 32)   # E; targets 2E


def _arg(arg):
  return base.parse(arg)


def rows(arg=None):
  """[(E, {column: run name})], columns fixed, fixed2x, upcycled, sparse."""
  experts = (2,) if _arg(arg).small else EXPERTS
  return [(e, dict(fixed=f'moe_{e}', fixed2x=f'moe_{2 * e}', upcycled=f'up_{e}',
                   sparse=f'sparse_{2 * e}')) for e in experts]


def get_config(arg=None):
  """The regime's model, T_max steps, checkpoints every u kept; upcycle.args
  empty: expand_experts duplicates uniformly and dense_to_moe copies, their
  recipes' defaults (one config holds both transitions)."""
  a = _arg(arg)
  u = base.unit(a)
  config = quickstart.get_config('small' if a.small else '')
  every = 5 if a.small else u
  config.update(total_steps=40 * u, checkpoint_every_steps=every, log_every_steps=min(every, 25),
                eval_every_steps=8 * every)
  config.ckpt.keep_every = every
  return config


def get_hyper(h, arg=None):
  u = base.unit(_arg(arg))
  tau = 20 * u
  table = rows(arg)
  counts = sorted({e for e, _ in table} | {2 * e for e, _ in table})
  points = [{'name': f'moe_{n}', 'config.moe.num_experts': n} for n in counts]
  points.append({'name': 'dense', 'config.moe.num_experts': 0})
  branch = {'config.upcycle.step': tau, 'config.ckpt.keep_every': 0}
  for e, names in table:
    target = {'config.upcycle.target.moe.num_experts': 2 * e}
    points.append(dict(branch, **target, name=names['upcycled'], resume_from=h.run(
        names['fixed'], step=tau), **{'config.moe.num_experts': e,
                                      'config.upcycle.recipe': 'expand_experts'}))
    points.append(dict(branch, **target, name=names['sparse'], resume_from=h.run(
        'dense', step=tau), **{'config.moe.num_experts': 0,
                               'config.upcycle.recipe': 'dense_to_moe'}))
  return points
