"""Rematerialization: what each decoder block keeps for the backward pass.

`model.remat` names a policy; the Transformer wraps every block in `nn.remat`
with it (moe_jax/models/transformer.py). Saved values cost memory, dropped
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
import flax.linen as nn
import jax

MOE_OUT = 'moe_out'
MOE_ROUTING = 'moe_routing'

_POLICIES = {
    'full': None,
    'save_dots': jax.checkpoint_policies.dots_saveable,
    'save_dots_no_batch': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    'save_moe': jax.checkpoint_policies.save_only_these_names(MOE_OUT, MOE_ROUTING),
}


def wrap(block_cls, name, static_argnums):
  """`block_cls` under remat policy `name` ('none': unchanged)."""
  if name == 'none':
    return block_cls
  return nn.remat(block_cls, policy=_POLICIES[name],
                  static_argnums=static_argnums)


def checkpoint(fn, name):
  """The function `fn` under policy `name` ('none': unchanged): the scanned
  stack's blocks (moe_jax/models/scan.py). Inside a scan, common-subexpression
  elimination cannot merge the recomputation with the forward pass, so
  prevent_cse (which costs extra ops) is off."""
  if name == 'none':
    return fn
  return jax.checkpoint(fn, policy=_POLICIES[name], prevent_cse=False)
