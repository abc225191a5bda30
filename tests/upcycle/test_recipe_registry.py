"""The recipe registry: a toy recipe registered in this one file gets its
target config, its args checked against its defaults, its rules run by the
strict mapping and its provenance recorded, with no other file touched
(docs/architecture.md)."""
import dataclasses

import jax
import ml_collections
import numpy as np
import pytest

from moe_jax.schema.field import field
from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, paths, recipes, transition
from moe_jax.upcycle.rules import Rule
from moe_jax.upcycle import ops
from tests.upcycle import toy


@dataclasses.dataclass(frozen=True)
class _MoreActive(recipes.Options):
  extra: int = field(1, at_least=1)   # an arg is one line


def _more_active(dst, src, factor, a):
  del factor
  dst.moe.top_k = src.moe.top_k + a.extra


def _toy_build(src, dst, a):
  """More active experts per token: the two layers' routers swapped, every other leaf copied."""
  recipes.same(src, dst, 'moe.num_experts')
  recipes.check_topk(dst, 'target')
  rules = (Rule(r'layers_0/moe/router/w', ('layers_1/moe/router/w',), ops.copy()),
           Rule(r'layers_1/moe/router/w', ('layers_0/moe/router/w',), ops.copy()),
           recipes.copy_rest())
  return recipes.Recipe('toy_more_active', rules, recipes.as_dict(a), a.opt_policy)


@pytest.fixture
def toy_recipe(monkeypatch):
  monkeypatch.setattr(recipes.REGISTRY, 'entries', dict(recipes.REGISTRY.entries))
  recipes.register('toy_more_active', _MoreActive, target=_more_active,
                   description='k -> k + extra')(_toy_build)
  yield


def test_builtin_recipes_are_registered_with_their_descriptions():
  assert set(recipes.names()) >= {'dense_to_moe', 'expand_experts', 'grow_width', 'grow_depth',
                                  'dus'}
  assert 'Definition 3.1' in recipes.get('expand_experts').description
  assert recipes.defaults('grow_width')['alpha'] == 0.01
  assert not recipes.get('dense_to_moe').uses_factor and recipes.get('grow_width').uses_factor
  with pytest.raises(ConfigError, match=r"upcycle.recipe='nope' is not one of"):
    recipes.get('nope')


@pytest.mark.usefixtures('toy_recipe')
def test_a_toy_recipe_registered_in_one_file_runs_end_to_end():
  config = toy.config(num_experts=4, top_k=1)
  config.upcycle.recipe = 'toy_more_active'
  config.upcycle.args = ml_collections.ConfigDict(dict(extra=2))
  dst_config = transition.target_config(config)
  assert (dst_config.moe.top_k, dst_config.moe.num_experts) == (3, 4)
  assert recipes.get('toy_more_active').description == 'k -> k + extra'

  src = toy.params(config, 0)
  recipe = recipes.build('toy_more_active', config, dst_config, config.upcycle.args)
  dst = paths.flatten(mapping.transform(recipe, src, toy.abstract(dst_config),
                                        jax.random.key(0)))
  src = paths.flatten(src)
  np.testing.assert_array_equal(dst['layers_0/moe/router/w'], src['layers_1/moe/router/w'])
  np.testing.assert_array_equal(dst['layers_1/moe/router/w'], src['layers_0/moe/router/w'])
  np.testing.assert_array_equal(dst['layers_1/moe/experts/wo'], src['layers_1/moe/experts/wo'])
  assert recipe.args == dict(opt_policy='copy', extra=2)
  # No upcycle.factor in its provenance: lineage prints no 'x2' after its name.
  assert transition.provenance(config, recipe)['factor'] is None

  config.upcycle.args = ml_collections.ConfigDict(dict(extra=1, alpha=0.5))
  with pytest.raises(ConfigError, match=r"\['alpha'\] are not options of recipe 'toy_more_active'"):
    recipes.build('toy_more_active', config, dst_config, config.upcycle.args)


@pytest.mark.usefixtures('toy_recipe')
@pytest.mark.parametrize('value, message', [
    (0, r'^upcycle.args.extra=0 must be a positive integer$'),
    ('2', r"^upcycle.args.extra='2' must be a positive integer$"),
    (True, r'^upcycle.args.extra=True must be a positive integer$'),
    (2.0, r'^upcycle.args.extra=2.0 must be a positive integer$')])
def test_an_option_is_checked_by_its_field_before_any_params_are_read(value, message):
  """The bounds of the options' dataclass field (schema/field.py), in
  target_config, before the growth reads a source."""
  config = toy.config(num_experts=4, top_k=1)
  config.upcycle.recipe = 'toy_more_active'
  config.upcycle.args = ml_collections.ConfigDict(dict(extra=value))
  with pytest.raises(ConfigError, match=message):
    transition.target_config(config)
