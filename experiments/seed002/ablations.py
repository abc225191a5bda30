r"""Seed 002's two training ablations at one size (d_model = SIZE).

  python -m experiments.launch --config=experiments/seed002/ablations.py --workdir=DIR --parallel=2
  python -m experiments.seed002.report --study=ablations --workdir=DIR

The LR of upcycled training (appendix A.6, Fig. 8): the dense run of D1
steps (a WSD branch of `dense_wsd`) is upcycled and trained UP steps with
  lr=const   the LR at the end of dense training (10% of the dense peak), constant
  lr=dense   WSD at the dense peak LR
  lr=moe     WSD at the MoE peak LR (the seed finds this best)
WSD vs cosine (appendix A.4, Fig. 7): dense and MoE from scratch, LONG steps
each, `dense_wsd` / `dense_cosine` / `moe_wsd` / `moe_cosine`, one peak LR per
model (cosine decays to the same 10% of it).
`:small`: a few steps of each (CI).
"""
from experiments.seed002 import common

SIZE = 48
LONG, D1, UP = 400, 150, 200
SMALL = dict(long=10, d1=5, up=5)
LR_ARMS = {'lr=const': 'constant, the LR at the end of dense training',
           'lr=dense': 'WSD, dense LR', 'lr=moe': 'WSD, MoE LR'}


def steps(arg=None):
  """dict(long, d1, up): the from-scratch runs, the dense source, the upcycled runs."""
  return SMALL if common.parse(arg).small else dict(long=LONG, d1=D1, up=UP)


def get_config(arg=None):
  return common.config(common.parse(arg).small)


def get_hyper(h, arg=None):
  s = steps(arg)
  size = common.size(SIZE)
  cosine = {'config.opt.schedule': 'cosine'}
  source = f'dense_D1={s["d1"]}'
  start = common.upcycled(h, source, s['d1'])
  end_of_dense = common.LR_DENSE * common.FINAL_LR_FRACTION
  arms = {'lr=const': {'config.opt.lr': end_of_dense, 'config.opt.schedule': 'constant',
                       'config.opt.warmup_steps': 0},
          'lr=dense': {'config.opt.lr': common.LR_DENSE}, 'lr=moe': {}}
  return ([common.long_run('dense_wsd', s['long'], [s['d1']], **size),
           common.branch(h, 'dense_wsd', s['d1'], source, **size)] +
          [common.long_run(name, s['up'], [], **size, **{**start, **common.moe(), **keys})
           for name, keys in arms.items()] +
          [common.long_run('dense_cosine', s['long'], [], **size, **cosine),
           common.long_run('moe_wsd', s['long'], [], **size, **common.moe()),
           common.long_run('moe_cosine', s['long'], [], **size, **common.moe(), **cosine)])
