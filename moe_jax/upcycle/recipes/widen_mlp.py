"""Dense MLP widening (Net2WiderNet, Chen et al. 2016): every hidden neuron
copied `factor` times, d_ff -> factor * d_ff, the same function.

Seed 004's Larger Dense (headroom) row is a dense model of about the MoE's
active size; the next size of the family is not at hand offline, and an MoE
k-of-E of copied MLPs has k MLPs active, which is the dense model with d_ff
times k. So this grows that model from the same base: wi_0 and wi_1 ([D, F])
tile their columns, wo ([F, D]) tiles its rows divided by the factor, and the
copies' outputs add up to the source's. Copies with equal weights would get
equal gradients forever, so `noise` (times std(wo)) is added to each copy of wo
and the copies of one neuron are then centred on wo / factor: their sum is
still wo, so the function is kept exactly while the symmetry is broken.

Args (defaults in brackets): factor [2: upcycle.factor], noise [0.01].
Optimizer moments (policy 'scale'): wo's gradient is the source's (the copy's
activation is the source neuron's), wi's is 1/factor of it, so wi's mu and nu
take factor**-1 and factor**-2.
"""
import dataclasses

import jax
import jax.numpy as jnp

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Op, Rule


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  factor: int = field(2, at_least=2)   # upcycle.factor where args leave it out (recipes.parse)
  noise: float = field(0.01, at_least=0)


def _wider(dst, src, factor, a):
  del factor   # a.factor: upcycle.factor where args leave it out
  dst.model.d_ff = src.model.d_ff * a.factor


def _tile(w, factor, axis):
  return jnp.concatenate([w] * factor, axis=axis)


def widen(factor, noise):
  """wi_0 / wi_1 [D, F] -> [D, factor F]; wo [F, D] -> [factor F, D] / factor + centred noise."""

  def fn(s, target, ctx):
    w = s[0]
    if not ctx.path.endswith('wo'):
      return _tile(w, factor, axis=1)
    eps_MFD = noise * jnp.std(w) * jax.random.normal(ctx.rng, (factor,) + w.shape, w.dtype)
    copies_MFD = w / factor + eps_MFD - eps_MFD.mean(axis=0)
    return copies_MFD.reshape(target.shape)

  def moment(s, target, ctx, power):
    if ctx.path.endswith('wo'):
      return _tile(s[0], factor, axis=0)
    return _tile(s[0], factor, axis=1) * float(factor) ** -power

  return Op(f'widen({factor})', fn, moment)


@recipes.register('widen_mlp', Options, target=_wider, uses_factor=True)
def widen_mlp(src, dst, a):
  if src.moe.num_experts or dst.moe.num_experts:
    raise ConfigError(f'widen_mlp widens a dense model; source and target have '
                      f'moe.num_experts={src.moe.num_experts}, {dst.moe.num_experts}')
  factor = a.factor
  if dst.model.d_ff != factor * src.model.d_ff:
    raise ConfigError(f'widen_mlp by {factor} of d_ff={src.model.d_ff} gives '
                      f'{factor * src.model.d_ff}; the target has model.d_ff={dst.model.d_ff}')
  recipes.same(src, dst, 'model.num_layers', 'model.d_model')
  rules = (Rule(r'layers_(\d+)/mlp/(wi_0|wi_1|wo)', (r'layers_\1/mlp/\2',),
                widen(factor, a.noise)),
           recipes.copy_rest())
  return recipes.Recipe('widen_mlp', rules, recipes.as_dict(a), a.opt_policy)
