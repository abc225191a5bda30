"""Width growth (seed 003 §3.2): experts and top-k both x factor, new experts and
their router rows get Gaussian noise alpha * sigma of the originals.

  python -m moe_jax.upcycle --config=configs/upcycle/grow_width.py:alpha=0.01 \
      --src=/tmp/moe --dst=/tmp/moe_wide

With alpha=0 and softmax scores the grown model computes exactly the source's
function (also with sigmoid scores when moe.renormalize=True), with or without
the selection bias (moe.use_bias; copies get bias/m under softmax scores).
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  up, d = common.upcycle(), recipes.defaults('grow_width')
  arg = common.parse_arg(arg, factor=up.factor, alpha=d['alpha'], layout=d['layout'])
  up.recipe, up.factor = 'grow_width', arg.factor
  up.args = ml_collections.ConfigDict(dict(alpha=arg.alpha, layout=arg.layout))
  return up
