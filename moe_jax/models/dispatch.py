"""Dispatch paths: route tokens to stacked experts and combine their outputs.

All share the contract of `moe_jax.kernels.reference.moe_ffn` (docs/internals.md)
and return `(y_TD, dropped_frac)`:
  reference  loop over experts, every expert on every token (tests only)
  einsum     GShard/Switch one-hot dispatch into [E, C, D] buffers of capacity
             C = ceil(capacity_factor * T * k / E); overflow is dropped, counted
  ragged     dropless: sort the T*k assignments by expert (int32 keys), two
             `jax.lax.ragged_dot` grouped matmuls, un-sort, weighted sum over k
  grouped    dropless: the XLA loop over expert-sorted row tiles of
             moe_jax/kernels/grouped.py (the CPU path: routed rows only)
  pallas     the fused kernel of moe_jax/kernels/moe_ffn.py (Triton on GPU)
  pallas_mosaic_gpu
             the same with the Mosaic GPU grouped matmuls for bf16 operands
             (kernels='mosaic_gpu', moe_jax/kernels/gmm_mgpu.py): D and F
             multiples of 128 on GPU, of 64 in interpret mode
  auto       the fastest dropless path of the platform (`AUTO`, `resolve`)
Under a mesh whose `expert` axis has more than one device, `get` returns the
expert-parallel path of moe_jax/parallel/expert.py instead (`expert_parallel`),
whose shards compute their local experts with the Pallas kernels for the
`pallas` paths,
the grouped loop for `grouped` and `jax.lax.ragged_dot` otherwise; under one
that splits tokens but not experts, the chosen path runs on each token shard
(moe_jax/parallel/local.py), einsum with a capacity per shard.
An assignment whose gate is exactly 0 (the MoE block zeroes padding tokens'
gates) adds nothing to y; einsum does not let it take a capacity slot.
"""
import functools
import importlib
import math

import jax
import jax.numpy as jnp

from moe_jax import sharding
from moe_jax.errors import ConfigError
from moe_jax.kernels import grouped as grouped_kernel
from moe_jax.kernels import reference as reference_kernel
from moe_jax.parallel import expert as expert_lib
from moe_jax.parallel import local as local_lib


def reference(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD):
  y_TD = reference_kernel.moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD)
  return y_TD, jnp.float32(0.0)


def capacity(num_tokens, top_k, num_experts, capacity_factor):
  return max(1, math.ceil(capacity_factor * num_tokens * top_k / num_experts))


def einsum(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, capacity_factor=1.25):
  num_tokens, top_k = idx_Tk.shape
  num_experts = wi_0_EDF.shape[0]
  cap = capacity(num_tokens, top_k, num_experts, capacity_factor)
  routed_kTE = (jax.nn.one_hot(idx_Tk.T, num_experts, dtype=jnp.int32)
                * (gates_Tk.T != 0)[..., None].astype(jnp.int32))
  # Slot of each assignment in its expert's buffer. k-major order: every
  # token's first choice is placed before any second choice (GShard), so
  # overflow drops the least preferred assignments first.
  pos_kTE = jnp.cumsum(routed_kTE.reshape(top_k * num_tokens, num_experts), axis=0)
  pos_kTE = pos_kTE.reshape(top_k, num_tokens, num_experts) - 1
  keep_kTE = routed_kTE * (pos_kTE < cap)
  # A token picks an expert at most once, so summing over k loses nothing.
  keep_TE = jnp.sum(keep_kTE, axis=0)
  pos_TE = jnp.sum(keep_kTE * pos_kTE, axis=0)
  gate_TE = jnp.einsum('kte,kt->te', keep_kTE.astype(jnp.float32), gates_Tk.T.astype(jnp.float32))
  dispatch_TEC = jax.nn.one_hot(pos_TE, cap, dtype=jnp.float32) * keep_TE[..., None]
  combine_TEC = dispatch_TEC * gate_TE[..., None]

  x_ECD = jnp.einsum('tec,td->ecd', dispatch_TEC.astype(x_TD.dtype), x_TD)
  h_ECF = (jax.nn.silu(jnp.einsum('ecd,edf->ecf', x_ECD, wi_0_EDF))
           * jnp.einsum('ecd,edf->ecf', x_ECD, wi_1_EDF))
  y_ECD = jnp.einsum('ecf,efd->ecd', h_ECF, wo_EFD)
  y_TD = jnp.einsum('tec,ecd->td', combine_TEC, y_ECD.astype(jnp.float32))
  routed = jnp.sum(routed_kTE)
  dropped_frac = (routed - jnp.sum(keep_TE)) / jnp.maximum(routed, 1)
  return y_TD.astype(x_TD.dtype), dropped_frac.astype(jnp.float32)


def ragged(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD):
  num_tokens, top_k = idx_Tk.shape
  num_experts = wi_0_EDF.shape[0]
  expert_A = idx_Tk.reshape(-1).astype(jnp.int32)          # A = T * k assignments
  order_A = jnp.argsort(expert_A, stable=True)
  x_AD = jnp.take(x_TD, order_A // top_k, axis=0)
  sizes_E = jnp.bincount(expert_A, length=num_experts).astype(jnp.int32)
  h_AF = (jax.nn.silu(jax.lax.ragged_dot(x_AD, wi_0_EDF, sizes_E))
          * jax.lax.ragged_dot(x_AD, wi_1_EDF, sizes_E))
  y_AD = jax.lax.ragged_dot(h_AF, wo_EFD, sizes_E)
  # Un-sort with a gather (its transpose is a scatter-add, no duplicate writes).
  inverse_A = jnp.zeros_like(order_A).at[order_A].set(jnp.arange(order_A.size, dtype=order_A.dtype))
  y_TkD = jnp.take(y_AD, inverse_A, axis=0).reshape(num_tokens, top_k, -1)
  y_TD = jnp.einsum('tkd,tk->td', y_TkD.astype(jnp.float32), gates_Tk.astype(jnp.float32))
  return y_TD.astype(x_TD.dtype), jnp.float32(0.0)


def grouped(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD):
  y_TD = grouped_kernel.moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD)
  return y_TD, jnp.float32(0.0)


def _pallas_kernel():
  try:
    return importlib.import_module('moe_jax.kernels.moe_ffn')
  except ImportError as e:
    raise ConfigError(f"moe.dispatch='pallas' needs moe_jax.kernels.moe_ffn, which "
                      f'failed to import ({e})') from e


def pallas(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, kernels=None):
  y_TD = _pallas_kernel().moe_ffn(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF,
                                  wo_EFD, kernels=kernels)
  return y_TD, jnp.float32(0.0)


def expert_parallel(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, *, mesh,
                    capacity_factor=None, local_ffn='ragged'):
  """`expert_lib.moe_ffn_ep` on `mesh`: dropless, or with `capacity_factor`
  capacity-bounded with C = `capacity` of each token shard's tokens.

  Each token shard is one GShard group (moe_jax/parallel/expert.py), so with a
  capacity the tokens dropped can differ from einsum's one group over all T.
  `local_ffn` ('ragged' | 'grouped' | 'pallas' | 'pallas_mosaic_gpu') computes
  each shard's local experts.
  """
  cap = None
  if capacity_factor is not None:
    num_tokens, top_k = idx_Tk.shape
    shards = math.prod(size for axis, size in mesh.shape.items() if axis != 'tensor')
    cap = capacity(-(-num_tokens // shards), top_k, wi_0_EDF.shape[0], capacity_factor)
  if local_ffn.startswith('pallas'):
    _pallas_kernel()   # a missing kernel is the ConfigError `pallas` raises
  return expert_lib.moe_ffn_ep(x_TD, idx_Tk, gates_Tk, wi_0_EDF, wi_1_EDF, wo_EFD, mesh=mesh,
                               capacity=cap, local_ffn=local_ffn)


_PATHS = {'reference': reference, 'einsum': einsum, 'ragged': ragged, 'grouped': grouped,
          'pallas': pallas,
          'pallas_mosaic_gpu': functools.partial(pallas, kernels='mosaic_gpu')}
NAMES = (*_PATHS, 'auto')

# The fastest dropless path per platform, the one place that choice is made.
# On CPU ragged_dot computes every expert on every row and the grouped loop
# only the routed ones (docs/benchmarks.md, "CPU training step"). On GPU the
# Triton kernels ('pallas'): every training step timed against ragged in one
# call was faster with them (docs/benchmarks/gpu.md, "Which dispatch `auto`
# picks on a GPU": 2.09x on an H200 at seed 002's 8x15m, 1.42x on an H100 at
# `10layer`), all in bf16 on one device. Outside what was measured `auto`
# keeps ragged (`_measured_fast`). TPU keeps ragged until one is timed.
AUTO = {'cpu': 'grouped', 'gpu': 'pallas'}
AUTO_DEFAULT = 'ragged'


def _measured_fast(dtype, dims, devices):
  """Whether the GPU's 'pallas' rows speak for this layer: 16-bit compute
  (the f32 Triton kernels have hung XLA's compiler at the device tiles), one
  device (the Triton kernels under a mesh are untimed), and d_model and d_ff
  with a power-of-two factor >= 16 (the least block the Triton kernels tile)."""
  return (dtype in ('bfloat16', 'float16') and devices == 1 and bool(dims)
          and all(d & -d >= 16 for d in dims))


def resolve(name, platform=None, dtype=None, dims=(), devices=1):
  """The concrete path `name` runs: itself, or for 'auto' the platform's
  (`platform` None: jax.default_backend()). On a GPU that needs the layer's
  compute `dtype`, its (d_model, d_ff) `dims` and the mesh's `devices`:
  without them 'auto' is ragged there."""
  if name != 'auto':
    return name
  path = AUTO.get(platform or jax.default_backend(), AUTO_DEFAULT)
  if path == 'pallas' and not _measured_fast(dtype, dims, devices):
    return AUTO_DEFAULT
  return path


def get(name, capacity_factor=1.25, mesh=None, dtype=None, dims=()):
  """The dispatch function `name`; `capacity_factor` is used by einsum only;
  `dtype` and `dims` (d_model, d_ff) are what 'auto' needs (`resolve`).

  With a `mesh` (concrete or abstract) whose `expert` axis is larger than 1,
  experts live on different devices, so every name maps to `expert_parallel`:
  einsum to its capacity mode, the dropless paths to its dropless mode, with
  the local experts computed by the Pallas kernels for the `pallas` paths, the
  grouped loop for `grouped` and `jax.lax.ragged_dot` for the others. 'auto' is
  `resolve`d first, at trace time.
  With `expert` = 1 but tokens split over the other axes of the default
  `batch` rule (moe_jax/sharding.py), `name` runs per token shard
  (`local_lib.moe_ffn_local`): einsum's C is then `capacity` of each shard's
  ceil(T / shards) tokens, as in `expert_parallel`.
  """
  if name not in NAMES:
    raise ConfigError(f'moe.dispatch={name!r} is not one of {NAMES}')
  sizes = {} if mesh is None else dict(mesh.shape)
  name = resolve(name, dtype=dtype, dims=dims, devices=math.prod(sizes.values()))
  if sizes.get('expert', 1) > 1:
    return functools.partial(expert_parallel, mesh=mesh,
                             capacity_factor=capacity_factor if name == 'einsum' else None,
                             local_ffn=name if name in expert_lib.LOCAL_FFNS else 'ragged')
  fn = _PATHS[name]
  if name == 'einsum':
    fn = functools.partial(einsum, capacity_factor=capacity_factor)
  token_axes = tuple(a for a in sharding.DEFAULT_RULES['batch'] if sizes.get(a, 1) > 1)
  if token_axes:
    return functools.partial(local_lib.moe_ffn_local, mesh=mesh, dispatch=fn,
                             token_axes=token_axes)
  return fn
