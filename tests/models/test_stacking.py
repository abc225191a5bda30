"""The stacked train state (models/stacking.py): both layouts hold the same
values, and a Program trains the stacked one while checkpoints see `layers_{i}`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.models import config as model_config, stacking, transformer
from moe_jax.train import optimizer, program as program_lib
from moe_jax.workdir import placement
from tests.train import tiny

# (dense, MoE) x 2 then a dense rest: three scan columns, one of them [1, ...].
_KEYS = {'model.vocab_size': 61, 'model.num_layers': 5, 'moe.every': 2, 'moe.use_bias': True, 'model.scan_layers': True}


def _params(config):
  cfg = model_config.from_config(config)
  model = transformer.Transformer(cfg)
  return cfg, model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))['params']


def test_stack_and_unstack_params_and_the_optimizer_state():
  config = tiny.config(**_KEYS)
  cfg, params = _params(config)
  assert stacking.columns(cfg) == [
      ('stack_0_0', ['layers_0', 'layers_2']), ('stack_0_1', ['layers_1', 'layers_3']),
      ('stack_4_0', ['layers_4'])]
  stacked = stacking.stack(params, cfg)
  assert sorted(stacked) == ['embed', 'final_norm', 'lm_head', 'stack_0_0', 'stack_0_1',
                             'stack_4_0']
  np.testing.assert_array_equal(stacked['stack_0_1']['moe']['router']['w'][1],
                                params['layers_3']['moe']['router']['w'])
  jax.tree.map(np.testing.assert_array_equal, stacking.unstack(stacked, cfg), params)
  # Adam's moments sit deep in an optax state, masked where the router bias is frozen.
  tx, _ = optimizer.make(config.opt, 10, stacked)
  moments = jax.tree.map(lambda p: p + 1.0, stacked)
  state = tx.init(moments)
  layers_tx, _ = optimizer.make(config.opt, 10, params)
  want = layers_tx.init(stacking.unstack(moments, cfg))
  got = stacking.unstack(state, cfg)
  assert jax.tree.structure(got) == jax.tree.structure(want)
  jax.tree.map(np.testing.assert_array_equal, got, want)
  # Without scan_layers both are the identity.
  plain_cfg, plain = _params(tiny.config(**dict(_KEYS, **{'model.scan_layers': False})))
  assert stacking.stack(plain, plain_cfg) is plain and stacking.unstack(plain, plain_cfg) is plain


def test_a_column_held_in_part_is_an_error():
  cfg, params = _params(tiny.config(**_KEYS))
  del params['layers_2']
  with pytest.raises(ValueError, match=r"stack_0_0 stacks \['layers_0', 'layers_2'\]"):
    stacking.stack(params, cfg)


def test_the_program_trains_the_stacked_state_and_checkpoints_layers():
  config = tiny.config(**_KEYS)
  program = program_lib.build(config, placement.make_mesh(config.mesh))
  assert 'stack_0_1' in program.abstract_state.params
  assert 'layers_3' in program.checkpoint_state.params
  # A stacked leaf is placed as its layers are, the [R] axis whole.
  stacked = program.state_shardings.params['stack_0_1']['moe']['experts']['wi_0'].spec
  layer = program.checkpoint_state.params['layers_3']['moe']['experts']['wi_0'].sharding.spec
  assert tuple(stacked) == (None, *layer)
  # init_from: params in the checkpoint layout, stacked into a fresh state.
  cfg, params = _params(config)
  state = program_lib.init_state(program, 0, params)
  jax.tree.map(np.testing.assert_array_equal, state.params, stacking.stack(params, cfg))
  back = program.to_checkpoint(state)
  jax.tree.map(np.testing.assert_array_equal, back.params, params)
  assert jax.tree.structure(back.opt_state) == jax.tree.structure(
      program.checkpoint_state.opt_state)
