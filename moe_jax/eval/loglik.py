"""Log-likelihood of each choice given its question: the lm-eval-harness score.

  requests = [loglik.encode(tok, context, [' ' + c for c in choices]) for ...]
  sums_QC = loglik.score(model, params, requests)   # [len(requests), max choices]

A request is (context_ids, (continuation_ids, ...)); the result is, for each
request and choice, the summed log-probability of the continuation's tokens
after the context (-inf for a choice the request does not have).
Tokenisation follows lm-eval: spaces that end the context move to the front
of the continuation, the context is encoded alone and the continuation is
what encoding both adds to it.

`score` is the fast path. Its contexts go through the model once per
question, not once per choice: a batch of B contexts, left-padded to P slots,
fills a KV cache [B, P + K]; the cache is repeated C times, and all B * C
continuations (right-padded to K slots, the padding in segment 0) run as one
more call that appends to it. Shapes come in buckets (P, K powers of two, B
from a token budget, C the largest choice count), padded with copies of a
request, so each bucket compiles once. `reference` scores every
context + continuation as its own row with a plain forward pass; the tests
hold the two together.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.errors import ConfigError

_MIN_BUCKET = 16


def encode(tok, context, continuations):
  """(context_ids, (continuation_ids, ...)) as lm-eval tokenises them, with the
  tokenizer's <bos> in front when it adds one."""
  head = [] if tok.bos_id is None else [tok.bos_id]
  stripped = context.rstrip()
  spaces = context[len(stripped):]
  context_ids = head + [int(t) for t in tok.encode(stripped)]
  out = []
  for continuation in continuations:
    whole = head + [int(t) for t in tok.encode(stripped + spaces + continuation)]
    if whole[:len(context_ids)] != context_ids:   # a token merged across the boundary
      whole = context_ids + [int(t) for t in tok.encode(spaces + continuation)]
    out.append(tuple(whole[len(context_ids):]))
  if not context_ids:
    raise ConfigError('loglik: a request has an empty context and the tokenizer has no <bos>')
  if not all(out):
    raise ConfigError(f'loglik: a choice of the request {context[-60:]!r} encodes to no tokens')
  return tuple(context_ids), tuple(out)


def bucket(n):
  return max(_MIN_BUCKET, 1 << (int(n) - 1).bit_length())


def _token_logprobs(logits_NLV, targets_NL):
  """log softmax(logits)[target] without materialising the log-softmax."""
  picked = jnp.take_along_axis(logits_NLV, targets_NL[..., None], axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(logits_NLV, axis=-1)


@functools.partial(jax.jit, static_argnames=('model',))
def _score_bucket(model, params, ctx_BP, ctx_seg_BP, ctx_pos_BP, cont_BCK, cont_seg_BCK,
                  cont_pos_BCK):
  batch, length = ctx_BP.shape
  _, choices, k = cont_BCK.shape

  def apply(cache, tokens, segment_ids, positions):
    (logits, _), state = model.apply({'params': params, 'cache': cache}, tokens,
                                     segment_ids=segment_ids, positions=positions, decode=True,
                                     mutable=['cache'])
    return state['cache'], logits

  full = jnp.zeros((batch, length + k), jnp.int32)
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), full, segment_ids=full,
                                             positions=full, decode=True)['cache'])
  cache = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
  cache, logits_BPV = apply(cache, ctx_BP, ctx_seg_BP, ctx_pos_BP)
  last_BV = logits_BPV[:, -1]   # contexts are left-padded: the last slot is real
  # Each context's cache, once per choice: rows b * C + c.
  cache = jax.tree.map(lambda x: jnp.repeat(x, choices, axis=0) if x.ndim else x, cache)
  flat = lambda x: x.reshape(batch * choices, k)
  cont_NK, cont_seg_NK = flat(cont_BCK), flat(cont_seg_BCK)
  _, logits_NKV = apply(cache, cont_NK, cont_seg_NK, flat(cont_pos_BCK))
  first_N = _token_logprobs(jnp.repeat(last_BV, choices, axis=0)[:, None], cont_NK[:, :1])
  rest_NK = _token_logprobs(logits_NKV[:, :-1], cont_NK[:, 1:])
  logprobs_NK = jnp.concatenate([first_N, rest_NK], axis=1)
  total_N = jnp.sum(jnp.where(cont_seg_NK > 0, logprobs_NK, 0.0), axis=1)
  return total_N.reshape(batch, choices)


def _arrays(group, requests, length, choices, k, pad_id):
  """Left-padded contexts and right-padded continuations of requests `group`."""
  batch = len(group)
  ctx = np.full((batch, length), pad_id, np.int32)
  ctx_seg = np.zeros((batch, length), np.int32)
  cont = np.full((batch, choices, k), pad_id, np.int32)
  cont_seg = np.zeros((batch, choices, k), np.int32)
  for row, i in enumerate(group):
    context, conts = requests[i]
    ctx[row, length - len(context):] = context
    ctx_seg[row, length - len(context):] = 1
    for c, ids in enumerate(conts):
      cont[row, c, :len(ids)] = ids
      cont_seg[row, c, :len(ids)] = 1
  ctx_pos = np.maximum(np.cumsum(ctx_seg, axis=1) - 1, 0).astype(np.int32)
  cont_pos = (ctx_seg.sum(1)[:, None, None] + np.arange(k)[None, None]).astype(np.int32)
  cont_pos = np.broadcast_to(cont_pos, cont.shape).copy()
  return ctx, ctx_seg, ctx_pos, cont, cont_seg, cont_pos


def buckets(requests, token_budget):
  """[(shape (B, P, C, K), request indices)]: requests with one (P, K) bucket,
  B of them at a time (the last group of a bucket may be shorter)."""
  choices = max(len(c) for _, c in requests)
  by_shape = {}
  for i, (context, conts) in enumerate(requests):
    by_shape.setdefault((bucket(len(context)), bucket(max(len(c) for c in conts))), []).append(i)
  out = []
  for (length, k), members in sorted(by_shape.items()):
    per_row = max(length, choices * k)
    batch = 1 << max(0, (max(1, token_budget // per_row)).bit_length() - 1)
    out += [((batch, length, choices, k), members[s:s + batch])
            for s in range(0, len(members), batch)]
  return out


def score(model, params, requests, pad_id=0, token_budget=1024):
  """[Q, C] summed log-probabilities (see the module docstring); `token_budget`
  bounds the tokens of one call (B * P, and B * C * K)."""
  if not requests:
    return np.zeros((0, 0), np.float32)
  choices = max(len(c) for _, c in requests)
  out = np.full((len(requests), choices), -np.inf, np.float32)
  for (batch, length, c, k), group in buckets(requests, token_budget):
    padded = group + [group[0]] * (batch - len(group))   # one shape per bucket
    sums = np.asarray(jax.device_get(_score_bucket(
        model, params, *_arrays(padded, requests, length, c, k, pad_id))))
    for row, i in enumerate(group):
      n = len(requests[i][1])
      out[i, :n] = sums[row, :n]
  return out


def reference(model, params, requests, pad_id=0):
  """The same [Q, C] sums from one plain forward pass (no cache, no left
  padding) over every context + continuation, each alone in a row."""
  rows = [(i, c, list(context) + list(ids)) for i, (context, conts) in enumerate(requests)
          for c, ids in enumerate(conts)]
  length = max(len(r) for _, _, r in rows)
  tokens_NL = np.full((len(rows), length), pad_id, np.int32)
  for n, (_, _, r) in enumerate(rows):
    tokens_NL[n, :len(r)] = r   # right padding: causal attention never sees it
  logits_NLV, _ = jax.jit(model.apply)({'params': params}, tokens_NL)
  logprobs_NL = np.asarray(_token_logprobs(logits_NLV[:, :-1], jnp.asarray(tokens_NL[:, 1:])))
  out = np.full((len(requests), max(len(c) for _, c in requests)), -np.inf, np.float32)
  for n, (i, c, r) in enumerate(rows):
    start = len(requests[i][0]) - 1   # logits at slot t predict token t + 1
    out[i, c] = logprobs_NL[n, start:len(r) - 1].sum()
  return out
