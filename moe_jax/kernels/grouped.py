"""The MoE FFN as an XLA loop over expert-sorted row tiles: the CPU path.

  y_TD = sum_j gates[t, j] * FFN_{idx[t, j]}(x[t]),  FFN = SwiGLU (reference.py)

Same contract as `reference.moe_ffn`, dropless. The assignments are sorted by
expert into a buffer whose groups are padded to `tile_m` rows
(`dispatch.route`, shared with the Pallas path), and a `fori_loop` over the
tiles in use runs each tile's SwiGLU with its own expert's weights, indexed in
place. So the FLOPs are those of the routed rows plus < tile_m padding rows
per non-empty expert, where `jax.lax.ragged_dot` on CPU computes every expert
on every row, and each tile's activations stay in cache between its matmuls,
where a whole-batch SwiGLU streams several [T·k, F] arrays through memory.

The backward pass is a second loop (custom VJP): per tile it rebuilds the
SwiGLU activations from the saved pre-activations, accumulates the expert's
weight gradients in place and writes the tile's input gradient. Dispatch and
combine are gathers both ways (as in permute.py): no scatter, deterministic.
wi_0 and wi_1 are concatenated to [E, D, 2F] once per call, so each tile does
one up-projection matmul forward and one input-gradient and one
weight-gradient matmul for both halves backward.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp

from moe_jax.kernels import dispatch as dispatch_lib


def tile_rows(num_assignments, num_experts, preferred=128):
  """Rows per tile: `preferred`, halved while padding (up to half a tile per
  expert on average) would exceed ~1/16 of the routed rows; at least 8."""
  m = preferred
  while m > 8 and num_experts * m > num_assignments // 8:
    m //= 2
  return m


def _tile(a_RX, m, tm):
  return lax.dynamic_slice_in_dim(a_RX, m * tm, tm)


def _put(a_RX, tile, m, tm):
  return lax.dynamic_update_slice_in_dim(a_RX, tile.astype(a_RX.dtype), m * tm, 0)


def _forward(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  num_tokens, top_k = idx_Tk.shape
  num_experts, d, f = wi_0_EDF.shape
  r = dispatch_lib.route(idx_Tk, num_experts, tm)
  x_RD = jnp.take(x_TD, r.row_token_R, axis=0) * (r.row_assign_R >= 0)[:, None].astype(x_TD.dtype)
  wi_E2 = jnp.concatenate([wi_0_EDF, wi_1_EDF], axis=-1)   # [E, D, 2F]

  def body(m, carry):
    h_R2, y_RD = carry
    e = r.tile_group_M[m]
    x = _tile(x_RD, m, tm)
    h_M2 = jnp.dot(x, wi_E2[e], preferred_element_type=jnp.float32)
    a_MF = jax.nn.silu(h_M2[:, :f]) * h_M2[:, f:]
    y_MD = jnp.dot(a_MF.astype(x.dtype), wo_EFD[e], preferred_element_type=jnp.float32)
    return _put(h_R2, h_M2, m, tm), _put(y_RD, y_MD, m, tm)

  rows = x_RD.shape[0]
  h_R2, y_RD = lax.fori_loop(0, r.num_tiles[0], body, (
      jnp.zeros((rows, 2 * f), jnp.float32), jnp.zeros((rows, d), jnp.float32)))
  y_TkD = jnp.take(y_RD, r.slot_Tk, axis=0)
  y_TD = jnp.einsum('tkd,tk->td', y_TkD, gates_Tk.astype(jnp.float32))
  return y_TD.astype(x_TD.dtype), (r, x_RD, h_R2, y_TkD)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  return _forward(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm)[0]


def _ffn_fwd(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  y_TD, res = _forward(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm)
  return y_TD, (res, x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD)


def _ffn_bwd(tm, saved, dy_TD):
  (r, x_RD, h_R2, y_TkD), x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD = saved
  num_tokens, top_k = idx_Tk.shape
  f = wi_0_EDF.shape[-1]
  dy_TD = dy_TD.astype(jnp.float32)
  dgates_Tk = jnp.einsum('td,tkd->tk', dy_TD, y_TkD)
  # d(combine)/dy_R: each row gets its token's dy times its gate (0 on padding).
  assign_R = jnp.maximum(r.row_assign_R, 0)
  gate_R = jnp.where(r.row_assign_R >= 0, gates_Tk.reshape(-1)[assign_R], 0).astype(jnp.float32)
  dy_RD = jnp.take(dy_TD, r.row_token_R, axis=0) * gate_R[:, None]
  wi_E2 = jnp.concatenate([wi_0_EDF, wi_1_EDF], axis=-1)

  def body(m, carry):
    dx_RD, dwi_E2, dwo_EFD = carry
    e = r.tile_group_M[m]
    x, h_M2, dy_MD = _tile(x_RD, m, tm), _tile(h_R2, m, tm), _tile(dy_RD, m, tm)
    g_MF, u_MF = h_M2[:, :f], h_M2[:, f:]
    sig_MF = jax.nn.sigmoid(g_MF)
    silu_MF = g_MF * sig_MF
    a_MF = silu_MF * u_MF
    dwo_EFD = dwo_EFD.at[e].add(jnp.dot(a_MF.T, dy_MD))
    da_MF = jnp.dot(dy_MD, wo_EFD[e].T.astype(jnp.float32))
    dh_M2 = jnp.concatenate([da_MF * u_MF * (sig_MF + silu_MF * (1 - sig_MF)),
                             da_MF * silu_MF], axis=-1)
    dwi_E2 = dwi_E2.at[e].add(jnp.dot(x.T.astype(jnp.float32), dh_M2))
    dx_MD = jnp.dot(dh_M2, wi_E2[e].T.astype(jnp.float32))
    return _put(dx_RD, dx_MD, m, tm), dwi_E2, dwo_EFD

  zeros = lambda a: jnp.zeros(a.shape, jnp.float32)
  dx_RD, dwi_E2, dwo_EFD = lax.fori_loop(0, r.num_tiles[0], body, (
      zeros(x_RD), zeros(wi_E2), zeros(wo_EFD)))
  # d(dispatch): each token sums its k rows (gathers, as in the forward combine).
  dx_TD = jnp.sum(jnp.take(dx_RD, r.slot_Tk, axis=0), axis=1)
  return (dx_TD.astype(x_TD.dtype), None, dgates_Tk.astype(gates_Tk.dtype),
          dwi_E2[..., :f].astype(wi_0_EDF.dtype), dwi_E2[..., f:].astype(wi_1_EDF.dtype),
          dwo_EFD.astype(wo_EFD.dtype))


_ffn.defvjp(_ffn_fwd, _ffn_bwd)


def moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tile_m=None):
  """Routes each token to its k experts and sums their gated SwiGLU outputs.

  tile_m: rows per tile (None: `tile_rows` of the shapes).
  """
  num_tokens, top_k = idx_Tk.shape
  tm = tile_m or tile_rows(num_tokens * top_k, wi_0_EDF.shape[0])
  return _ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tm)
