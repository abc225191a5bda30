"""Fine-grained upcycling (arXiv 2410.07524): a dense checkpoint becomes an MoE
of experts x granularity experts, each 1/granularity of the MLP wide, top
top_k x granularity, with virtual-group router initialisation and weight
scaling, so that it computes the dense function at step 0.

  python -m moe_jax.upcycle --config=configs/upcycle/finegrained.py:experts=8,top_k=2,granularity=4 \
      --src=/tmp/dense --dst=/tmp/finegrained

`shared=True` adds one shared expert holding the dense MLP (moe.num_shared_experts
= granularity fine-grained units), carrying `shared_share` of the output and the
routed experts the rest; `shared_gate` puts Qwen2-MoE's sigmoid gate on it
(moe.shared_gate, started at 1/2), so the MoE exports as Qwen2-MoE. `renormalize` (default True), `order` (softmax_then_topk |
topk_then_softmax) and `score` (softmax | sigmoid) set the router; with
renormalised or topk_then_softmax gates the step-0 MoE is exact for any router,
without renormalisation only with `router_init=zero` (the recipe's docstring has
the math). `bias` (moe.use_bias, the selection-only bias of loss-free
balancing) is on, as in dense_to_moe.py.
"""
import ml_collections

from configs import common
from moe_jax.upcycle import recipes


def get_config(arg=None):
  d = recipes.defaults('finegrained')
  arg = common.parse_arg(arg, experts=d['experts'], top_k=d['top_k'],
                         granularity=d['granularity'], router_init=d['router_init'],
                         shared=d['shared'], shared_share=d['shared_share'], shared_gate=False,
                         every=1, seed=0,
                         bias=True, renormalize=True, order='softmax_then_topk', score='softmax',
                         router_std=0.0)
  up = common.upcycle()
  up.recipe, up.seed = 'finegrained', arg.seed
  up.target = ml_collections.ConfigDict({'moe': dict(
      every=arg.every, renormalize=arg.renormalize, order=arg.order, score=arg.score,
      use_bias=arg.bias, router_init_std=arg.router_std, shared_gate=arg.shared_gate)})
  up.args = ml_collections.ConfigDict(dict(
      experts=arg.experts, top_k=arg.top_k, granularity=arg.granularity,
      router_init=arg.router_init, shared=arg.shared, shared_share=arg.shared_share))
  return up
