"""Depth growth: stacking (l1..ln, l1..ln) or interposition (l1, l1, l2, l2, ...)
by a factor (seed 003), or depth up-scaling by a percentage (`dus`, seed 004;
`placement=solar` repeats the middle layers as one block, SOLAR's layout).

  python -m moe_jax.upcycle --config=configs/upcycle/grow_depth.py:method=stack \
      --src=/tmp/moe --dst=/tmp/moe_deep

Interleaved dense/MoE stacks are grown by whole blocks of `moe.every` layers,
so the pattern is kept; the `first_dense` leading layers are kept once.
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  d = recipes.defaults('grow_depth')
  arg = common.parse_arg(arg, method=d['method'], factor=d['factor'], percent=d['percent'],
                         placement=d['placement'])
  up = common.upcycle()
  up.recipe, up.factor = 'grow_depth', arg.factor
  up.args = ml_collections.ConfigDict(dict(method=arg.method, percent=arg.percent,
                                           placement=arg.placement))
  return up
