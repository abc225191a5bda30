"""The learned router: logits x W [D, E] and, with `moe.use_bias`, a
selection-only bias (moe_jax/models/router.py holds the math)."""
from moe_jax.models import router as router_lib
from moe_jax.models import routers


@routers.register('learned')
class Learned(routers.Base):
  """Scores from the token's hidden state; top-k selection (router.select)
  by moe.score and moe.order, gates renormalised if moe.renormalize."""

  @staticmethod
  def route(cfg, x_BLD, tokens_BL):
    del tokens_BL
    m = cfg.moe
    logits_BLE, bias_E = router_lib.Router(
        m.num_experts, m.router_init_std, m.use_bias, name='router')(x_BLD)
    idx_BLk, gates_BLk, probs_BLE = router_lib.select(
        logits_BLE, bias_E, m.top_k, m.score, m.order, m.renormalize)
    return routers.Routing(idx_BLk, gates_BLk, probs_BLE, logits_BLE)

  @staticmethod
  def num_params(d_model, moe):
    return d_model * moe.num_experts + (moe.num_experts if moe.use_bias else 0)
