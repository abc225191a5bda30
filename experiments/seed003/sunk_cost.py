r"""Seed 003 §4 (Figs. 7-8, Tables 1-2): grow the base's checkpoints at several
steps (sunk cost) x2 in depth by interposition and train them on, with a fixed
additional budget and with a fixed total budget, against the grown model
trained from scratch (zero sunk cost).

  python -m experiments.launch --config=experiments/seed003/sunk_cost.py \
      --workdir=/tmp/s003_sunk --parallel=2
  python -m experiments.seed003.analysis --workdir=/tmp/s003_sunk

Runs: `base`; `scratch` (the 2x deeper model, `additional` steps from random
init); interpose@S for every kept step S of the base, `additional` steps each
(fixed additional FLOPs); total_interpose@S, trained until its sunk plus
additional FLOPs equal scratch's FLOPs (fixed total; S where nothing would be
left is skipped). FLOPs are 3 x forward FLOPs per token x tokens (moe_jax/
models/accounting.py). The seed: final quality rises with sunk cost under a
fixed additional budget; under a fixed total budget growth is on par with
scratch, best from early checkpoints, worse from very late ones.
"""
from experiments.seed003 import common

get_config = common.get_config


def total_budget_steps(p, step):
  """Steps a model grown at base step `step` may train so that base FLOPs to
  `step` plus its own equal scratch's FLOPs (both at one tokens per step)."""
  config = common.config_for(p)
  small = common.flops_per_token(config)
  config.model.num_layers = 2 * p.layers
  grown = common.flops_per_token(config)
  return round(p.additional - step * small / grown)


def points(h, p):
  out = common.scratch(h, p)
  out += [point for s in p.checkpoints for point in common.depth(h, p, 'interpose', s)]
  for s in p.checkpoints:
    steps = total_budget_steps(p, s)
    if steps > 0:
      out += common.depth(h, p, 'interpose', s, steps=steps, name=f'total_interpose@{s}')
  return out


def get_hyper(h, arg=None):
  p = common.plan(arg)
  return common.base(h, p) + points(h, p)
