"""MoE block: router + dispatch + stacked SwiGLU experts (+ shared experts).

Params (docs/internals.md): `router/w` [D, E] and `router/bias` [E] (learned
router), `experts/{wi_0,wi_1}` [E, D, F] and `experts/wo` [E, F, D], and with
S shared experts `shared/{wi_0,wi_1}` [D, S*F], `shared/wo` [S*F, D] (S always-on
experts fused into one wide MLP), gated by sigmoid(x . `shared_gate` [D, 1]) with
moe.shared_gate (Qwen2-MoE). Returns the output and this layer's router
statistics, so callers need no side channels.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from moe_jax.models import dispatch as dispatch_lib
from moe_jax.models import layers
from moe_jax.models import mlp
from moe_jax.models import remat
from moe_jax.models import router as router_lib
from moe_jax.models import routers


class Experts(nn.Module):
  num_experts: int
  d_ff: int
  init_std: float

  @nn.compact
  def __call__(self, d_model):
    init = layers.normal(self.init_std)
    e, d, f = self.num_experts, d_model, self.d_ff
    return (self.param('wi_0', init, (e, d, f), jnp.float32),
            self.param('wi_1', init, (e, d, f), jnp.float32),
            self.param('wo', init, (e, f, d), jnp.float32))


class MoE(nn.Module):
  cfg: 'moe_jax.schema.model.ModelConfig'

  @nn.compact
  def __call__(self, x_BLD, tokens_BL, valid_BL, train=False, load_E=None):
    """`load_E` (optional): the expert load fractions the global balance loss
    uses instead of this batch's (gradient accumulation's whole batch)."""
    cfg, m = self.cfg, self.cfg.moe
    dtype = layers.compute_dtype(cfg)
    batch, length, d = x_BLD.shape
    router_in = x_BLD
    if train and m.jitter > 0:
      router_in = router_lib.jitter(x_BLD, m.jitter, self.make_rng('jitter'))
    routing = routers.get(m.router).route(cfg, router_in, tokens_BL)
    # What routing analysis reads (eval/routing.py), when `intermediates` is mutable.
    self.sow('intermediates', 'routing', routing)
    idx_BLk, gates_BLk, probs_BLE, logits_BLE = routing
    # Padding tokens get zero gates: no output, no gradient, no capacity slot.
    gates_BLk = gates_BLk * valid_BL[..., None]
    # What remat policy 'save_moe' keeps (moe_jax/models/remat.py).
    idx_BLk, gates_BLk = checkpoint_name((idx_BLk, gates_BLk), remat.MOE_ROUTING)

    wi_0, wi_1, wo = Experts(m.num_experts, m.d_ff, cfg.init_std, name='experts')(d)
    # The mesh the step is traced under (the trainer sets it): expert-parallel
    # dispatch when it spreads experts over devices.
    fn = dispatch_lib.get(m.dispatch, m.capacity_factor, jax.sharding.get_abstract_mesh(),
                          dtype=cfg.dtype, dims=(d, m.d_ff))
    y_TD, dropped_frac = fn(x_BLD.reshape(-1, d), idx_BLk.reshape(-1, m.top_k),
                            gates_BLk.reshape(-1, m.top_k), wi_0.astype(dtype),
                            wi_1.astype(dtype), wo.astype(dtype))
    y_BLD = y_TD.reshape(batch, length, d)
    if m.num_shared_experts:
      shared_BLD = mlp.MLP(m.num_shared_experts * m.d_ff, cfg.init_std, dtype,
                           name='shared')(x_BLD)
      if m.shared_gate:
        w_D1 = self.param('shared_gate', layers.normal(cfg.init_std), (d, 1), jnp.float32)
        shared_BLD = jax.nn.sigmoid(layers.dense(x_BLD, w_D1.astype(dtype))) * shared_BLD
      y_BLD = y_BLD + shared_BLD
    y_BLD = checkpoint_name(y_BLD, remat.MOE_OUT)

    counts_E = router_lib.expert_counts(idx_BLk, valid_BL, m.num_experts)
    stats = dict(
        load=counts_E / jnp.maximum(jnp.sum(counts_E), 1.0),
        counts=counts_E,
        balance_loss=router_lib.balance_loss(probs_BLE, idx_BLk, valid_BL, m.balance_scope,
                                             load_E),
        z_loss=(router_lib.z_loss(logits_BLE, valid_BL) if logits_BLE is not None
                else jnp.float32(0.0)),
        entropy=router_lib.entropy(probs_BLE, valid_BL),
        dropped_frac=jnp.asarray(dropped_frac, jnp.float32),
    )
    return y_BLD, jax.tree.map(lambda v: jnp.asarray(v, jnp.float32), stats)
