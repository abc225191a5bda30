"""The blocked CPU attention loop against the whole-array reference: values and
gradients with packed segments, GQA and the causal mask, alone and in the model."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.kernels import attention_cpu
from moe_jax.models import attention, config as model_config, transformer
from tests.models import fixtures


def _inputs(b=3, g=2, r=3, length=10, s=10, k=8, seed=0, dtype=jnp.float32):
  rng = np.random.default_rng(seed)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), dtype)
  # Packed rows: documents of random lengths, segment ids 1, 2, ...; row 0 ends in padding (0).
  seg_BS = np.cumsum(rng.random((b, s)) < 0.3, axis=1) + 1
  seg_BS[0, -3:] = 0
  q_slots_L = jnp.arange(s - length, s)   # the last L slots (a decode step when L < S)
  return (normal(b, g, r * length, k), normal(b, g, s, k), normal(b, g, s, k),
          jnp.asarray(seg_BS[:, s - length:], jnp.int32), jnp.asarray(seg_BS, jnp.int32),
          q_slots_L)


def _value_and_vjp(fn, args, seed=1):
  out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, *args[3:]), *args[:3])
  dout = jnp.asarray(np.random.default_rng(seed).standard_normal(out.shape), out.dtype)
  return out, vjp(dout)


@pytest.mark.parametrize('shape', [dict(), dict(g=1, r=4), dict(g=4, r=1, k=4),
                                   dict(length=1, s=7), dict(length=4, s=12)])
def test_blocked_matches_reference(shape):
  args = _inputs(**shape)
  out_ref, grads_ref = _value_and_vjp(attention_cpu.reference, args)
  out, grads = jax.jit(lambda *a: _value_and_vjp(attention_cpu.blocked, a))(*args)
  np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-5)
  for name, got, want in zip('qkv', grads, grads_ref):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f'd{name}')


@pytest.mark.parametrize('block', [2, 5])
def test_query_blocks_match_reference(block):
  """Query blocks that skip the keys after them, on a full pass (slots 0 ... S - 1)."""
  args = _inputs(r=2, length=10, s=10)
  out_ref, grads_ref = _value_and_vjp(attention_cpu.reference, args)
  blocked = lambda *a: attention_cpu.blocked(*a, query_block=block)
  out, grads = jax.jit(lambda *a: _value_and_vjp(blocked, a))(*args)
  np.testing.assert_allclose(out, out_ref, rtol=1e-5, atol=1e-5)
  for name, got, want in zip('qkv', grads, grads_ref):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f'd{name}')
  with pytest.raises(ValueError, match='query_block=3'):
    attention_cpu.blocked(*args, query_block=3)


def test_mask_is_causal_and_per_segment():
  """Changing a key the mask hides changes nothing; changing one it shows does."""
  q, k, v, q_seg, kv_seg, slots = _inputs(b=1, g=1, r=1, length=6, s=6)
  kv_seg = q_seg = jnp.array([[1, 1, 1, 2, 2, 2]], jnp.int32)
  out = attention_cpu.blocked(q, k, v, q_seg, kv_seg, slots)
  v2 = v.at[0, 0, 4].add(10.0)   # a key of segment 2, slot 4
  out2 = attention_cpu.blocked(q, k, v2, q_seg, kv_seg, slots)
  np.testing.assert_array_equal(out2[0, 0, :4], out[0, 0, :4])   # earlier or other segment
  assert not np.allclose(out2[0, 0, 4:], out[0, 0, 4:])


def test_bfloat16_close_to_reference():
  args = _inputs(dtype=jnp.bfloat16)
  out_ref, grads_ref = _value_and_vjp(attention_cpu.reference, args)
  out, grads = _value_and_vjp(attention_cpu.blocked, args)
  f32 = lambda a: np.asarray(a, np.float32)
  np.testing.assert_allclose(f32(out), f32(out_ref), rtol=2e-2, atol=2e-2)
  for got, want in zip(grads, grads_ref):
    np.testing.assert_allclose(f32(got), f32(want), rtol=5e-2, atol=5e-2)


def test_model_loss_and_gradients_match():
  """The whole model, packed batch, with model.attention blocked vs reference."""
  base = fixtures.tiny_config()
  batch = fixtures.packed_batch(12)
  results = []
  for name in ('reference', 'blocked'):
    base.model.attention = name
    cfg = model_config.from_config(base)
    results.append(fixtures.packed_loss_and_grads(cfg, fixtures.random_params(cfg), batch))
  (l_ref, g_ref), (l_blk, g_blk) = results
  np.testing.assert_allclose(l_blk, l_ref, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
               g_blk, g_ref)


def test_auto_resolves_per_platform_and_bad_name_is_refused():
  assert attention.resolve('blocked') == 'blocked'
  assert attention.resolve('auto', 'cpu') == 'blocked'
  assert attention.resolve('auto', 'gpu') == attention.AUTO_DEFAULT
  # The loop indexes the batch: on a mesh that splits it, the reference.
  mesh = lambda n: jax.sharding.Mesh(np.array(jax.devices()[:n]), ('data',))
  assert attention.resolve('auto', 'cpu', mesh(2)) == 'reference'
  assert attention.resolve('auto', 'cpu', mesh(1)) == 'blocked'
  config = fixtures.tiny_config()
  config.model.attention = 'flash'
  with pytest.raises(ConfigError, match='model.attention'):
    model_config.from_config(config)


def test_decode_steps_match_reference():
  """A left-padded prompt, then a one-token step, through the KV cache: the
  blocked path's logits are the reference path's."""
  prompt = jnp.asarray([[0, 0, 5, 6], [7, 8, 9, 10]], jnp.int32)
  seg = jnp.asarray([[0, 0, 1, 1], [1, 1, 1, 1]], jnp.int32)
  pos = jnp.asarray([[0, 0, 0, 1], [0, 1, 2, 3]], jnp.int32)
  got = []
  for name in ('reference', 'blocked'):
    config = fixtures.tiny_config()
    config.model.attention = name
    cfg = model_config.from_config(config)
    model, params = transformer.Transformer(cfg), fixtures.random_params(cfg)
    full = jnp.zeros((2, 5), jnp.int32)
    cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
        lambda: model.init(jax.random.key(0), full, segment_ids=full, positions=full,
                           decode=True)['cache']))
    (first, _), state = model.apply({'params': params, 'cache': cache}, prompt,
                                    segment_ids=seg, positions=pos, decode=True,
                                    mutable=['cache'])
    (second, _), _ = model.apply({'params': params, 'cache': state['cache']},
                                 jnp.asarray([[11], [12]], jnp.int32),
                                 segment_ids=jnp.ones((2, 1), jnp.int32),
                                 positions=jnp.asarray([[2], [4]], jnp.int32), decode=True,
                                 mutable=['cache'])
    got.append((first, second))
  for want, have in zip(*got):
    np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)


def test_auto_attention_on_a_split_batch_gathers_nothing():
  """On a mesh that splits the batch, auto runs the reference, whose step
  needs no all-gather; the blocked loop, indexing the batch, would gather it."""
  from moe_jax.train import program as program_lib  # pylint: disable=g-import-not-at-top
  from moe_jax.workdir import placement  # pylint: disable=g-import-not-at-top

  def hlo(path):
    config = fixtures.tiny_config()
    config.model.attention = path
    config.update(batch_size=4, seq_len=16, grad_accum_steps=1)
    config.mesh.update(num_devices=2, data=2)
    mesh = placement.make_mesh(config.mesh)
    program = program_lib.build(config, mesh)
    batch = {k: jax.ShapeDtypeStruct((4, 16), jnp.int32, sharding=program.batch_sharding)
             for k in ('inputs', 'targets', 'segment_ids', 'positions', 'loss_mask')}
    with jax.set_mesh(mesh):   # as the trainer calls the step (placement.on_mesh)
      return program.train_step.__wrapped__.lower(program.abstract_state, batch).compile(
          ).as_text()
  assert 'all-gather' not in hlo('auto')
  assert 'all-gather' in hlo('blocked')
