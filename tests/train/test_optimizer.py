"""Schedules, the weight-decay mask, the frozen router bias and the router's LR multiplier."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.train import optimizer
from moe_jax.workdir import config_check


def _opt(**kw):
  cfg = common.opt()
  cfg.update(dict(dict(lr=1.0, warmup_steps=10, final_lr_fraction=0.1), **kw))
  return cfg


def test_wsd_warms_up_holds_and_decays_linearly():
  lr = optimizer.schedule(_opt(schedule='wsd', decay_fraction=0.2), total_steps=100)
  np.testing.assert_allclose([lr(0), lr(4), lr(9)], [0.1, 0.5, 1.0], rtol=1e-6)
  np.testing.assert_allclose([lr(50), lr(79)], [1.0, 1.0])
  # Decay over the last 20 steps from 1.0 to 0.1.
  np.testing.assert_allclose([lr(80), lr(90), lr(100)], [1.0, 0.55, 0.1], rtol=1e-6)


@pytest.mark.parametrize('shape, mid', [('cosine', 0.55), ('sqrt', 1 - 0.9 * np.sqrt(0.5))])
def test_wsd_decay_shapes(shape, mid):
  lr = optimizer.schedule(_opt(schedule='wsd', decay_fraction=0.2, decay_shape=shape), 100)
  np.testing.assert_allclose(lr(90), mid, rtol=1e-6)


def test_cosine_and_constant():
  cos = optimizer.schedule(_opt(schedule='cosine'), total_steps=110)
  np.testing.assert_allclose([cos(10), cos(60), cos(110)], [1.0, 0.55, 0.1], rtol=1e-6)
  const = optimizer.schedule(_opt(schedule='constant'), total_steps=110)
  np.testing.assert_allclose([const(5), const(100)], [0.6, 1.0], rtol=1e-6)


def test_rewarm_after_a_transition():
  lr = optimizer.schedule(_opt(schedule='constant', rewarm_steps=4), 100, start_step=50)
  np.testing.assert_allclose([lr(50), lr(51), lr(53), lr(60)], [0.25, 0.5, 1.0, 1.0])


def test_a_transition_keeps_the_run_schedule():
  """Without rewarm, the schedule after tau is the uninterrupted run's."""
  for kind in ('cosine', 'wsd'):
    plain = optimizer.schedule(_opt(schedule=kind), total_steps=110)
    grown = optimizer.schedule(_opt(schedule=kind), total_steps=110, start_step=60)
    np.testing.assert_allclose([grown(s) for s in (60, 80, 109)],
                               [plain(s) for s in (60, 80, 109)])


@pytest.mark.parametrize('key, value', [('schedule', 'step'), ('router_lr_multiplier', 0.0)])
def test_a_bad_opt_value_is_refused_before_the_optimizer_is_built(key, value):
  """The trainer's check (workdir/config_check.py) reads opt's bounds from its fields."""
  config = common.base()
  config.opt[key] = value
  with pytest.raises(ConfigError, match=f'^opt.{key}={value!r} '):
    config_check.check_run(config)


def test_decay_mask_and_frozen_router_bias():
  params = {'layers_0': {'attn_norm': {'scale': jnp.ones(4)},
                         'moe': {'router': {'w': jnp.ones((4, 2)), 'bias': jnp.ones(2)}}}}
  cfg = _opt(schedule='constant', warmup_steps=0, weight_decay=0.5, clip_norm=0.0, lr=0.1)
  tx, lr = optimizer.make(cfg, 10, params)
  zero_grads = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(zero_grads, tx.init(params), params)
  new = optax.apply_updates(params, jax.tree.map(lambda u: lr(0) * u, updates))
  layer = new['layers_0']
  np.testing.assert_allclose(layer['attn_norm']['scale'], 1.0)        # no decay on norms
  np.testing.assert_allclose(layer['moe']['router']['bias'], 1.0)     # frozen
  np.testing.assert_allclose(layer['moe']['router']['w'], 1 - 0.1 * 0.5, rtol=1e-6)  # decayed
  grads = jax.tree.map(jnp.ones_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  assert not np.any(updates['layers_0']['moe']['router']['bias'])      # no gradient step either


def test_router_lr_multiplier_scales_the_router_weights_update_only():
  params = {'layers_0': {'mlp': {'wi_0': jnp.ones((4, 3))},
                         'moe': {'router': {'w': jnp.ones((4, 2)), 'bias': jnp.ones(2)}}}}
  grads = jax.tree.map(lambda p: jnp.full_like(p, 0.5), params)
  updates = []
  for multiplier in (1.0, 10.0):
    tx, _ = optimizer.make(_opt(router_lr_multiplier=multiplier, weight_decay=0.1), 10, params)
    updates.append(tx.update(grads, tx.init(params), params)[0]['layers_0'])
  plain, scaled = updates
  np.testing.assert_allclose(scaled['moe']['router']['w'], 10 * plain['moe']['router']['w'])
  np.testing.assert_allclose(scaled['mlp']['wi_0'], plain['mlp']['wi_0'])
  assert not np.any(scaled['moe']['router']['bias'])
