r"""Seed 001's routing analysis: a sparse-upcycled MoE against one trained from scratch.

  python -m experiments.launch --config=experiments/seed001/routing.py --workdir=DIR
  python -m experiments.seed001.report --study=routing --workdir=DIR

Runs `dense`, `up_single` and `scratch` (experiments/seed001/common.py): the
upcycled and the from-scratch MoE end on the same number of steps. The report
runs `inspect --routing` (moe_jax/eval/routing.py) on both final checkpoints.
"""
from experiments.seed001 import common

get_config = common.get_config


def get_hyper(h, arg=None):
  s = common.steps(arg)
  return [common.dense(s), common.upcycled(h, s, 'up_single', False), common.scratch(s)]
