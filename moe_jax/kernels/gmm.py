"""Grouped matmul over expert-sorted rows, forward and both backward products.

  gmm:   out_RN[r] = lhs_RK[r] @ rhs_EKN[group(r)]           (forward)
         dlhs_RK[r] = dout_RN[r] @ rhs_EKN[group(r)]^T         (input gradient)
  tgmm:  drhs_EKN[e] = sum_{r in group e} lhs_RK[r]^T dout_RN[r] (weight grad)

Rows come from `expert_sort.route`: groups are padded to whole row tiles, so each
tile multiplies against one expert's weights and no product is ever computed
densely over all experts (unlike ragged_dot's weight gradient on GPU). Unused
tiles past `num_tiles` are skipped and written as zeros.

These are the GPU (Triton-lowered) kernels, also run in interpret mode on CPU:
one program per (row tile, column tile) with the contraction loop inside, the
expert id read from the routing metadata, and weight tiles loaded from global
memory at that expert's offset. `gmm_tpu` holds the Mosaic (TPU) versions,
`gmm_mgpu` the Mosaic GPU ones (16-bit operands; f32 stays here).

`swiglu_gate` is the SwiGLU gate silu(x @ wi_0) * (x @ wi_1) as one
differentiable op on the Mosaic GPU kernels, x read once for both weights.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from moe_jax.kernels import backend as backend_lib
from moe_jax.kernels import gmm_mgpu
from moe_jax.kernels import gmm_tpu

_NN = (((1,), (0,)), ((), ()))   # a @ w
_NT = (((1,), (1,)), ((), ()))   # a @ w.T
_TN = (((0,), (0,)), ((), ()))   # a.T @ w


def _gmm_kernel(group_ref, ntiles_ref, lhs_ref, rhs_ref, out_ref, *, tk, tn,
                transpose_rhs, precision):
  m, n = pl.program_id(0), pl.program_id(1)
  used = m < ntiles_ref[0]

  @pl.when(used)
  def _():
    g = group_ref[m]
    num_k = lhs_ref.shape[1] // tk

    def body(i, acc_MN):
      a = lhs_ref[:, pl.ds(i * tk, tk)]
      if transpose_rhs:
        w = rhs_ref[g, pl.ds(n * tn, tn), pl.ds(i * tk, tk)]
      else:
        w = rhs_ref[g, pl.ds(i * tk, tk), pl.ds(n * tn, tn)]
      return acc_MN + lax.dot_general(a, w, _NT if transpose_rhs else _NN,
                                      precision=precision,
                                      preferred_element_type=jnp.float32)

    acc_MN = lax.fori_loop(0, num_k, body, jnp.zeros(out_ref.shape,
                                                     jnp.float32))
    out_ref[...] = acc_MN.astype(out_ref.dtype)

  @pl.when(jnp.logical_not(used))
  def _():
    out_ref[...] = jnp.zeros(out_ref.shape, out_ref.dtype)


def _tgmm_kernel(start_ref, count_ref, lhs_ref, dout_ref, out_ref, *, tm, tk,
                 tn, precision):
  e, kk, nn = pl.program_id(0), pl.program_id(1), pl.program_id(2)
  start = start_ref[e]

  def body(i, acc_KN):
    rows = pl.ds(pl.multiple_of((start + i) * tm, tm), tm)
    a = lhs_ref[rows, pl.ds(kk * tk, tk)]
    d = dout_ref[rows, pl.ds(nn * tn, tn)]
    return acc_KN + lax.dot_general(a, d, _TN, precision=precision,
                                    preferred_element_type=jnp.float32)

  # Empty groups run zero iterations and so write zeros.
  acc_KN = lax.fori_loop(0, count_ref[e], body,
                         jnp.zeros(out_ref.shape, jnp.float32))
  out_ref[...] = acc_KN.astype(out_ref.dtype)


def on_mosaic_gpu(b, *operands):
  """Whether b's Mosaic GPU kernels take these operands (gmm_mgpu.supports:
  16-bit only; f32 stays on the Triton kernels)."""
  return b.kernels == 'mosaic_gpu' and gmm_mgpu.supports(*(a.dtype for a in operands))


def gmm_raw(lhs_RK, rhs, routing, b, transpose_rhs=False, out_dtype=None):
  """lhs_RK @ rhs[group] per row tile; rhs is [E, K, N], or [E, N, K] when
  transpose_rhs."""
  if b.kernels == 'mosaic':
    return gmm_tpu.gmm(lhs_RK, rhs, routing, b, transpose_rhs, out_dtype)
  if on_mosaic_gpu(b, lhs_RK, rhs):
    return gmm_mgpu.gmm(lhs_RK, rhs, routing, b, transpose_rhs, out_dtype)
  rows, k_dim = lhs_RK.shape
  n_dim = rhs.shape[1] if transpose_rhs else rhs.shape[2]
  tm = b.tile_m
  tk = b.tile(k_dim, b.tile_k, 'contraction dim')
  tn = b.tile(n_dim, b.tile_n, 'output dim')
  out_dtype = out_dtype or jnp.result_type(lhs_RK, rhs)
  kernel = functools.partial(_gmm_kernel, tk=tk, tn=tn,
                             transpose_rhs=transpose_rhs,
                             precision=b.precision)
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((rows, n_dim), out_dtype),
      grid=(rows // tm, n_dim // tn),
      in_specs=[pl.no_block_spec, pl.no_block_spec,
                pl.BlockSpec((tm, k_dim), lambda m, n: (m, 0)),
                pl.no_block_spec],
      out_specs=pl.BlockSpec((tm, tn), lambda m, n: (m, n)),
      interpret=b.interpret,
      compiler_params=backend_lib.compiler_params(
          b, (tm * tk + tk * tn) * max(lhs_RK.dtype.itemsize,
                                        rhs.dtype.itemsize)),
      name='moe_gmm',
  )(routing.tile_group_M, routing.num_tiles, lhs_RK, rhs)


def tgmm_raw(lhs_RK, dout_RN, routing, b, out_dtype):
  """Per-expert lhs^T @ dout over that expert's row tiles: [E, K, N]."""
  if b.kernels == 'mosaic':
    return gmm_tpu.tgmm(lhs_RK, dout_RN, routing, b, out_dtype)
  if on_mosaic_gpu(b, lhs_RK, dout_RN):
    return gmm_mgpu.tgmm(lhs_RK, dout_RN, routing, b, out_dtype)
  k_dim, n_dim = lhs_RK.shape[1], dout_RN.shape[1]
  num_experts = routing.counts_E.shape[0]
  # Both output dims are tiled like an output column tile.
  tile_w = b.tile_w or b.tile_n
  tk = b.tile(k_dim, tile_w, 'weight-gradient rows')
  tn = b.tile(n_dim, tile_w, 'weight-gradient columns')
  kernel = functools.partial(_tgmm_kernel, tm=b.tile_m, tk=tk, tn=tn,
                             precision=b.precision)
  return pl.pallas_call(
      kernel,
      out_shape=jax.ShapeDtypeStruct((num_experts, k_dim, n_dim), out_dtype),
      grid=(num_experts, k_dim // tk, n_dim // tn),
      in_specs=[pl.no_block_spec] * 4,
      out_specs=pl.BlockSpec((pl.squeezed, tk, tn),
                             lambda e, kk, nn: (e, kk, nn)),
      interpret=b.interpret,
      compiler_params=backend_lib.compiler_params(
          b, b.tile_m * (tk + tn) * max(lhs_RK.dtype.itemsize,
                                       dout_RN.dtype.itemsize)),
      name='moe_tgmm',
  )(routing.tile_start_E, routing.tile_count_E, lhs_RK, dout_RN)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def gmm(lhs_RK, rhs_EKN, routing, b):
  """Differentiable grouped matmul: out_RN[r] = lhs_RK[r] @ rhs_EKN[g(r)]."""
  return gmm_raw(lhs_RK, rhs_EKN, routing, b)


def _gmm_fwd(lhs_RK, rhs_EKN, routing, b):
  return gmm_raw(lhs_RK, rhs_EKN, routing, b), (lhs_RK, rhs_EKN, routing)


def _gmm_bwd(b, res, dout_RN):
  lhs_RK, rhs_EKN, routing = res
  dlhs_RK = gmm_raw(dout_RN, rhs_EKN, routing, b, transpose_rhs=True,
                    out_dtype=lhs_RK.dtype)
  drhs_EKN = tgmm_raw(lhs_RK, dout_RN, routing, b, out_dtype=rhs_EKN.dtype)
  return dlhs_RK, drhs_EKN, None


gmm.defvjp(_gmm_fwd, _gmm_bwd)


def swiglu(x_RD, wi_0_EDF, wi_1_EDF, routing, b):
  """a_RF = silu(x @ wi_0[g]) * (x @ wi_1[g]): one fused kernel where b asks
  for it (`Backend.fuse_gate`) and its Mosaic GPU kernels take the operands,
  else two `gmm`s and XLA's silu * mul."""
  if b.fuse_gate and on_mosaic_gpu(b, x_RD, wi_0_EDF, wi_1_EDF):
    return swiglu_gate(x_RD, wi_0_EDF, wi_1_EDF, routing, b)
  return jax.nn.silu(gmm(x_RD, wi_0_EDF, routing, b)) * gmm(x_RD, wi_1_EDF, routing, b)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def swiglu_gate(x_RD, wi_0_EDF, wi_1_EDF, routing, b):
  """Differentiable fused SwiGLU gate on the Mosaic GPU kernels (16-bit
  operands): a_RF[r] = silu(x_RD[r] @ wi_0_EDF[g(r)]) * (x_RD[r] @
  wi_1_EDF[g(r)]), x read once for both products (gmm_mgpu.gmm_glu)."""
  return gmm_mgpu.gmm_glu(x_RD, wi_0_EDF, wi_1_EDF, routing, b)


def _swiglu_gate_fwd(x_RD, wi_0_EDF, wi_1_EDF, routing, b):
  # The residuals are the inputs, not h0 and h1: the backward kernel
  # recomputes those two [R, F] products rather than keep them alive.
  return (gmm_mgpu.gmm_glu(x_RD, wi_0_EDF, wi_1_EDF, routing, b),
          (x_RD, wi_0_EDF, wi_1_EDF, routing))


def _swiglu_gate_bwd(b, res, da_RF):
  x_RD, wi_0_EDF, wi_1_EDF, routing = res
  dh0_RF, dh1_RF = gmm_mgpu.gmm_glu_bwd(x_RD, wi_0_EDF, wi_1_EDF, da_RF,
                                        routing, b)
  # Two input-gradient products summed in x's dtype, as the unfused path's
  # two gmm backward passes are: one product over [dh0 | dh1] would need the
  # weights concatenated, a copy of both every step.
  dx_RD = (gmm_mgpu.gmm(dh0_RF, wi_0_EDF, routing, b, transpose_rhs=True,
                        out_dtype=x_RD.dtype)
           + gmm_mgpu.gmm(dh1_RF, wi_1_EDF, routing, b, transpose_rhs=True,
                          out_dtype=x_RD.dtype))
  dwi_0_EDF = gmm_mgpu.tgmm(x_RD, dh0_RF, routing, b, wi_0_EDF.dtype)
  dwi_1_EDF = gmm_mgpu.tgmm(x_RD, dh1_RF, routing, b, wi_1_EDF.dtype)
  return dx_RD, dwi_0_EDF, dwi_1_EDF, None


swiglu_gate.defvjp(_swiglu_gate_fwd, _swiglu_gate_bwd)
