"""Dispatch (token order -> expert-sorted rows) and combine (back), with VJPs.

Both directions are gathers, so nothing needs atomics and results are
deterministic:
  dispatch:  x_RD[r] = x_TD[token(r)]                  (padding rows are 0)
  combine:   y_TD[t] = sum_j gates[t, j] * y_RD[slot[t, j]]
Combine is gather-based rather than a scatter-add: each token owns its output
row and sums its k rows itself, with the gates applied in the kernel, so no
two programs write the same row. The backward passes are the same two
kernels with the roles swapped: d(dispatch) is a combine with unit gates,
d(combine)/dy_R is a dispatch that scales each row by its gate, and
d(combine)/dgates is a per-token dot product of dy with its k rows.

On the Triton path each program gathers a tile of rows with one vector-indexed
load; Mosaic has no such load, so the TPU backend uses XLA gathers here and
keeps Pallas for the grouped matmuls.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from moe_jax.kernels import backend as backend_lib


def _gather_kernel(ntiles_ref, tok_ref, w_ref, x_ref, out_ref, *, td):
  m, d = pl.program_id(0), pl.program_id(1)
  used = m < ntiles_ref[0]

  @pl.when(used)
  def _():
    rows = x_ref[tok_ref[...], pl.ds(d * td, td)].astype(jnp.float32)
    scale = w_ref[...].astype(jnp.float32)[:, None]
    out_ref[...] = (rows * scale).astype(out_ref.dtype)

  @pl.when(jnp.logical_not(used))
  def _():
    out_ref[...] = jnp.zeros(out_ref.shape, out_ref.dtype)


def _combine_kernel(slot_ref, gate_ref, y_ref, out_ref, *, td, top_k):
  d = pl.program_id(1)
  acc_TD = jnp.zeros(out_ref.shape, jnp.float32)
  for j in range(top_k):
    rows = y_ref[slot_ref[j, :], pl.ds(d * td, td)].astype(jnp.float32)
    acc_TD += gate_ref[j, :].astype(jnp.float32)[:, None] * rows
  out_ref[...] = acc_TD.astype(out_ref.dtype)


def _gate_grad_kernel(slot_ref, dy_ref, y_ref, out_ref, *, td, top_k):
  num_d = dy_ref.shape[1] // td
  for j in range(top_k):
    slots = slot_ref[j, :]

    def body(i, acc_T, slots=slots):
      cols = pl.ds(i * td, td)
      prod = dy_ref[:, cols].astype(jnp.float32) * y_ref[slots, cols].astype(
          jnp.float32)
      return acc_T + jnp.sum(prod, axis=1)

    out_ref[j, :] = lax.fori_loop(0, num_d, body,
                                  jnp.zeros(out_ref.shape[1:], jnp.float32))


def gather_rows(x_TD, row_token_R, row_weight_R, routing, b, out_dtype):
  """x_RD[r] = row_weight[r] * x_TD[row_token[r]]; unused tiles are 0."""
  rows, dim = row_token_R.shape[0], x_TD.shape[1]
  if b.kernels == 'mosaic':
    return (x_TD[row_token_R].astype(jnp.float32)
            * row_weight_R.astype(jnp.float32)[:, None]).astype(out_dtype)
  tm, td = b.tile_m, b.tile(dim, b.tile_d, 'model dim')
  return pl.pallas_call(
      functools.partial(_gather_kernel, td=td),
      out_shape=jax.ShapeDtypeStruct((rows, dim), out_dtype),
      grid=(rows // tm, dim // td),
      in_specs=[pl.no_block_spec,
                pl.BlockSpec((tm,), lambda m, d: (m,)),
                pl.BlockSpec((tm,), lambda m, d: (m,)),
                pl.no_block_spec],
      out_specs=pl.BlockSpec((tm, td), lambda m, d: (m, d)),
      interpret=b.interpret,
      compiler_params=backend_lib.compiler_params(b),
      name='moe_dispatch',
  )(routing.num_tiles, row_token_R, row_weight_R, x_TD)


def _pad_tokens(a_T, tt):
  """Pads the leading token axis to a multiple of the token tile with zeros
  (slot 0, gate 0), so a token tile never reads out of bounds."""
  extra = -a_T.shape[0] % tt
  return jnp.pad(a_T, [(0, extra)] + [(0, 0)] * (a_T.ndim - 1))


def combine_rows(y_RD, slot_Tk, gates_Tk, b, out_dtype):
  """y_TD[t] = sum_j gates[t, j] * y_RD[slot[t, j]], accumulated in float32."""
  num_tokens, top_k = slot_Tk.shape
  dim = y_RD.shape[1]
  if b.kernels == 'mosaic':
    return jnp.einsum('tkd,tk->td', y_RD[slot_Tk].astype(jnp.float32),
                      gates_Tk.astype(jnp.float32)).astype(out_dtype)
  tt, td = b.tile_t, b.tile(dim, b.tile_d, 'model dim')
  slot_kT = _pad_tokens(slot_Tk, tt).T
  gate_kT = _pad_tokens(gates_Tk, tt).T
  out_TD = pl.pallas_call(
      functools.partial(_combine_kernel, td=td, top_k=top_k),
      out_shape=jax.ShapeDtypeStruct((slot_kT.shape[1], dim), out_dtype),
      grid=(slot_kT.shape[1] // tt, dim // td),
      in_specs=[pl.BlockSpec((top_k, tt), lambda t, d: (0, t)),
                pl.BlockSpec((top_k, tt), lambda t, d: (0, t)),
                pl.no_block_spec],
      out_specs=pl.BlockSpec((tt, td), lambda t, d: (t, d)),
      interpret=b.interpret,
      compiler_params=backend_lib.compiler_params(b),
      name='moe_combine',
  )(slot_kT, gate_kT, y_RD)
  return out_TD[:num_tokens]


def gate_grad(dy_TD, y_RD, slot_Tk, b):
  """dgates[t, j] = <dy_TD[t], y_RD[slot[t, j]]> in float32."""
  num_tokens, top_k = slot_Tk.shape
  dim = y_RD.shape[1]
  if b.kernels == 'mosaic':
    return jnp.einsum('td,tkd->tk', dy_TD.astype(jnp.float32),
                      y_RD[slot_Tk].astype(jnp.float32))
  tt, td = b.tile_t, b.tile(dim, b.tile_d, 'model dim')
  slot_kT = _pad_tokens(slot_Tk, tt).T
  dy_TD = _pad_tokens(dy_TD, tt)
  out_kT = pl.pallas_call(
      functools.partial(_gate_grad_kernel, td=td, top_k=top_k),
      out_shape=jax.ShapeDtypeStruct(slot_kT.shape, jnp.float32),
      grid=(slot_kT.shape[1] // tt,),
      in_specs=[pl.BlockSpec((top_k, tt), lambda t: (0, t)),
                pl.BlockSpec((tt, dim), lambda t: (t, 0)),
                pl.no_block_spec],
      out_specs=pl.BlockSpec((top_k, tt), lambda t: (0, t)),
      interpret=b.interpret,
      compiler_params=backend_lib.compiler_params(b),
      name='moe_gate_grad',
  )(slot_kT, dy_TD, y_RD)
  return out_kT.T[:num_tokens]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def dispatch(x_TD, routing, b):
  """Differentiable dispatch: x_TD gathered into expert-sorted rows x_RD."""
  valid_R = (routing.row_assign_R >= 0).astype(x_TD.dtype)
  return gather_rows(x_TD, routing.row_token_R, valid_R, routing, b,
                     x_TD.dtype)


def _dispatch_fwd(x_TD, routing, b):
  return dispatch(x_TD, routing, b), routing


def _dispatch_bwd(b, routing, dx_RD):
  ones_Tk = jnp.ones(routing.slot_Tk.shape, dx_RD.dtype)
  return combine_rows(dx_RD, routing.slot_Tk, ones_Tk, b, dx_RD.dtype), None


dispatch.defvjp(_dispatch_fwd, _dispatch_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def combine(y_RD, gates_Tk, routing, b, out_dtype):
  """Differentiable combine: y_TD = sum_j gates[:, j] * y_RD[slot[:, j]]."""
  return combine_rows(y_RD, routing.slot_Tk, gates_Tk, b, out_dtype)


def _combine_fwd(y_RD, gates_Tk, routing, b, out_dtype):
  out = combine_rows(y_RD, routing.slot_Tk, gates_Tk, b, out_dtype)
  return out, (y_RD, gates_Tk, routing)


def _combine_bwd(b, out_dtype, res, dy_TD):
  del out_dtype
  y_RD, gates_Tk, routing = res
  gate_R = jnp.where(routing.row_assign_R >= 0,
                     gates_Tk.reshape(-1)[jnp.maximum(routing.row_assign_R, 0)],
                     0)
  dy_RD = gather_rows(dy_TD, routing.row_token_R, gate_R, routing, b,
                      y_RD.dtype)
  dgates_Tk = gate_grad(dy_TD, y_RD, routing.slot_Tk, b).astype(gates_Tk.dtype)
  return dy_RD, dgates_Tk, None


combine.defvjp(_combine_fwd, _combine_bwd)
