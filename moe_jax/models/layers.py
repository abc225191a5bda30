"""Small building blocks shared by the decoder: RMSNorm, embedding, init, dtype,
and `dense`, the one way weights multiply activations.

Params are float32 leaves created with `self.param` under the exact names of
docs/internals.md (no Dense/kernel nesting), so upcycling and sharding rules can
match paths; compute runs in `model.dtype`.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp


def compute_dtype(cfg):
  return jnp.dtype(cfg.dtype)


def dense(x, w, in_dims=1):
  """Contracts the last `in_dims` dims of x with the first `in_dims` of w.

  The leading (token) dims of x are flattened into one first: given [B, L, D]
  activations, XLA:CPU lays out the weight gradient of a matmul with two free
  dims by transposing copies of the activations, about twice the time of the
  same [B*L, D] matmul (docs/benchmarks.md, "CPU training step"). On GPU and
  TPU the reshapes are free.
  """
  lead, ins, outs = x.shape[:x.ndim - in_dims], w.shape[:in_dims], w.shape[in_dims:]
  y = x.reshape(-1, math.prod(ins)) @ w.reshape(math.prod(ins), -1)
  return y.reshape(*lead, *outs)


def normal(std):
  return nn.initializers.normal(stddev=std)


class RMSNorm(nn.Module):
  """x / rms(x) * scale, statistics in float32 (Llama's pre-norm)."""
  eps: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    scale_D = self.param('scale', nn.initializers.ones, (x_BLD.shape[-1],), jnp.float32)
    x = x_BLD.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
    return (x * scale_D).astype(self.dtype)


class Embed(nn.Module):
  """Token embedding `embed/embedding` [V, D]; `attend` is the tied LM head."""
  vocab_size: int
  d_model: int
  init_std: float
  dtype: jnp.dtype = jnp.float32

  def setup(self):
    self.embedding = self.param('embedding', normal(self.init_std),
                                (self.vocab_size, self.d_model), jnp.float32)

  def __call__(self, tokens_BL):
    return jnp.take(self.embedding, tokens_BL, axis=0).astype(self.dtype)

  def attend(self, x_BLD):
    return dense(x_BLD, self.embedding.astype(self.dtype).T)
