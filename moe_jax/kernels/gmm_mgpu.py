"""Mosaic GPU (Hopper) grouped matmuls: the same products as `gmm`, with wgmma.

  gmm:   out_RN[r] = lhs_RK[r] @ rhs_EKN[group(r)]   (or rhs_ENK^T: dlhs)
  tgmm:  drhs_EKN[e] = sum_{r in group e} lhs_RK[r]^T dout_RN[r]

Why a second GPU kernel: the Triton one stays well below a dense matmul
(docs/benchmarks.md, "MoE layer kernel"). Triton chooses its own loads; here
every operand tile is a TMA copy into swizzled shared memory that wgmma reads
directly, and the copies of the next `num_stages` contraction steps are in
flight while the tensor cores work on the current one (`plgpu.emit_pipeline`).
Measured against Triton: the same docs section, "Mosaic GPU grouped matmul".

Persistent schedule: one program per SM walks (row tile, column tile) pairs,
`plgpu.nd_loop` hands them out and `plgpu.planar_snake` orders them so
neighbouring SMs share weight tiles in L2. Rows are expert-sorted and every
group is padded to whole row tiles (`expert_sort.route`), so each row tile
reads one expert's weights and the output needs no masked store, unlike a
ragged_dot over unpadded groups. Tiles past `num_tiles` skip the pipeline and
store the zero accumulator, as the Triton kernels do.

16-bit operands only: wgmma on f32 operands would round them to TF32, so
`gmm` keeps f32 on the Triton kernels, which honour `matmul_precision`.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend as backend_lib

# An H100 SXM's SMs: the program count when lowering on a host without a GPU
# (jax.export for CI). On a GPU the device's own count is used.
_HOPPER_SMS = 132
# Programs in interpret mode: few, so each walks several tiles of a test
# shape and the persistent loop itself is exercised.
_INTERPRET_SMS = 3
_SWIZZLE_BYTES = 128   # the widest wgmma swizzle: a 64-element bf16 row
_HOPPER_SMEM = backend_lib.SMEM_PER_BLOCK['9.0']


def supports(*dtypes):
  """Whether wgmma takes these operands without changing their math: one
  16-bit float type for all (it multiplies f32 as TF32, mixes no types)."""
  return len({jnp.dtype(d) for d in dtypes}) == 1 and jnp.dtype(dtypes[0]) in (
      jnp.bfloat16, jnp.float16)


def _interpret_params():
  # Public from jax 0.11; jax 0.10 has it only under jax._src.
  params = getattr(plgpu, 'InterpretGPUParams', None)
  if params is None:
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams as params  # pylint: disable=g-import-not-at-top
  return params()


def _num_sms(b):
  if b.interpret:
    return _INTERPRET_SMS
  dev = jax.devices()[0]
  return dev.core_count if dev.platform == 'gpu' else _HOPPER_SMS


def _smem(dtype):
  """SMEM transforms: 8-row tiles of one swizzle width each, the layout
  wgmma reads and TMA writes."""
  elems = _SWIZZLE_BYTES // jnp.dtype(dtype).itemsize
  return (plgpu.TilingTransform((8, elems)),
          plgpu.SwizzleTransform(_SWIZZLE_BYTES))


def _stages(b, stage_bytes, out_bytes):
  """Pipeline depth: b.num_stages, cut to what fits beside the output tile.
  The weight gradient's two 128 x 128 operand tiles take 64 KiB a stage, so
  four stages and its f32 output tile would not fit."""
  fit = (_HOPPER_SMEM - out_bytes - 1024) // stage_bytes   # 1 KiB: barriers
  if fit < 2:
    raise ConfigError(f'mosaic_gpu: one pipeline stage of {stage_bytes} bytes '
                      'does not fit twice in shared memory; use smaller tiles')
  return min(b.num_stages, fit)


def _check(what, dim, tile):
  if dim % tile:
    raise ConfigError(f'mosaic_gpu {what}={dim} is not a multiple of its tile '
                      f'{tile}')


def _store(acc, out_gmem_tile, dtype):
  """Accumulator -> SMEM -> one TMA store of the whole output tile."""
  @functools.partial(pl.run_scoped,
                     o_smem=plgpu.SMEM(acc.shape, dtype,
                                       transforms=_smem(dtype)))
  def _(o_smem):
    o_smem[...] = acc.astype(dtype)
    plgpu.commit_smem()
    plgpu.copy_smem_to_gmem(o_smem, out_gmem_tile)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def _kernel(body, out_type, b):
  return plgpu.kernel(
      body, out_type=out_type, grid=(_num_sms(b),), grid_names=('sm',),
      compiler_params=plgpu.CompilerParams(
          lowering_semantics=plgpu.LoweringSemantics.Warpgroup),
      interpret=_interpret_params() if b.interpret else None)


def gmm(lhs_RK, rhs, routing, b, transpose_rhs=False, out_dtype=None):
  """lhs_RK @ rhs[group] per row tile; rhs is [E, K, N], or [E, N, K] when
  transpose_rhs."""
  rows, k_dim = lhs_RK.shape
  n_dim = rhs.shape[1] if transpose_rhs else rhs.shape[2]
  tm, tn, tk = b.tile_m, b.tile_n, b.tile_k
  for what, dim, tile in (('rows', rows, tm), ('contraction dim', k_dim, tk),
                          ('output dim', n_dim, tn)):
    _check(what, dim, tile)
  out_dtype = out_dtype or jnp.result_type(lhs_RK, rhs)
  grid_m, grid_n = rows // tm, n_dim // tn
  w_block = (tn, tk) if transpose_rhs else (tk, tn)
  stages = _stages(b, tk * (tm * lhs_RK.dtype.itemsize
                            + tn * rhs.dtype.itemsize),
                   tm * tn * jnp.dtype(out_dtype).itemsize)

  def body(group_gmem, ntiles_gmem, lhs_gmem, rhs_gmem, out_gmem):
    @plgpu.nd_loop((grid_m * grid_n,), collective_axes='sm')
    def _(step):
      m, n = plgpu.planar_snake(step.index[0], (grid_m, grid_n), 1,
                                b.snake_n)

      def matmul(acc_ref):
        @pl.when(m < ntiles_gmem[0])
        def _():
          def step_k(_, a_smem, w_smem):
            plgpu.wgmma(acc_ref, a_smem,
                        w_smem.transpose((1, 0)) if transpose_rhs else w_smem)

          plgpu.emit_pipeline(
              step_k, grid=(k_dim // tk,),
              in_specs=[
                  plgpu.BlockSpec((tm, tk), lambda i: (m, i), delay_release=1,
                                  transforms=_smem(lhs_RK.dtype)),
                  plgpu.BlockSpec(
                      w_block,
                      (lambda i: (n, i)) if transpose_rhs else
                      (lambda i: (i, n)), delay_release=1,
                      transforms=_smem(rhs.dtype)),
              ],
              max_concurrent_steps=stages,
          )(lhs_gmem, rhs_gmem.at[group_gmem[m]])
        return acc_ref[...]

      acc = pl.run_scoped(matmul, plgpu.ACC((tm, tn)))
      _store(acc, out_gmem.at[pl.ds(m * tm, tm), pl.ds(n * tn, tn)],
             out_dtype)

  return _kernel(body, jax.ShapeDtypeStruct((rows, n_dim), out_dtype), b)(
      routing.tile_group_M, routing.num_tiles, lhs_RK, rhs)


def tgmm(lhs_RK, dout_RN, routing, b, out_dtype):
  """Per-expert lhs^T @ dout over that expert's row tiles: [E, K, N]."""
  rows, k_dim = lhs_RK.shape
  n_dim = dout_RN.shape[1]
  num_experts = routing.counts_E.shape[0]
  tm, tw = b.tile_m, b.tile_w or b.tile_n
  for what, dim in (('weight-gradient rows', k_dim),
                    ('weight-gradient columns', n_dim)):
    _check(what, dim, tw)
  _check('rows', rows, tm)
  grid_k, grid_n = k_dim // tw, n_dim // tw
  stages = _stages(b, tm * tw * (lhs_RK.dtype.itemsize
                                 + dout_RN.dtype.itemsize),
                   tw * tw * jnp.dtype(out_dtype).itemsize)

  def body(start_gmem, count_gmem, lhs_gmem, dout_gmem, out_gmem):
    @plgpu.nd_loop((num_experts, grid_k * grid_n), collective_axes='sm')
    def _(step):
      e = step.index[0]
      kk, nn = plgpu.planar_snake(step.index[1], (grid_k, grid_n), 1,
                                  b.snake_n)
      start, count = start_gmem[e], count_gmem[e]

      def matmul(acc_ref):
        @pl.when(count > 0)   # an empty expert's gradient is the zero acc
        def _():
          def step_rows(_, a_smem, d_smem):
            plgpu.wgmma(acc_ref, a_smem.transpose((1, 0)), d_smem)

          plgpu.emit_pipeline(
              step_rows, grid=(count,),
              in_specs=[
                  plgpu.BlockSpec((tm, tw), lambda i: (start + i, kk),
                                  delay_release=1,
                                  transforms=_smem(lhs_RK.dtype)),
                  plgpu.BlockSpec((tm, tw), lambda i: (start + i, nn),
                                  delay_release=1,
                                  transforms=_smem(dout_RN.dtype)),
              ],
              max_concurrent_steps=stages,
          )(lhs_gmem, dout_gmem)
        return acc_ref[...]

      acc = pl.run_scoped(matmul, plgpu.ACC((tw, tw)))
      _store(acc, out_gmem.at[e, pl.ds(kk * tw, tw), pl.ds(nn * tw, tw)],
             out_dtype)

  out_type = jax.ShapeDtypeStruct((num_experts, k_dim, n_dim), out_dtype)
  return _kernel(body, out_type, b)(routing.tile_start_E, routing.tile_count_E,
                                    lhs_RK, dout_RN)
