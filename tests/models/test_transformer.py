"""The decoder: parameter paths, pre- and post-norm blocks, dense -> MoE invariance,
packed-document masking."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.models import attention, layers, mlp
from moe_jax.models import config as model_config
from moe_jax.models import transformer
from tests.models import fixtures


def _apply(cfg, params, tokens_BL, **kw):
  return jax.jit(lambda p, t: transformer.Transformer(cfg).apply({'params': p}, t, **kw))(
      params, tokens_BL)


def _paths(tree, prefix=''):
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      out.update(_paths(value, f'{prefix}{key}/'))
    else:
      out[prefix + key] = value.shape
  return out


def test_param_paths_and_shapes_match_internals():
  cfg = fixtures.tiny_model_config(num_experts=4, every=2, use_bias=True, num_shared_experts=1,
                                   d_ff=40)
  params = jax.eval_shape(transformer.Transformer(cfg).init, jax.random.key(0),
                          fixtures.tokens(1, 5))['params']
  d, h, g, k, f, e, v = 32, 4, 2, 8, 48, 4, 61
  want = {'embed/embedding': (v, d), 'final_norm/scale': (d,), 'lm_head': (d, v)}
  for i in (0, 1):
    want.update({f'layers_{i}/attn_norm/scale': (d,), f'layers_{i}/mlp_norm/scale': (d,),
                 f'layers_{i}/attn/q': (d, h, k), f'layers_{i}/attn/k': (d, g, k),
                 f'layers_{i}/attn/v': (d, g, k), f'layers_{i}/attn/o': (h, k, d)})
  want.update({'layers_0/mlp/wi_0': (d, f), 'layers_0/mlp/wi_1': (d, f),
               'layers_0/mlp/wo': (f, d),
               'layers_1/moe/router/w': (d, e), 'layers_1/moe/router/bias': (e,),
               'layers_1/moe/experts/wi_0': (e, d, 40), 'layers_1/moe/experts/wi_1': (e, d, 40),
               'layers_1/moe/experts/wo': (e, 40, d),
               'layers_1/moe/shared/wi_0': (d, 40), 'layers_1/moe/shared/wi_1': (d, 40),
               'layers_1/moe/shared/wo': (40, d)})
  assert _paths(params) == want
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))


def test_tied_embeddings_and_hash_router_have_no_extra_params():
  cfg = fixtures.tiny_model_config(num_experts=4, router='hash')
  cfg = cfg.__class__(**{**cfg.__dict__, 'tie_embeddings': True})
  paths = _paths(jax.eval_shape(transformer.Transformer(cfg).init, jax.random.key(0),
                                fixtures.tokens(1, 5))['params'])
  assert 'lm_head' not in paths
  assert not any('router' in p for p in paths)
  assert 'layers_0/moe/experts/wo' in paths


def _by_hand(cfg, params, tokens_BL):
  """The decoder written out with the sublayers' own modules: pre-norm
  x + F(norm(x)) or post-norm norm(x + F(x)) (seed 003 App. C eqs. 5 and 6)."""
  norm = lambda p, x: layers.RMSNorm(cfg.norm_eps).apply({'params': p}, x)
  x = params['embed']['embedding'][tokens_BL]
  seg = jnp.ones(tokens_BL.shape, jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(tokens_BL.shape[1]), tokens_BL.shape)
  for i in range(cfg.num_layers):
    p = params[f'layers_{i}']
    attn = lambda h: attention.Attention(cfg).apply({'params': p['attn']}, h, seg, pos)
    ffn = lambda h: mlp.MLP(cfg.d_ff, cfg.init_std).apply({'params': p['mlp']}, h)
    for fn, name in ((attn, 'attn_norm'), (ffn, 'mlp_norm')):
      if cfg.norm_position == 'pre':
        x = x + fn(norm(p[name], x))
      else:
        x = norm(p[name], x + fn(x))
  return norm(params['final_norm'], x) @ params['lm_head']


@pytest.mark.parametrize('position', ['pre', 'post'])
def test_norm_position_computes_its_equation(position):
  cfg = fixtures.tiny_model_config(num_experts=0)
  cfg = dataclasses.replace(cfg, norm_position=position)
  tokens = fixtures.tokens(2, 7)
  # Norm scales other than ones, one per norm: a norm in the wrong place shows.
  rng = np.random.default_rng(1)
  params = jax.tree_util.tree_map_with_path(
      lambda path, w: w + 0.5 * rng.normal(size=w.shape).astype(np.float32)
      if 'scale' in jax.tree_util.keystr(path) else w, fixtures.random_params(cfg))
  got, _ = _apply(cfg, params, tokens)
  np.testing.assert_allclose(got, _by_hand(cfg, params, tokens), atol=2e-5, rtol=2e-5)
  other = dataclasses.replace(cfg, norm_position={'pre': 'post', 'post': 'pre'}[position])
  assert jax.tree.structure(params) == jax.tree.structure(fixtures.random_params(other))
  assert np.abs(got - _apply(other, params, tokens)[0]).max() > 1e-2


def _moe_from_dense(dense_params, moe_params):
  """Every expert a copy of the dense MLP; router from the MoE init."""
  out = dict(dense_params)
  for name, layer in dense_params.items():
    if name.startswith('layers_'):
      num_experts = moe_params[name]['moe']['experts']['wo'].shape[0]
      experts = {w: jnp.tile(layer['mlp'][w][None], (num_experts, 1, 1)) for w in layer['mlp']}
      moe = dict(moe_params[name]['moe'], experts=experts)
      out[name] = {**{k: v for k, v in layer.items() if k != 'mlp'}, 'moe': moe}
  return out


@pytest.mark.parametrize('moe', [
    dict(dispatch='ragged'),
    dict(dispatch='einsum', capacity_factor=2.0),   # C = ceil(2 T k / E) = T: no drops
    dict(dispatch='reference', score='sigmoid', use_bias=True),
    dict(dispatch='ragged', order='topk_then_softmax'),
    dict(dispatch='ragged', router='hash', top_k=3),
])
def test_dense_to_moe_is_function_preserving(moe):
  tokens_BL = fixtures.tokens(2, 13)
  dense_cfg = fixtures.tiny_model_config()
  moe_cfg = fixtures.tiny_model_config(num_experts=4, **{'top_k': 2, **moe})
  dense_params = fixtures.random_params(dense_cfg)
  params = _moe_from_dense(dense_params, fixtures.random_params(moe_cfg, seed=1))
  want, _ = _apply(dense_cfg, dense_params, tokens_BL)
  got, aux = _apply(moe_cfg, params, tokens_BL)
  assert float(jnp.max(jnp.abs(got - want))) < 1e-5
  assert set(aux['moe']) == {'layers_0', 'layers_1'}


def _packed():
  # Row 0: document A (6 tokens), document B (5), 2 padding. Positions restart.
  seg = np.array([[1] * 6 + [2] * 5 + [0] * 2])
  pos = np.array([list(range(6)) + list(range(5)) + [0, 0]])
  return jnp.asarray(seg), jnp.asarray(pos)


def test_packed_documents_do_not_see_each_other():
  cfg = fixtures.tiny_model_config(num_experts=4, every=2)
  model = transformer.Transformer(cfg)
  tokens_BL = fixtures.tokens(1, 13)
  params = fixtures.random_params(cfg)
  seg, pos = _packed()
  apply = jax.jit(lambda t: model.apply({'params': params}, t, segment_ids=seg, positions=pos)[0])
  base = apply(tokens_BL)
  other_b = apply(tokens_BL.at[0, 6:11].set((tokens_BL[0, 6:11] + 7) % 61))
  np.testing.assert_array_equal(base[0, :6], other_b[0, :6])
  assert float(jnp.max(jnp.abs(base[0, 6:11] - other_b[0, 6:11]))) > 1e-3
  other_a = apply(tokens_BL.at[0, :6].set((tokens_BL[0, :6] + 3) % 61))
  np.testing.assert_array_equal(base[0, 6:11], other_a[0, 6:11])
  # Document B packed after A equals B alone at the start of a row (RoPE uses positions).
  alone, _ = _apply(cfg, params, tokens_BL[:, 6:11])
  np.testing.assert_allclose(base[0, 6:11], alone[0], atol=1e-5)


def test_padding_is_excluded_from_router_statistics():
  cfg = fixtures.tiny_model_config(num_experts=4, every=2, top_k=2)
  tokens_BL = fixtures.tokens(1, 13)
  params = fixtures.random_params(cfg)
  seg, pos = _packed()
  _, aux = _apply(cfg, params, tokens_BL, segment_ids=seg, positions=pos)
  stats = aux['moe']['layers_1']
  np.testing.assert_allclose(jnp.sum(stats['counts']), 11 * 2)
  np.testing.assert_allclose(jnp.sum(stats['load']), 1.0, rtol=1e-6)
  want = (cfg.moe.balance_loss_weight * stats['balance_loss']
          + cfg.moe.z_loss_weight * stats['z_loss'])
  np.testing.assert_allclose(aux['aux_loss'], want, rtol=1e-6)
  assert float(stats['dropped_frac']) == 0.0


def test_router_loss_mean_is_the_sum_over_moe_layers_divided_by_their_number():
  # 5 layers, every 2nd MoE: 2 MoE layers of 5, so the divisor is not num_layers.
  cfg = fixtures.tiny_model_config(num_experts=4, every=2, top_k=2)
  cfg = dataclasses.replace(cfg, num_layers=5)
  tokens_BL = fixtures.tokens(2, 9)
  params = fixtures.random_params(cfg)
  _, aux_sum = _apply(cfg, params, tokens_BL)
  mean_cfg = dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe,
                                                              router_loss_reduction='mean'))
  _, aux_mean = _apply(mean_cfg, params, tokens_BL)
  assert len(aux_sum['moe']) == 2
  want = sum(cfg.moe.balance_loss_weight * s['balance_loss'] + cfg.moe.z_loss_weight * s['z_loss']
             for s in aux_sum['moe'].values())
  np.testing.assert_allclose(aux_sum['aux_loss'], want, rtol=1e-6)
  np.testing.assert_allclose(aux_mean['aux_loss'], want / 2, rtol=1e-6)


def test_router_weight_learns_and_bias_gets_no_gradient():
  cfg = fixtures.tiny_model_config(num_experts=4, use_bias=True)
  tokens_BL = fixtures.tokens(2, 7)
  params = fixtures.random_params(cfg)
  model = transformer.Transformer(cfg)

  def loss(p):
    logits, aux = model.apply({'params': p}, tokens_BL)
    return jnp.mean(jax.nn.logsumexp(logits, -1)) + aux['aux_loss']
  grads = jax.jit(jax.grad(loss))(params)['layers_0']['moe']['router']
  assert float(jnp.max(jnp.abs(grads['w']))) > 0
  assert not np.any(grads['bias'])


def test_jitter_only_while_training():
  cfg = fixtures.tiny_model_config(num_experts=4, jitter=0.5)
  tokens_BL = fixtures.tokens(2, 7)
  params = fixtures.random_params(cfg)
  run = lambda train, key: _apply(cfg, params, tokens_BL, train=train,
                                  rngs={'jitter': jax.random.key(key)})[1]
  ent = lambda aux: float(aux['moe']['layers_0']['entropy'])
  assert ent(run(False, 0)) == ent(run(False, 1))
  assert ent(run(True, 0)) != ent(run(False, 0))


def test_bfloat16_compute_matches_float32():
  """The bf16 model computes the float32 model's function to bf16 precision
  (eps 2**-8; two layers, the worst logit observed ~1.4 % of the largest) and
  returns float32 logits; a nonzero difference shows bf16 really ran."""
  config = fixtures.tiny_config(num_experts=4)
  cfg32 = model_config.from_config(config)
  config.model.dtype = 'bfloat16'
  cfg16 = model_config.from_config(config)
  tokens_BL = fixtures.tokens(2, 7)
  params = fixtures.random_params(cfg32, std=0.3)
  want, _ = _apply(cfg32, params, tokens_BL)
  got, _ = _apply(cfg16, params, tokens_BL)
  assert got.dtype == jnp.float32
  want, got = np.asarray(want), np.asarray(got)
  scale = np.abs(want).max()
  assert scale > 1   # logits large enough for a relative bound to mean something
  np.testing.assert_allclose(got, want, rtol=0, atol=8 * 2.0**-8 * scale)
  assert np.abs(got - want).max() > 2.0**-12 * scale
