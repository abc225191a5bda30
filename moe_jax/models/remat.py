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
  backward pass held to its place in the chain of blocks.

  Under jax.checkpoint alone, XLA:CPU's scheduler moved work out of each
  block's backward, and every move kept a block's worth of buffers alive
  (seed 002's 8x0.5b under 'full', 8 layers: 20.0 GB of temporaries, 9.4 GB
  with both ties below; docs/benchmarks.md, "Memory"):
  - the recomputation depends only on saved values, so it ran several
    blocks ahead of their backward;
  - the weight gradients are needed only by the optimizer at the end, so
    their matmuls ran last, holding every block's recomputed activations;
  - the params' casts were shared by the forward and the recomputation, so
    each block's cast weights lived from one to the other.
  An optimization barrier does not order any of this: XLA:CPU removes
  barriers before it schedules. Data dependences do (`_after`): the backward
  recomputes from params and x tied to the cotangent, and the cotangent it
  passes down (dx) is tied to every param gradient of the block.
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
    # The saved values are pullback's leaves; params and x are among them as themselves.
    inputs = {id(v) for v in jax.tree.leaves(args[:2])}
    at = tuple(i for i, v in enumerate(leaves) if id(v) in inputs)
    return out, jax.tree_util.Partial(functools.partial(_pull, tree, at), *leaves)

  tied.defvjp(fwd, lambda pull, ct: pull(ct))
  return tied


def _pull(tree, at, *leaves_ct):
  """The pullback rebuilt from its leaves, with the saved params and x (leaf
  indices `at`) tied to ct, applied to ct; dx tied to the param gradients."""
  *leaves, ct = leaves_ct
  leaves = [_after(v, ct) if i in at else v for i, v in enumerate(leaves)]
  d_params, d_x, *d_rest = jax.tree.unflatten(tree, leaves)(ct)
  return (d_params, _after(d_x, d_params), *d_rest)


def _after(x, tree):
  """`x`, computed once every float leaf of `tree` exists: plus zero times
  their first elements (XLA does not fold a float times 0, which NaN and
  infinity make non-zero). An index, not a reshape: on a mesh it reads one
  shard's element."""
  firsts = [v[(0,) * v.ndim].astype(jnp.float32) for v in jax.tree.leaves(tree)
            if jnp.issubdtype(v.dtype, jnp.floating)]
  return x + (sum(firsts) * 0).astype(x.dtype)
