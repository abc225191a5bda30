"""widen_mlp (Net2WiderNet): the wider dense model computes the source's
function with the copies of each neuron pulled apart, and its moments follow
the gradients the copies get."""
import jax
import ml_collections
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, paths, recipes, transition
from tests.upcycle import test_preservation, toy


def _configs(factor=2):
  src = test_preservation._scaled(toy.config(layers=2, d_ff=16))
  src.upcycle.recipe, src.upcycle.factor = 'widen_mlp', factor
  src.upcycle.args = ml_collections.ConfigDict(dict(noise=0.1))
  return src, transition.target_config(src)


@pytest.mark.parametrize('factor', [2, 3])
def test_widen_mlp_is_exact_with_its_noise(factor):
  src, dst = _configs(factor)
  assert dst.model.d_ff == 16 * factor
  assert test_preservation._gap(src, dst, 'widen_mlp', dict(factor=factor, noise=0.1)) < 1e-5


def test_copies_differ_and_sum_to_the_source():
  src, dst = _configs()
  params = toy.params(src, 0)
  recipe = recipes.build('widen_mlp', src, dst, src.upcycle.args)
  out = paths.flatten(mapping.transform(recipe, params, toy.abstract(dst), jax.random.key(1)))
  params = paths.flatten(params)
  wi, wo = params['layers_0/mlp/wi_0'], params['layers_0/mlp/wo']
  np.testing.assert_array_equal(out['layers_0/mlp/wi_0'], np.concatenate([wi, wi], axis=1))
  halves = np.asarray(out['layers_0/mlp/wo']).reshape(2, 16, -1)
  np.testing.assert_allclose(halves.sum(0), wo, atol=1e-6)
  assert np.abs(halves[0] - halves[1]).min() > 0
  np.testing.assert_array_equal(out['layers_1/attn/q'], params['layers_1/attn/q'])


def test_moments_follow_the_copies_gradients():
  src, dst = _configs()
  recipe = recipes.build('widen_mlp', src, dst, {})
  ones = jax.tree_util.tree_map(np.ones_like, toy.params(src, 0))
  nu = paths.flatten(mapping.map_tree(recipe.rules, ones, toy.abstract(dst), jax.random.key(0),
                                      moment_power=2))
  assert np.all(np.asarray(nu['layers_0/mlp/wi_1']) == 0.25)
  assert np.all(np.asarray(nu['layers_0/mlp/wo']) == 1.0)


def test_bad_targets_are_one_line_errors():
  src, dst = _configs()
  dst.model.d_ff = 20
  with pytest.raises(ConfigError, match=r'gives 32; the target has model.d_ff=20'):
    recipes.build('widen_mlp', src, dst, {})
  moe = toy.config(num_experts=4)
  with pytest.raises(ConfigError, match=r'widen_mlp widens a dense model'):
    recipes.build('widen_mlp', moe, moe, {})
