"""An arg a recipe was given (upcycle.args.KEY) wins over the upcycle group's
key of the same name, which only fills it where the args leave it out
(transition's group args: factor, split_bias, utility_metric,
utility_batches). Seen from outside: the target's shape and the training
batches the growth reads."""
import ml_collections
import pytest

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


def test_given_utility_args_win_over_the_group():
  group = dict(utility_batches=64, utility_metric='grad_norm')
  moe = dict(num_experts=4)
  given = _config('expand_experts', group, dict(allocation='utility', utility_batches=3), **moe)
  assert transition.batches_needed(given) == 3
  no_grad = dict(allocation='utility', utility_metric='weight_norm')   # reads no batch
  assert transition.batches_needed(_config('expand_experts', group, no_grad, **moe)) == 0
  filled = _config('expand_experts', dict(utility_batches=5), dict(allocation='utility'), **moe)
  assert transition.batches_needed(filled) == 5
