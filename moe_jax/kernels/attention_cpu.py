"""Grouped-query attention as an XLA loop over (batch, kv-group) tiles: a CPU path.

  out[b, g] = softmax(mask(q[b, g] k[b, g]^T * scale)) v[b, g]

Same contract as the reference in moe_jax/models/attention.py (`reference`
below): q [B, G, Q, K] holds the R = H / G query heads of group g and their L
positions as rows Q = R*L (head-major), k and v are [B, G, S, K]. A query may
see key slot j iff j <= its slot and both carry the same segment id.

The reference materialises all [B, G, Q, S] float32 scores and runs QK^T,
mask, softmax and PV, and their backward, as whole-array passes. Here a
`fori_loop` takes one (b, g) tile at a time through all of them, so its [Q, S]
scores stay in cache, as the grouped MoE loop does for its row tiles
(kernels/grouped.py); the mask enters each tile as an additive bias built once
for the batch (`mask_bias`). The custom VJP saves only the output and the row
log-sum-exp [B, G, Q] and recomputes each tile's probabilities in the
backward loop, rather than storing them. On a full pass (queries in slots
0 ... S - 1) `query_block` splits each tile further into query blocks that
skip the keys after their last query: the scores the causal mask hides are
never computed.
"""
import functools

import jax
from jax import lax
import jax.numpy as jnp

_MASKED = jnp.finfo(jnp.float32).min   # the reference's fill: a row with no key is uniform


def allowed(q_segment_ids_L, kv_segment_ids_S, q_slots_L):
  """[L, S] True where query i may attend to key slot j."""
  causal_LS = jnp.arange(kv_segment_ids_S.shape[0])[None, :] <= q_slots_L[:, None]
  return causal_LS & (q_segment_ids_L[:, None] == kv_segment_ids_S[None, :])


def reference(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L):
  """Whole-array attention, the path the blocked loop must match."""
  b, g, q, k = q_BGQK.shape
  s, length = k_BGSK.shape[2], q_segment_ids_BL.shape[1]
  logits_BGQS = jnp.einsum('bgqk,bgsk->bgqs', q_BGQK, k_BGSK,
                           preferred_element_type=jnp.float32)
  logits_BGRLS = logits_BGQS.reshape(b, g, q // length, length, s) / jnp.sqrt(jnp.float32(k))
  ok_BLS = jax.vmap(allowed, (0, 0, None))(q_segment_ids_BL, kv_segment_ids_BS, q_slots_L)
  logits_BGRLS = jnp.where(ok_BLS[:, None, None], logits_BGRLS, _MASKED)
  probs_BGQS = jax.nn.softmax(logits_BGRLS, axis=-1).astype(q_BGQK.dtype).reshape(b, g, q, s)
  return jnp.einsum('bgqs,bgsk->bgqk', probs_BGQS, v_BGSK)


def mask_bias(q_segment_ids_BL, kv_segment_ids_BS, q_slots_L):
  """[B, L, S] float32 added to the scores: 0 where `allowed`, else _MASKED.
  Built once, outside the loop: computed per tile from segment ids, the mask
  made the tile's exp fusion the step's costliest instruction
  (docs/benchmarks.md, "CPU step, round 2")."""
  ok_BLS = jax.vmap(allowed, (0, 0, None))(q_segment_ids_BL, kv_segment_ids_BS, q_slots_L)
  return jnp.where(ok_BLS, 0.0, _MASKED).astype(jnp.float32)


def _logits(q_QK, k_SK, bias_LS):
  """Scaled, masked float32 scores [Q, S] of one tile. A masked score is
  score + _MASKED, which rounds to _MASKED: exp gives 0 as the reference's."""
  q, k = q_QK.shape
  s, length = k_SK.shape[0], bias_LS.shape[0]
  logits_QS = jnp.dot(q_QK, k_SK.T, preferred_element_type=jnp.float32) / jnp.sqrt(
      jnp.float32(k))
  return (logits_QS.reshape(q // length, length, s) + bias_LS).reshape(q, s)


def _tile(a, i, g):
  """a[i // g, i % g] of a [B, G, ...] array."""
  return a[i // g, i % g]


def _put(a, tile, i, g):
  idx = (i // g, i % g) + (0,) * (a.ndim - 2)
  return lax.dynamic_update_slice(a, tile[None, None].astype(a.dtype), idx)


def query_block(length, preferred=128):
  """Queries per block for `blocked`'s causal key skipping: `preferred` when it
  splits `length` into several blocks, else 0 (one block, all keys)."""
  return preferred if length > preferred and length % preferred == 0 else 0


def _blocks(length, s, block):
  """(first query, end query, end key) of each query block: block 0 is one
  block over all keys; otherwise the keys after a block's last query, which the
  causal mask hides, are skipped."""
  if not block:
    return [(0, length, s)]
  return [(j, j + block, j + block) for j in range(0, length, block)]


def _rows(a_QX, r, q0, q1):
  """The rows of queries q0 ... q1 - 1 of all R heads of a [R*L, ...] tile."""
  a_RLX = a_QX.reshape(r, -1, *a_QX.shape[1:])
  return a_RLX[:, q0:q1].reshape(-1, *a_QX.shape[1:])


def _join(pieces, r):
  """The inverse of `_rows` over all blocks: [R*L, ...] from per-block rows."""
  return jnp.concatenate([p.reshape(r, -1, *p.shape[1:]) for p in pieces], axis=1).reshape(
      -1, *pieces[0].shape[1:])


def _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L, block):
  b, g, q, _ = q_BGQK.shape
  length, s = q_slots_L.shape[0], k_BGSK.shape[2]
  r = q // length

  bias_BLS = mask_bias(q_segment_ids_BL, kv_segment_ids_BS, q_slots_L)

  def body(i, carry):
    out_BGQK, lse_BGQ = carry
    q_QK, k_SK, v_SK = (_tile(a, i, g) for a in (q_BGQK, k_BGSK, v_BGSK))
    bias_LS = bias_BLS[i // g]
    outs, lses = [], []
    for q0, q1, s1 in _blocks(length, s, block):
      logits_QS = _logits(_rows(q_QK, r, q0, q1), k_SK[:s1], bias_LS[q0:q1, :s1])
      max_Q = jnp.max(logits_QS, axis=-1, keepdims=True)
      e_QS = jnp.exp(logits_QS - max_Q)
      sum_Q = jnp.sum(e_QS, axis=-1, keepdims=True)
      probs_QS = (e_QS / sum_Q).astype(q_BGQK.dtype)
      outs.append(jnp.dot(probs_QS, v_SK[:s1], preferred_element_type=jnp.float32))
      lses.append((max_Q + jnp.log(sum_Q))[:, 0])
    return _put(out_BGQK, _join(outs, r), i, g), _put(lse_BGQ, _join(lses, r), i, g)

  init = (jnp.zeros(q_BGQK.shape, q_BGQK.dtype), jnp.zeros((b, g, q), jnp.float32))
  return lax.fori_loop(0, b * g, body, init)


def blocked(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L,
            query_block=0):
  """`reference`'s result, one (batch, kv-group) tile at a time.

  query_block > 0 splits each tile into blocks of that many queries that skip
  the keys after their last query; it is exact only when the queries sit in
  slots 0 ... S - 1 (a full forward pass, not a decode step), which the caller
  promises. It must divide L.
  """
  if query_block and (q_slots_L.shape[0] % query_block or
                      q_slots_L.shape[0] != k_BGSK.shape[2]):
    raise ValueError(f'query_block={query_block} needs L = S divisible by it, got '
                     f'L={q_slots_L.shape[0]}, S={k_BGSK.shape[2]}')
  return _blocked(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L,
                  query_block)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def _blocked(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L, block):
  return _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L,
                  block)[0]


def _blocked_fwd(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L, block):
  out_BGQK, lse_BGQ = _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS,
                               q_slots_L, block)
  return out_BGQK, (q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L,
                    out_BGQK, lse_BGQ)


def _blocked_bwd(block, saved, dout_BGQK):
  q_BGQK, k_BGSK, v_BGSK, q_seg_BL, kv_seg_BS, q_slots_L, out_BGQK, lse_BGQ = saved
  g, q, k = q_BGQK.shape[1:]
  length, s = q_slots_L.shape[0], k_BGSK.shape[2]
  r = q // length
  scale = 1 / jnp.sqrt(jnp.float32(k))
  f32 = lambda a: a.astype(jnp.float32)
  # delta_q = sum_s p_qs dp_qs = dout_q . out_q: softmax's backward needs only a row vector.
  delta_BGQ = jnp.einsum('bgqk,bgqk->bgq', f32(dout_BGQK), f32(out_BGQK))
  bias_BLS = mask_bias(q_seg_BL, kv_seg_BS, q_slots_L)

  def body(i, carry):
    dq_BGQK, dk_BGSK, dv_BGSK = carry
    q_QK, k_SK, v_SK, dout_QK = (f32(_tile(a, i, g))
                                 for a in (q_BGQK, k_BGSK, v_BGSK, dout_BGQK))
    lse_Q, delta_Q = _tile(lse_BGQ, i, g), _tile(delta_BGQ, i, g)
    bias_LS = bias_BLS[i // g]
    dqs, dk_SK, dv_SK = [], jnp.zeros_like(k_SK), jnp.zeros_like(v_SK)
    for q0, q1, s1 in _blocks(length, s, block):
      q_JK, dout_JK = _rows(q_QK, r, q0, q1), _rows(dout_QK, r, q0, q1)
      # The forward's probabilities, rebuilt from its log-sum-exp (the forward
      # rounds them to the input dtype before PV; so does this).
      probs_JS = jnp.exp(_logits(q_JK, k_SK[:s1], bias_LS[q0:q1, :s1])
                         - _rows(lse_Q, r, q0, q1)[:, None])
      probs_JS = f32(probs_JS.astype(q_BGQK.dtype))
      dprobs_JS = jnp.dot(dout_JK, v_SK[:s1].T)
      dlogits_JS = probs_JS * (dprobs_JS - _rows(delta_Q, r, q0, q1)[:, None]) * scale
      dqs.append(jnp.dot(dlogits_JS, k_SK[:s1]))
      dk_SK = lax.dynamic_update_slice(dk_SK, dk_SK[:s1] + jnp.dot(dlogits_JS.T, q_JK), (0, 0))
      dv_SK = lax.dynamic_update_slice(dv_SK, dv_SK[:s1] + jnp.dot(probs_JS.T, dout_JK), (0, 0))
    return (_put(dq_BGQK, _join(dqs, r), i, g), _put(dk_BGSK, dk_SK, i, g),
            _put(dv_BGSK, dv_SK, i, g))

  zeros = lambda a: jnp.zeros(a.shape, a.dtype)
  b = q_BGQK.shape[0]
  dq, dk, dv = lax.fori_loop(0, b * g, body, (zeros(q_BGQK), zeros(k_BGSK), zeros(v_BGSK)))
  return dq, dk, dv, None, None, None


_blocked.defvjp(_blocked_fwd, _blocked_bwd)

PATHS = {'reference': reference, 'blocked': blocked}
