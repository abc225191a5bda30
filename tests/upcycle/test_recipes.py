"""Recipes on toy trees: shapes, which leaves move where, and one-line errors."""
import jax
import numpy as np
import optax
import pytest

from moe_jax.errors import ConfigError
from moe_jax.upcycle import layout, mapping, paths, recipes
from tests.upcycle import toy


def _run(name, src_c, dst_c, args=None, seed=0):
  recipe = recipes.build(name, src_c, dst_c, args)
  src = toy.params(src_c, seed)
  dst = mapping.transform(recipe, src, toy.abstract(dst_c), jax.random.key(seed))
  return recipe, paths.flatten(src), paths.flatten(dst)


def test_dense_to_moe_interleaved_keeps_dense_layers():
  dst_c = toy.config(num_experts=4, layers=4, every=2)
  recipe, src, dst = _run('dense_to_moe', toy.config(layers=4), dst_c, dict(router_init='zero'))
  assert recipe.fresh == (r'layers_\d+/moe/router/w', r'layers_\d+/moe/router/bias')
  np.testing.assert_array_equal(dst['layers_0/mlp/wi_0'], src['layers_0/mlp/wi_0'])
  np.testing.assert_array_equal(dst['layers_1/moe/experts/wo'][3], src['layers_1/mlp/wo'])
  np.testing.assert_array_equal(dst['layers_3/moe/router/w'], 0)
  np.testing.assert_array_equal(dst['embed/embedding'], src['embed/embedding'])


def test_expand_experts_uniform_and_utility():
  src_c, dst_c = toy.config(num_experts=4), toy.config(num_experts=8)
  _, src, dst = _run('expand_experts', src_c, dst_c, dict(delta=0))
  np.testing.assert_array_equal(dst['layers_0/moe/experts/wi_1'][4:], src['layers_0/moe/experts/wi_1'])
  scores = {'layers_0': [5.0, 1.0, 1.0, 1.0], 'layers_1': [1.0, 1.0, 1.0, 1.0]}
  recipe, src, dst = _run('expand_experts', src_c, dst_c,
                          dict(delta=0, allocation='utility', scores=scores, layout='in_place'))
  assert recipe.args['counts']['layers_0'] == [5, 1, 1, 1]
  np.testing.assert_array_equal(dst['layers_0/moe/router/w'][:, :5],
                                np.repeat(src['layers_0/moe/router/w'][:, :1], 5, axis=1))


@pytest.mark.parametrize('method,want', [('stack', [0, 1, 2, 3, 0, 1, 2, 3]),
                                         ('interpose', [0, 1, 0, 1, 2, 3, 2, 3])])
def test_depth_growth_keeps_interleaving(method, want):
  src_c = toy.config(num_experts=4, layers=4, every=2)
  dst_c = toy.config(num_experts=4, layers=8, every=2)
  recipe, src, dst = _run('grow_depth', src_c, dst_c, dict(method=method))
  assert recipe.args['layer_map'] == want
  for j, i in enumerate(want):
    np.testing.assert_array_equal(dst[f'layers_{j}/attn/q'], src[f'layers_{i}/attn/q'])
  assert layout.layer_kinds(dst_c) == [layout.layer_kinds(src_c)[i] for i in want]


def test_dus_by_percent():
  c = toy.config(layers=5)
  assert layout.depth_map(c, 'dus', percent=40) == [0, 1, 1, 2, 3, 3, 4]
  _, src, dst = _run('dus', c, toy.config(layers=7), dict(percent=40))
  np.testing.assert_array_equal(dst['layers_5/mlp/wo'], src['layers_3/mlp/wo'])


def test_dus_solar_repeats_the_middle_as_one_block():
  c = toy.config(layers=5)
  assert layout.depth_map(c, 'dus', percent=40, placement='solar') == [0, 1, 2, 1, 2, 3, 4]
  assert (layout.depth_map(c, 'dus', percent=100, placement='solar')
          == layout.depth_map(c, 'stack', factor=2))
  inter = toy.config(num_experts=4, layers=6, every=2)   # 3 units of [dense, moe]
  assert layout.depth_map(inter, 'dus', percent=34, placement='solar') == [0, 1, 2, 3, 2, 3, 4, 5]
  recipe, src, dst = _run('dus', c, toy.config(layers=7), dict(percent=40, placement='solar'))
  assert recipe.args['layer_map'] == [0, 1, 2, 1, 2, 3, 4]
  np.testing.assert_array_equal(dst['layers_3/mlp/wo'], src['layers_1/mlp/wo'])
  with pytest.raises(ConfigError, match='upcycle.args.placement'):
    layout.depth_map(c, 'dus', percent=40, placement='middle')


def test_grow_width_noise_only_on_new_experts():
  src_c = toy.config(num_experts=4, top_k=1)
  _, src, dst = _run('grow_width', src_c, toy.config(num_experts=8, top_k=2), dict(alpha=0.1))
  w, w2 = src['layers_0/moe/experts/wo'], dst['layers_0/moe/experts/wo']
  np.testing.assert_array_equal(w2[:4], w)
  rel = np.std(w2[4:] - w, axis=(1, 2)) / np.std(w, axis=(1, 2))
  assert np.all((rel > 0.05) & (rel < 0.15))
  np.testing.assert_array_equal(dst['layers_0/moe/router/w'][:, :4], src['layers_0/moe/router/w'])


def test_opt_state_policies():
  src_c, dst_c = toy.config(num_experts=2, layers=1), toy.config(num_experts=4, layers=1)
  recipe = recipes.build('expand_experts', src_c, dst_c, dict(delta=0))
  src = toy.params(src_c)
  tx = optax.adam(1e-3)
  state = tx.init(src)
  grads = jax.tree_util.tree_map(np.ones_like, src)
  _, state = tx.update(grads, state, src)
  abstract_dst = toy.abstract(dst_c)
  abstract_state = jax.eval_shape(tx.init, abstract_dst)
  old_mu = np.asarray(paths.flatten(state[0].mu)['layers_0/moe/experts/wi_0'])
  old_nu = np.asarray(paths.flatten(state[0].nu)['layers_0/moe/experts/wi_0'])
  copied = mapping.map_opt_state(recipe, state, abstract_state, abstract_dst, 'copy')
  scaled = mapping.map_opt_state(recipe, state, abstract_state, abstract_dst, 'scale')
  reset = mapping.map_opt_state(recipe, state, abstract_state, abstract_dst, 'reset')
  mu = paths.flatten(copied[0].mu)['layers_0/moe/experts/wi_0']
  np.testing.assert_array_equal(mu, old_mu[[0, 1, 0, 1]])
  np.testing.assert_allclose(paths.flatten(scaled[0].mu)['layers_0/moe/experts/wi_0'],
                             old_mu[[0, 1, 0, 1]] / 2)
  np.testing.assert_allclose(paths.flatten(scaled[0].nu)['layers_0/moe/experts/wi_0'],
                             old_nu[[0, 1, 0, 1]] / 4)
  assert int(copied[0].count) == 1 and int(reset[0].count) == 0
  np.testing.assert_array_equal(paths.flatten(reset[0].mu)['layers_0/moe/experts/wi_0'], 0)
  # Moments never get noise, even when the params do.
  noisy = recipes.build('grow_width', src_c, toy.config(num_experts=4, top_k=4, layers=1), {})
  out = mapping.map_opt_state(noisy, state, abstract_state, abstract_dst, 'copy')
  np.testing.assert_array_equal(paths.flatten(out[0].mu)['layers_0/moe/experts/wi_0'],
                                old_mu[[0, 1, 0, 1]])


def test_dense_to_moe_scale_policy_follows_formula():
  # Sparse upcycling: each of E experts sees about top_k / E of the tokens the
  # dense MLP saw, so 'scale' gives mu (k/E) and nu (k/E)**2. E=4, k=2 keeps
  # k/E = 1/2 apart from 1/E = 1/4, so a scale that forgets top_k fails.
  src_c, dst_c = toy.config(layers=1), toy.config(num_experts=4, top_k=2, layers=1)
  recipe = recipes.build('dense_to_moe', src_c, dst_c, {})
  src = toy.params(src_c)
  tx = optax.adam(1e-3)
  grads = jax.tree_util.tree_map(lambda p: np.full_like(p, 3.0), src)
  _, state = tx.update(grads, tx.init(src), src)
  abstract_dst = toy.abstract(dst_c)
  abstract_state = jax.eval_shape(tx.init, abstract_dst)
  scaled = mapping.map_opt_state(recipe, state, abstract_state, abstract_dst, 'scale')
  for leaf in ('wi_0', 'wi_1', 'wo'):
    old_mu = np.asarray(paths.flatten(state[0].mu)[f'layers_0/mlp/{leaf}'])
    old_nu = np.asarray(paths.flatten(state[0].nu)[f'layers_0/mlp/{leaf}'])
    mu = paths.flatten(scaled[0].mu)[f'layers_0/moe/experts/{leaf}']
    nu = paths.flatten(scaled[0].nu)[f'layers_0/moe/experts/{leaf}']
    assert mu.shape == (4,) + old_mu.shape
    np.testing.assert_allclose(mu, np.broadcast_to(old_mu * (2 / 4), mu.shape), rtol=1e-6)
    np.testing.assert_allclose(nu, np.broadcast_to(old_nu * (2 / 4) ** 2, nu.shape), rtol=1e-6)
  # Leaves outside the experts keep their moments.
  np.testing.assert_array_equal(paths.flatten(scaled[0].mu)['layers_0/attn/q'],
                                paths.flatten(state[0].mu)['layers_0/attn/q'])


@pytest.mark.parametrize('name,src,dst,args,match', [
    ('expand_experts', dict(num_experts=4), dict(num_experts=6), dict(delta=0),
     'expansion factor'),
    ('expand_experts', dict(num_experts=4), dict(num_experts=4), dict(delta=0),
     'expansion factor'),
    ('dense_to_moe', {}, dict(num_experts=2, top_k=3), {}, 'top_k=3 exceeds'),
    ('grow_width', dict(num_experts=2, top_k=1), dict(num_experts=4, top_k=1), {},
     'top_k must be 2'),
    ('shrink', {}, {}, {}, "upcycle.recipe='shrink' is not one of"),
    ('expand_experts', dict(num_experts=2), dict(num_experts=4),
     dict(delta=0, expert_heuristic='magic'), "expert_heuristic='magic'"),
    ('expand_experts', dict(num_experts=2), dict(num_experts=4),
     dict(delta=0, router_heuristic='magic'), "router_heuristic='magic'"),
    ('expand_experts', dict(num_experts=2), dict(num_experts=4),
     dict(delta=0, allocation='utility'), 'utility scores requested with no data for layers_0'),
    ('expand_experts', dict(num_experts=2), dict(num_experts=4), {}, 'moe.use_bias=False'),
    ('expand_experts', dict(num_experts=2), dict(num_experts=4), dict(colour=1),
     r"\['colour'\] are not options"),
    ('grow_depth', dict(layers=2), dict(layers=3), {}, 'gives 4; the target has'),
    ('grow_depth', dict(layers=2), dict(layers=4), dict(factor=1), 'factor=1'),
])
def test_bad_input_is_one_line(name, src, dst, args, match):
  with pytest.raises(ConfigError, match=match) as e:
    recipes.build(name, toy.config(**src), toy.config(**dst), args)
  assert '\n' not in str(e.value)


def test_source_shapes_not_matching_config():
  src_c, dst_c = toy.config(num_experts=4), toy.config(num_experts=8)
  recipe = recipes.build('expand_experts', src_c, dst_c, dict(delta=0))
  wrong = toy.params(toy.config(num_experts=2))
  with pytest.raises(ConfigError, match='source has 2 experts, the source config says 4'):
    mapping.transform(recipe, wrong, toy.abstract(dst_c), jax.random.key(0))
