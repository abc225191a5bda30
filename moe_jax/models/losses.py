"""Next-token cross-entropy over packed rows."""
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
