r"""Seed 002's grid extended until eq. 13's D* lies inside the data (issue 36).

  python -m experiments.launch --config=experiments/seed002/extend.py --workdir=DIR --parallel=2
  python -m experiments.seed002.report --study=grid --workdir=DIR
  python -m experiments.launch --config=experiments/seed002/extend.py:diagonal --workdir=DIR2 \
    --parallel=2

The grid of experiments/seed002/grid.py (same family, names and WSD
branches) at the smallest and the largest size, with budgets 4 to 16 times
longer, so that eq. 13's diagonal (D1 = D2 = D against the MoE from scratch
at D) runs from 1.6M to 6.6M tokens. The budgets were chosen after seeing
two earlier runs: the grid's fitted D* (7.7e5 to 1.4e6 tokens) lay beyond
its longest budget, and a first extension to D1 = D2 = 1,600 steps
(docs/seed002/extend1.json) put it at 3.2e6 to 5.3e6 tokens, again beyond.
`:diagonal` runs eq. 13's diagonal alone one step further, D1 = D2 = D =
12,800 steps (13.1M tokens), past the D* this extension's fits give
(8e6 to 1.1e7 tokens; chosen after seeing them): three runs per size, one
WSD run each, no branches. `:small` is the grid's CI variant.
"""
from experiments.seed002 import common, grid

EXTEND = dict(sizes=(common.SIZES[0], common.SIZES[-1]), dense=(1600, 3200, 6400),
              up=(1600, 3200, 6400), moe=(1600, 3200, 6400))


DIAGONAL = dict(EXTEND, dense=(12800,), up=(12800,), moe=(12800,))


def budgets(arg=None):
  arg = common.parse(arg, diagonal=False)
  return grid.SMALL if arg.small else DIAGONAL if arg.diagonal else EXTEND


def get_config(arg=None):
  return common.config(common.parse(arg, diagonal=False).small)


def get_hyper(h, arg=None):
  return grid.points(h, budgets(arg))
