"""Sparse upcycling (seeds 001, 004): every expert starts as the dense MLP, the
router starts fresh.

Args (defaults in brackets): expert_init [copy] | noise | subset | permute |
drop | random (ops.tile_experts), noise [0.01], drop_ratio [0.5], drop_init [normal]
(source statistics), router_init [normal]: N(0, moe.router_init_std^2 or
2/(5 D)) | zero. The target (`upcycle.target.moe`) names the experts; its
layer pattern decides which layers become MoE, the others keep their dense
MLP. Exact (function-preserving) with expert_init=copy when the target's gates
sum to 1: moe.renormalize=True or order=topk_then_softmax, and no shared
experts.
"""
import math

from moe_jax.errors import ConfigError
from moe_jax.upcycle import ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


@recipes.register('dense_to_moe', dict(expert_init='copy', noise=0.01, drop_ratio=0.5,
                                       drop_init='normal', router_init='normal'))
def dense_to_moe(src, dst, args):
  a = recipes.resolve('dense_to_moe', args)
  if src.moe.num_experts:
    raise ConfigError(f'dense_to_moe needs a dense source; it has moe.num_experts='
                      f'{src.moe.num_experts}')
  if not dst.moe.num_experts:
    raise ConfigError('dense_to_moe needs a target with moe.num_experts > 0')
  recipes.check_topk(dst, 'target')
  recipes.same(src, dst, 'model.num_layers', 'model.d_model')
  if a['router_init'] not in ('normal', 'zero'):
    raise ConfigError(f"upcycle.args.router_init={a['router_init']!r} is not one of "
                      "('normal', 'zero')")
  std = dst.moe.router_init_std or math.sqrt(2.0 / (5 * dst.model.d_model))
  num = dst.moe.num_experts
  tile = ops.tile_experts(num, a['expert_init'], a['noise'], a['drop_ratio'], a['drop_init'],
                          dst.moe.top_k)
  rules = (
      Rule(r'layers_(\d+)/moe/experts/(wi_0|wi_1|wo)', (r'layers_\1/mlp/\2',), tile),
      Rule(r'layers_\d+/moe/router/w', (),
           ops.normal(std) if a['router_init'] == 'normal' else ops.zeros()),
      Rule(r'layers_\d+/moe/router/bias', (), ops.zeros()),
      recipes.copy_rest(),
  )
  return recipes.Recipe('dense_to_moe', rules, a, a['opt_policy'])
