r"""Seed 003 Fig. 3: depth growth x2 by stacking (eq. 1) or interposition (eq. 2)
of a converged checkpoint (after the WSD decay) and of an early one.

  python -m experiments.launch --config=experiments/seed003/depth.py \
      --workdir=/tmp/s003_depth --parallel=2
  python -m experiments.seed003.analysis --workdir=/tmp/s003_depth

Runs: `base` (experiments/seed003/common.py), then interpose@S and stack@S for
S = its last (converged) and first (early) kept checkpoint, each trained the
same additional steps. The seed: interposition beats stacking from a converged
checkpoint; early in training stacking is fine. `:small` is the CI variant.
"""
from experiments.seed003 import common

get_config = common.get_config


def points(h, p):
  return [point for step in (p.checkpoints[-1], p.checkpoints[0])
          for method in ('interpose', 'stack') for point in common.depth(h, p, method, step)]


def get_hyper(h, arg=None):
  p = common.plan(arg)
  return common.base(h, p) + points(h, p)
