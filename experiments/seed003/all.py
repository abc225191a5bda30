r"""Every seed-003 study in one sweep, on one base run: what the CPU-scale results
in docs/seed003.md ran (and, as `:small`, what CI runs).

  python -m experiments.launch --config=experiments/seed003/all.py \
      --workdir=/tmp/s003 --parallel=2
  python -m experiments.seed003.analysis --workdir=/tmp/s003

The runs of depth.py, width_noise.py, retention.py and sunk_cost.py, a run
that two studies share (e.g. interpose@S) trained once.
"""
from experiments.seed003 import common, depth, retention, sunk_cost, width_noise

get_config = common.get_config


def get_hyper(h, arg=None):
  p = common.plan(arg)
  return common.unique(common.base(h, p) + depth.points(h, p) + width_noise.points(h, p) +
                       retention.points(h, p) + sunk_cost.points(h, p))
