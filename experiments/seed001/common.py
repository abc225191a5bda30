r"""Seed 001's sparse-upcycling practice at CPU scale: one dense run, upcycled.

Two sweeps share these runs (experiments/seed001/{schedule,routing,all}.py):
  dense           the dense model, DENSE steps (WSD, experiments/seed002/common.py's family)
  up_single       its last checkpoint upcycled to 8 experts, top-2 (every expert
                  a copy of the MLP), trained UP steps at one constant LR and
                  constant balance / z-loss weights
  up_three_phase  the same with seed 001's three phases (configs/common.py
                  SEED001_PHASES, moe_jax/train/phases.py): 5% / 70% / 25% of
                  the steps, LR x 0.1 / 1 / 0.1, balance x 5 / 1 / 0.5, z-loss
                  x 2 / 1 / 0.5
  scratch         the MoE trained from scratch for DENSE + UP steps (WSD)
  scratch_up      the same for UP steps: as many MoE steps as the upcycled runs
                  (seeds.py)
The MoE runs use a Switch balance loss (0.01) and a router z-loss (1e-3), the
weights seed 001's phases multiply. `:small`: a few steps of each (CI).
"""
from configs import common as configs_common
from experiments.seed002 import common as family

SIZE = 48
DENSE, UP = 150, 150   # sized to the shared 2-core machine (docs/seed001.md)
SMALL = dict(dense=5, up=20)   # 20: seed 001's 5% warmup phase gets a step
BALANCE, Z_LOSS = 1e-2, 1e-3
LR_UP = family.LR_MOE


def parse(arg):
  return family.parse(arg)


def steps(arg=None):
  """dict(dense, up): the dense run's steps and the upcycled runs' steps."""
  return SMALL if parse(arg).small else dict(dense=DENSE, up=UP)


def get_config(arg=None):
  config = family.config(parse(arg).small)
  config.moe.update(balance_loss_weight=BALANCE, z_loss_weight=Z_LOSS)
  return config


def dense(s):
  return dict(name='dense', **{'config.total_steps': s['dense'],
                               'config.checkpoint_every_steps': s['dense']}, **family.size(SIZE))


def upcycled(h, s, name, three_phase, src='dense'):
  """Run `src` upcycled and trained s['up'] steps at one constant LR, with
  or without seed 001's phases on top."""
  keys = {'config.opt.schedule': 'constant', 'config.opt.warmup_steps': 0,
          'config.total_steps': s['up'], 'config.checkpoint_every_steps': s['up']}
  if three_phase:
    keys.update({f'config.phases.{k}': v for k, v in configs_common.SEED001_PHASES.items()})
  return dict(name=name, **family.upcycled(h, src, s['dense']), **family.size(SIZE),
              **family.moe(LR_UP), **keys)


def scratch(s, name='scratch', total=None):
  """The MoE from scratch, `total` steps (default: the dense and upcycled
  runs' together, WSD)."""
  total = total or s['dense'] + s['up']
  return dict(name=name, **{'config.total_steps': total,
                            'config.checkpoint_every_steps': total},
              **family.size(SIZE), **family.moe())
