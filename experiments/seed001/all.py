r"""Both of seed 001's studies in one sweep: the four runs of experiments/seed001/common.py.

  python -m experiments.launch --config=experiments/seed001/all.py --workdir=DIR
  python -m experiments.seed001.report --study=schedule --workdir=DIR
  python -m experiments.seed001.report --study=routing --workdir=DIR

schedule.py and routing.py plan three of these runs each (dense and
up_single in both); this file runs their union once.
"""
from experiments.seed001 import common

get_config = common.get_config


def get_hyper(h, arg=None):
  s = common.steps(arg)
  return [common.dense(s), common.upcycled(h, s, 'up_single', False),
          common.upcycled(h, s, 'up_three_phase', True), common.scratch(s)]
