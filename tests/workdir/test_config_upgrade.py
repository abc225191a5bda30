"""A config.json written before a key existed reads with the value its run
had, once, where it is read: new configs keep the key's own default."""
import json

from configs import common
from moe_jax import schema
from moe_jax.schema import upcycle as upcycle_schema
from moe_jax.workdir import files, saved_config


def _old_workdir(tmp_path, *dropped):
  """A workdir whose config.json lacks the dotted keys `dropped`."""
  record = json.loads(common.base().to_json())
  for dotted in dropped:
    *groups, key = dotted.split('.')
    node = record
    for group in groups:
      node = node[group]
    del node[key]
  files.write_json(str(tmp_path / files.CONFIG), record)
  return str(tmp_path)


def test_grad_accum_steps_of_an_old_run_is_one(tmp_path):
  """Runs before grad_accum_steps ran one batch a step; new ones default to 0 (auto)."""
  workdir = _old_workdir(tmp_path, 'grad_accum_steps', 'opt.mu_dtype', 'model.attention')
  for config in (files.read_config(workdir), saved_config.load(workdir)):
    assert config.grad_accum_steps == 1
    assert (config.opt.mu_dtype, config.model.attention) == ('', 'reference')
  assert common.base().grad_accum_steps == 0
  # The upgraded key takes an override like any saved one.
  assert saved_config.load(workdir, ['--config.grad_accum_steps=2']).grad_accum_steps == 2


def test_a_run_from_before_the_phases_group_gets_one(tmp_path):
  workdir = _old_workdir(tmp_path, 'phases')
  assert files.read_config(workdir).phases.fractions == []


def test_a_full_config_is_left_alone():
  config = json.loads(common.base().to_json())
  assert schema.upgrade(json.loads(common.base().to_json())) == config


def test_the_upcycle_keys_that_became_recipe_args_move_into_them():
  """Moved where the args leave them out and not at their default (which the
  recipe's own default gives), else dropped: the recipe reads what it read."""
  record = {'upcycle': {'recipe': 'r', 'args': {'utility_batches': 3}, 'split_bias': True,
                        'utility_metric': 'grad_norm', 'utility_batches': 2}}
  assert upcycle_schema.upgrade_recipe_args(record) == {
      'upcycle': {'recipe': 'r', 'args': {'utility_batches': 3, 'split_bias': True}}}
  defaults = {'upcycle': {'recipe': '', 'args': {}, **upcycle_schema.MOVED_TO_ARGS}}
  assert upcycle_schema.upgrade_recipe_args(defaults) == {'upcycle': {'recipe': '', 'args': {}}}
