"""Mosaic (TPU) grouped matmuls: the same products as `gmm`, TPU-style.

Mosaic cannot load at a data-dependent offset inside a kernel, so the expert
of each row tile is a scalar-prefetch operand and the BlockSpec index maps
read it: the pipeline then DMAs the right expert's weight block into VMEM.
The contraction is the innermost grid axis, accumulated in a VMEM scratch.

For the weight gradient the row tiles are the innermost (sequential) axis and
the output block is the tile's expert, so consecutive tiles of one expert
accumulate into one resident block: it is zeroed at the expert's first tile
and written at its last. Experts with no tiles are never visited, so their
blocks are masked to zero afterwards.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

_NN = (((1,), (0,)), ((), ()))
_NT = (((1,), (1,)), ((), ()))
_TN = (((0,), (0,)), ((), ()))


def _compiler_params(b):
  """Both kernels' grids: two independent output axes, then the axis they
  accumulate over, which must run in order on one core."""
  if b.interpret:
    return None
  return pltpu.CompilerParams(
      dimension_semantics=('parallel', 'parallel', 'arbitrary'))


def _gmm_kernel(group_ref, ntiles_ref, lhs_ref, rhs_ref, out_ref, acc_ref, *,
                transpose_rhs, precision):
  del group_ref  # used by the index maps only
  m, k = pl.program_id(0), pl.program_id(2)

  @pl.when(k == 0)
  def _():
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

  @pl.when(m < ntiles_ref[0])
  def _():
    acc_ref[...] += lax.dot_general(
        lhs_ref[...], rhs_ref[...], _NT if transpose_rhs else _NN,
        precision=precision, preferred_element_type=jnp.float32)

  @pl.when(k == pl.num_programs(2) - 1)
  def _():
    out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def gmm(lhs_RK, rhs, routing, b, transpose_rhs=False, out_dtype=None):
  """See gmm.gmm_raw."""
  rows, k_dim = lhs_RK.shape
  n_dim = rhs.shape[1] if transpose_rhs else rhs.shape[2]
  tm = b.tile_m
  tk = b.tile(k_dim, b.tile_k, 'contraction dim')
  tn = b.tile(n_dim, b.tile_n, 'output dim')
  if transpose_rhs:
    rhs_spec = pl.BlockSpec((pl.squeezed, tn, tk),
                            lambda m, n, k, grp, nt: (grp[m], n, k))
  else:
    rhs_spec = pl.BlockSpec((pl.squeezed, tk, tn),
                            lambda m, n, k, grp, nt: (grp[m], k, n))
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=2,
      grid=(rows // tm, n_dim // tn, k_dim // tk),
      in_specs=[pl.BlockSpec((tm, tk), lambda m, n, k, grp, nt: (m, k)),
                rhs_spec],
      out_specs=pl.BlockSpec((tm, tn), lambda m, n, k, grp, nt: (m, n)),
      scratch_shapes=[pltpu.VMEM((tm, tn), jnp.float32)])
  return pl.pallas_call(
      functools.partial(_gmm_kernel, transpose_rhs=transpose_rhs,
                        precision=b.precision),
      out_shape=jax.ShapeDtypeStruct(
          (rows, n_dim), out_dtype or jnp.result_type(lhs_RK, rhs)),
      grid_spec=grid_spec,
      interpret=b.interpret,
      compiler_params=_compiler_params(b),
      name='moe_gmm_tpu',
  )(routing.tile_group_M, routing.num_tiles, lhs_RK, rhs)


def _tgmm_kernel(group_ref, ntiles_ref, lhs_ref, dout_ref, out_ref, acc_ref, *,
                 precision):
  m, num_m = pl.program_id(2), pl.num_programs(2)
  g = group_ref[m]
  first = jnp.logical_or(m == 0, group_ref[jnp.maximum(m - 1, 0)] != g)
  last = jnp.logical_or(m == num_m - 1,
                        group_ref[jnp.minimum(m + 1, num_m - 1)] != g)

  @pl.when(first)
  def _():
    acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)

  @pl.when(m < ntiles_ref[0])
  def _():
    acc_ref[...] += lax.dot_general(lhs_ref[...], dout_ref[...], _TN,
                                    precision=precision,
                                    preferred_element_type=jnp.float32)

  @pl.when(last)
  def _():
    out_ref[...] = acc_ref[...].astype(out_ref.dtype)


def tgmm(lhs_RK, dout_RN, routing, b, out_dtype):
  """See gmm.tgmm_raw."""
  rows, k_dim = lhs_RK.shape
  n_dim = dout_RN.shape[1]
  num_experts = routing.counts_E.shape[0]
  tm = b.tile_m
  tk = b.tile(k_dim, b.tile_n, 'weight-gradient rows')
  tn = b.tile(n_dim, b.tile_n, 'weight-gradient columns')
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=2,
      grid=(k_dim // tk, n_dim // tn, rows // tm),
      in_specs=[pl.BlockSpec((tm, tk), lambda kk, nn, m, grp, nt: (m, kk)),
                pl.BlockSpec((tm, tn), lambda kk, nn, m, grp, nt: (m, nn))],
      out_specs=pl.BlockSpec((pl.squeezed, tk, tn),
                             lambda kk, nn, m, grp, nt: (grp[m], kk, nn)),
      scratch_shapes=[pltpu.VMEM((tk, tn), jnp.float32)])
  out_EKN = pl.pallas_call(
      functools.partial(_tgmm_kernel, precision=b.precision),
      out_shape=jax.ShapeDtypeStruct((num_experts, k_dim, n_dim), out_dtype),
      grid_spec=grid_spec,
      interpret=b.interpret,
      compiler_params=_compiler_params(b),
      name='moe_tgmm_tpu',
  )(routing.tile_group_M, routing.num_tiles, lhs_RK, dout_RN)
  return jnp.where(routing.counts_E[:, None, None] > 0, out_EKN, 0)
