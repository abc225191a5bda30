"""A recipe's options come from upcycle.args alone, but for `factor`: the
upcycle group's expansion factor, shared by the recipes that grow by one,
fills an option of that name where the args leave it out. Seen from
outside: the target's shape and the training batches the growth reads."""
import ml_collections
import pytest

from moe_jax.errors import ConfigError
from moe_jax.upcycle import transition
from tests.upcycle import toy


def _config(recipe, group, args, **model):
  config = toy.config(**model)
  config.upcycle.update(recipe=recipe, **group)
  config.upcycle.args = ml_collections.ConfigDict(args)
  return config


@pytest.mark.parametrize('recipe, key, per_factor', [
    ('grow_depth', 'num_layers', 2), ('widen_mlp', 'd_ff', 16)])
def test_a_given_factor_wins_and_the_group_fills_a_missing_one(recipe, key, per_factor):
  given = transition.target_config(_config(recipe, dict(factor=2), dict(factor=3)))
  assert given.model[key] == 3 * per_factor
  filled = transition.target_config(_config(recipe, dict(factor=4), {}))
  assert filled.model[key] == 4 * per_factor


def test_the_utility_options_are_the_recipes_args():
  moe = dict(num_experts=4)
  given = _config('expand_experts', {}, dict(allocation='utility', utility_batches=3), **moe)
  assert transition.batches_needed(given) == 3
  no_grad = dict(allocation='utility', utility_metric='weight_norm')   # reads no batch
  assert transition.batches_needed(_config('expand_experts', {}, no_grad, **moe)) == 0
  default = _config('expand_experts', {}, dict(allocation='utility'), **moe)
  assert transition.batches_needed(default) == 64


def test_another_recipe_refuses_them():
  config = _config('grow_width', {}, dict(split_bias=True), num_experts=4)
  with pytest.raises(ConfigError, match=r"\['split_bias'\] are not options of recipe"):
    transition.target_config(config)
