"""Batched autoregressive decoding with a KV cache: greedy or sampled.

  new_tokens = generation.generate(model, params, prompts, max_new_tokens=32,
                                   temperature=0.0, eos_id=tok.eos_id, rng=key)

`prompts` are lists of token ids (with the BOS already there if the tokenizer
adds one); the result is one list of new ids per prompt, cut before its first
`eos_id`. Prompts of different lengths are left-padded into one [B, P] batch:
padding is segment 0, which attention masks out, and positions count real
tokens only, so a row computes what it would alone. One forward pass over the
prompts fills the cache (moe_jax/models/attention.py), then one jitted scan
decodes a token per step for the whole batch. A row that has emitted
`eos_id` keeps stepping (the scan has a fixed length) but its tokens are
dropped. `temperature=0` is greedy (argmax); above 0 samples from
softmax(logits / temperature), restricted to the `top_k` most likely tokens
(0: all) and to the smallest set whose probability reaches `top_p` (nucleus
sampling, Holtzman et al. 2019; 1: all). `eos_id` may be several ids: a chat
turn ends at the template's end-of-turn token or at the end-of-text one.
"""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError


def left_pad(prompts, pad_id=0, length=0):
  """(tokens, segment_ids, positions), each [B, P] int32, prompts right-aligned;
  P is the longest prompt, or `length` if that is more."""
  if not prompts or not all(len(p) for p in prompts):
    raise ConfigError('generation needs at least one prompt, each with at least one token')
  length = max(length, max(len(p) for p in prompts))
  tokens = np.full((len(prompts), length), pad_id, np.int32)
  segment_ids = np.zeros((len(prompts), length), np.int32)
  for row, prompt in enumerate(prompts):
    tokens[row, length - len(prompt):] = prompt
    segment_ids[row, length - len(prompt):] = 1
  positions = np.maximum(np.cumsum(segment_ids, axis=1) - 1, 0).astype(np.int32)
  return tokens, segment_ids, positions


def filter_logits(logits_BV, top_k=0, top_p=1.0):
  """Logits with every token outside the top-k and outside the top-p nucleus
  set to -inf. The nucleus keeps the most likely tokens until their summed
  probability reaches top_p (the one that crosses it included), so the most
  likely token always stays."""
  if top_k and top_k < logits_BV.shape[-1]:
    kth_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
    logits_BV = jnp.where(logits_BV < kth_B1, -jnp.inf, logits_BV)
  if top_p >= 1:
    return logits_BV
  sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
  probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
  before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV   # mass of the likelier tokens
  kept = jnp.where(before_BV < top_p, sorted_BV, jnp.inf)
  cutoff_B1 = jnp.min(kept, axis=-1, keepdims=True)
  return jnp.where(logits_BV < cutoff_B1, -jnp.inf, logits_BV)


@functools.partial(jax.jit, static_argnames=('model', 'steps', 'greedy', 'top_k', 'top_p'))
def _decode(model, params, tokens_BP, segment_ids_BP, positions_BP, rng, temperature, stop_S,
            steps, greedy, top_k, top_p):
  batch, length = tokens_BP.shape

  def apply(cache, tokens, segment_ids, positions):
    (logits, _), state = model.apply({'params': params, 'cache': cache}, tokens,
                                     segment_ids=segment_ids, positions=positions, decode=True,
                                     mutable=['cache'])
    return state['cache'], logits[:, -1]

  # The cache holds the prompt and every new token: [B, P + steps] per layer.
  full = jnp.zeros((batch, length + steps), jnp.int32)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), full, segment_ids=full,
                                             positions=full, decode=True)['cache'])
  cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  cache, logits_BV = apply(cache, tokens_BP, segment_ids_BP, positions_BP)

  def step(carry, _):
    cache, logits_BV, position_B, done_B, rng = carry
    rng, key = jax.random.split(rng)
    if greedy:
      token_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    else:
      token_B = jax.random.categorical(
          key, filter_logits(logits_BV / temperature, top_k, top_p)).astype(jnp.int32)
    done_B = done_B | jnp.any(token_B[:, None] == stop_S[None], axis=-1)
    ones = jnp.ones((batch, 1), jnp.int32)
    cache, logits_BV = apply(cache, token_B[:, None], ones, position_B[:, None])
    return (cache, logits_BV, position_B + 1, done_B, rng), (token_B, done_B)

  start = (cache, logits_BV, jnp.sum(segment_ids_BP, axis=1), jnp.zeros((batch,), bool), rng)
  _, (tokens_SB, done_SB) = jax.lax.scan(step, start, None, length=steps)
  return tokens_SB.T, done_SB.T


def generate(model, params, prompts, max_new_tokens, temperature=0.0, eos_id=None, rng=None,
             pad_id=0, length=0, context=0, top_k=0, top_p=1.0):
  """New tokens for each prompt (see the module docstring). `length` pads the
  prompts to at least that many slots, so calls of one shape compile once.
  `context` (0: no bound) caps prompt plus new tokens: the positions the
  model was trained for, and a bound on the time and the KV cache. `eos_id`
  is None, one id or a list of ids that end a continuation."""
  if not math.isfinite(temperature) or temperature < 0:   # nan passes every comparison
    raise ConfigError(f'temperature={temperature} must be a finite number >= 0')
  if max_new_tokens < 1:
    raise ConfigError(f'max_new_tokens={max_new_tokens} must be positive')
  longest = max((len(p) for p in prompts), default=0)
  if context and longest + max_new_tokens > context:
    raise ConfigError(f'max_new_tokens={max_new_tokens} with a prompt of {longest} tokens '
                      f'exceeds the model\'s context of {context} tokens (at most '
                      f'{max(context - longest, 0)} new tokens)')
  if top_k < 0:
    raise ConfigError(f'top_k={top_k} must be >= 0 (0: no limit)')
  if not 0 < top_p <= 1:   # nan fails it too
    raise ConfigError(f'top_p={top_p} must be in (0, 1] (1: no limit)')
  tokens, segment_ids, positions = left_pad(prompts, pad_id, length)
  rng = jax.random.key(0) if rng is None else rng
  stops = [] if eos_id is None else [eos_id] if np.ndim(eos_id) == 0 else list(eos_id)
  stop_S = jnp.asarray([int(i) for i in stops] or [-1], jnp.int32)
  new_BS, done_BS = jax.device_get(_decode(
      model, params, tokens, segment_ids, positions, rng, jnp.float32(max(temperature, 1e-6)),
      stop_S, steps=int(max_new_tokens), greedy=temperature == 0, top_k=int(top_k),
      top_p=float(top_p)))
  out = []
  for row, done in zip(new_BS, done_BS):
    end = int(np.argmax(done)) if done.any() else len(row)   # done turns true at the eos
    out.append([int(t) for t in row[:end]])
  return out
