r"""Seed 002's grid extended until eq. 13's D* lies inside the data (issue 36).

  python -m experiments.launch --config=experiments/seed002/extend.py --workdir=DIR --parallel=2
  python -m experiments.seed002.report --study=grid --workdir=DIR

The grid of experiments/seed002/grid.py (same family, names and WSD
branches) at the smallest and the largest size, with budgets four to eight
times longer: the grid's fitted D* (7.7e5 to 1.4e6 tokens, 750 to 1,360
steps) lay 1.3 to 2.3 times beyond its longest budget (614,400 tokens),
so neither a crossing nor its interval was determined. Here MoE from scratch
runs to 3,200 steps (3.3M tokens) and the upcycled runs to D1 + D2 = 3,200.
Not run yet: about 12 times the grid's tokens per size.
`:small` is the grid's CI variant.
"""
from experiments.seed002 import common, grid

EXTEND = dict(sizes=(common.SIZES[0], common.SIZES[-1]), dense=(400, 800, 1600),
              up=(100, 400, 1600), moe=(400, 1600, 3200))


def budgets(arg=None):
  return grid.SMALL if common.parse(arg).small else EXTEND


get_config = grid.get_config


def get_hyper(h, arg=None):
  return grid.points(h, budgets(arg))
