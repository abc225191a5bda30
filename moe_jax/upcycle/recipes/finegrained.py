"""Fine-grained upcycling (He et al., "Upcycling Large Language Models into
Mixture of Experts", arXiv 2410.07524): a dense checkpoint becomes an MoE of
E * G experts of width F / G, top-(k G), optionally beside one shared expert
(DeepSeek-MoE's shared expert isolation; Qwen2-MoE), and the MoE computes the
dense function at step 0.

Args (defaults in brackets): experts [8] (E, copies of the MLP), top_k [2] (k),
granularity [1] (G), router_init [normal]: N(0, moe.router_init_std^2 or
2/(5 D)) | zero, shared [False]: one shared expert holding the dense MLP,
shared_share [0.5]: the share a of the dense output the shared expert carries.

The math (SwiGLU MLP y(x) = sum_f wo[f] silu(x . wi_0[:, f]) (x . wi_1[:, f])):
the sum over the F hidden units splits into G shards of F / G units each,
y = sum_g y_g, every shard itself a SwiGLU MLP of width F / G. Expert e G + g
(e < E, g < G) is shard g of copy e: the E G experts are E copies of the G
shards, `moe.d_ff` = F / G.

"Virtual group initialisation" (the paper's name; the construction here is
derived, not quoted): the G experts e G .. e G + G - 1 form copy e's virtual
group and share one router column r_e (a fresh [D, E] router, each column
repeated G times), so their logits tie and they are selected together:
  softmax scores  p_(eG+g) = exp(x r_e) / (G sum_e' exp(x r_e')) = p_e / G,
  and top-(k G) of the E G tied scores takes the k best groups whole. The
  groups sit on contiguous experts because lax.top_k breaks ties towards the
  lower index: when scores tie across groups (a zero router) it takes groups
  0 .. k-1 whole; with a random router the groups' scores differ and the
  threshold of top-(k G) falls between groups (tests/upcycle/
  test_finegrained.py checks that every selection is whole groups).
  A selected group contributes sum_g c_e y_g = c_e y with c_e its members'
  common gate, so the layer gives (sum over the k groups of c_e) y.

"Weight scaling" (the paper's name; the factors are derived here from the
gates above): every expert's `wo` is multiplied by s = 1 / (sum of the
selected groups' gates), constant in x wherever the gates are normalised:
  renormalised softmax_then_topk, or topk_then_softmax: each member's gate is
    c_e = p_e / (G sum_sel p_e'), the k groups' gates sum to 1 / G: s = G,
    exact for any router;
  softmax_then_topk without renormalisation: c_e = p_e / G sums to
    (sum_sel p_e) / G, which is k / (E G) only at a uniform router: s = E G / k,
    exact with router_init=zero, within a router's width of it otherwise
    (what dense_to_moe's rescale=gate_mass does at G = 1);
  sigmoid scores: renormalised, s = G and exact as for softmax; without
    renormalisation each member's gate is sigmoid(x r_e), not split G ways,
    so the groups' gates sum to k sigmoid(0) = k / 2 at a zero router:
    s = 2 / k, exact only there.
G = 1 is sparse upcycling (dense_to_moe) with this weight scaling.

Shared expert (shared=True): the target has moe.num_shared_experts = G, i.e.
G always-on experts of width F / G fused into one MLP of width F (as
DeepSeek-MoE counts shared experts in fine-grained units): the dense MLP
itself, its `wo` times a, while the routed experts' `wo` carry (1 - a) s. The
sum is the dense function at step 0 for any a in (0, 1]. With a = 1 the
routed experts start with zero output (and their wi_0, wi_1 and the router
get no gradient at step 0; their wo does, so they start learning at step 1);
the default a = 1/2 leaves every parameter a gradient from the first step.
With moe.shared_gate (Qwen2-MoE's sigmoid(x . w) on the shared expert) the
gate's w starts at zero, a gate of exactly 1/2 that still learns (its
gradient is x (dL/dy . shared(x)) / 4), and the shared `wo` is doubled to
2 a to make up for it.
Optimizer moments are arranged like the params (structural, no scaling by s
or a), times (k / E)^power on the routed experts: each sees about k / E of
the tokens the MLP saw.
"""
import dataclasses
import math

import jax
import jax.numpy as jnp

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import ops
from moe_jax.upcycle import recipes
from moe_jax.upcycle.rules import Op, Rule

ROUTER_INITS = ('normal', 'zero')


@dataclasses.dataclass(frozen=True)
class Options(recipes.Options):
  experts: int = field(8, at_least=1)
  top_k: int = field(2, at_least=1)
  granularity: int = field(1, at_least=1)
  router_init: str = field('normal', choices=ROUTER_INITS)
  shared: bool = False
  shared_share: float = field(0.5, above=0, at_most=1)


def _check(src, a):
  """(E, k, G), or a one-line ConfigError naming the arg."""
  e, k, g = a.experts, a.top_k, a.granularity
  if src.moe.num_experts:
    raise ConfigError(f'finegrained needs a dense source; it has moe.num_experts='
                      f'{src.moe.num_experts}')
  if src.model.d_ff % g:
    raise ConfigError(f'upcycle.args.granularity={g} does not divide model.d_ff='
                      f'{src.model.d_ff}')
  if k > e:
    raise ConfigError(f'upcycle.args.top_k={k} exceeds upcycle.args.experts={e}')
  return e, k, g


def _target(dst, src, factor, a):
  """E G experts of width F / G, top-(k G), and G shared units when shared."""
  del factor
  e, k, g = _check(src, a)
  dst.moe.num_experts, dst.moe.top_k, dst.moe.d_ff = e * g, k * g, src.model.d_ff // g
  dst.moe.num_shared_experts = g if a.shared else 0


def weight_scale(moe, experts, top_k, granularity):
  """s of the module docstring: 1 / the selected groups' gate sum at a uniform router."""
  if moe.renormalize or moe.order == 'topk_then_softmax':
    return float(granularity)
  if moe.score == 'sigmoid':
    return 2.0 / top_k
  return experts * granularity / top_k


def shards(experts, granularity, factor=1.0, moment_scale=1.0):
  """Dense MLP leaf [D, F] (wi_0, wi_1) or [F, D] (wo) -> [E G, D, F/G] or
  [E G, F/G, D]: expert e G + g is hidden units [g F/G, (g+1) F/G) of copy e,
  times `factor` (wo only: the weight scaling); moments times
  moment_scale^power."""
  def arrange(w, path):
    wo = path.endswith('wo')
    f = w.shape[0] if wo else w.shape[1]
    w_GXY = (w.reshape(granularity, f // granularity, w.shape[1]) if wo else
             w.reshape(w.shape[0], granularity, f // granularity).transpose(1, 0, 2))
    return jnp.tile(w_GXY, (experts, 1, 1))

  def init(s, target, ctx):
    return arrange(s[0], ctx.path) * (factor if ctx.path.endswith('wo') else 1.0)

  def moment(s, target, ctx, power):
    return arrange(s[0], ctx.path) * moment_scale ** power

  return Op(f'shards({experts}x{granularity})', init, moment)


def group_router(experts, granularity, std):
  """Router w [D, E G]: a fresh [D, E] (N(0, std^2), or zeros at std=0), each
  column repeated G times, so a virtual group's experts tie."""
  def init(s, target, ctx):
    w_DE = std * jax.random.normal(ctx.rng, (target.shape[0], experts), target.dtype)
    return jnp.repeat(w_DE, granularity, axis=1)
  return Op(f'group_router({experts}x{granularity}, {std:.3g})', init,
            lambda s, t, c, p: jnp.zeros(t.shape, t.dtype), fresh=True)


@recipes.register('finegrained', Options, target=_target)
def finegrained(src, dst, a):
  e, k, g = _check(src, a)
  recipes.same(src, dst, 'model.num_layers', 'model.d_model', 'model.d_ff')
  want = dict(num_experts=e * g, top_k=k * g, d_ff=src.model.d_ff // g,
              num_shared_experts=g if a.shared else 0)
  got = dict(dst.moe, d_ff=dst.moe.d_ff or dst.model.d_ff)   # moe.d_ff=0: the MLP's width
  for key, value in want.items():
    if got[key] != value:
      raise ConfigError(f'moe.{key}={got[key]} but finegrained with experts={e}, '
                        f'top_k={k}, granularity={g}, shared={a.shared} makes {value}')
  if dst.moe.router != 'learned':
    raise ConfigError(f'finegrained initialises a learned router; moe.router={dst.moe.router!r}')
  std = 0.0
  if a.router_init == 'normal':
    std = dst.moe.router_init_std or math.sqrt(2.0 / (5 * dst.model.d_model))
  share = a.shared_share if a.shared else 0.0
  scale = weight_scale(dst.moe, e, k, g) * (1.0 - share)
  rules = [
      Rule(r'layers_(\d+)/moe/experts/(wi_0|wi_1|wo)', (r'layers_\1/mlp/\2',),
           shards(e, g, scale, k / e)),
      Rule(r'layers_\d+/moe/router/w', (), group_router(e, g, std)),
      Rule(r'layers_\d+/moe/router/bias', (), ops.zeros()),
  ]
  if a.shared:
    gate = 2.0 if dst.moe.shared_gate else 1.0   # sigmoid(0) = 1/2
    rules += [
        Rule(r'layers_\d+/moe/shared_gate', (), ops.zeros()),
        Rule(r'layers_(\d+)/moe/shared/wo', (r'layers_\1/mlp/wo',),
             ops.scaled(ops.copy(), gate * share)),
        Rule(r'layers_(\d+)/moe/shared/(wi_0|wi_1)', (r'layers_\1/mlp/\2',), ops.copy()),
    ]
  rules.append(recipes.copy_rest())
  return recipes.Recipe('finegrained', tuple(rules), recipes.as_dict(a), a.opt_policy)
