"""model.attention='cudnn' (kernels/attention_cudnn.py): the same
jax.nn.dot_product_attention call with implementation='xla' against the
whole-array reference (values and gradients with packed segments, padding
and GQA, alone and in the model), the cuDNN call lowered for CUDA on this CPU
host, and the ConfigErrors.

Tolerances: both paths compute the scores, softmax and output in float32
from the same inputs and differ in the order of their S-term sums, at most
(S + 2) eps32 relative (S - 1 roundings in a sum, one in exp, one in the
division); the gradients chain three such sums. In bf16 the output and the
probabilities are rounded to bf16, and a float32 difference can put them on
neighbouring values: one bf16 ulp.
"""
import re

import jax
from jax import export
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import attention_cudnn
from moe_jax.models import attention, config as model_config
from tests.models import fixtures
from tests.models.test_attention_pallas import _reference_BLHK

EPS32 = float(jnp.finfo(jnp.float32).eps)
EPS_BF16 = float(jnp.finfo(jnp.bfloat16).eps)


def _inputs(b, length, g, r, k, dtype, seed=0):
  rng = np.random.default_rng(seed)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), dtype)
  q, kk, v = normal(b, length, g * r, k), normal(b, length, g, k), normal(b, length, g, k)
  # Packed documents, segment ids 1, 2, ...; row 0 ends in padding (segment 0).
  seg = np.cumsum(rng.random((b, length)) < 0.15, axis=1) + 1
  seg[0, -5:] = 0
  return q, kk, v, jnp.asarray(seg, jnp.int32), normal(b, length, g * r, k)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize('b,length,g,r,k', [(2, 32, 2, 2, 16), (1, 40, 1, 4, 8)])
def test_xla_twin_matches_reference(b, length, g, r, k, dtype):
  q, kk, v, seg, dout = _inputs(b, length, g, r, k, dtype)
  want, vjp_ref = jax.vjp(lambda *a: _reference_BLHK(*a, seg), q, kk, v)
  got, vjp = jax.vjp(lambda *a: attention_cudnn.attention(*a, seg, impl='xla'), q, kk, v)
  rel = 3 * (length + 2) * EPS32
  ulp = EPS_BF16 if dtype == jnp.bfloat16 else 0.0
  f32 = lambda a: np.asarray(a, np.float32)
  # |out| <= max |v| (a convex combination); the gradients are sums of L
  # products of unit-scale terms, so their scale is sqrt(L) times that.
  scale = float(jnp.max(jnp.abs(v.astype(jnp.float32))))
  np.testing.assert_allclose(f32(got), f32(want), rtol=ulp, atol=(rel + ulp) * scale)
  for name, d_got, d_want in zip('qkv', vjp(dout), vjp_ref(dout)):
    # Each gradient sums L products whose bf16 factors may each be an ulp off.
    atol = (rel + 2 * ulp) * float(jnp.max(jnp.abs(f32(d_want)))) * (1 + ulp * length)
    np.testing.assert_allclose(f32(d_got), f32(d_want), rtol=ulp, atol=atol, err_msg=f'd{name}')


def test_model_loss_and_gradients_match_reference():
  """The whole bf16 model on a packed batch: cudnn (its XLA twin here) and
  the reference give the same loss and gradients up to bf16 round-off of
  the attention outputs, which the rest of the model carries on."""
  base = fixtures.tiny_config()
  base.model.dtype = 'bfloat16'
  batch = fixtures.packed_batch(16)
  results = []
  for name in ('reference', 'cudnn'):
    base.model.attention = name
    cfg = model_config.from_config(base)
    run = jax.jit(fixtures.packed_loss_and_grads, static_argnums=0)
    results.append(run(cfg, fixtures.random_params(cfg), batch))
  (l_ref, g_ref), (l_cud, g_cud) = results
  # Two bf16 layers of attention, each output one ulp off at most.
  tol = 2 * 2 * EPS_BF16
  np.testing.assert_allclose(l_cud, l_ref, rtol=tol)
  for a, b in zip(jax.tree.leaves(g_cud), jax.tree.leaves(g_ref)):
    np.testing.assert_allclose(a, b, atol=tol * float(jnp.max(jnp.abs(b))))


def test_refused_where_cudnn_cannot_run():
  base = fixtures.tiny_config()
  base.model.attention = 'cudnn'
  with pytest.raises(ConfigError, match=r"needs model.dtype in .* got float32"):
    model_config.from_config(base)
  base.model.dtype = 'bfloat16'
  base.model.head_dim = 12
  with pytest.raises(ConfigError, match='multiple of 8 and <= 256, got 12'):
    model_config.from_config(base)
  with pytest.raises(ConfigError, match="'cudnn' runs on a GPU"):
    attention.resolve('cudnn', 'tpu')
  assert attention.resolve('cudnn', 'gpu') == 'cudnn'
  q, kk, v, seg, _ = _inputs(1, 15, 1, 2, 16, jnp.bfloat16)
  with pytest.raises(ConfigError, match='even seq_len'):
    attention_cudnn.attention(q, kk, v, seg, impl='cudnn')
  assert attention_cudnn.max_head_dim('9.0') == 256 and attention_cudnn.max_head_dim('8.0') == 128


def test_cudnn_call_lowers_for_cuda(monkeypatch):
  """The forward and backward lower to cuDNN's fused attention with its
  causal mask type, the kv heads as they are (GQA) and the segment mask as a
  bias. jax asks the cuDNN library for its version first, which a CPU host
  lacks: the test supplies one (jax's private module; skipped if it moved)."""
  try:
    from jax._src.cudnn import fused_attention_stablehlo as fused  # pylint: disable=g-import-not-at-top
  except ImportError:
    pytest.skip('jax moved its cuDNN attention module')
  if not hasattr(fused, 'check_cudnn_version'):
    pytest.skip('jax moved its cuDNN version check')
  monkeypatch.setattr(fused, 'check_cudnn_version', lambda: 90800)
  b, length, g, r, k = 2, 128, 2, 4, 64

  def loss_grads(q, kk, v, seg):
    f = lambda *a: jnp.sum(attention_cudnn.attention(*a, seg, impl='cudnn').astype(jnp.float32))
    return jax.grad(f, (0, 1, 2))(q, kk, v)

  shapes = [((b, length, g * r, k), jnp.bfloat16), ((b, length, g, k), jnp.bfloat16),
            ((b, length, g, k), jnp.bfloat16), ((b, length), jnp.int32)]
  targets = ('__cudnn$fmhaScaleBiasSoftmax', '__cudnn$fmhaScaleBiasSoftmaxBackward')
  exported = export.export(
      jax.jit(loss_grads), platforms=['cuda'],
      disabled_checks=[export.DisabledSafetyCheck.custom_call(t) for t in targets])(
          *[jax.ShapeDtypeStruct(s, d) for s, d in shapes])
  text = exported.mlir_module()
  assert set(re.findall(r'custom_call @(__cudnn\$\w+)\(', text)) == set(targets)
  assert '\\22mask_type\\22: \\22CAUSAL\\22' in text
  # GQA: the kv operands keep their G heads; the mask is a [B, 1, L, L] bias.
  assert f'tensor<{b}x{length}x{g}x{k}xbf16>, tensor<{b}x{length}x{g}x{k}xbf16>, ' \
         f'tensor<{b}x1x{length}x{length}xbf16>' in text


@pytest.mark.parametrize('capability, widest', [('8.9', 128), ('9.0', 256), ('10.0', 256)])
def test_the_widest_head_is_taken_and_one_step_wider_refused(capability, widest):
  """At the limit itself (Ampere/Ada 128, Hopper on 256), and through the
  config, which checks the most any GPU takes."""
  assert attention_cudnn.max_head_dim(capability) == widest
  attention_cudnn.check('bfloat16', widest, widest)
  step = attention_cudnn.HEAD_DIM_MULTIPLE
  with pytest.raises(ConfigError, match=rf'<= {widest}, got {widest + step}'):
    attention_cudnn.check('bfloat16', widest + step, widest)
  base = fixtures.tiny_config()
  base.model.update(attention='cudnn', dtype='bfloat16', head_dim=256)
  model_config.from_config(base)
  base.model.head_dim = 256 + step
  with pytest.raises(ConfigError, match=rf'<= 256, got {256 + step}'):
    model_config.from_config(base)
