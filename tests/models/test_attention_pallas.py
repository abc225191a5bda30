"""The Pallas flash attention (GPU path, here in interpret mode) against the
whole-array reference: values and gradients with packed segments, padding and
GQA, alone and in the model; where it refuses to run."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import attention_cpu
from moe_jax.kernels import attention_gpu
from moe_jax.models import attention, config as model_config, transformer
from tests.models import fixtures


def _reference_BLHK(q_BLHK, k_BLGK, v_BLGK, seg_BL):
  """attention_cpu.reference in the model's [B, L, H, K] layout, full pass."""
  b, length, h, k = q_BLHK.shape
  g = k_BLGK.shape[2]
  q_BGQK = q_BLHK.reshape(b, length, g, h // g, k).transpose(0, 2, 3, 1, 4).reshape(
      b, g, -1, k)
  out_BGQK = attention_cpu.reference(q_BGQK, k_BLGK.transpose(0, 2, 1, 3),
                                     v_BLGK.transpose(0, 2, 1, 3), seg_BL, seg_BL,
                                     jnp.arange(length))
  return out_BGQK.reshape(b, g, h // g, length, k).transpose(0, 3, 1, 2, 4).reshape(
      b, length, h, k)


@pytest.mark.parametrize('b,length,g,r,k', [(2, 32, 2, 2, 16), (1, 48, 1, 4, 16), (2, 16, 4, 1, 32)])
def test_flash_matches_reference(b, length, g, r, k):
  rng = np.random.default_rng(length)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  q, kk, v = normal(b, length, g * r, k), normal(b, length, g, k), normal(b, length, g, k)
  # Packed documents, segment ids 1, 2, ...; row 0 ends in padding (segment 0).
  seg = np.cumsum(rng.random((b, length)) < 0.15, axis=1) + 1
  seg[0, -5:] = 0
  seg = jnp.asarray(seg, jnp.int32)
  dout = normal(b, length, g * r, k)
  want, vjp_ref = jax.vjp(lambda *a: _reference_BLHK(*a, seg), q, kk, v)
  got, vjp = jax.vjp(lambda *a: attention_gpu.flash(*a, seg), q, kk, v)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for name, d_got, d_want in zip('qkv', vjp(dout), vjp_ref(dout)):
    np.testing.assert_allclose(d_got, d_want, rtol=1e-4, atol=1e-5, err_msg=f'd{name}')


def test_model_loss_gradients_and_decode_match_reference():
  """The whole model on a packed batch, pallas vs reference; a KV-cache
  decode with model.attention=pallas runs the reference."""
  base = fixtures.tiny_config()
  base.model.head_dim = 16   # Triton's smallest dot, so the test also runs compiled on a GPU
  batch = tokens, seg, pos = fixtures.packed_batch(16)
  results = []
  for name in ('reference', 'pallas'):
    base.model.attention = name
    cfg = model_config.from_config(base)
    model, params = transformer.Transformer(cfg), fixtures.random_params(cfg)
    cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
        lambda: model.init(jax.random.key(0), tokens, segment_ids=seg, positions=pos,
                           decode=True)['cache']))
    (decoded, _), _ = model.apply({'params': params, 'cache': cache}, tokens[:, :4],
                                  segment_ids=seg[:, :4], positions=pos[:, :4], decode=True,
                                  mutable=['cache'])
    results.append((fixtures.packed_loss_and_grads(cfg, params, batch), decoded))
  ((l_ref, g_ref), dec_ref), ((l_pal, g_pal), dec_pal) = results
  np.testing.assert_allclose(l_pal, l_ref, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), g_pal, g_ref)
  np.testing.assert_array_equal(dec_pal, dec_ref)


def test_refused_on_a_mesh_a_tpu_a_length_without_blocks_and_a_narrow_head():
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ('data',))
  with pytest.raises(ConfigError, match="model.attention='pallas' runs on one GPU"):
    attention.resolve('pallas', 'gpu', mesh)
  with pytest.raises(ConfigError, match="model.attention='pallas'"):
    attention.resolve('pallas', 'tpu')
  assert attention.resolve('pallas', 'gpu') == 'pallas'
  assert attention_gpu.block_size(1024) == 128 and attention_gpu.block_size(48) == 16
  with pytest.raises(ValueError, match='seq_len divisible by 16, got 12'):
    attention_gpu.block_size(12)
  q_BLHK = jnp.zeros((1, 16, 2, 8))
  with pytest.raises(ValueError, match='head_dim >= 16 on a GPU, got 8'):
    attention_gpu.flash(q_BLHK, q_BLHK, q_BLHK, jnp.ones((1, 16), jnp.int32), interpret=False)
