"""Depth growth (seeds 003, 004): interposition (l1, l1, l2, l2, ...) or
stacking (l1..ln, l1..ln) by a factor, or depth up-scaling by a percentage
(`dus`, also its own name: grow_depth with method=dus).

Args (defaults in brackets): method [interpose] | stack | dus, factor [2:
upcycle.factor], percent and placement [spread] | solar (dus);
layout.depth_map says which layers are copied and how interleaved patterns
are kept.
"""
import dataclasses

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout, ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Rule


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  method: str = field('interpose', choices=layout.DEPTH_METHODS)
  factor: int = field(2, at_least=2)   # upcycle.factor where args leave it out (recipes.parse)
  percent: float = field(0.0, at_least=0)
  placement: str = field('spread', choices=layout.DUS_PLACEMENTS)


def _deeper(dst, src, factor, a, method=None):
  del factor   # a.factor: upcycle.factor where args leave it out
  dst.model.num_layers = len(layout.depth_map(src, method or a.method, a.factor, a.percent,
                                              a.placement))


@recipes.register('grow_depth', Options, target=_deeper, uses_factor=True)
def grow_depth(src, dst, a, method=None):
  if method:
    a = dataclasses.replace(a, method=method)
  recipes.same(src, dst, 'moe.num_experts', 'moe.every', 'moe.first_dense', 'moe.top_k')
  lmap = layout.depth_map(src, a.method, a.factor, a.percent, a.placement)
  if dst.model.num_layers != len(lmap):
    raise ConfigError(f'grow_depth {a.method} of {src.model.num_layers} layers gives '
                      f'{len(lmap)}; the target has model.num_layers={dst.model.num_layers}')
  src_kinds, dst_kinds = layout.layer_kinds(src), layout.layer_kinds(dst)
  for j, i in enumerate(lmap):
    if src_kinds[i] != dst_kinds[j]:
      raise ConfigError(f'grow_depth: target layers_{j} is {dst_kinds[j]} but its source '
                        f'layers_{i} is {src_kinds[i]}')

  def layer_source(match):
    return (f'layers_{lmap[int(match.group(1))]}/{match.group(2)}',)

  rules = (Rule(r'layers_(\d+)/(.*)', layer_source, ops.copy()), recipes.copy_rest())
  return recipes.Recipe('grow_depth', rules, dict(recipes.as_dict(a), layer_map=lmap),
                        a.opt_policy)


@recipes.register('dus', Options,
                  target=lambda dst, src, factor, args: _deeper(dst, src, factor, args, 'dus'),
                  description='Depth up-scaling by a percentage (seed 004): grow_depth with '
                              'method=dus.')
def dus(src, dst, args):
  return grow_depth(src, dst, args, method='dus')
