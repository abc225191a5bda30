"""The fused cross-entropy (models/losses.py) against optax's float32 one:
values and gradients, whole and chunked, and the float32 [T, V] arrays it
must not write.

Tolerances come from the arithmetic. Both sides compute in float32 from the
same logits, and differ only in the order of the V-term log-sum-exp: at most
(V + 2) eps32 relative on each probability (V - 1 roundings in the sum, one
each in exp and log). A gradient in bf16 adds one bf16 ulp (eps_bf16
relative) where the two float32 values round to neighbours.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config
from moe_jax.models import losses
from moe_jax.models import transformer
from moe_jax.train import accumulate
from tests.models import fixtures

EPS32 = float(jnp.finfo(jnp.float32).eps)
EPS_BF16 = float(jnp.finfo(jnp.bfloat16).eps)
T, V, D = 37, 251, 24   # odd sizes: no block divides them


def _inputs(dtype, seed=0):
  rng = np.random.default_rng(seed)
  logits = jnp.asarray(rng.normal(size=(T, V)) * 3, dtype)
  targets = jnp.asarray(rng.integers(0, V, T), jnp.int32)
  mask = jnp.asarray(rng.random(T) < 0.8, jnp.float32)
  return logits, targets, mask


def _f32(a):
  return np.asarray(a, np.float32)


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_fused_matches_reference_on_logits(dtype):
  logits, targets, mask = _inputs(dtype)
  loss = lambda impl: lambda z: losses.cross_entropy(z, targets, mask, impl)[0]
  want, want_g = jax.value_and_grad(loss('reference'))(logits)
  got, got_g = jax.value_and_grad(loss('fused'))(logits)
  assert got_g.dtype == dtype
  rel = (V + 2) * EPS32
  np.testing.assert_allclose(got, want, rtol=rel)
  # |d loss / d logit| <= 1 / count: the float32 difference is rel of that.
  count = float(jnp.sum(mask))
  ulp = EPS_BF16 if dtype == jnp.bfloat16 else 0.0
  np.testing.assert_allclose(_f32(got_g), _f32(want_g), rtol=ulp, atol=rel / count)


@pytest.mark.parametrize('chunk', [0, T])
def test_fused_head_matches_reference_in_bf16(chunk):
  """x @ w in bf16 then the loss, whole (chunk 0) or in chunks of T tokens
  (3 chunks), the reference side in the same chunks."""
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(3, T, D)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(D, V)) / D**0.5 * 3, jnp.bfloat16)
  targets = jnp.asarray(rng.integers(0, V, (3, T)), jnp.int32)
  mask = jnp.asarray(rng.random((3, T)) < 0.8, jnp.float32)

  def loss(impl):
    def f(x, w):
      if chunk:
        return losses.chunked_cross_entropy(x, w, targets, mask, chunk, impl)[0]
      return losses.cross_entropy(x @ w, targets, mask, impl)[0]
    return f

  want, (want_x, want_w) = jax.value_and_grad(loss('reference'), (0, 1))(x, w)
  got, (got_x, got_w) = jax.value_and_grad(loss('fused'), (0, 1))(x, w)
  # XLA may fold the reference's upcast into its matmul, so its logits can
  # skip the rounding to bf16: half a bf16 ulp each, which moves a token's
  # loss (log-sum-exp minus the target's logit) by at most one ulp of the
  # largest logit.
  z = _f32(x) @ _f32(w)
  shift = EPS_BF16 * np.max(np.abs(z))
  np.testing.assert_allclose(got, want, rtol=(V + 2) * EPS32, atol=shift)
  # Each logit gradient p - onehot moves by p (shift + rel) / count, plus one
  # ulp of its bf16 value; a matmul sums those steps against |w| (or |x|),
  # and the result rounds to bf16 once more.
  count = float(jnp.sum(mask))
  p = np.exp(z - np.log(np.sum(np.exp(z), -1, keepdims=True))) * _f32(mask)[..., None]
  dlogits = _f32(jax.grad(lambda z: losses.cross_entropy(z, targets, mask)[0])(x @ w))
  step = EPS_BF16 * np.abs(dlogits) + p * (shift + (V + 2) * EPS32) / count
  bound_x = step @ np.abs(_f32(w)).T + EPS_BF16 * np.abs(_f32(want_x))
  bound_w = np.einsum('btd,btv->dv', np.abs(_f32(x)), step) + EPS_BF16 * np.abs(_f32(want_w))
  assert np.all(np.abs(_f32(got_x) - _f32(want_x)) <= bound_x)
  assert np.all(np.abs(_f32(got_w) - _f32(want_w)) <= bound_w)


def _entry_shapes(fn, *args):
  """Result types of the compiled ENTRY computation's instructions: each one
  is an array XLA writes to memory (fusions keep their insides in registers)."""
  hlo = jax.jit(fn).lower(*args).compile().as_text()
  entry = hlo[hlo.index('ENTRY'):]
  return re.findall(r'= (\w+\[[\d,]*\])', entry)


def test_fused_gradient_writes_no_float32_logits():
  """The reference's gradient writes float32 [T, V] arrays (the upcast
  logits, the softmax gradient); the fused one none on a GPU, whose reduction
  fusions read the bf16 logits. XLA:CPU's reduction fusion reads an upcast
  copy instead, which is one [T, V] float32 array of the forward."""
  logits, targets, mask = _inputs(jnp.bfloat16)
  grad = lambda impl: jax.grad(lambda z: losses.cross_entropy(z, targets, mask, impl)[0])
  count = lambda impl: _entry_shapes(grad(impl), logits).count(f'f32[{T},{V}]')
  allowed = 1 if jax.default_backend() == 'cpu' else 0
  assert count('fused') <= allowed < count('reference')


@pytest.mark.parametrize('chunk', [0, 16])
def test_model_loss_and_gradients_match_the_reference(chunk):
  """The step's loss (accumulate.loss_terms) with model.cross_entropy='fused'
  against the reference path (the model's own float32 logits), float32."""
  config = fixtures.tiny_config()
  config.model.loss_chunk = chunk
  ref_cfg = model_config.from_config(config)
  config.model.cross_entropy = 'fused'
  fused_cfg = model_config.from_config(config)
  params = fixtures.random_params(ref_cfg)
  tokens = fixtures.tokens(2, 17)
  batch = dict(inputs=tokens[:, :-1], targets=tokens[:, 1:],
               segment_ids=jnp.ones((2, 16), jnp.int32),
               positions=jnp.tile(jnp.arange(16), (2, 1)),
               loss_mask=jnp.ones((2, 16), jnp.float32).at[1, 10:].set(0))

  def value_and_grad(cfg):
    model = transformer.Transformer(cfg)
    f = lambda p: accumulate.loss_terms(model, p, batch, jax.random.key(0))[0]
    return jax.jit(jax.value_and_grad(f))(params)

  want, want_g = value_and_grad(ref_cfg)
  got, got_g = value_and_grad(fused_cfg)
  rel = (ref_cfg.vocab_size + 2) * EPS32
  np.testing.assert_allclose(got, want, rtol=rel)
  # The logit gradients differ by rel relative; the backward is linear in
  # them, so each parameter's gradient by rel of its own scale (its largest
  # entry) plus float32 round-off of the different association.
  for g, w in zip(jax.tree.leaves(got_g), jax.tree.leaves(want_g)):
    np.testing.assert_allclose(g, w, atol=2 * rel * float(jnp.max(jnp.abs(w))))


def test_unknown_cross_entropy_is_a_config_error():
  config = fixtures.tiny_config()
  config.model.cross_entropy = 'fast'
  with pytest.raises(ConfigError, match=r"model.cross_entropy='fast' is not one of"):
    model_config.from_config(config)
