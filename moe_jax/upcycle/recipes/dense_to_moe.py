"""Sparse upcycling (seeds 001, 004): every expert starts as the dense MLP, the
router starts fresh.

Args (defaults in brackets): expert_init [copy] | noise | subset | permute |
drop | random (ops.tile_experts), noise [0.01], drop_ratio [0.5], drop_init [normal]
(source statistics), router_init [normal]: N(0, moe.router_init_std^2 or
2/(5 D)) | zero, rescale [none] | gate_mass: every copy's `wo` times E / k.
The target (`upcycle.target.moe`) names the experts; its
layer pattern decides which layers become MoE, the others keep their dense
MLP. Exact (function-preserving) with expert_init=copy when the target's gates
sum to 1: moe.renormalize=True or order=topk_then_softmax, and no shared
experts.

Without renormalisation (seed 004's G(x) = TopK(softmax(Wx))) the picked
gates of a near-uniform router sum to k / E, so the copies' output starts at
k / E of the MLP's (half of it at 4-2) and the upcycle costs most of what the
dense model knew. `rescale=gate_mass` multiplies each copy's `wo` by E / k:
with a small `moe.router_init_std` the MoE then starts within a router's
width of the dense function while its gates still carry the LM loss's
gradient to the router (renormalised copies give it none). Optimizer moments
are not rescaled: the gradient a copy's `wo` sees is already its gate's
share of the dense one.
"""
import dataclasses
import math

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import heuristics, ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  expert_init: str = field('copy', choices=ops.TILE_INITS)
  noise: float = field(0.01, at_least=0)
  drop_ratio: float = 0.5   # in (0, 1) with expert_init=drop: ops.tile_experts
  drop_init: str = field('normal', choices=heuristics.DROP_INITS)
  router_init: str = field('normal', choices=('normal', 'zero'))
  rescale: str = field('none', choices=('none', 'gate_mass'))


@recipes.register('dense_to_moe', Options)
def dense_to_moe(src, dst, a):
  if src.moe.num_experts:
    raise ConfigError(f'dense_to_moe needs a dense source; it has moe.num_experts='
                      f'{src.moe.num_experts}')
  if not dst.moe.num_experts:
    raise ConfigError('dense_to_moe needs a target with moe.num_experts > 0')
  recipes.check_topk(dst, 'target')
  recipes.same(src, dst, 'model.num_layers', 'model.d_model')
  if a.rescale == 'gate_mass' and (dst.moe.renormalize or dst.moe.order == 'topk_then_softmax'):
    raise ConfigError('upcycle.args.rescale=gate_mass is for unnormalised gates; the target has '
                      f'moe.renormalize={dst.moe.renormalize}, moe.order={dst.moe.order!r}, '
                      'whose gates already sum to 1')
  std = dst.moe.router_init_std or math.sqrt(2.0 / (5 * dst.model.d_model))
  num = dst.moe.num_experts
  tile = ops.tile_experts(num, a.expert_init, a.noise, a.drop_ratio, a.drop_init, dst.moe.top_k)
  wo = ops.scaled(tile, num / dst.moe.top_k) if a.rescale == 'gate_mass' else tile
  rules = (
      Rule(r'layers_(\d+)/moe/experts/wo', (r'layers_\1/mlp/wo',), wo),
      Rule(r'layers_(\d+)/moe/experts/(wi_0|wi_1)', (r'layers_\1/mlp/\2',), tile),
      Rule(r'layers_\d+/moe/router/w', (),
           ops.normal(std) if a.router_init == 'normal' else ops.zeros()),
      Rule(r'layers_\d+/moe/router/bias', (), ops.zeros()),
      recipes.copy_rest(),
  )
  return recipes.Recipe('dense_to_moe', rules, recipes.as_dict(a), a.opt_policy)
