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
(kernels/grouped.py). The custom VJP saves only the output and the row
log-sum-exp [B, G, Q] and recomputes each tile's probabilities in the
backward loop, rather than storing them.
"""
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


def _logits(q_QK, k_SK, ok_LS):
  """Scaled, masked float32 scores [Q, S] of one tile."""
  q, k = q_QK.shape
  s, length = k_SK.shape[0], ok_LS.shape[0]
  logits_QS = jnp.dot(q_QK, k_SK.T, preferred_element_type=jnp.float32) / jnp.sqrt(
      jnp.float32(k))
  logits_RLS = jnp.where(ok_LS, logits_QS.reshape(q // length, length, s), _MASKED)
  return logits_RLS.reshape(q, s)


def _tile(a, i, g):
  """a[i // g, i % g] of a [B, G, ...] array."""
  return a[i // g, i % g]


def _put(a, tile, i, g):
  idx = (i // g, i % g) + (0,) * (a.ndim - 2)
  return lax.dynamic_update_slice(a, tile[None, None].astype(a.dtype), idx)


def _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L):
  b, g, q, _ = q_BGQK.shape

  def body(i, carry):
    out_BGQK, lse_BGQ = carry
    ok_LS = allowed(q_segment_ids_BL[i // g], kv_segment_ids_BS[i // g], q_slots_L)
    logits_QS = _logits(_tile(q_BGQK, i, g), _tile(k_BGSK, i, g), ok_LS)
    max_Q = jnp.max(logits_QS, axis=-1, keepdims=True)
    e_QS = jnp.exp(logits_QS - max_Q)
    sum_Q = jnp.sum(e_QS, axis=-1, keepdims=True)
    probs_QS = (e_QS / sum_Q).astype(q_BGQK.dtype)
    out_QK = jnp.dot(probs_QS, _tile(v_BGSK, i, g), preferred_element_type=jnp.float32)
    lse_Q = (max_Q + jnp.log(sum_Q))[:, 0]
    return _put(out_BGQK, out_QK, i, g), _put(lse_BGQ, lse_Q, i, g)

  init = (jnp.zeros(q_BGQK.shape, q_BGQK.dtype), jnp.zeros((b, g, q), jnp.float32))
  return lax.fori_loop(0, b * g, body, init)


@jax.custom_vjp
def blocked(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L):
  """`reference`'s result, one (batch, kv-group) tile at a time."""
  return _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L)[0]


def _blocked_fwd(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L):
  out_BGQK, lse_BGQ = _forward(q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS,
                               q_slots_L)
  return out_BGQK, (q_BGQK, k_BGSK, v_BGSK, q_segment_ids_BL, kv_segment_ids_BS, q_slots_L,
                    out_BGQK, lse_BGQ)


def _blocked_bwd(saved, dout_BGQK):
  q_BGQK, k_BGSK, v_BGSK, q_seg_BL, kv_seg_BS, q_slots_L, out_BGQK, lse_BGQ = saved
  g, k = q_BGQK.shape[1], q_BGQK.shape[3]
  scale = 1 / jnp.sqrt(jnp.float32(k))
  f32 = lambda a: a.astype(jnp.float32)
  # delta_q = sum_s p_qs dp_qs = dout_q . out_q: softmax's backward needs only a row vector.
  delta_BGQ = jnp.einsum('bgqk,bgqk->bgq', f32(dout_BGQK), f32(out_BGQK))

  def body(i, carry):
    dq_BGQK, dk_BGSK, dv_BGSK = carry
    q_QK, k_SK, v_SK = (f32(_tile(a, i, g)) for a in (q_BGQK, k_BGSK, v_BGSK))
    ok_LS = allowed(q_seg_BL[i // g], kv_seg_BS[i // g], q_slots_L)
    # The forward's probabilities, rebuilt from its log-sum-exp (the forward
    # rounds them to the input dtype before PV; so does this).
    probs_QS = jnp.exp(_logits(q_QK, k_SK, ok_LS) - _tile(lse_BGQ, i, g)[:, None])
    probs_QS = f32(probs_QS.astype(q_BGQK.dtype))
    dout_QK = f32(_tile(dout_BGQK, i, g))
    dv_SK = jnp.dot(probs_QS.T, dout_QK)
    dprobs_QS = jnp.dot(dout_QK, v_SK.T)
    dlogits_QS = probs_QS * (dprobs_QS - _tile(delta_BGQ, i, g)[:, None]) * scale
    dq_QK = jnp.dot(dlogits_QS, k_SK)
    dk_SK = jnp.dot(dlogits_QS.T, q_QK)
    return _put(dq_BGQK, dq_QK, i, g), _put(dk_BGSK, dk_SK, i, g), _put(dv_BGSK, dv_SK, i, g)

  zeros = lambda a: jnp.zeros(a.shape, a.dtype)
  b = q_BGQK.shape[0]
  dq, dk, dv = lax.fori_loop(0, b * g, body, (zeros(q_BGQK), zeros(k_BGSK), zeros(v_BGSK)))
  return dq, dk, dv, None, None, None


blocked.defvjp(_blocked_fwd, _blocked_bwd)

PATHS = {'reference': reference, 'blocked': blocked}
