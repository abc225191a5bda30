"""Rematerialization: what each decoder block keeps for the backward pass.

`model.remat` names a policy; in training every block runs under
`checkpoint` with it (moe_jax/models/scan.py, scanned or not). Saved values cost memory, dropped
ones cost a recomputation in the backward pass:

  none                no remat: every intermediate is kept (fastest, most memory)
  save_dots           keep every matmul output, recompute the elementwise work
  save_dots_no_batch  keep the matmul outputs that have no batch dimension
                      (jax.checkpoint_policies.dots_with_no_batch_dims_saveable:
                      the dense projections; attention's batched einsums are redone)
  save_moe            keep only each MoE layer's output and its routing (the
                      names below), recompute attention and the experts' inner work
  full                keep only the block's input: the whole block runs twice

The gradients are the same function in every case (float32 round-off).
"""
import functools

import jax
import jax.numpy as jnp

MOE_OUT = 'moe_out'
MOE_ROUTING = 'moe_routing'

_POLICIES = {
    'full': None,
    'save_dots': jax.checkpoint_policies.dots_saveable,
    'save_dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    'save_moe': jax.checkpoint_policies.save_only_these_names(MOE_OUT, MOE_ROUTING),
}


def checkpoint(fn, name):
  """`fn(params, x, *rest)` under policy `name` ('none': unchanged), its
  recomputation waiting for the cotangent.

  Under jax.checkpoint alone the recomputation depends only on the saved
  values, so XLA may run it any time after the forward pass, and on CPU it
  ran several blocks' recomputations ahead of their backward, each holding
  its activations (seed 002's 8x0.5b under 'full': 55.4 GB of temporaries
  so, 38.4 GB with the tie below; docs/benchmarks.md, "Memory"). An optimization
  barrier does not stop it: XLA:CPU removes barriers before it schedules.
  So the backward pass recomputes from `x` plus zero times an element of the
  cotangent (`_after`), a data dependence no pass removes.
  """
  if name == 'none':
    return fn
  ckpt = jax.checkpoint(fn, policy=_POLICIES[name], prevent_cse=False)

  @jax.custom_vjp
  def tied(*args):
    return ckpt(*args)

  def fwd(*args):
    out, pullback = jax.vjp(ckpt, *args)
    leaves, tree = jax.tree.flatten(pullback)
    # The saved values are pullback's leaves; x is among them as itself.
    at = tuple(i for i, v in enumerate(leaves) if v is args[1])
    return out, jax.tree_util.Partial(functools.partial(_pull, tree, at), *leaves)

  tied.defvjp(fwd, lambda pull, ct: pull(ct))
  return tied


def _pull(tree, at, *leaves_ct):
  """The pullback rebuilt from its leaves, with the saved x at leaf indices
  `at` replaced by `_after(x, ct)`, applied to ct."""
  *leaves, ct = leaves_ct
  leaves = [_after(v, ct) if i in at else v for i, v in enumerate(leaves)]
  return jax.tree.unflatten(tree, leaves)(ct)


def _after(x, ct):
  """`x`, computed once `ct` exists: plus zero times its first element (XLA
  does not fold a float times 0, which NaN and infinity make non-zero). An
  index, not a reshape: on a mesh it reads one shard's element."""
  first = next(v for v in jax.tree.leaves(ct)
               if jnp.issubdtype(v.dtype, jnp.floating))
  return x + (first[(0,) * first.ndim] * 0).astype(x.dtype)
