"""The fused SwiGLU gate kernels of Mosaic GPU (gmm_mgpu.gmm_glu and
gmm_glu_bwd) in Mosaic GPU's interpret mode against numpy and jax.vjp, and
lowered for CUDA on this CPU host.

The kernels round their f32 results once to bf16 (the operand type), so the
kernel outputs are held to that rounding: 2**-8 of the exact value, plus
test_gmm_mgpu.py's 1e-4 for the f32 sums' own error.

Rows past num_tiles hold NaN: the kernels must not read them. Padding rows
inside used tiles hold finite garbage, computed like any row and checked.
"""
import collections
import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import backend
from moe_jax.kernels import expert_sort
from moe_jax.kernels import gmm_mgpu
from tests.kernels import routings
from tests.kernels import test_gmm_mgpu

NUM_EXPERTS, D_DIM, F_DIM = 4, 128, 256
RTOL, ATOL = 2.0**-8, 1e-4


def _case(b=None, seed=0):
  """Routing (two of four experts empty), x, wi_0, wi_1, a cotangent da, and
  per row: used (inside num_tiles) and its group, at b's tiles."""
  b = b or backend.resolve('interpret', kernels='mosaic_gpu')
  idx_Tk = routings.make_idx('empty_experts', 40 * b.tile_m // 16,
                             NUM_EXPERTS, 2, seed)
  r = expert_sort.route(idx_Tk, NUM_EXPERTS, b.tile_m)
  rows = r.row_token_R.shape[0]
  used = np.arange(rows) < int(r.num_tiles[0]) * b.tile_m
  rng = np.random.default_rng(seed)

  def rows_of(cols):   # garbage in padding rows, NaN past num_tiles
    v = rng.normal(size=(rows, cols))
    return jnp.asarray(np.where(used[:, None], v, np.nan), jnp.bfloat16)

  w0, w1 = (jnp.asarray(rng.normal(size=(NUM_EXPERTS, D_DIM, F_DIM))
                        / D_DIM**0.5, jnp.bfloat16) for _ in range(2))
  group = np.repeat(np.asarray(r.tile_group_M), b.tile_m)
  return b, r, rows_of(D_DIM), w0, w1, rows_of(F_DIM), used, group


def _f32(a):
  return np.asarray(a, np.float32)


def _products(x, w0, w1, used, group):
  """h0, h1 in f64 on the used rows (0 elsewhere): exact for bf16 inputs."""
  x64 = np.where(used[:, None], np.asarray(x, np.float64), 0)
  return (np.einsum('rd,rdf->rf', x64, np.asarray(w, np.float64)[group])
          for w in (w0, w1))


def test_gate_matches_numpy(b=None):
  b, r, x, w0, w1, _, used, group = _case(b)
  assert int(r.num_tiles[0]) < r.tile_group_M.shape[0]   # unused tiles exist
  assert not np.isin([2, 3], np.asarray(r.tile_group_M)).any()   # empty
  h0, h1 = _products(x, w0, w1, used, group)
  want = h0 / (1 + np.exp(-h0)) * h1
  got = gmm_mgpu.gmm_glu(x, w0, w1, r, b)
  assert got.dtype == jnp.bfloat16 and got.shape == want.shape
  np.testing.assert_allclose(_f32(got), want, rtol=RTOL, atol=ATOL)


def test_gate_backward_matches_jax_vjp(b=None):
  """dh0, dh1 of the kernel against jax.vjp of silu(h0) * h1 (not the
  kernel's silu' formula), with NaN in da past num_tiles."""
  b, r, x, w0, w1, da, used, group = _case(b)
  h0, h1 = _products(x, w0, w1, used, group)
  _, vjp = jax.vjp(lambda a, c: jax.nn.silu(a) * c, h0.astype(np.float32),
                   h1.astype(np.float32))
  want_dh0, want_dh1 = (np.where(used[:, None], d, 0)
                        for d in vjp(jnp.asarray(np.nan_to_num(_f32(da)))))
  got_dh0, got_dh1 = gmm_mgpu.gmm_glu_bwd(x, w0, w1, da, r, b)
  for got, want in ((got_dh0, want_dh0), (got_dh1, want_dh1)):
    assert got.dtype == jnp.bfloat16
    np.testing.assert_allclose(_f32(got), want, rtol=RTOL, atol=ATOL)


def test_gate_tile_off_the_swizzle_is_a_config_error():
  b, r, x, w0, w1, _, _, _ = _case()
  with pytest.raises(ConfigError, match='tile_n=16 gives 8 columns'):
    gmm_mgpu.gmm_glu(x, w0, w1, r, dataclasses.replace(b, tile_n=16))
  with pytest.raises(ConfigError, match=r'gate output dim \(tile_n / 2\)=48'):
    gmm_mgpu.gmm_glu(x, w0[..., :48], w1[..., :48], r, b)


@pytest.mark.parametrize('tile_n,swizzle', [(128, 128), (64, 64)])
def test_gate_kernels_lower_for_cuda(tile_n, swizzle):
  """Both gate kernels lower through Mosaic GPU (layout inference, one
  swizzle for x and the weights, TMA) at the GPU preset's tiles (64 columns
  a weight) and at tile_n 64 (32 columns, a 64-byte swizzle); three operand
  tiles a stage keep four stages beside the backward's da, dh0 and dh1."""
  gpu = test_gmm_mgpu._gpu_backend(tile_n=tile_n)  # pylint: disable=protected-access
  experts, d, f, t, k = 8, 256, 512, 512, 2
  rows = expert_sort.buffer_tiles(t * k, experts, gpu.tile_m) * gpu.tile_m
  shapes = (((rows, d), jnp.bfloat16), ((experts, d, f), jnp.bfloat16))
  x, w = (jax.ShapeDtypeStruct(s, dt) for s, dt in shapes)
  assert gmm_mgpu._gate_setup(x, w, w, gpu, 3) == (tile_n // 2, swizzle, 4)  # pylint: disable=protected-access

  def gate(x_RD, idx_Tk, w0_EDF, w1_EDF, da_RF):
    r = expert_sort.route(idx_Tk, experts, gpu.tile_m)
    return (gmm_mgpu.gmm_glu(x_RD, w0_EDF, w1_EDF, r, gpu),
            gmm_mgpu.gmm_glu_bwd(x_RD, w0_EDF, w1_EDF, da_RF, r, gpu))

  text = test_gmm_mgpu._lowered(  # pylint: disable=protected-access
      gate, *shapes[:1], ((t, k), jnp.int32), shapes[1], shapes[1],
      ((rows, f), jnp.bfloat16))
  # Routing metadata (2) + x, wi_0, wi_1 forward; + da backward.
  assert _mosaic_gpu_operands(text) == {5: 1, 6: 1}


def _mosaic_gpu_operands(text):
  """Operand count -> Mosaic GPU calls in a lowered module: the kernels carry
  no name there, but the gate kernels take more operands than a product."""
  calls = re.findall(r'custom_call @mosaic_gpu\w*\(([^)]*)\)', text)
  return collections.Counter(len(c.split(',')) for c in calls)
