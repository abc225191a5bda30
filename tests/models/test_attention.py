"""Attention features of the public checkpoints: q/k norms, q/k/v biases,
Llama 3 RoPE, and the KV cache against the full forward pass."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from configs import common
from moe_jax import sharding
from moe_jax.eval import generation
from moe_jax.models import config as model_config, rope, transformer


def _cfg(num_experts=0, **model):
  config = common.base()
  config.model.update(dict(dict(vocab_size=61, d_model=32, num_heads=4, num_kv_heads=2,
                                head_dim=8, d_ff=48), **model))
  config.moe.update(num_experts=num_experts, top_k=2)
  return model_config.from_config(config)


def _init(cfg, seed=0):
  """Params with norm scales and biases moved off 1 and 0, so they matter."""
  params = jax.jit(transformer.Transformer(cfg).init)(jax.random.key(seed),
                                                      jnp.zeros((1, 4), jnp.int32))['params']
  rng = np.random.default_rng(seed)
  moved = lambda p, w: w + 0.3 * rng.standard_normal(w.shape) if sharding.path_str(p).endswith(
      ('scale', '_bias')) else w
  return jax.tree_util.tree_map_with_path(moved, params)


def test_new_params_are_named_and_sharded():
  plain = transformer.abstract_params(transformer.Transformer(_cfg()), 4)
  assert set(plain['layers_0']['attn']) == {'q', 'k', 'v', 'o'}   # defaults unchanged
  params = transformer.abstract_params(
      transformer.Transformer(_cfg(qk_norm=True, qkv_bias=True)), 4)
  attn = params['layers_0']['attn']
  assert {k: jax.tree.map(lambda x: x.shape, v) for k, v in attn.items() if k not in 'qkvo'} == {
      'q_bias': (4, 8), 'k_bias': (2, 8), 'v_bias': (2, 8),
      'q_norm': {'scale': (8,)}, 'k_norm': {'scale': (8,)}}
  sharding.param_logical_axes(params)   # every new leaf has a rule


def test_llama3_rope_frequencies():
  """Llama 3.1's rule: long wavelengths slowed by `factor`, short ones kept,
  a linear blend in between; factor 1 is plain RoPE."""
  kw = dict(head_dim=64, rope_theta=500_000.0, rope_factor=8.0, rope_low_freq_factor=1.0,
            rope_high_freq_factor=4.0, rope_original_max_len=8192)
  plain = rope.frequencies(_cfg(**kw))
  scaled = rope.frequencies(_cfg(rope_scaling='llama3', **kw))
  wavelength = 2 * math.pi / plain
  short, long_ = wavelength < 8192 / 4, wavelength > 8192 / 1
  np.testing.assert_array_equal(scaled[short], plain[short])
  np.testing.assert_allclose(scaled[long_], plain[long_] / 8, rtol=1e-6)
  mid = ~short & ~long_
  assert mid.any() and np.all((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 8))
  np.testing.assert_array_equal(
      rope.frequencies(_cfg(rope_scaling='llama3', **dict(kw, rope_factor=1.0))), plain)


def right_padded(rows, length):
  """tokens, segment_ids, positions [B, length] of `rows`, padding at the end."""
  tokens = np.zeros((len(rows), length), np.int32)
  segment_ids = np.zeros((len(rows), length), np.int32)
  for i, row in enumerate(rows):
    tokens[i, :len(row)], segment_ids[i, :len(row)] = row, 1
  positions = np.broadcast_to(np.arange(length, dtype=np.int32), tokens.shape)
  return tokens, segment_ids, positions


def test_rope_table_matches_the_computed_angles_and_refuses_far_positions():
  """The full pass's table (rope.sin_cos with max_position) gives the sines and
  cosines computed on the device to float32 round-off; a position at or past
  the bound reads NaN, not a wrong angle."""
  freq = rope.frequencies(_cfg(head_dim=64, rope_theta=10_000.0))
  pos_BL = jnp.asarray(np.stack([np.arange(256), np.arange(256) % 100]), jnp.int32)
  x_BLHK = jax.random.normal(jax.random.key(0), (2, 256, 3, 64)) * 4
  want = rope.rotate(x_BLHK, *rope.sin_cos(pos_BL, freq))
  got = rope.rotate(x_BLHK, *rope.sin_cos(pos_BL, freq, max_position=256))
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
  far = rope.rotate(x_BLHK, *rope.sin_cos(pos_BL.at[1, 7].set(256), freq, max_position=256))
  assert np.isnan(far[1, 7]).all() and not np.isnan(far[1, 6]).any()


def test_decode_with_cache_matches_the_full_forward():
  """Left-padded prompts, then three one-token steps: each step's logits are
  the full forward pass's at that position."""
  cfg = _cfg(qk_norm=True, qkv_bias=True, rope_scaling='llama3', rope_original_max_len=16)
  model = transformer.Transformer(cfg)
  params = _init(cfg)
  prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
  follow = np.array([[21, 22, 23], [24, 25, 26], [27, 28, 29]], np.int32)
  tokens, segment_ids, positions = generation.left_pad(prompts)
  steps = follow.shape[1]
  full = jnp.zeros((3, tokens.shape[1] + steps), jnp.int32)
  cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(
      lambda: model.init(jax.random.key(0), full, segment_ids=full, positions=full,
                         decode=True)['cache']))
  decode = jax.jit(functools.partial(model.apply, decode=True, mutable=['cache']))
  (logits, _), state = decode({'params': params, 'cache': cache}, tokens,
                              segment_ids=segment_ids, positions=positions)
  got = [logits[:, -1]]
  next_pos = segment_ids.sum(1)
  for s in range(steps):
    (logits, _), state = decode({'params': params, 'cache': state['cache']},
                                follow[:, s:s + 1], segment_ids=np.ones((3, 1), np.int32),
                                positions=(next_pos + s)[:, None])
    got.append(logits[:, -1])
  rows = [prompt + list(f) for prompt, f in zip(prompts, follow)]
  tokens, segment_ids, positions = right_padded(rows, full.shape[1])
  want, _ = jax.jit(model.apply)({'params': params}, tokens, segment_ids=segment_ids,
                                 positions=positions)
  for row, prompt in enumerate(prompts):
    for s in range(steps + 1):
      np.testing.assert_allclose(got[s][row], want[row, len(prompt) - 1 + s], atol=2e-5)
