r"""Seed 003 Fig. 4: width growth (E and top-k doubled) of the converged
checkpoint with noise N(0, (alpha sigma)^2) on the new experts and router
columns, for several alpha.

  python -m experiments.launch --config=experiments/seed003/width_noise.py \
      --workdir=/tmp/s003_width --parallel=2
  python -m experiments.seed003.analysis --workdir=/tmp/s003_width

Runs: `base`, then width_a<alpha>@S for each alpha of the plan (0, 0.01, 0.05,
0.1; `:small`: 0, 0.01), S its last checkpoint, trained the same additional
steps. The seed: the LM loss is about the same for every alpha (the gain of
a small alpha shows downstream, which we do not measure), too much noise hurts.
"""
from experiments.seed003 import common

get_config = common.get_config


def points(h, p):
  return [point for alpha in p.alphas for point in common.width(h, p, alpha, p.checkpoints[-1])]


def get_hyper(h, arg=None):
  p = common.plan(arg)
  return common.base(h, p) + points(h, p)
