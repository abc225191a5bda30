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
