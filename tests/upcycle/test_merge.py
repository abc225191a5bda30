"""The merge recipe on hand-built sources: where each target leaf comes from,
strictness, router rows, and exactness per source where the math allows."""
import jax
import numpy as np
import pytest

from configs.upcycle import merge as merge_config
from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config, transformer
from moe_jax.upcycle import mapping, merge_router, paths, recipes, transition
from tests.upcycle import toy


def _configs(arg='', n=2, layers=2):
  src = toy.config(num_experts=0, layers=layers)
  src.upcycle = merge_config.get_config(arg)
  src.upcycle.args.num_sources = n
  return src, transition.target_config(src, n)


def _tree(params):
  return {f'src_{i}': p for i, p in enumerate(params)}


def _merge(arg, params, rows=None):
  src, dst = _configs(arg, len(params), layers=len([k for k in params[0] if k.startswith('layers_')]))
  args = dict(src.upcycle.args.to_dict(), router_rows=rows)
  recipe = recipes.build('merge', src, dst, args)
  out = mapping.map_tree(recipe.rules, _tree(params), transition.abstract_params(dst),
                         jax.random.key(0))
  return src, dst, out


def test_experts_come_from_their_source_and_the_rest_is_averaged_or_picked():
  params = [toy.params(toy.config(), seed=s) for s in range(3)]
  _, dst, out = _merge('per_source=2,top_k=2', params)
  assert dst.moe.num_experts == 6
  for i, p in enumerate(params):
    for name in ('wi_0', 'wi_1', 'wo'):
      for j in (2 * i, 2 * i + 1):
        np.testing.assert_array_equal(out['layers_1']['moe']['experts'][name][j],
                                      p['layers_1']['mlp'][name])
  mean_q = sum(p['layers_0']['attn']['q'] for p in params) / 3
  np.testing.assert_allclose(out['layers_0']['attn']['q'], mean_q, rtol=1e-6)
  np.testing.assert_allclose(out['embed']['embedding'],
                             sum(p['embed']['embedding'] for p in params) / 3, rtol=1e-6)
  _, _, picked = _merge('per_source=1,shared=1', params)
  for path, leaf in paths.flatten(picked).items():
    if '/moe/' not in path:
      np.testing.assert_array_equal(leaf, paths.flatten(params[1])[path])


def test_mapping_is_strict_about_every_source_leaf():
  params = [toy.params(toy.config(), seed=s) for s in range(2)]
  del params[1]['layers_0']['attn']['q']
  with pytest.raises(ConfigError, match=r'missing source leaves: layers_0/attn/q <- src_1/'):
    _merge('', params)
  params = [toy.params(toy.config(), seed=s) for s in range(2)]
  params[0]['layers_0']['attn']['extra'] = np.zeros(3, np.float32)
  with pytest.raises(ConfigError, match=r'feed no target leaf: src_0/layers_0/attn/extra'):
    _merge('', params)


@pytest.mark.parametrize('arg, message', [
    ('router=learned', r"router='learned' is not one of"),
    ('shared=2', r"shared=2 is not 'mean' or a source index 0..1"),
])
def test_bad_args_are_one_line_errors_before_params_are_read(arg, message):
  with pytest.raises(ConfigError, match=r'moe.top_k=3 must be in \[1, moe.num_experts=2\]'):
    _configs('per_source=1,top_k=3')
  with pytest.raises(ConfigError, match=message):
    _configs(arg)
  with pytest.raises(ConfigError, match='grows several sources'):
    _configs('', n=1)


def test_a_learned_router_needs_the_rows_prepare_computes():
  src, dst = _configs('router=hidden')
  with pytest.raises(ConfigError, match='needs router_rows'):
    recipes.build('merge', src, dst, src.upcycle.args.to_dict())


def _domain_sources(n_sources=2, layers=2):
  """Sources with identical attention, norms and embeddings whose MLPs
  differ; embedding dim 0 is +2 on tokens 0-4 (domain 0) and -2 on 5-10
  (domain 1), and no sublayer writes dim 0, so every layer's router input
  tells the domains apart and a router can send each to its own experts."""
  base = toy.params(toy.config(layers=layers), seed=0)
  base['embed']['embedding'][:, 0] = np.where(np.arange(11) < 5, 2.0, -2.0)
  out = []
  for s in range(n_sources):
    p = jax.tree_util.tree_map(np.copy, base)
    mlp = toy.params(toy.config(layers=layers), seed=10 + s)
    for i in range(layers):
      p[f'layers_{i}']['attn']['o'][..., 0] = 0.0
      p[f'layers_{i}']['mlp'] = mlp[f'layers_{i}']['mlp']
      p[f'layers_{i}']['mlp']['wo'][:, 0] = 0.0
      p[f'layers_{i}']['mlp_norm']['scale'] = np.abs(p[f'layers_{i}']['mlp_norm']['scale'])
    out.append(p)
  return out


def _batch(tokens_BL):
  b, l = tokens_BL.shape
  return dict(inputs=tokens_BL, segment_ids=np.ones((b, l), np.int32),
              positions=np.broadcast_to(np.arange(l, dtype=np.int32), (b, l)))


def _logits(config, params, tokens_BL):
  model = transformer.Transformer(model_config.from_config(config))
  return np.asarray(model.apply({'params': params}, tokens_BL)[0])


def _by_sign_rows(per_source, layers=2):
  """A hand-set router: dim 0 > 0 -> source 0's experts, < 0 -> source 1's."""
  w = np.zeros((8, 2 * per_source), np.float32)
  w[0] = np.repeat([10.0, -10.0], per_source)
  return {f'layers_{i}': w for i in range(layers)}


def _domains():
  rng = np.random.default_rng(0)
  return [rng.integers(0, 5, (3, 13)), rng.integers(5, 11, (3, 13))]


@pytest.mark.parametrize('per_source, top_k', [(1, 1), (2, 2), (3, 2)])
def test_a_router_by_domain_makes_the_merge_exact_per_source(per_source, top_k):
  params, domains = _domain_sources(), _domains()
  src, _ = _configs()
  _, dst, merged = _merge(f'per_source={per_source},top_k={top_k},router=domain', params,
                          _by_sign_rows(per_source))
  for i, (p, tokens) in enumerate(zip(params, domains)):
    assert merge_router.own_share(dst, merged, [_batch(tokens)], i, per_source) == 1.0
    np.testing.assert_allclose(_logits(dst, merged, tokens), _logits(src, p, tokens),
                               atol=1e-5, rtol=1e-5)
  # A random router mixes the sources' experts: no longer either source.
  _, dst, mixed = _merge(f'per_source={per_source},top_k={top_k}', params)
  assert not np.allclose(_logits(dst, mixed, domains[0]), _logits(src, params[0], domains[0]),
                         atol=1e-3)


def test_a_trained_domain_router_learns_to_route_by_source():
  params, domains = _domain_sources(), _domains()
  src, _ = _configs()
  inputs = [merge_router.router_inputs(src, p, [_batch(t)]) for p, t in zip(params, domains)]
  assert sorted(inputs[0]) == ['layers_0', 'layers_1'] and inputs[0]['layers_0'].shape == (39, 8)
  untrained = merge_router.domain_rows(inputs, 2, steps=0, lr=0.1)
  rows = merge_router.domain_rows(inputs, 2, steps=300, lr=0.1)
  _, dst, before = _merge('per_source=2,top_k=2,router=domain', params, untrained)
  _, dst, merged = _merge('per_source=2,top_k=2,router=domain', params, rows)
  shares = [merge_router.own_share(dst, merged, [_batch(t)], i, 2) for i, t in enumerate(domains)]
  assert shares == [1.0, 1.0]
  assert min(merge_router.own_share(dst, before, [_batch(t)], i, 2)
             for i, t in enumerate(domains)) < 0.9


def test_hidden_rows_are_unit_differences_of_mean_router_inputs():
  rng = np.random.default_rng(1)
  inputs = [{'layers_0': rng.normal(size=(7 + i, 8)).astype(np.float32) + i} for i in range(3)]
  rows = merge_router.hidden_rows(inputs, per_source=2)['layers_0']
  assert rows.shape == (8, 6)
  mu = np.stack([x['layers_0'].mean(0) for x in inputs])
  for i in range(3):
    want = mu[i] - np.delete(mu, i, axis=0).mean(0)
    np.testing.assert_allclose(rows[:, 2 * i], want / np.linalg.norm(want), rtol=1e-5)
    np.testing.assert_array_equal(rows[:, 2 * i], rows[:, 2 * i + 1])
