r"""Seed 002's D1 x D2 grid at CPU scale, with MoE-from-scratch and dense baselines.

  python -m experiments.launch --config=experiments/seed002/grid.py --workdir=DIR --parallel=2
  python -m experiments.seed002.report --study=grid --workdir=DIR

For each size d_model in common.SIZES (experiments/seed002/common.py):
  dense{d}_D1=T   dense runs of T steps in DENSE_D1: one long WSD run and decay
                  branches from its stable phase (seed 002 sec. 3.1)
  up{d}_D1=T1_D2=T2
                  the dense run of T1 steps, upcycled (every expert a copy of
                  its MLP, configs/upcycle/dense_to_moe.py) and trained T2
                  steps in UP_D2: one long WSD run per T1 and decay branches
  moe{d}_D=T      the MoE trained from scratch for T steps in MOE_D (long run
                  and branches)
A step is 1,024 tokens; collect turns steps into D1 / D2 tokens. The report
collects the runs (`python -m moe_jax.scaling_laws collect`), fits seed 002's
forms (eqs. 3, 8, 9, 12) with leave-one-out RMS and bootstrap intervals, puts
the exponents beside Table 2's and gives D* (eq. 13) at our sizes.
`:small`: one size, two budgets each, a few steps (CI). `:one_size`: the
smallest size, a 3 x 3 grid of short budgets (what the shared 2-core machine
could run in half an hour: enough runs for Table 1's forms, not for Table 2).
"""
from experiments.seed002 import common

DENSE_D1 = (50, 150, 400)
UP_D2 = (25, 50, 100, 200)
MOE_D = (50, 100, 200, 400)
SMALL = dict(sizes=(32,), dense=(5, 10), up=(5, 10), moe=(5, 10))
ONE_SIZE = dict(sizes=(32,), dense=(20, 40, 80), up=(10, 20, 40), moe=(40, 80))


def parse(arg=None):
  return common.parse(arg, one_size=False)


def budgets(arg=None):
  """dict(sizes, dense, up, moe): the sizes and the step budgets of each kind."""
  arg = parse(arg)
  if arg.small or arg.one_size:
    return SMALL if arg.small else ONE_SIZE
  return dict(sizes=common.SIZES, dense=DENSE_D1, up=UP_D2, moe=MOE_D)


def get_config(arg=None):
  return common.config(parse(arg).small)


def get_hyper(h, arg=None):
  return points(h, budgets(arg))


def points(h, b):
  """The grid of budgets `b` (dict(sizes, dense, up, moe), steps)."""
  points = []
  for d in b['sizes']:
    size = common.size(d)
    dense = lambda t, d=d: f'dense{d}_D1={t}'
    points += common.family(h, dense, b['dense'], **size)
    for d1 in b['dense']:
      points += common.family(h, lambda t, d=d, d1=d1: f'up{d}_D1={d1}_D2={t}', b['up'],
                              start=common.upcycled(h, dense(d1), d1), **size, **common.moe())
    points += common.family(h, lambda t, d=d: f'moe{d}_D={t}', b['moe'], **size, **common.moe())
  return points
