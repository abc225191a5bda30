"""Dense MLP widening (Net2WiderNet): d_ff times `factor`, every neuron copied,
the same function (seed 004's Larger Dense row of the MoE's active size).

  python -m moe_jax.upcycle --config=configs/upcycle/widen_mlp.py:factor=2 \
      --src=/tmp/dense --dst=/tmp/dense_wide

`noise` (times std(wo)) makes the copies of each neuron differ, with their sum
kept, so training can pull them apart; the report shows max |delta logits| at
float32 round-off.
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  d = recipes.defaults('widen_mlp')
  arg = common.parse_arg(arg, factor=d['factor'], noise=d['noise'])
  up = common.upcycle()
  up.recipe, up.factor = 'widen_mlp', arg.factor
  up.args = ml_collections.ConfigDict(dict(noise=arg.noise))
  return up
