"""The strict engine: plans, errors naming leaves, jit and sharding."""
import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from moe_jax.errors import ConfigError
from moe_jax.upcycle import mapping, ops, paths, recipes
from moe_jax.upcycle.rules import Rule
from tests.upcycle import toy

COPY = (Rule(r'(.*)', (r'\1',), ops.copy()),)


def test_flatten_roundtrip_and_layer():
  tree = toy.params(toy.config(num_experts=4))
  flat = paths.flatten(tree)
  assert 'layers_1/moe/experts/wo' in flat
  back = paths.flatten(paths.unflatten(flat))
  assert back.keys() == flat.keys()
  assert paths.layer('layers_12/attn/q') == 'layers_12' and paths.layer('lm_head') is None


def test_identity_rules_copy_everything():
  c = toy.config(num_experts=4)
  src = toy.params(c)
  out = mapping.map_tree(COPY, src, toy.abstract(c), jax.random.key(0))
  for p, x in paths.flatten(src).items():
    np.testing.assert_array_equal(paths.flatten(out)[p], x)


def test_unmatched_target_is_named():
  rules = (Rule(r'layers_\d+/.*', (r'\g<0>',), ops.copy()),)
  c = toy.config()
  with pytest.raises(ConfigError, match='match no upcycle rule: embed/embedding'):
    mapping.map_tree(rules, toy.params(c), toy.abstract(c), jax.random.key(0))


def test_unused_source_is_named():
  src, dst = toy.config(layers=3), toy.config(layers=2)
  with pytest.raises(ConfigError, match='feed no target leaf: layers_2/attn/k'):
    mapping.map_tree(COPY, toy.params(src), toy.abstract(dst), jax.random.key(0))


def test_missing_source_is_named():
  src, dst = toy.config(layers=2), toy.config(layers=3)
  with pytest.raises(ConfigError, match=r'missing source leaves: layers_2/attn/k <- layers_2'):
    mapping.map_tree(COPY, toy.params(src), toy.abstract(dst), jax.random.key(0))


def test_shape_mismatch_names_leaf_and_shapes():
  src, dst = toy.config(d_ff=16), toy.config(d_ff=32)
  with pytest.raises(ConfigError, match=r'layers_0/mlp/wi_0: op copy made shape \(8, 16\), '
                                        r'the target config needs \(8, 32\)'):
    mapping.map_tree(COPY, toy.params(src), toy.abstract(dst), jax.random.key(0))


def test_extra_leaves_may_go_unused():
  c = toy.config()
  rules = (Rule('lm_head', ('fresh/lm_head',), ops.copy()),) + COPY
  src = toy.params(c)
  del src['lm_head']  # the target's lm_head comes from `extra` instead
  extra = {'fresh': {'lm_head': np.ones((8, 11), np.float32), 'other': np.zeros(3)}}
  out = mapping.map_tree(rules, src, toy.abstract(c), jax.random.key(0), extra=extra)
  np.testing.assert_array_equal(out['lm_head'], 1.0)


def test_sharded_transform_equals_single_device():
  src_c, dst_c = toy.config(num_experts=4, use_bias=True), toy.config(num_experts=8,
                                                                      use_bias=True)
  # The bias noise (delta) checks that per-leaf randomness survives sharding.
  recipe = recipes.build('expand_experts', src_c, dst_c, dict(layout='in_place', delta=0.1))
  src, abstract = toy.params(src_c), toy.abstract(dst_c)
  rng = jax.random.key(3)
  want = mapping.transform(recipe, src, abstract, rng)
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ('expert', 'data'))
  spec = lambda kp: P('expert') if 'experts' in paths.join(kp) else P()
  shardings = jax.tree_util.tree_map_with_path(lambda kp, t: NamedSharding(mesh, spec(kp)),
                                               abstract)
  got = mapping.transform(recipe, src, abstract, rng, out_shardings=shardings)
  assert len(jax.devices()) == 8
  for p, x in paths.flatten(got).items():
    assert x.sharding == paths.flatten(shardings)[p]
    np.testing.assert_array_equal(np.asarray(x), paths.flatten(want)[p])
