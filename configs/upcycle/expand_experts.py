"""Expert upcycling E -> mE with top-k fixed (seed 000 Definition 3.1).

  python -m moe_jax.upcycle --config=configs/upcycle/expand_experts.py:factor=2 \
      --src=/tmp/moe --dst=/tmp/moe_x2

`allocation=utility` duplicates experts by utility (`metric`: grad_norm |
saliency | weight_norm | curvature, from `batches` training batches) instead
of uniformly, turning scores into copies by `rule` (dhondt | proportional |
sampled, moe_jax/upcycle/utility.py); `delta` is the U(-delta, delta) noise on the replicas' router
biases (seed 000's 1e-3 by default; needs moe.use_bias in the source, or
`delta=0`). `split_bias=True` divides every router bias by m, as the m
copies split each softmax score m ways, which keeps top-1 with renormalised
gates exact up to delta (the recipe's docstring). `expert` and `router`
pick a heuristic of seed 000 Tables 9/10 (`expert=random` is Table 4's
Kaiming baseline) whose options are then keys of their own:

  python -m moe_jax.upcycle --config=configs/upcycle/expand_experts.py:expert=copy_noise \
      --config.args.expert_args.lam=0.05 --src=/tmp/moe --dst=/tmp/moe_noise

Not function-preserving: copies tie in the top-k, and the report gives the
loss jump. On a fine-grained MoE (configs/upcycle/finegrained.py) `granularity`
copies its virtual groups whole:

  python -m moe_jax.upcycle --config=configs/upcycle/expand_experts.py:factor=2,granularity=4 \
      --src=/tmp/finegrained --dst=/tmp/finegrained_x2
"""
from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  up, d = common.upcycle(), recipes.defaults('expand_experts')
  arg = common.parse_arg(arg, factor=up.factor, allocation=d['allocation'],
                         metric=d['utility_metric'], batches=d['utility_batches'],
                         layout=d['layout'], delta=d['delta'], expert=d['expert_heuristic'],
                         router=d['router_heuristic'], rule=d['utility_allocation'],
                         granularity=d['granularity'], split_bias=d['split_bias'])
  up.recipe, up.factor = 'expand_experts', arg.factor
  up.args = common.expand_args(arg.allocation, arg.delta, arg.expert, arg.router, arg.layout,
                               arg.rule)
  up.args.update(utility_metric=arg.metric, utility_batches=arg.batches,
                 granularity=arg.granularity, split_bias=arg.split_bias)
  return up
