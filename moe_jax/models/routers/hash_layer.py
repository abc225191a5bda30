"""The hash router (Hash Layers; seed 001): a fixed token id -> experts table
(router.hash_table), equal gates 1/k, no parameters and no logits."""
import jax
import jax.numpy as jnp

from moe_jax.errors import ConfigError
from moe_jax.models import router as router_lib
from moe_jax.models import routers


@routers.register('hash')
class Hash(routers.Base):
  """Experts by token id alone: the same k experts for a token everywhere."""

  @staticmethod
  def route(cfg, x_BLD, tokens_BL):
    del x_BLD
    m = cfg.moe
    table_Vk = router_lib.hash_table(cfg.vocab_size, m.num_experts, m.top_k, m.hash_seed)
    idx_BLk = jnp.asarray(table_Vk)[tokens_BL]
    gates_BLk = jnp.full(idx_BLk.shape, 1.0 / m.top_k, jnp.float32)
    probs_BLE = jnp.sum(jax.nn.one_hot(idx_BLk, m.num_experts), axis=-2) / m.top_k
    return routers.Routing(idx_BLk, gates_BLk, probs_BLE, None)

  @staticmethod
  def check(moe):
    if moe.use_bias:
      raise ConfigError("moe.use_bias needs moe.router='learned' (a hash router has no scores)")
