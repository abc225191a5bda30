"""Fine-grained upcycling (recipes/finegrained.py): dense -> E G experts of
width F / G, top-(k G), with and without a shared expert, computes the dense
function at step 0 wherever the recipe's docstring says it does."""
import jax
import numpy as np
import pytest

from configs.upcycle import finegrained as finegrained_config
from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config, router, transformer
from moe_jax.upcycle import mapping, recipes, rules, transition
from moe_jax.upcycle.recipes import finegrained
from tests.upcycle import toy


def _configs(arg):
  src = toy.config(layers=2, d_ff=16)
  src.model.init_std = 0.3   # weights far from 0, so a wrong shard shows in the logits
  src.upcycle = finegrained_config.get_config(arg)
  return src, transition.target_config(src)


def _grow(src_c, dst_c, seed=0):
  tokens = np.random.default_rng(seed).integers(0, 11, size=(2, 13)).astype(np.int32)
  src_model = transformer.Transformer(model_config.from_config(src_c))
  dst_model = transformer.Transformer(model_config.from_config(dst_c))
  src = src_model.init(jax.random.key(seed), tokens)['params']
  abstract = jax.eval_shape(lambda: dst_model.init(jax.random.key(0), tokens)['params'])
  recipe = recipes.build('finegrained', src_c, dst_c, src_c.upcycle.args)
  dst = mapping.transform(recipe, src, abstract, jax.random.key(seed + 1))
  want, _ = src_model.apply({'params': src}, tokens)
  got, _ = dst_model.apply({'params': dst}, tokens)
  return dst, float(np.max(np.abs(np.asarray(got) - np.asarray(want))))


# (E, k, G) x router: every exact case of the docstring's weight scaling.
@pytest.mark.parametrize('arg', [
    'experts=4,top_k=2,granularity=2',
    'experts=2,top_k=1,granularity=4,order=topk_then_softmax',
    'experts=3,top_k=2,granularity=4,score=sigmoid',
    'experts=4,top_k=1,granularity=2,renormalize=False,router_init=zero',
    'experts=2,top_k=2,granularity=4,renormalize=False,router_init=zero,score=sigmoid',
    'experts=4,top_k=2,granularity=2,shared',
    'experts=2,top_k=1,granularity=4,shared,shared_share=1.0,order=topk_then_softmax',
    'experts=2,top_k=1,granularity=2,shared,shared_gate,renormalize=False,router_init=zero',
])
def test_finegrained_is_the_dense_function(arg):
  src, dst = _configs(arg)
  params, gap = _grow(src, dst)
  a = src.upcycle.args
  assert params['layers_0']['moe']['experts']['wo'].shape == (
      a.experts * a.granularity, 16 // a.granularity, 8)
  assert ('shared' in params['layers_0']['moe']) == a.shared
  print(f'finegrained {arg}: max |dlogits| = {gap:.3g}')
  assert gap < 1e-5


def test_unnormalised_gates_with_a_random_router_are_not_exact():
  # The docstring's caveat: s = E G / k holds only at a uniform router.
  _, gap = _grow(*_configs('experts=4,top_k=1,granularity=2,renormalize=False,router_std=0.5'))
  assert gap > 1e-3


@pytest.mark.parametrize('std', [0.0, 1.0])
def test_top_k_selects_whole_virtual_groups(std):
  # Ties inside a group (and, at a zero router, across all groups) must never
  # split a group: lax.top_k breaks ties towards the lower index and groups
  # are contiguous experts.
  e, k, g = 5, 2, 4
  ctx = rules.Ctx('layers_0/moe/router/w', jax.random.key(3), jax.random.key(4))
  w = finegrained.group_router(e, g, std).init((), jax.ShapeDtypeStruct((8, e * g), np.float32),
                                               ctx)
  x = np.random.default_rng(0).normal(size=(64, 8)).astype(np.float32)
  for order in ('softmax_then_topk', 'topk_then_softmax'):
    idx, _, _ = router.select(x @ np.asarray(w), np.zeros(e * g, np.float32), k * g,
                              order=order)
    groups = np.sort(np.asarray(idx) // g, axis=-1).reshape(64, k, g)
    assert np.all(groups == groups[..., :1])


@pytest.mark.parametrize('arg,match', [
    ('granularity=3', r'granularity=3 does not divide model.d_ff=16'),
    ('experts=2,top_k=3', r'top_k=3 exceeds upcycle.args.experts=2'),
    ('shared,shared_share=0.0', r'shared_share=0.0 must be in \(0, 1\]'),
    ('router_init=uniform', r"router_init='uniform' is not one of"),
])
def test_bad_args_are_one_line(arg, match):
  with pytest.raises(ConfigError, match=match):
    src, dst = _configs(arg)
    recipes.build('finegrained', src, dst, src.upcycle.args)


def _expand(src_c, params, factor, args):
  src_model = transformer.Transformer(model_config.from_config(src_c))
  dst_c = src_c.copy_and_resolve_references()
  dst_c.moe.num_experts *= factor
  dst_model = transformer.Transformer(model_config.from_config(dst_c))
  tokens = np.random.default_rng(5).integers(0, 11, size=(2, 13)).astype(np.int32)
  abstract = jax.eval_shape(lambda: dst_model.init(jax.random.key(0), tokens)['params'])
  dst = mapping.transform(recipes.build('expand_experts', src_c, dst_c, args), params, abstract,
                          jax.random.key(7))
  want, _ = src_model.apply({'params': params}, tokens)
  got, _ = dst_model.apply({'params': dst}, tokens)
  return float(np.max(np.abs(np.asarray(got) - np.asarray(want))))


@pytest.mark.parametrize('granularity,layout,delta,exact', [
    (2, 'in_place', 0.01, True), (2, 'append', 0.01, True),
    (1, 'in_place', 0.0, False), (1, 'append', 0.01, False)])
def test_expand_experts_doubles_a_finegrained_moe_by_whole_groups(granularity, layout, delta,
                                                                   exact):
  # Seed 000's E -> 2E, top-(k G) fixed, on a fresh finegrained upcycle (every
  # group is the dense MLP): copying whole groups with one bias draw each keeps
  # every selection whole, so it is exact; copying shards lets top-(k G) take
  # part of a group (in_place puts shard 0's copy before shard 1) or the
  # per-shard bias noise split one.
  src, fine = _configs('experts=2,top_k=1,granularity=2')
  params, _ = _grow(src, fine)
  gap = _expand(fine, params, 2, dict(granularity=granularity, layout=layout, delta=delta))
  print(f'expand_experts x2 of finegrained 2-1 G=2, granularity={granularity}, {layout}, '
        f'delta={delta}: max |dlogits| vs the fine-grained MoE = {gap:.3g}')
  assert gap < 1e-5 if exact else gap > 1e-3


def test_expand_experts_allocates_by_group_utility():
  src, fine = _configs('experts=3,top_k=1,granularity=2')
  dst = fine.copy_and_resolve_references()
  dst.moe.num_experts *= 2
  scores = {f'layers_{i}': [5.0, 4.0, 0.1, 0.1, 0.2, 0.1] for i in range(2)}
  recipe = recipes.build('expand_experts', fine, dst, dict(allocation='utility', scores=scores,
                                                           granularity=2))
  # Groups score 9, 0.2, 0.3: D'Hondt gives group 0 three more copies, and its
  # two members get the same count.
  assert recipe.args['counts']['layers_0'] == [4, 4, 1, 1, 1, 1]
  with pytest.raises(ConfigError, match=r'granularity=4 must be a positive integer dividing '
                                        r'moe.num_experts=6'):
    recipes.build('expand_experts', fine, dst, dict(granularity=4))


def test_a_target_that_is_not_the_recipes_shape_is_refused():
  src, dst = _configs('experts=4,top_k=2,granularity=2')
  dst.moe.top_k = 2
  with pytest.raises(ConfigError, match=r'moe.top_k=2 but finegrained with experts=4, top_k=2, '
                                        r'granularity=2, shared=False makes 4'):
    recipes.build('finegrained', src, dst, src.upcycle.args)
