"""The Mosaic GPU grouped matmuls (gmm_mgpu.py) in Mosaic GPU's interpret mode
against numpy per-group products, and lowered for CUDA on this CPU host.

bf16 operands, f32 accumulation and output: the sums are exact up to f32
rounding of bf16 products, hence the 1e-5 tolerance. Unused tiles are filled
with garbage that the kernels must not read. jax 0.10's interpreter cannot
read a transposed shared-memory ref, which the input gradient (w^T) and the
weight gradient (lhs^T) feed to wgmma; those two run under jax >= 0.11 and on
a GPU (tests/kernels/test_device.py), and are lowered here on every version.
"""
import dataclasses
import re

import jax
from jax import export
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm
from moe_jax.kernels import gmm_mgpu
from moe_jax.kernels import moe_ffn
from tests.kernels import routings

NUM_EXPERTS, K_DIM, N_DIM = 4, 128, 256
needs_transposes = pytest.mark.skipif(
    jax.__version_info__ < (0, 11),
    reason="jax 0.10's Mosaic GPU interpreter cannot read transposed refs")


def routed(b=None, seed=0):
  """(b, routing, used, group) at b's tiles (default: interpret), two of
  four experts empty: used marks the rows inside num_tiles, group each row's
  expert."""
  b = b or backend.resolve('interpret', kernels='mosaic_gpu')
  idx_Tk = routings.make_idx('empty_experts', 40 * b.tile_m // 16,
                             NUM_EXPERTS, 2, seed)
  r = expert_sort.route(idx_Tk, NUM_EXPERTS, b.tile_m)
  used = np.arange(r.row_token_R.shape[0]) < int(r.num_tiles[0]) * b.tile_m
  return b, r, used, np.repeat(np.asarray(r.tile_group_M), b.tile_m)


def _case(b=None, seed=0):
  """Routing, operands and the row groups at b's tiles (default: interpret).
  test_device.py reruns the checks below with the GPU's tiles."""
  b, r, used, group = routed(b, seed)
  rows = used.shape[0]
  valid = (np.asarray(r.row_assign_R) >= 0) & used
  rng = np.random.default_rng(seed)

  def rows_of(cols):   # zero padding rows, garbage in unused tiles
    v = rng.normal(size=(rows, cols)) * valid[:, None]
    return jnp.asarray(np.where(used[:, None], v, 7.0), jnp.bfloat16)

  rhs = jnp.asarray(rng.normal(size=(NUM_EXPERTS, K_DIM, N_DIM)), jnp.bfloat16)
  return b, r, rows_of(K_DIM), rhs, rows_of(N_DIM), used, group


def _gpu_backend(**tiles):
  """The GPU preset with kernels='mosaic_gpu', built without a GPU (resolve
  would refuse): for lowering and validation."""
  preset = backend._PRESETS['gpu']  # pylint: disable=protected-access
  return dataclasses.replace(preset, kernels='mosaic_gpu',
                             **{**backend._MOSAIC_GPU['gpu'], **tiles})  # pylint: disable=protected-access


def _f32(a):
  return np.asarray(a, np.float32)


def test_gmm_matches_numpy(b=None):
  b, r, lhs, rhs, _, used, group = _case(b)
  assert int(r.num_tiles[0]) < r.tile_group_M.shape[0]   # unused tiles exist
  want = np.einsum('rk,rkn->rn', _f32(lhs), _f32(rhs)[group]) * used[:, None]
  got = gmm.gmm_raw(lhs, rhs, r, b, out_dtype=jnp.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@needs_transposes
def test_input_grad_matches_numpy(b=None):
  b, r, _, rhs, dout, used, group = _case(b)
  want = np.einsum('rn,rkn->rk', _f32(dout), _f32(rhs)[group]) * used[:, None]
  got = gmm.gmm_raw(dout, rhs, r, b, transpose_rhs=True, out_dtype=jnp.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@needs_transposes
def test_weight_grad_matches_numpy(b=None):
  b, r, lhs, _, dout, used, group = _case(b)
  lhs0, dout0 = (_f32(a) * used[:, None] for a in (lhs, dout))
  want = np.stack([lhs0[group == e].T @ dout0[group == e]
                   for e in range(NUM_EXPERTS)])
  assert np.all(want[2:] == 0)   # the empty experts
  got = gmm.tgmm_raw(lhs, dout, r, b, out_dtype=jnp.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_f32_operands_keep_the_triton_kernels(monkeypatch):
  """wgmma would round f32 to TF32 and cannot mix types: gmm routes f32
  (and mixed 16-bit types) to the Triton bodies, for all three products."""
  def refuse(*args, **kwargs):
    raise AssertionError('an f32 product reached the Mosaic GPU kernels')
  monkeypatch.setattr(gmm_mgpu, 'gmm', refuse)
  monkeypatch.setattr(gmm_mgpu, 'tgmm', refuse)
  b, r, lhs, rhs, dout, used, group = _case()
  b = dataclasses.replace(b, matmul_precision='highest')
  assert not gmm_mgpu.supports(jnp.bfloat16, jnp.float16)
  lhs, rhs, dout = _f32(lhs), _f32(rhs), _f32(dout)
  want = np.einsum('rk,rkn->rn', lhs, rhs[group]) * used[:, None]
  got = gmm.gmm_raw(jnp.asarray(lhs), jnp.asarray(rhs), r, b)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
  lhs0, dout0 = lhs * used[:, None], dout * used[:, None]
  want_w = np.stack([lhs0[group == e].T @ dout0[group == e]
                     for e in range(NUM_EXPERTS)])
  got_w = gmm.tgmm_raw(jnp.asarray(lhs0), jnp.asarray(dout0), r, b,
                       out_dtype=jnp.float32)
  np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-4)


def test_dim_off_the_tile_is_a_config_error():
  b, r, lhs, _, _, _, _ = _case()
  rhs = jnp.zeros((NUM_EXPERTS, K_DIM, 100), jnp.bfloat16)
  with pytest.raises(ConfigError, match='output dim=100 is not a multiple'):
    gmm.gmm_raw(lhs, rhs, r, b)


def test_unknown_kernels_is_a_config_error():
  with pytest.raises(ConfigError, match="kernels='cutlass'"):
    backend.resolve('interpret', kernels='cutlass')


@pytest.mark.parametrize('tiles,match', [
    (dict(tile_n=96), 'multiples of 64'), (dict(tile_m=192), 'power'),
    (dict(num_stages=1), 'num_stages=1')])
def test_bad_mosaic_gpu_tiles_are_a_config_error(tiles, match):
  with pytest.raises(ConfigError, match=match):
    _gpu_backend(**tiles)


def test_kernels_that_disagree_with_a_backend_are_a_config_error():
  b, r, lhs, rhs, _, _, _ = _case()
  with pytest.raises(ConfigError, match="kernels='triton' disagrees"):
    moe_ffn.moe_ffn(jnp.zeros((4, K_DIM)), jnp.zeros((4, 1), jnp.int32),
                    jnp.ones((4, 1)), rhs, rhs, jnp.zeros((NUM_EXPERTS, N_DIM, K_DIM)),
                    backend=b, kernels='triton')


def _lowered(fn, *shapes):
  args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
  return export.export(jax.jit(fn), platforms=['cuda'])(*args).mlir_module()


@pytest.mark.parametrize('out_dtype', [jnp.bfloat16, jnp.float32])
def test_all_three_products_lower_for_cuda_at_gpu_tiles(out_dtype):
  """The preset tiles lower through Mosaic GPU (layouts, swizzles, TMA) and
  fit a Hopper SM's shared memory: 4 stages for the matmuls, fewer for the
  weight gradient, whose 4 stages (256 KiB) would not."""
  gpu = _gpu_backend()
  experts, d, f, t, k = 8, 256, 512, 512, 2

  def products(x_RD, idx_Tk, w_EDF, h_RF):
    r = expert_sort.route(idx_Tk, experts, gpu.tile_m)
    return (gmm_mgpu.gmm(x_RD, w_EDF, r, gpu, out_dtype=out_dtype),
            gmm_mgpu.gmm(h_RF, w_EDF, r, gpu, transpose_rhs=True,
                         out_dtype=out_dtype),
            gmm_mgpu.tgmm(x_RD, h_RF, r, gpu, out_dtype))

  # Operand tiles a stage: 2 x 16 KiB for the matmuls, 2 x 32 KiB for the
  # weight gradient beside its 64 KiB f32 output tile.
  assert gmm_mgpu._stages(gpu, 32 * 1024, 64 * 1024) == 4  # pylint: disable=protected-access
  assert gmm_mgpu._stages(gpu, 64 * 1024, 64 * 1024) == 2  # pylint: disable=protected-access
  rows = expert_sort.buffer_tiles(t * k, experts, gpu.tile_m) * gpu.tile_m
  text = _lowered(products, ((rows, d), jnp.bfloat16), ((t, k), jnp.int32),
                  ((experts, d, f), jnp.bfloat16), ((rows, f), jnp.bfloat16))
  assert len(re.findall(r'custom_call @mosaic_gpu\w*\(', text)) == 3, (
      set(re.findall(r'custom_call @(\S+)\(', text)))
