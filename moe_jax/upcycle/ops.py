"""The named ops rules apply: small pure functions from source leaves to one
target leaf (see rules.py for the `Op` contract).

Expert tensors are [E, D, F] (wi_0, wi_1) and [E, F, D] (wo): the intermediate
neuron axis is 2, or 1 for wo. Dense MLP leaves are the same without E.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.upcycle import heuristics, paths
from moe_jax.upcycle.rules import Op

TILE_INITS = ('copy', 'noise', 'subset', 'permute', 'drop', 'random')


def copy():
  return Op('copy', lambda s, t, c: s[0], lambda s, t, c, p: s[0])


def _zeros(s, t, c, p=0):
  return jnp.zeros(t.shape, t.dtype)


def normal(std):
  """Fresh N(0, std^2), e.g. the router (seed 002 App. A.6: std^2 = 2 / (5 d_model))."""
  return Op(f'normal({std:.3g})',
            lambda s, t, c: std * jax.random.normal(c.rng, t.shape, t.dtype), _zeros, fresh=True)


def zeros():
  return Op('zeros', _zeros, _zeros, fresh=True)


def _neuron_axis(path):
  return 1 if path.endswith('wo') else 2


def tile_experts(num_experts, init='copy', noise=0.0, drop=0.0, drop_init='normal', top_k=1):
  """Dense MLP leaf -> E experts (sparse upcycling, seed 001).

  init: copy (exact), noise (+ noise * std(w) * N(0, 1), seed 001
  `_duplicate_noise_init`), subset (expert e keeps neurons [e F/E, (e+1) F/E):
  the rest zero when the expert is as wide as the MLP, seed 001
  `_subset_init`, or just that slice when the expert width is F/E), permute
  (an independent neuron permutation per expert and matrix, seed 001
  `_permute_init`), drop (Drop-Upcycling: a `drop` share of neurons per expert
  re-initialised by `drop_init`, one set shared by wi_0, wi_1 and wo), random
  (every neuron of every expert re-initialised by `drop_init`: seed 001's
  "random init (no upcycling)" row, with attention, norms and embeddings
  still copied; `normal` draws at the dense MLP's own mean and std).
  Optimizer moments are arranged the same way (no noise, no re-init) and, for
  the 'scale' policy, scaled by (top_k / E)**power: each expert sees about
  top_k / E of the tokens the dense MLP saw.
  """
  if init not in TILE_INITS:
    raise ConfigError(f'upcycle.args.expert_init={init!r} is not one of {TILE_INITS}')
  if init == 'drop' and not 0 < drop < 1:
    raise ConfigError(f'upcycle.args.drop_ratio={drop} must be in (0, 1)')
  if init in ('drop', 'random') and drop_init not in heuristics.DROP_INITS:
    raise ConfigError(f'upcycle.args.drop_init={drop_init!r} is not one of '
                      f'{heuristics.DROP_INITS}')

  def arrange(w, target, ctx):
    axis = _neuron_axis(ctx.path)
    width, want = w.shape[axis - 1], target.shape[axis]
    w_E = jnp.broadcast_to(w, (num_experts,) + w.shape)
    if init == 'subset':
      if want * num_experts == width:
        idx = np.arange(width).reshape(num_experts, want)
        return jax.vmap(lambda m, i: jnp.take(m, i, axis=axis - 1))(w_E, idx)
      if width % num_experts or want != width:
        raise ConfigError(f'{ctx.path}: subset init needs the expert width {want} to equal the '
                          f'MLP width {width} or {width}/{num_experts}, divisibly')
      owner = np.arange(width) // (width // num_experts)
      keep = (owner[None, :] == np.arange(num_experts)[:, None])
      keep = keep[:, None, :] if axis == 2 else keep[:, :, None]
      return jnp.where(keep, w_E, 0)
    if want != width:
      raise ConfigError(f'{ctx.path}: expert width {want} != MLP width {width} '
                        f'(only expert_init=subset changes the width)')
    return heuristics.shuffle_neurons(w_E, axis, ctx.rng) if init == 'permute' else w_E

  def fn(s, target, ctx):
    w_E = arrange(s[0], target, ctx)
    if init == 'noise':
      return w_E + noise * jnp.std(s[0]) * jax.random.normal(ctx.rng, w_E.shape, w_E.dtype)
    if init in ('drop', 'random'):
      axis = _neuron_axis(ctx.path)
      mask = (heuristics.neuron_mask(ctx.layer_rng, num_experts, w_E.shape[axis], drop)
              if init == 'drop' else jnp.ones((num_experts, w_E.shape[axis]), bool))
      return heuristics.drop_neurons(w_E, mask, axis, drop_init, ctx.rng)
    return w_E

  def moment(s, target, ctx, power):
    return arrange(s[0], target, ctx) * (top_k / num_experts) ** power

  return Op(f'tile_experts({num_experts}, {init})', fn, moment)


def scaled(op, factor):
  """`op`'s parameter times `factor`; its moments as they are (the caller says why)."""
  return Op(f'{op.name} x {factor:g}', lambda s, t, c: factor * op.init(s, t, c), op.moment,
            op.fresh)


def _slots(slots, path, num_src):
  s = slots[paths.layer(path)]
  if num_src != len(s.counts):
    raise ConfigError(f'{path}: source has {num_src} experts, the source config says '
                      f'{len(s.counts)}')
  return s


def replicate_experts(slots, heuristic='copy', options=None):
  """[E, ...] -> [mE, ...] by `slots[layer]` (seed 000 Definition 3.1 step 1),
  with a Table 9 heuristic on the replicas (heuristics.py).

  Moments: gathered, and scaled by r_e**-power for a source copied r_e times
  (its tokens split over its copies, so each copy's gradient is ~1/r_e).
  """
  kw = heuristics.options('expert', heuristic, options)

  def fn(src, target, ctx):
    w = src[0]
    s = _slots(slots, ctx.path, w.shape[0])
    out = w[s.src_of]
    rep = np.nonzero(s.replica)[0]
    if heuristic == 'copy' or not len(rep):
      return out
    i = s.src_of[rep]
    new = heuristics.expert(heuristic, kw, w[i], w[(i + 1) % w.shape[0]],
                            _neuron_axis(ctx.path), ctx.rng, ctx.layer_rng)
    return out.at[rep].set(new.astype(out.dtype))

  def moment(src, target, ctx, power):
    s = _slots(slots, ctx.path, src[0].shape[0])
    scale = (s.counts[s.src_of].astype(np.float32) ** -power).reshape((-1,) + (1,) * (src[0].ndim - 1))
    return src[0][s.src_of] * scale

  return Op(f'replicate_experts({heuristic})', fn, moment)


def extend_router(slots, heuristic='copy', options=None, delta=0.0, bias_scale=1.0, group=1):
  """Router w [D, E] -> [D, mE] and bias [E] -> [mE] (Definition 3.1 step 2):
  columns copied to replicas with a Table 10 heuristic; replicas' biases get
  U(-delta, delta) noise (one draw per copied group of `group` experts), the
  originals' router parameters stay unchanged.
  `bias_scale` then multiplies every target bias (1/m where the copies split
  a softmax score m ways, so selection by score + bias keeps its
  order)."""
  kw = heuristics.options('router', heuristic, options)

  def fn(src, target, ctx):
    x = src[0]
    s = _slots(slots, ctx.path, x.shape[-1])
    if ctx.path.endswith('bias'):
      return bias_scale * heuristics.router_bias(heuristic, kw, x, s.src_of, s.replica,
                                                 ctx.rng, delta, group)
    return heuristics.router_weight(heuristic, kw, x, s.src_of, s.replica, ctx.rng)

  def moment(src, target, ctx, power):
    s = _slots(slots, ctx.path, src[0].shape[-1])
    return src[0][..., s.src_of] * s.counts[s.src_of].astype(np.float32) ** -power

  return Op(f'extend_router({heuristic})', fn, moment)


def mean():
  """The mean of the source leaves (merging: attention, norms, embeddings)."""
  fn = lambda s, t, c: sum(s) / len(s)
  return Op('mean', fn, lambda s, t, c, p: fn(s, t, c))


def pick(index):
  """Source leaf `index` of those named; the others are read and dropped, so
  every source leaf stays accounted for (merging with `shared=i`)."""
  return Op(f'pick({index})', lambda s, t, c: s[index], lambda s, t, c, p: s[index])


def merge_experts(num_sources, per_source, **tile):
  """n dense MLP leaves (one per source) -> [n * g, ...] experts: source i
  fills experts i*g ... (i+1)*g - 1 by `tile_experts(g, **tile)`, each
  source with its own rng (Branch-Train-MiX; mergekit-moe)."""
  one = tile_experts(per_source, **tile)

  def each(s, target, ctx, fn, *rest):
    if len(s) != num_sources:
      raise ConfigError(f'{ctx.path}: {len(s)} sources, the recipe says {num_sources}')
    part = jax.ShapeDtypeStruct((per_source,) + tuple(target.shape[1:]), target.dtype)
    return jnp.concatenate([
        fn([w], part, dataclasses.replace(ctx, rng=jax.random.fold_in(ctx.rng, i),
                                          layer_rng=jax.random.fold_in(ctx.layer_rng, i)), *rest)
        for i, w in enumerate(s)])

  return Op(f'merge_experts({num_sources}x{per_source}, {tile.get("init", "copy")})',
            lambda s, t, c: each(s, t, c, one.init),
            lambda s, t, c, p: each(s, t, c, one.moment, p))


def table(values, name):
  """A per-layer constant computed before the map ({layer: array}), e.g. router
  rows from the sources' hidden states; its moments start at zero."""
  def fn(s, target, ctx):
    layer = paths.layer(ctx.path)
    if layer not in values:
      raise ConfigError(f'{ctx.path}: no {name} value for {layer}')
    return jnp.asarray(values[layer], target.dtype)
  return Op(name, fn, _zeros)
