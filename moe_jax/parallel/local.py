"""Token-parallel MoE FFN: each token shard runs a one-device dispatch alone.

With `mesh.expert` = 1 every device holds every expert, so when the mesh
splits tokens (the data / fsdp axes of the `batch` sharding rule) nothing
has to cross devices to route a token. Handing the global token array to a
one-device dispatch instead leaves its global sort (ragged) or one-hot
buffers (einsum) to XLA's partitioner, which gathers tokens across devices
(docs/benchmarks.md, "Mesh step"). `moe_ffn_local` states the locality
explicitly: under `jax.shard_map` (jax 0.10 and 0.11 alike) tokens, idx and
gates are split over the token axes and the chosen dispatch runs on each
shard's T_l = ceil(T / shards) tokens; the expert weights come in whole
(in_specs P(): shard_map gathers fsdp-sharded weights, as FSDP does anyway).

Tensor axis. With `tensor_axis` in the mesh larger than 1 and d_ff divisible
by it, each tensor shard holds a slice of every expert's F and the partial
outputs are summed (SwiGLU is elementwise in F and the combine is linear),
as in moe_jax/parallel/expert.py; otherwise the tensor shards repeat the work.

Capacity. A capacity-bounded dispatch (einsum) sees only its shard's tokens,
so each token shard is one GShard group with C computed from T_l, and which
tokens are dropped can differ from one group over all T. `dropped_frac` is
the global fraction: each shard's fraction weighted by its routed
(nonzero-gate) assignments, summed over shards.
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P


def moe_ffn_local(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, *, mesh,
                  dispatch, token_axes, tensor_axis='tensor'):
  """`dispatch` (a `moe_jax.models.dispatch` path) per token shard of `mesh`.

  `token_axes` are the mesh axes the tokens are split over. Returns
  (y_TD, dropped_frac) like `dispatch`.
  """
  sizes = dict(mesh.shape)
  d_ff = wi_0_EDF.shape[2]
  tp = sizes.get(tensor_axis, 1)
  f_axis = tensor_axis if tp > 1 and d_ff % tp == 0 else None

  # Pad T to a multiple of the token shards with zero gates: padded
  # assignments add nothing to y, take no capacity slot and are not counted.
  num_tokens = x_TD.shape[0]
  pad = -num_tokens % math.prod(sizes[a] for a in token_axes)
  x, idx, gates = (jnp.pad(a, [(0, pad)] + [(0, 0)] * (a.ndim - 1))
                   for a in (x_TD, idx_Tk, gates_Tk))

  tok, w_in, w_out = P(token_axes), P(None, None, f_axis), P(None, f_axis, None)
  local = functools.partial(_local_moe, dispatch=dispatch, token_axes=token_axes,
                            f_axis=f_axis)
  # check_vma=False: the Pallas kernels' pallas_call output shapes do not say
  # how they vary over mesh axes, which check_vma=True requires. Forward and
  # gradients of every path under this setting are checked against the
  # reference in tests/parallel/test_local_dispatch.py.
  y, dropped_frac = jax.shard_map(
      local, mesh=mesh, in_specs=(tok, tok, tok, w_in, w_in, w_out),
      out_specs=(tok, P()), check_vma=False)(x, idx, gates, wi_0_EDF, wi_1_EDF, wo_EFD)
  return y[:num_tokens], dropped_frac


def _local_moe(x_TD, idx_Tk, gates_Tk, wi_0, wi_1, wo, *, dispatch, token_axes, f_axis):
  """One shard's part of `moe_ffn_local`; shapes are per shard."""
  y_TD, dropped_frac = dispatch(x_TD, idx_Tk, gates_Tk, wi_0, wi_1, wo)
  if f_axis is not None:
    y_TD = jax.lax.psum(y_TD, f_axis)
  routed = jnp.sum(gates_Tk != 0).astype(jnp.float32)
  dropped, total = jax.lax.psum(jnp.stack([dropped_frac * routed, routed]), token_axes)
  return y_TD, dropped / jnp.maximum(total, 1.0)
