"""Width growth E -> mE and k -> mk (seed 003 §3.2, m=2 there).

Args (defaults in brackets): alpha [0.01]: N(0, (alpha sigma_orig)^2) on the
new experts (sigma of each source matrix) and their router columns (sigma of
the router), layout [append]. Selection biases (use_bias) are copied, divided
by m under softmax_then_topk with softmax scores (each copy holds 1/m of the
score). Exact at alpha=0, biases included, with softmax scores (any order,
renormalised or not) and with sigmoid scores when renormalize=True; not exact
with sigmoid and renormalize=False (each copy keeps the full gate, so the
layer output doubles).
"""
import dataclasses

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout, ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  alpha: float = field(0.01, at_least=0)
  layout: str = field('append', choices=layout.LAYOUTS)


def _wider(dst, src, factor, a):
  del a
  dst.moe.num_experts = src.moe.num_experts * factor
  dst.moe.top_k = src.moe.top_k * factor


@recipes.register('grow_width', Options, target=_wider, uses_factor=True)
def grow_width(src, dst, a):
  m = recipes.expert_factor(src, dst)
  recipes.same(src, dst, 'model.num_layers', 'moe.every', 'moe.first_dense')
  if dst.moe.top_k != m * src.moe.top_k:
    raise ConfigError(f'grow_width multiplies top_k with the experts: moe.top_k must be '
                      f'{m * src.moe.top_k}, not {dst.moe.top_k}')
  recipes.check_topk(dst, 'target')
  counts = {f'layers_{i}': [m] * src.moe.num_experts
            for i, k in enumerate(layout.layer_kinds(src)) if k == 'moe'}
  slots = {layer: layout.replica_slots(c, a.layout) for layer, c in counts.items()}
  lam = dict(lam=a.alpha)
  # Softmax over mE copied logits gives each copy 1/m of its source's score;
  # selection by score + bias (router.select) keeps its order only if the bias
  # shrinks with it. Sigmoid scores and topk_then_softmax logits are not split.
  split = dst.moe.score == 'softmax' and dst.moe.order == 'softmax_then_topk'
  rules = (
      Rule(r'layers_\d+/moe/experts/(wi_0|wi_1|wo)', (r'\g<0>',),
           ops.replicate_experts(slots, 'copy_noise', lam)),
      Rule(r'layers_\d+/moe/router/(w|bias)', (r'\g<0>',),
           ops.extend_router(slots, 'perturb_new_only', lam,
                                     bias_scale=1 / m if split else 1.0)),
      recipes.copy_rest(),
  )
  return recipes.Recipe('grow_width', rules, recipes.as_dict(a), a.opt_policy)
