"""moe_ffn on the Mosaic GPU kernels at any d_model / d_ff: D and F padded to
the kernels' tiles and y sliced back (moe_ffn._padded), checked three ways:
the forward in Mosaic GPU's interpret mode against the reference; forward
and gradients with the grouped matmuls swapped for a plain XLA product (jax
0.10's interpreter cannot run their backward, tests/kernels/test_gmm_mgpu.py),
so what is checked is the padding and slicing around them; and the layer's
forward + backward at seed 002's 8x15m width lowered for CUDA.
"""
import re

import jax
from jax import export
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.kernels import backend
from moe_jax.kernels import gmm as gmm_lib
from moe_jax.kernels import gmm_mgpu
from moe_jax.kernels import moe_ffn
from moe_jax.kernels import reference
from tests.kernels import routings
from tests.kernels import test_gmm_mgpu
from tests.kernels import test_moe_ffn

# 40 and 72 are multiples of no interpret tile (64); 37 tokens fill no row tile.
T, D, F, E, K = 37, 40, 72, 4, 2


def _args():
  """bf16 operands (the Mosaic GPU kernels' only type) and a cotangent."""
  idx = routings.make_idx('skewed', T, E, K)
  gates = routings.make_gates(T, K)
  ks = jax.random.split(jax.random.PRNGKey(0), 5)
  x = jax.random.normal(ks[0], (T, D))
  w0, w1 = (jax.random.normal(k, (E, D, F)) / D**0.5 for k in ks[1:3])
  wo = jax.random.normal(ks[3], (E, F, D)) / F**0.5
  bf16 = lambda a: jnp.asarray(a).astype(jnp.bfloat16)
  return ((bf16(x), jnp.asarray(idx), bf16(gates), bf16(w0), bf16(w1), bf16(wo)),
          jax.random.normal(ks[4], (T, D)))


def _interpret_mgpu():
  return backend.resolve('interpret', kernels='mosaic_gpu')


def test_unaligned_forward_matches_reference(monkeypatch):
  shapes = []
  monkeypatch.setattr(gmm_mgpu, 'gmm', lambda lhs, rhs, *a, _gmm=gmm_mgpu.gmm, **kw: (
      shapes.append((lhs.shape[1], rhs.shape[1:])), _gmm(lhs, rhs, *a, **kw))[1])
  args, _ = _args()
  got = moe_ffn.moe_ffn(*args, backend=_interpret_mgpu())
  want = reference.moe_ffn(*args)
  assert got.shape == (T, D) and got.dtype == jnp.bfloat16
  g, w = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert np.max(np.abs(g - w)) / np.max(np.abs(w)) <= test_moe_ffn.TOL['bfloat16']
  # wi_0, wi_1 then wo, every width padded to the 64-wide interpret tiles.
  assert shapes == [(64, (64, 128)), (64, (64, 128)), (128, (128, 64))]


def _xla_gmm(lhs_RK, rhs_EKN, routing, b):
  """The grouped product as one XLA einsum over each row's expert: the
  kernels' contract (zero rows past num_tiles), differentiable by jax."""
  del b
  group_R = jnp.repeat(routing.tile_group_M, lhs_RK.shape[0] // routing.tile_group_M.shape[0])
  used_R = jnp.arange(lhs_RK.shape[0]) < routing.num_tiles[0] * (
      lhs_RK.shape[0] // routing.tile_group_M.shape[0])
  out = jnp.einsum('rk,rkn->rn', lhs_RK, rhs_EKN[group_R], preferred_element_type=jnp.float32)
  return jnp.where(used_R[:, None], out, 0).astype(lhs_RK.dtype)


def test_unaligned_gradients_match_reference_with_an_xla_product(monkeypatch):
  widths = []
  monkeypatch.setattr(gmm_lib, 'gmm', lambda lhs, rhs, *a: (
      widths.append(rhs.shape[1:]), _xla_gmm(lhs, rhs, *a))[1])
  args, ct = _args()
  b = _interpret_mgpu()
  y, grads = test_moe_ffn._value_and_grads(  # pylint: disable=protected-access
      lambda *a: moe_ffn.moe_ffn(*a, backend=b), ct, *args)
  assert widths == [(64, 128), (64, 128), (128, 64)]   # the padded products ran
  want_y, want_grads = test_moe_ffn._value_and_grads(reference.moe_ffn, ct, *args)  # pylint: disable=protected-access
  for name, g, w in zip(['y', 'dx', 'dgates', 'dwi_0', 'dwi_1', 'dwo'],
                        jax.tree.leaves((y, grads)), jax.tree.leaves((want_y, want_grads))):
    assert g.shape == w.shape, name   # the padding's gradient is sliced away
    g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
    assert np.max(np.abs(g - w)) / np.max(np.abs(w)) <= test_moe_ffn.TOL['bfloat16'], name


def test_aligned_widths_are_not_padded(monkeypatch):
  monkeypatch.setattr(moe_ffn, '_padded', lambda *a: pytest.fail('padded an aligned layer'))
  assert moe_ffn._pad_multiple(_interpret_mgpu(), jnp.zeros(1, jnp.bfloat16)) == 64  # pylint: disable=protected-access
  assert moe_ffn._pad_multiple(test_gmm_mgpu._gpu_backend(), jnp.zeros(1, jnp.bfloat16)) == 128  # pylint: disable=protected-access
  assert moe_ffn._pad_multiple(backend.resolve('interpret'), jnp.zeros(1, jnp.bfloat16)) == 1  # pylint: disable=protected-access
  x = jnp.zeros((8, 64), jnp.bfloat16)
  w = jnp.zeros((2, 64, 128), jnp.bfloat16)
  moe_ffn.moe_ffn(x, jnp.zeros((8, 1), jnp.int32), jnp.ones((8, 1), jnp.bfloat16), w, w,
                  w.transpose(0, 2, 1), backend=_interpret_mgpu())


def test_8x15m_width_lowers_for_cuda():
  """d_model 320 (8x15m) and d_ff 864: both padded to 384 and 896 at the GPU
  tiles; the nine products of forward + backward are Mosaic GPU kernels."""
  gpu = test_gmm_mgpu._gpu_backend()  # pylint: disable=protected-access
  t, d, f, e, k = 256, 320, 864, 8, 2

  def loss(*args):
    return jnp.sum(moe_ffn.moe_ffn(*args, backend=gpu).astype(jnp.float32))

  shapes = [((t, d), jnp.bfloat16), ((t, k), jnp.int32), ((t, k), jnp.bfloat16),
            ((e, d, f), jnp.bfloat16), ((e, d, f), jnp.bfloat16), ((e, f, d), jnp.bfloat16)]
  grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 2, 3, 4, 5)))
  text = export.export(grad, platforms=['cuda'], disabled_checks=[
      export.DisabledSafetyCheck.custom_call('__gpu$xla.gpu.triton')])(
          *(jax.ShapeDtypeStruct(s, dt) for s, dt in shapes)).mlir_module()
  assert len(re.findall(r'custom_call @mosaic_gpu\w*\(', text)) == 9
  assert f'tensor<{e}x384x896xbf16>' in text and f'tensor<{e}x896x384xbf16>' in text
