"""Batched cached decoding against an uncached loop that reruns the whole
sequence every step."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.eval import generation
from moe_jax.models import transformer
from tests.models.test_attention import _cfg, _init, right_padded


def _uncached(model, params, prompts, steps, temperature, key):
  """The reference: the full forward pass over each row's sequence so far,
  its last logits, the same sampling keys as the decode loop."""
  rows = [list(p) for p in prompts]
  forward = jax.jit(model.apply)
  for _ in range(steps):
    key, sample_key = jax.random.split(key)
    tokens, segment_ids, positions = right_padded(rows, max(map(len, prompts)) + steps)
    logits, _ = forward({'params': params}, tokens, segment_ids=segment_ids, positions=positions)
    last = jnp.stack([logits[i, len(r) - 1] for i, r in enumerate(rows)])
    new = (jnp.argmax(last, -1) if temperature == 0 else
           jax.random.categorical(sample_key, last / temperature))
    for row, token in zip(rows, np.asarray(new)):
      row.append(int(token))
  return [row[len(p):] for row, p in zip(rows, prompts)]


@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_generate_matches_uncached_decoding(temperature):
  cfg = _cfg(qk_norm=True)
  model = transformer.Transformer(cfg)
  params = _init(cfg, seed=3)
  prompts = [[3, 4, 5, 6], [7], [8, 9]]
  key = jax.random.key(5)
  got = generation.generate(model, params, prompts, 5, temperature=temperature, rng=key)
  assert got == _uncached(model, params, prompts, 5, temperature, key)


def test_generate_stops_at_eos():
  cfg = _cfg()
  model = transformer.Transformer(cfg)
  params = _init(cfg)
  free = generation.generate(model, params, [[1, 2, 3]], 6)[0]
  eos = free[2]
  stopped = generation.generate(model, params, [[1, 2, 3]], 6, eos_id=eos)[0]
  assert stopped == free[:free.index(eos)]


def _filter_reference(logits, top_k, top_p):
  """One row at a time, in plain numpy: keep the top_k largest, then the
  likeliest tokens until their probability reaches top_p."""
  out = np.full_like(logits, -np.inf)
  for row, values in enumerate(logits):
    order = np.argsort(-values, kind='stable')
    keep = order[:top_k] if top_k else order
    probs = np.exp(values[keep] - values[keep].max())
    probs /= probs.sum()
    mass, chosen = 0.0, []
    for i, p in zip(keep, probs):
      if mass >= top_p:
        break
      chosen.append(i)
      mass += p
    out[row, chosen] = values[chosen]
  return out


@pytest.mark.parametrize('top_k, top_p', [(0, 1.0), (1, 1.0), (3, 1.0), (0, 0.5), (0, 0.9),
                                          (4, 0.7), (100, 0.3)])
def test_filter_logits_matches_a_numpy_reference(top_k, top_p):
  logits = np.asarray(jax.random.normal(jax.random.key(1), (5, 11)) * 2, np.float32)
  got = np.asarray(generation.filter_logits(jnp.asarray(logits), top_k, top_p))
  np.testing.assert_array_equal(np.isfinite(got), np.isfinite(_filter_reference(
      logits, top_k, top_p)))
  np.testing.assert_array_equal(got[np.isfinite(got)], logits[np.isfinite(got)])


def test_top_k_1_sampling_is_greedy_and_top_k_limits_the_choices():
  cfg = _cfg()
  model = transformer.Transformer(cfg)
  params = _init(cfg, seed=2)
  prompts = [[3, 4, 5], [6, 7]]
  greedy = generation.generate(model, params, prompts, 6)
  assert generation.generate(model, params, prompts, 6, temperature=5.0, top_k=1,
                             rng=jax.random.key(9)) == greedy
  assert generation.generate(model, params, prompts, 6, temperature=5.0, top_p=1e-6,
                             rng=jax.random.key(9)) == greedy
  with pytest.raises(Exception, match=r'top_p=0 must be in \(0, 1\]'):
    generation.generate(model, params, prompts, 2, temperature=1.0, top_p=0)


def test_generate_stops_at_any_of_several_ids():
  cfg = _cfg()
  model = transformer.Transformer(cfg)
  params = _init(cfg)
  free = generation.generate(model, params, [[1, 2, 3]], 6)[0]
  first, later = free[1], free[3]
  stopped = generation.generate(model, params, [[1, 2, 3]], 6, eos_id=[later, first])[0]
  assert stopped == free[:min(free.index(first), free.index(later))]
