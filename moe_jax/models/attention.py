"""Grouped-query attention with RoPE and a packed-sequence mask.

Params: q [D, H, K], k and v [D, G, K], o [H, K, D] (G kv heads shared by
H / G query heads each). RoPE rotates by `positions`, which restart at 0 in
every packed document; the mask is causal within the row and lets a token see
only tokens with the same segment id, so documents never attend to each other.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from moe_jax.models import layers


def rope(x_BLHK, positions_BL, theta):
  """Rotary embedding (Su et al.), rotating halves [x1, x2] of the head dim."""
  half = x_BLHK.shape[-1] // 2
  freq_K = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
  angle_BLK = positions_BL[..., None].astype(jnp.float32) * freq_K
  sin, cos = jnp.sin(angle_BLK)[:, :, None, :], jnp.cos(angle_BLK)[:, :, None, :]
  x1, x2 = jnp.split(x_BLHK.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BLHK.dtype)


def mask(segment_ids_BL):
  """[B, 1, L, L] True where query i may attend to key j: j <= i, same segment."""
  length = segment_ids_BL.shape[1]
  causal_LL = jnp.tril(jnp.ones((length, length), bool))
  same_BLL = segment_ids_BL[:, :, None] == segment_ids_BL[:, None, :]
  return (causal_LL[None] & same_BLL)[:, None]


class Attention(nn.Module):
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float
  init_std: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD, segment_ids_BL, positions_BL):
    d = x_BLD.shape[-1]
    h, g, k = self.num_heads, self.num_kv_heads, self.head_dim
    init = layers.normal(self.init_std)
    param = lambda name, shape: self.param(name, init, shape, jnp.float32).astype(self.dtype)
    w_q, w_k, w_v = param('q', (d, h, k)), param('k', (d, g, k)), param('v', (d, g, k))
    w_o = param('o', (h, k, d))

    q_BLHK = rope(jnp.einsum('bld,dhk->blhk', x_BLD, w_q), positions_BL, self.rope_theta)
    k_BLGK = rope(jnp.einsum('bld,dgk->blgk', x_BLD, w_k), positions_BL, self.rope_theta)
    v_BLGK = jnp.einsum('bld,dgk->blgk', x_BLD, w_v)
    q_BLHK = nn.with_logical_constraint(q_BLHK, ('batch', 'length', 'heads', 'head_dim'))

    # Query head h reads kv head h // (H / G): group the query heads.
    b, length = x_BLD.shape[:2]
    q_BLGRK = q_BLHK.reshape(b, length, g, h // g, k)
    # Scores accumulate in float32 even with bf16 inputs.
    logits_BGRLL = jnp.einsum('bqgrk,bsgk->bgrqs', q_BLGRK, k_BLGK,
                              preferred_element_type=jnp.float32)
    logits_BGRLL = logits_BGRLL / jnp.sqrt(jnp.float32(k))
    allowed = mask(segment_ids_BL)[:, :, None]  # [B, 1, 1, L, L]
    logits_BGRLL = jnp.where(allowed, logits_BGRLL, jnp.finfo(jnp.float32).min)
    probs_BGRLL = jax.nn.softmax(logits_BGRLL, axis=-1).astype(self.dtype)
    out_BLGRK = jnp.einsum('bgrqs,bsgk->bqgrk', probs_BGRLL, v_BLGK)
    out_BLHK = out_BLGRK.reshape(b, length, h, k)
    return jnp.einsum('blhk,hkd->bld', out_BLHK, w_o)
