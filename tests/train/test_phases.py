"""Training phases (seed 001's three-phase CPT): boundaries, multipliers, bad
values, and a run whose logged LR and router losses follow the phases."""
import json
import os

import numpy as np
import pytest

from configs import common
from moe_jax.errors import ConfigError
from moe_jax.train import optimizer, phases, trainer
from tests.train import tiny


def _config(**p):
  config = tiny.config(total_steps=100)
  config.phases.update(p)
  return config


def test_seed001_phases_split_the_steps_after_start():
  p = phases.build(_config(**common.SEED001_PHASES))
  assert p.edges == (0, 5, 75)
  steps = [0, 4, 5, 74, 75, 99]
  np.testing.assert_allclose([p.lr_scale(s) for s in steps], [0.1, 0.1, 1, 1, 0.1, 0.1])
  weights = [p.loss_weights(s) for s in steps]
  np.testing.assert_allclose([w[0] for w in weights], np.array([5, 5, 1, 1, .5, .5]) * 0.01)
  np.testing.assert_allclose([w[1] for w in weights], np.array([2, 2, 1, 1, .5, .5]) * 1e-3)
  # After an in-run upcycle at step 20 the phases split steps 20..99; before it nothing scales.
  late = phases.build(_config(**common.SEED001_PHASES), start=20)
  assert late.edges == (20, 24, 80)
  np.testing.assert_allclose([late.lr_scale(s) for s in (0, 19, 20, 24, 79, 80)],
                             [1, 1, 0.1, 1, 1, 0.1])


def test_phase_router_losses_sum_or_average_over_moe_layers():
  p = phases.build(_config(**common.SEED001_PHASES))
  aux = {'moe': {'layers_0': dict(balance_loss=1.0, z_loss=3.0),
                 'layers_1': dict(balance_loss=2.0, z_loss=5.0)}}
  want = 5 * 0.01 * 3.0 + 2 * 1e-3 * 8.0   # step 0: the warmup phase's x5 and x2
  np.testing.assert_allclose(p.aux_loss(aux, 0), want, rtol=1e-6)
  np.testing.assert_allclose(p.aux_loss(aux, 0, 'mean'), want / 2, rtol=1e-6)


def test_no_phases_and_default_multipliers():
  assert phases.build(_config()) is None
  p = phases.build(_config(fractions=(0.5, 0.5), lr=(1.0, 0.5)))
  np.testing.assert_allclose([p.lr_scale(49), p.lr_scale(50)], [1, 0.5])
  np.testing.assert_allclose(p.loss_weights(99), (0.01, 1e-3))   # balance, z_loss: all ones


def test_the_lr_schedule_is_scaled_by_the_phase():
  config = _config(**common.SEED001_PHASES)
  config.opt.update(schedule='constant', warmup_steps=0, lr=2e-3)
  p = phases.build(config)
  lr = optimizer.schedule(config.opt, 100, scale=p.lr_scale)
  np.testing.assert_allclose([lr(0), lr(5), lr(75)], [2e-4, 2e-3, 2e-4], rtol=1e-6)


@pytest.mark.parametrize('p, message', [
    (dict(fractions=(0.5, 0.6)), 'phases.fractions=(0.5, 0.6) must be positive and sum to 1'),
    (dict(fractions=(1.2, -0.2)), 'must be positive and sum to 1'),
    (dict(fractions=(0.5, 0.5), lr=(1.0,)), 'phases.lr=(1.0,) needs one value per phase (2'),
    (dict(fractions=(0.5, 0.5), z_loss=(1.0, -1.0)), 'phases.z_loss=(1.0, -1.0) must be >= 0'),
    (dict(fractions=(0.5, 0.5), balance=(1.0, float('nan'))),
     'phases.balance=(1.0, nan) must be finite'),
    (dict(lr=(0.1,)), 'phases.lr=(0.1,) needs phases.fractions'),
    (dict(fractions=('a',)), "phases.fractions=('a',) must be a tuple of numbers"),
    (dict(fractions=(0.999, 0.001)), 'leave a phase without steps'),
])
def test_bad_phases_name_the_key(p, message):
  with pytest.raises(ConfigError) as e:
    phases.build(_config(**p))
  assert message in str(e.value)


def test_a_run_logs_the_lr_and_router_losses_of_its_phases(tmp_path):
  config = tiny.config(total_steps=8, eval_every_steps=0, checkpoint_every_steps=0)
  config.moe.update(balance_loss_weight=0.01, z_loss_weight=1e-3)
  config.opt.update(schedule='constant', warmup_steps=0, lr=1e-3)
  config.phases.update(fractions=(0.25, 0.5, 0.25), lr=(0.1, 1.0, 0.5), balance=(5.0, 1.0, 0.5),
                       z_loss=(2.0, 1.0, 0.0))
  trainer.train_and_evaluate(config, str(tmp_path))
  with open(os.path.join(tmp_path, 'metrics.jsonl')) as f:
    rows = [json.loads(line) for line in f]
  assert [r['step'] for r in rows] == list(range(1, 9))
  phase = [0, 0, 1, 1, 1, 1, 2, 2]   # the row of step s logs the update at index s - 1
  for r, i in zip(rows, phase):
    np.testing.assert_allclose(r['lr'], 1e-3 * (0.1, 1.0, 0.5)[i], rtol=1e-6)
    w_balance, w_z = 0.01 * (5.0, 1.0, 0.5)[i], 1e-3 * (2.0, 1.0, 0.0)[i]
    np.testing.assert_allclose((r['balance_weight'], r['z_loss_weight']), (w_balance, w_z),
                               rtol=1e-6)
    layers = range(config.model.num_layers)
    want = sum(w_balance * r[f'moe/layers_{l}/balance_loss'] + w_z * r[f'moe/layers_{l}/z_loss']
               for l in layers)
    np.testing.assert_allclose(r['aux_loss'], want, rtol=1e-5)
