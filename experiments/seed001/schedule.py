r"""Seed 001's three-phase continued pre-training against one phase, after dense -> MoE.

  python -m experiments.launch --config=experiments/seed001/schedule.py --workdir=DIR
  python -m experiments.seed001.report --study=schedule --workdir=DIR

Runs `dense`, `up_single`, `up_three_phase` (experiments/seed001/common.py).
The report gives each upcycled run's final validation loss, its load CV and
dead experts at the end, and plots loss, LR and load CV against the step.
"""
from experiments.seed001 import common

get_config = common.get_config


def get_hyper(h, arg=None):
  s = common.steps(arg)
  return [common.dense(s), common.upcycled(h, s, 'up_single', False),
          common.upcycled(h, s, 'up_three_phase', True)]
