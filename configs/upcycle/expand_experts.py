"""Expert upcycling E -> mE with top-k fixed (seed 000 Definition 3.1).

  python -m moe_jax.upcycle --config=configs/upcycle/expand_experts.py:factor=2 \
      --src=/tmp/moe --dst=/tmp/moe_x2

`allocation=utility` duplicates experts by utility (`metric`: grad_norm |
saliency | weight_norm | curvature, from `batches` training batches) instead
of uniformly; `delta` is the U(-delta, delta) noise on the replicas' router
biases (needs moe.use_bias in the source). Not function-preserving: copies
tie in the top-k, and the report gives the loss jump.
"""
import ml_collections

from configs import common


def get_config(arg=None):
  arg = common.parse_arg(arg, factor=2, allocation='uniform', metric='grad_norm', batches=8,
                         layout='append', delta=0.0, expert='copy', router='copy')
  up = common.upcycle()
  up.recipe, up.factor = 'expand_experts', arg.factor
  up.utility_metric, up.utility_batches = arg.metric, arg.batches
  up.args = ml_collections.ConfigDict(dict(
      allocation=arg.allocation, layout=arg.layout, delta=arg.delta,
      expert_heuristic=arg.expert, router_heuristic=arg.router))
  return up
