"""Next-token cross-entropy over packed rows, whole or chunk by chunk."""
import jax
import jax.numpy as jnp
import optax


def cross_entropy(logits_BLV, targets_BL, loss_mask_BL):
  """Mean token cross-entropy (nats) over unmasked targets, and their count.

  Logits are upcast to float32 first: a bf16 log-softmax over a large
  vocabulary loses most of the loss' precision.
  """
  ce_BL = optax.softmax_cross_entropy_with_integer_labels(
      logits_BLV.astype(jnp.float32), targets_BL)
  mask_BL = loss_mask_BL.astype(jnp.float32)
  count = jnp.sum(mask_BL)
  return jnp.sum(ce_BL * mask_BL) / jnp.maximum(count, 1.0), count


def chunked_cross_entropy(x_BLD, w_DV, targets_BL, loss_mask_BL, chunk):
  """`cross_entropy(x_BLD @ w_DV, ...)` without ever holding the [B, L, V] logits.

  The B*L tokens are cut into chunks of `chunk` (which must divide B*L); a
  scan applies the head and the loss to one chunk at a time, and each chunk is
  rematerialized, so the backward pass recomputes that chunk's logits instead
  of keeping them. Peak logits memory is [chunk, V] instead of [B*L, V];
  the result differs from the unchunked loss by float32 round-off only.
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
    logits_cV = (x_cD @ w_DV).astype(jnp.float32)
    return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits_cV, t_c) * m_c)

  def body(total, xs):
    return total + chunk_sum(*xs), None

  total, _ = jax.lax.scan(body, jnp.float32(0.0), (x_NcD, t_Nc, m_Nc))
  count = jnp.sum(m_Nc)
  return total / jnp.maximum(count, 1.0), count
