"""The MoE FFN as an XLA loop over expert-sorted row tiles: the CPU path.

  y_TD = sum_j gates[t, j] * FFN_{idx[t, j]}(x[t]),  FFN = SwiGLU (reference.py)

Same contract as `reference.moe_ffn`, dropless. The assignments are sorted by
expert into a buffer whose groups are padded to `tile_m` rows
(`expert_sort.route`, shared with the Pallas path), and `swiglu_tiles`, a
`fori_loop` over the tiles in use, runs each tile's SwiGLU with its own
expert's weights, indexed in place. So the FLOPs are those of the routed rows
plus < tile_m padding rows per non-empty expert, where `jax.lax.ragged_dot`
on CPU computes every expert on every row; and each tile's activations stay in
cache between its matmuls, where a whole-batch SwiGLU streams several
[T·k, F] arrays through memory.

Each piece has a custom VJP. The backward of `swiglu_tiles` is a second loop:
per tile it rebuilds the activations from the saved pre-activations,
accumulates its expert's weight gradients in place and writes the tile's
input gradient (`jnp.ndarray.at[e].add` would be a scatter, which XLA:CPU
turns into a pass over all of the gradient each tile). Dispatch and combine
are gathers both ways (as in permute.py): no scatter, deterministic.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp

from moe_jax.kernels import expert_sort


def tile_rows(num_rows, num_groups=1, preferred=128):
  """Rows per tile: `preferred` (the fastest on CPU from D = 96 to 256,
  docs/benchmarks.md), halved while the padding, up to a tile per group, could
  exceed a quarter of the rows; at least 8."""
  m = preferred
  while m > 8 and num_groups * m > num_rows // 4:
    m //= 2
  return m


def _tile(a_RX, m, tm):
  return lax.dynamic_slice_in_dim(a_RX, m * tm, tm)


def _put(a_RX, tile, m, tm):
  return lax.dynamic_update_slice_in_dim(a_RX, tile.astype(a_RX.dtype), m * tm, 0)


def _expert(w_EXY, e):
  """w_EXY[e] for a traced e (also when w_EXY is a numpy array)."""
  return lax.dynamic_index_in_dim(w_EXY, e, keepdims=False)


def _accumulate(a_EXY, e, grad_XY):
  """a_EXY[e] += grad_XY as one in-place dynamic-update-slice (`.at[e].add`
  is a scatter, which XLA:CPU fuses into a pass over all of a_EXY)."""
  old_XY = _expert(a_EXY, e)
  return lax.dynamic_update_index_in_dim(a_EXY, old_XY + grad_XY, e, 0)


def _swiglu_fwd_loop(x_RD, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  """y_RD and the pre-activations g_RF = x @ wi_0, u_RF = x @ wi_1 of the used
  tiles."""
  rows, d = x_RD.shape
  f = wi_0_EDF.shape[-1]

  def body(m, carry):
    g_RF, u_RF, y_RD = carry
    e, x_MD = tile_e_M[m], _tile(x_RD, m, tm)
    g_MF = jnp.dot(x_MD, _expert(wi_0_EDF, e), preferred_element_type=jnp.float32)
    u_MF = jnp.dot(x_MD, _expert(wi_1_EDF, e), preferred_element_type=jnp.float32)
    a_MF = (jax.nn.silu(g_MF) * u_MF).astype(x_RD.dtype)
    y_MD = jnp.dot(a_MF, _expert(wo_EFD, e), preferred_element_type=jnp.float32)
    return _put(g_RF, g_MF, m, tm), _put(u_RF, u_MF, m, tm), _put(y_RD, y_MD, m, tm)

  zeros = lambda n: jnp.zeros((rows, n), jnp.float32)
  return lax.fori_loop(0, num_tiles, body, (zeros(f), zeros(f), jnp.zeros((rows, d), x_RD.dtype)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def swiglu_tiles(x_RD, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  """Row tile m (rows m*tm ... m*tm + tm - 1) through expert tile_e_M[m]'s
  SwiGLU, for m < num_tiles; the rows of later tiles are 0 in the output."""
  return _swiglu_fwd_loop(x_RD, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD, tm)[2]


def _swiglu_tiles_fwd(x_RD, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD, tm):
  g_RF, u_RF, y_RD = _swiglu_fwd_loop(x_RD, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD, tm)
  return y_RD, (x_RD, g_RF, u_RF, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD)


def _swiglu_tiles_bwd(tm, saved, dy_RD):
  x_RD, g_RF, u_RF, tile_e_M, num_tiles, wi_0_EDF, wi_1_EDF, wo_EFD = saved
  f32 = lambda a: a.astype(jnp.float32)

  def body(m, carry):
    dx_RD, dwi_0_EDF, dwi_1_EDF, dwo_EFD = carry
    e = tile_e_M[m]
    x_MD, dy_MD = f32(_tile(x_RD, m, tm)), f32(_tile(dy_RD, m, tm))
    g_MF, u_MF = _tile(g_RF, m, tm), _tile(u_RF, m, tm)
    sig_MF = jax.nn.sigmoid(g_MF)
    silu_MF = g_MF * sig_MF
    dwo_EFD = _accumulate(dwo_EFD, e, jnp.dot((silu_MF * u_MF).T, dy_MD))
    da_MF = jnp.dot(dy_MD, f32(_expert(wo_EFD, e)).T)
    dg_MF = da_MF * u_MF * (sig_MF + silu_MF * (1 - sig_MF))
    du_MF = da_MF * silu_MF
    dwi_0_EDF = _accumulate(dwi_0_EDF, e, jnp.dot(x_MD.T, dg_MF))
    dwi_1_EDF = _accumulate(dwi_1_EDF, e, jnp.dot(x_MD.T, du_MF))
    dx_MD = (jnp.dot(dg_MF, f32(_expert(wi_0_EDF, e)).T)
             + jnp.dot(du_MF, f32(_expert(wi_1_EDF, e)).T))
    return _put(dx_RD, dx_MD, m, tm), dwi_0_EDF, dwi_1_EDF, dwo_EFD

  zeros = lambda a: jnp.zeros(a.shape, jnp.float32)
  dx_RD, dwi_0_EDF, dwi_1_EDF, dwo_EFD = lax.fori_loop(0, num_tiles, body, (
      jnp.zeros(x_RD.shape, x_RD.dtype), zeros(wi_0_EDF), zeros(wi_1_EDF), zeros(wo_EFD)))
  return (dx_RD, None, None, dwi_0_EDF.astype(wi_0_EDF.dtype),
          dwi_1_EDF.astype(wi_1_EDF.dtype), dwo_EFD.astype(wo_EFD.dtype))


swiglu_tiles.defvjp(_swiglu_tiles_fwd, _swiglu_tiles_bwd)


def _rows(a_NX, index):
  """a_NX[index] for indices in range by construction: no out-of-bounds
  select (jnp.take's default fill mode costs XLA:CPU a pass over the result)."""
  return a_NX.at[index].get(mode='promise_in_bounds')


@jax.custom_vjp
def _dispatch(x_TD, routing):
  """x_RD[r] = x_TD[token(r)]. Padding rows copy token 0 rather than being
  zeroed (a pass less): nothing reads their outputs, and their dy is 0, so
  they add nothing to any gradient."""
  return _rows(x_TD, routing.row_token_R)


def _dispatch_fwd(x_TD, routing):
  return _dispatch(x_TD, routing), routing


def _dispatch_bwd(routing, dx_RD):
  # Each token sums the rows it was copied to: its k slots.
  return jnp.sum(_rows(dx_RD, routing.slot_Tk), axis=1), None


_dispatch.defvjp(_dispatch_fwd, _dispatch_bwd)


@jax.custom_vjp
def _combine(y_RD, gates_Tk, routing):
  """y_TD[t] = sum_j gates[t, j] * y_RD[slot(t, j)], in float32."""
  y_TkD = _rows(y_RD, routing.slot_Tk).astype(jnp.float32)
  return jnp.einsum('tkd,tk->td', y_TkD, gates_Tk.astype(jnp.float32))


def _combine_fwd(y_RD, gates_Tk, routing):
  return _combine(y_RD, gates_Tk, routing), (y_RD, gates_Tk, routing)


def _combine_bwd(saved, dy_TD):
  y_RD, gates_Tk, routing = saved
  dgates_Tk = jnp.einsum('td,tkd->tk', dy_TD,
                         _rows(y_RD, routing.slot_Tk).astype(jnp.float32))
  # Row r gets its token's dy times its gate (0 on padding rows).
  assign_R = routing.row_assign_R
  gate_R = jnp.where(assign_R >= 0, gates_Tk.reshape(-1)[jnp.maximum(assign_R, 0)], 0)
  dy_RD = _rows(dy_TD, routing.row_token_R) * gate_R[:, None].astype(jnp.float32)
  return dy_RD.astype(y_RD.dtype), dgates_Tk.astype(gates_Tk.dtype), None


_combine.defvjp(_combine_fwd, _combine_bwd)


def moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, tile_m=None):
  """Routes each token to its k experts and sums their gated SwiGLU outputs.

  idx = num_experts means "no expert" (as in moe_ffn.py): it adds 0 and its
  gate gets a zero gradient. tile_m: rows per tile (None: `tile_rows`).
  """
  num_tokens, top_k = idx_Tk.shape
  num_experts = wi_0_EDF.shape[0]
  tm = tile_m or tile_rows(num_tokens * top_k, num_experts)
  routing = expert_sort.route(idx_Tk, num_experts, tm)
  x_RD = _dispatch(x_TD, routing)
  y_RD = swiglu_tiles(x_RD, routing.tile_group_M, routing.num_tiles[0], wi_0_EDF, wi_1_EDF,
                      wo_EFD, tm)
  return _combine(y_RD, gates_Tk, routing).astype(x_TD.dtype)
