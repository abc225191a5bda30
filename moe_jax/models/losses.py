"""Next-token cross-entropy over packed rows, whole or chunk by chunk.

Two implementations of the per-token loss (`model.cross_entropy`):
  reference: optax's log-softmax on the logits upcast to float32. Its forward
    and backward are whole-array float32 passes over [tokens, V]: on the
    `10layer` GPU step (16 x 1024 tokens, a 200,704-token vocabulary) they took
    13.7 of its 95.6 ms (docs/benchmarks.md, "Where the GPU step's time goes").
  fused: the same math with a custom VJP. The forward keeps only the row
    log-sum-exp (float32 [tokens]); the backward rebuilds softmax - onehot from
    the logits and that log-sum-exp in one elementwise pass that writes the
    gradient in the logits' dtype. Every float32 value lives inside one XLA
    fusion, so no float32 [tokens, V] array is ever written.
"""
import jax
import jax.numpy as jnp
import optax


@jax.custom_vjp
def fused_token_cross_entropy(logits_TV, targets_T):
  """-log softmax(logits)[target] per token ([..., V] -> [...], float32),
  accumulated in float32 whatever the logits' dtype."""
  return _fused_fwd(logits_TV, targets_T)[0]


def _fused_fwd(logits_TV, targets_T):
  x_TV = logits_TV.astype(jnp.float32)   # fused into each reduction, never stored
  max_T = jnp.max(x_TV, axis=-1)
  lse_T = max_T + jnp.log(jnp.sum(jnp.exp(x_TV - max_T[..., None]), axis=-1))
  picked_T = jnp.take_along_axis(logits_TV, targets_T[..., None], axis=-1)[..., 0]
  return lse_T - picked_T.astype(jnp.float32), (logits_TV, targets_T, lse_T)


def _fused_bwd(res, g_T):
  logits_TV, targets_T, lse_T = res
  vocab_V = jax.lax.broadcasted_iota(jnp.int32, logits_TV.shape, logits_TV.ndim - 1)
  p_TV = jnp.exp(logits_TV.astype(jnp.float32) - lse_T[..., None])
  d_TV = (p_TV - (vocab_V == targets_T[..., None])) * g_T[..., None]
  return d_TV.astype(logits_TV.dtype), None


fused_token_cross_entropy.defvjp(_fused_fwd, _fused_bwd)


def token_cross_entropy(logits_TV, targets_T, impl='reference'):
  """Per-token cross-entropy (nats, float32) by `impl`, 'reference' or 'fused'."""
  if impl == 'fused':
    return fused_token_cross_entropy(logits_TV, targets_T)
  # A bf16 log-softmax over a large vocabulary loses most of the loss' precision.
  return optax.softmax_cross_entropy_with_integer_labels(logits_TV.astype(jnp.float32), targets_T)


def cross_entropy(logits_BLV, targets_BL, loss_mask_BL, impl='reference'):
  """Mean token cross-entropy (nats) over unmasked targets, and their count."""
  ce_BL = token_cross_entropy(logits_BLV, targets_BL, impl)
  mask_BL = loss_mask_BL.astype(jnp.float32)
  count = jnp.sum(mask_BL)
  return jnp.sum(ce_BL * mask_BL) / jnp.maximum(count, 1.0), count


def chunked_cross_entropy(x_BLD, w_DV, targets_BL, loss_mask_BL, chunk, impl='reference'):
  """`cross_entropy(x_BLD @ w_DV, ...)` without ever holding the [B, L, V] logits.

  The B*L tokens are cut into chunks of `chunk` (which must divide B*L); a
  scan applies the head and the loss to one chunk at a time, and each chunk is
  rematerialized, so the backward pass recomputes that chunk's logits instead
  of keeping them. Peak logits memory is [chunk, V] instead of [B*L, V], and
  the logits stay in x's dtype (bf16 in training): `impl` accumulates in
  float32. The result differs from the unchunked loss by float32 round-off only.
  """
  d = x_BLD.shape[-1]
  tokens = targets_BL.size
  if tokens % chunk:
    raise ValueError(f'model.loss_chunk={chunk} does not divide the {tokens} tokens of a batch')
  # Chunk n holds tokens n, n + N, n + 2N, ...: every chunk spans the rows, so
  # a batch sharded over devices stays sharded inside each chunk.
  n = tokens // chunk
  x_NcD = x_BLD.reshape(chunk, n, d).swapaxes(0, 1)
  t_Nc = targets_BL.reshape(chunk, n).swapaxes(0, 1)
  m_Nc = loss_mask_BL.astype(jnp.float32).reshape(chunk, n).swapaxes(0, 1)

  @jax.checkpoint
  def chunk_sum(x_cD, t_c, m_c):
    return jnp.sum(token_cross_entropy(x_cD @ w_DV, t_c, impl) * m_c)

  def body(total, xs):
    return total + chunk_sum(*xs), None

  total, _ = jax.lax.scan(body, jnp.float32(0.0), (x_NcD, t_Nc, m_Nc))
  count = jnp.sum(m_Nc)
  return total / jnp.maximum(count, 1.0), count
