"""SwiGLU MLP (Shazeer 2020), the dense FFN of the Llama-family decoder.

Params `wi_0` [D, F] (gate), `wi_1` [D, F] (up), `wo` [F, D]; the same names,
with a leading E axis, are the experts of moe.py, so upcycling is a tile.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from moe_jax.models import layers


class MLP(nn.Module):
  d_ff: int
  init_std: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BLD):
    d = x_BLD.shape[-1]
    init = layers.normal(self.init_std)
    wi_0 = self.param('wi_0', init, (d, self.d_ff), jnp.float32).astype(self.dtype)
    wi_1 = self.param('wi_1', init, (d, self.d_ff), jnp.float32).astype(self.dtype)
    wo = self.param('wo', init, (self.d_ff, d), jnp.float32).astype(self.dtype)
    h_BLF = jax.nn.silu(layers.dense(x_BLD, wi_0)) * layers.dense(x_BLD, wi_1)
    h_BLF = nn.with_logical_constraint(h_BLF, ('batch', 'length', 'mlp'))
    return layers.dense(h_BLF, wo)
