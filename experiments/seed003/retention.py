r"""Seed 003 Fig. 5 and App. C: how much of the loss survives growth right after
it (no training), depth vs width, pre-norm vs post-norm blocks.

  python -m experiments.launch --config=experiments/seed003/retention.py \
      --workdir=/tmp/s003_retention --parallel=2
  python -m experiments.seed003.analysis --workdir=/tmp/s003_retention

Runs: `base` (pre-norm) and `base_post` (the same with model.norm_position=
'post'), each grown from its converged checkpoint by interposition, stacking
and width growth (alpha=0.01). The loss before and right after growth is the
upcycle CLI's report (upcycle_report.json: the same validation batches through
both models). The pre-norm runs are the depth and width studies' runs (trained
the additional steps, which also gives Fig. 5 left: depth vs width after
continued training); the post-norm ones train only a few steps. The seed:
width growth keeps the loss in both positions; depth growth costs little
pre-norm and much post-norm.
"""
from experiments.seed003 import common

get_config = common.get_config


def points(h, p):
  last = p.checkpoints[-1]
  post = dict(src=common.BASE_POST, steps=p.retain, norm_position='post')
  return (common.depth(h, p, 'interpose', last) + common.depth(h, p, 'stack', last) +
          common.width(h, p, common.RETENTION_ALPHA, last) +
          common.base(h, p, common.BASE_POST, 'post') +
          common.depth(h, p, 'interpose', last, name=f'post_interpose@{last}', **post) +
          common.depth(h, p, 'stack', last, name=f'post_stack@{last}', **post) +
          common.width(h, p, common.RETENTION_ALPHA, last,
                       name=f'post_width_a{common.RETENTION_ALPHA:g}@{last}', **post))


def get_hyper(h, arg=None):
  p = common.plan(arg)
  return common.base(h, p) + points(h, p)
