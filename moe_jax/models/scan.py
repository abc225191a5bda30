"""The block stack as scans (`model.scan_layers`): one traced block per period.

A Python loop over blocks puts every layer into the step's program, so its
compile time grows with depth; `jax.lax.scan` traces and compiles one period
of blocks once. With the train state stacked alike (models/stacking.py) the
step compiles in the same time at 8 and 24 layers (docs/benchmarks.md).
A stack is cut into groups that each repeat one period of the MoE pattern
(ModelConfig.is_moe_layer):

  first_dense dense layers | (every - 1 dense, 1 MoE) x R | the dense rest

so every stack a config can express is scanned (none is refused): all-dense
and all-MoE stacks are one group of period 1, seed 000's interleaved stacks
one group of period 2, Table 7(a)'s (two dense, then MoE) two groups.

The model takes `layers_{i}` params (their paths are API: checkpoints,
upcycle rules, interop and inspect read them). Each group's layers are
stacked here on a leading [R] axis; the trainer's stacked state hands them
over as slices of its own [R] leaves, which XLA folds into this stacking.
Init, decoding (the `cache` collection) and the routing record
(`intermediates`) run the Transformer's own loop of Block modules instead
(models/transformer.py): same params, same function. `loop` is the stack
without scan for training under remat, whose checkpoint (models/remat.py)
takes a block as a function, as the scan does.
"""
import functools

import jax
import jax.numpy as jnp

from moe_jax.models import remat


def groups(cfg):
  """((first layer, is-MoE pattern of one period, repeats), ...): the stack in order."""
  n = cfg.num_layers
  if not cfg.moe_layers:
    return ((0, (False,), n),)
  first, every = cfg.moe.first_dense, cfg.moe.every
  repeats, rest = divmod(n - first, every)   # validate(): first < n, repeats >= 1
  out = [(0, (False,), first)] if first else []
  out.append((first, tuple(cfg.is_moe_layer(first + q) for q in range(every)), repeats))
  if rest:   # an incomplete period ends before its MoE layer: dense
    out.append((first + repeats * every, (False,), rest))
  return tuple(out)


def columns(start, period, repeats):
  """The group's layer names by position in its period: [[layers_i of q] for q]."""
  return [[f'layers_{start + r * period + q}' for r in range(repeats)] for q in range(period)]


def _blocks(block_cls, cfg, train):
  """{is_moe: f(params, x_BLD, load_E, i, tokens_BL, segment_ids_BL,
  positions_BL, rng) -> (x_BLD, stats)}: one block applied as a function of
  its params, under `cfg.remat` (models/remat.py). Everything a block reads
  is an argument: remat's custom VJP must not close over traced values."""
  def block(is_moe, p, x_BLD, load_E, i, tokens_BL, segment_ids_BL, positions_BL, rng):
    rngs = {} if rng is None else {'jitter': jax.random.fold_in(rng, i)}
    return block_cls(cfg, is_moe, parent=None).apply(
        {'params': p}, x_BLD, tokens_BL, segment_ids_BL, positions_BL, train, False, load_E,
        rngs=rngs)

  return {is_moe: remat.checkpoint(functools.partial(block, is_moe), cfg.remat)
          for is_moe in (False, True)}


def loop(block_cls, cfg, params, x_BLD, tokens_BL, segment_ids_BL, positions_BL, train,
         expert_load=None, rng=None):
  """`run`'s result from a Python loop over the blocks: the stack under remat
  without scan_layers (remat.checkpoint needs a block as a function)."""
  fns = _blocks(block_cls, cfg, train)
  inputs = (tokens_BL, segment_ids_BL, positions_BL, rng)
  stats = {}
  for i in range(cfg.num_layers):
    name = f'layers_{i}'
    x_BLD, s = fns[cfg.is_moe_layer(i)](params[name], x_BLD, (expert_load or {}).get(name),
                                        jnp.int32(i), *inputs)
    if s is not None:
      stats[name] = s
  return x_BLD, stats


def run(block_cls, cfg, params, x_BLD, tokens_BL, segment_ids_BL, positions_BL, train,
        expert_load=None, rng=None):
  """(x_BLD after every block, {'layers_i': stats} of the MoE layers).

  `params` holds `layers_{i}` as the loop's blocks own them; `expert_load` is
  the Transformer's ({'layers_i': [E]} or None); `rng` the jitter key, folded
  with the layer index (the loop's blocks draw their own: other noise, same
  distribution).
  """
  fns = _blocks(block_cls, cfg, train)
  inputs = (tokens_BL, segment_ids_BL, positions_BL, rng)
  stats = {}
  for start, pattern, repeats in groups(cfg):
    names = columns(start, len(pattern), repeats)
    stack = lambda tree_of: [jax.tree.map(lambda *v: jnp.stack(v), *map(tree_of, col))
                             for col in names]
    xs = (stack(lambda name: params[name]),
          stack(lambda name: None if expert_load is None else expert_load.get(name)),
          stack(lambda name: jnp.int32(int(name.split('_')[1]))))

    def body(x_BLD, xs_r, pattern=pattern):
      out = []
      for q, is_moe in enumerate(pattern):
        x_BLD, s = fns[is_moe](xs_r[0][q], x_BLD, xs_r[1][q], xs_r[2][q], *inputs)
        out.append(s)
      return x_BLD, out

    x_BLD, ys = jax.lax.scan(body, x_BLD, xs)
    for q, col in enumerate(names):
      if ys[q] is not None:
        for r, name in enumerate(col):
          stats[name] = jax.tree.map(lambda v, r=r: v[r], ys[q])
  return x_BLD, stats
