"""Mosaic GPU (Hopper) grouped matmuls: the same products as `gmm`, with wgmma.

  gmm:   out_RN[r] = lhs_RK[r] @ rhs_EKN[group(r)]   (or rhs_ENK^T: dlhs)
  tgmm:  drhs_EKN[e] = sum_{r in group e} lhs_RK[r]^T dout_RN[r]
  gmm_glu:     a_RF = silu(x_RD @ wi_0_EDF[g]) * (x_RD @ wi_1_EDF[g])
  gmm_glu_bwd: dh0_RF, dh1_RF of that gate, given da_RF

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

The two gate kernels are the SwiGLU gate fused (moe_ffn, `Backend.fuse_gate`):
x is read once for both weights, and h0, h1 never leave registers.

16-bit operands only: wgmma on f32 operands would round them to TF32, so
`gmm` keeps f32 on the Triton kernels, which honour `matmul_precision`.
"""
import functools

import jax
from jax import lax
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


def _smem(dtype, swizzle=_SWIZZLE_BYTES):
  """SMEM transforms: 8-row tiles of one swizzle width each, the layout
  wgmma reads and TMA writes."""
  elems = swizzle // jnp.dtype(dtype).itemsize
  return (plgpu.TilingTransform((8, elems)), plgpu.SwizzleTransform(swizzle))


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


def _store(dtype, *tiles, swizzle=_SWIZZLE_BYTES):
  """(value, out_gmem_tile) pairs -> SMEM -> one TMA store of each whole
  output tile, all in flight before the one wait."""
  def stores(*o_smems):
    for o_smem, (value, _) in zip(o_smems, tiles):
      o_smem[...] = value.astype(dtype)
    plgpu.commit_smem()
    for o_smem, (_, out_gmem_tile) in zip(o_smems, tiles):
      plgpu.copy_smem_to_gmem(o_smem, out_gmem_tile)
    plgpu.wait_smem_to_gmem(0, wait_read_only=True)

  pl.run_scoped(stores, *(plgpu.SMEM(value.shape, dtype,
                                     transforms=_smem(dtype, swizzle))
                          for value, _ in tiles))


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
      _store(out_dtype,
             (acc, out_gmem.at[pl.ds(m * tm, tm), pl.ds(n * tn, tn)]))

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
      _store(out_dtype,
             (acc, out_gmem.at[e, pl.ds(kk * tw, tw), pl.ds(nn * tw, tw)]))

  out_type = jax.ShapeDtypeStruct((num_experts, k_dim, n_dim), out_dtype)
  return _kernel(body, out_type, b)(routing.tile_start_E, routing.tile_count_E,
                                    lhs_RK, dout_RN)


def _gate_tile(b, dtype):
  """The fused gate's column tile per weight and its swizzle (bytes).

  Half of b.tile_n: one warpgroup holds both f32 accumulators in registers,
  and at the GPU tiles one 128 x 128 accumulator is 128 registers a thread,
  so two of them would need 256, over the 255 limit. Two 128 x 64 ones take
  the 128 of gmm's one. The swizzle is the widest wgmma accepts for that row
  (128 bytes at the GPU tiles, 64 for the interpret preset's 32 columns);
  wgmma needs one swizzle for both operands, so x's tile uses it too.
  """
  tf = b.tile_n // 2
  row_bytes = tf * jnp.dtype(dtype).itemsize
  for swizzle in (_SWIZZLE_BYTES, 64, 32):
    if row_bytes % swizzle == 0:
      return tf, swizzle
  raise ConfigError(f'mosaic_gpu fused gate: tile_n={b.tile_n} gives {tf} '
                    f'columns a weight, {row_bytes} bytes, not a multiple of '
                    'the narrowest wgmma swizzle (32 bytes); use a tile_n '
                    'that is a multiple of 64 bytes of the operand type')


def _gate_setup(x_RD, wi_0_EDF, wi_1_EDF, b, out_tiles):
  """Checks and static sizes shared by the two gate kernels: (tf, swizzle,
  stages); out_tiles is the number of (tile_m, tf) tiles held beside the
  pipeline (outputs, and da in the backward)."""
  rows, d_dim = x_RD.shape
  f_dim = wi_0_EDF.shape[2]
  if wi_1_EDF.shape != wi_0_EDF.shape:
    raise ConfigError(f'mosaic_gpu fused gate: wi_1 {wi_1_EDF.shape} does '
                      f'not match wi_0 {wi_0_EDF.shape}')
  tm, tk = b.tile_m, b.tile_k
  tf, swizzle = _gate_tile(b, x_RD.dtype)
  for what, dim, tile in (('rows', rows, tm), ('contraction dim', d_dim, tk),
                          ('gate output dim (tile_n / 2)', f_dim, tf)):
    _check(what, dim, tile)
  itemsize = x_RD.dtype.itemsize
  # Three operand tiles a stage: x's and the matching wi_0 and wi_1 tiles.
  stages = _stages(b, tk * (tm + 2 * tf) * itemsize,
                   out_tiles * tm * tf * itemsize)
  return tf, swizzle, stages


def _gate_products(x_gmem, w0_gmem, w1_gmem, m, n, group, used, b, tf,
                   swizzle, stages):
  """h0, h1 = x @ wi_0[group], x @ wi_1[group] for row tile m, column tile n:
  one pipeline whose every stage loads one x tile for both products. Tiles
  past num_tiles (used false) skip it and return the zero accumulators."""
  tm, tk = b.tile_m, b.tile_k
  k_dim = x_gmem.shape[1]
  w_spec = plgpu.BlockSpec((tk, tf), lambda i: (i, n), delay_release=1,
                           transforms=_smem(w0_gmem.dtype, swizzle))

  def matmuls(acc0_ref, acc1_ref):
    @pl.when(used)
    def _():
      def step_k(_, x_smem, w0_smem, w1_smem):
        plgpu.wgmma(acc0_ref, x_smem, w0_smem)
        plgpu.wgmma(acc1_ref, x_smem, w1_smem)
        # Wait until at most this step's pair is pending: the previous
        # step's pair has then read its tiles, which delay_release=1 hands
        # back to the pipeline (jax's hopper_matmul_mgpu waits the same way).
        plgpu.wgmma_wait(2)

      plgpu.emit_pipeline(
          step_k, grid=(k_dim // tk,),
          in_specs=[
              plgpu.BlockSpec((tm, tk), lambda i: (m, i), delay_release=1,
                              transforms=_smem(x_gmem.dtype, swizzle)),
              w_spec, w_spec],
          max_concurrent_steps=stages,
      )(x_gmem, w0_gmem.at[group], w1_gmem.at[group])
    return acc0_ref[...], acc1_ref[...]

  return pl.run_scoped(matmuls, plgpu.ACC((tm, tf)), plgpu.ACC((tm, tf)))


def gmm_glu(x_RD, wi_0_EDF, wi_1_EDF, routing, b):
  """The SwiGLU gate fused: a_RF = silu(x @ wi_0[g]) * (x @ wi_1[g]) per row
  tile, in x's dtype.

  Unfused, gmm reads every x tile twice (once per weight) and writes h0 and
  h1 for XLA to read back for silu * mul. Here each pipeline stage loads one
  x tile and the matching wi_0 and wi_1 tiles, two wgmma accumulators
  (`_gate_tile` says why each is tile_n / 2 wide) take both products, the
  epilogue applies silu * mul in f32 registers, and one TMA store writes a.
  """
  tf, swizzle, stages = _gate_setup(x_RD, wi_0_EDF, wi_1_EDF, b, 1)
  rows, f_dim = x_RD.shape[0], wi_0_EDF.shape[2]
  tm = b.tile_m
  grid_m, grid_f = rows // tm, f_dim // tf

  def body(group_gmem, ntiles_gmem, x_gmem, w0_gmem, w1_gmem, a_gmem):
    @plgpu.nd_loop((grid_m * grid_f,), collective_axes='sm')
    def _(step):
      m, n = plgpu.planar_snake(step.index[0], (grid_m, grid_f), 1,
                                b.snake_n)
      h0, h1 = _gate_products(x_gmem, w0_gmem, w1_gmem, m, n, group_gmem[m],
                              m < ntiles_gmem[0], b, tf, swizzle, stages)
      _store(x_RD.dtype,
             (h0 * lax.logistic(h0) * h1,
              a_gmem.at[pl.ds(m * tm, tm), pl.ds(n * tf, tf)]),
             swizzle=swizzle)

  out_type = jax.ShapeDtypeStruct((rows, f_dim), x_RD.dtype)
  return _kernel(body, out_type, b)(routing.tile_group_M, routing.num_tiles,
                                    x_RD, wi_0_EDF, wi_1_EDF)


def gmm_glu_bwd(x_RD, wi_0_EDF, wi_1_EDF, da_RF, routing, b):
  """(dh0_RF, dh1_RF), the gradients of a = silu(h0) * h1 given da, without
  h0 and h1 stored: each tile recomputes them as gmm_glu does (4·R·D·F
  FLOPs, a third more than the layer's backward had, instead of writing two
  [R, F] tensors in the forward and keeping them until the backward reads
  them), and its epilogue reads the da tile (a TMA copy in flight during the
  products) and writes

    dh0 = da * h1 * silu'(h0),  silu'(z) = s(z) (1 + z (1 - s(z))),
    dh1 = da * silu(h0),        s = sigmoid.

  That epilogue holds h0, h1 and da at once, more registers than gmm_glu's;
  whether they spill is for a GPU run to show. Tiles past num_tiles neither
  read da nor compute: they store zeros.
  """
  tf, swizzle, stages = _gate_setup(x_RD, wi_0_EDF, wi_1_EDF, b, 3)
  rows, f_dim = x_RD.shape[0], wi_0_EDF.shape[2]
  if da_RF.shape != (rows, f_dim) or da_RF.dtype != x_RD.dtype:
    raise ConfigError(f'mosaic_gpu fused gate: da {da_RF.shape} '
                      f'{da_RF.dtype} is not [{rows}, {f_dim}] {x_RD.dtype}')
  dtype, tm = x_RD.dtype, b.tile_m
  grid_m, grid_f = rows // tm, f_dim // tf

  def body(group_gmem, ntiles_gmem, x_gmem, w0_gmem, w1_gmem, da_gmem,
           dh0_gmem, dh1_gmem):
    def tiles(da_smem, da_barrier):
      @plgpu.nd_loop((grid_m * grid_f,), collective_axes='sm')
      def _(step):
        m, n = plgpu.planar_snake(step.index[0], (grid_m, grid_f), 1,
                                  b.snake_n)
        used = m < ntiles_gmem[0]
        tile = (pl.ds(m * tm, tm), pl.ds(n * tf, tf))

        @pl.when(used)
        def _():
          plgpu.copy_gmem_to_smem(da_gmem.at[tile], da_smem, da_barrier)

        h0, h1 = _gate_products(x_gmem, w0_gmem, w1_gmem, m, n,
                                group_gmem[m], used, b, tf, swizzle, stages)

        @pl.when(used)
        def _():
          plgpu.barrier_wait(da_barrier)
          da = da_smem[...].astype(jnp.float32)
          s = lax.logistic(h0)
          _store(dtype, (da * h1 * s * (1 + h0 * (1 - s)), dh0_gmem.at[tile]),
                 (da * h0 * s, dh1_gmem.at[tile]), swizzle=swizzle)

        @pl.when(jnp.logical_not(used))
        def _():   # h0 and h1 are the zero accumulators here
          _store(dtype, (h0, dh0_gmem.at[tile]), (h1, dh1_gmem.at[tile]),
                 swizzle=swizzle)

    pl.run_scoped(tiles, plgpu.SMEM((tm, tf), dtype,
                                    transforms=_smem(dtype, swizzle)),
                  plgpu.Barrier())

  out_type = (jax.ShapeDtypeStruct((rows, f_dim), dtype),) * 2
  return _kernel(body, out_type, b)(routing.tile_group_M, routing.num_tiles,
                                    x_RD, wi_0_EDF, wi_1_EDF, da_RF)
