"""The router registry: a toy router registered in this one file runs in the
MoE block, is validated by the config, counted by accounting and read by
routing analysis, with no other file touched (docs/architecture.md)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.eval import routing
from moe_jax.models import accounting, config as model_config, routers, transformer
from tests.models import fixtures


class _Gates(nn.Module):
  top_k: int

  @nn.compact
  def __call__(self):
    return self.param('g', nn.initializers.normal(1.0), (self.top_k,), jnp.float32)


class _Toy:
  """Every token to experts 0..k-1 with learned gates: softmax of a [k] param."""

  @staticmethod
  def route(cfg, x_BLD, tokens_BL):
    m = cfg.moe
    g_k = _Gates(m.top_k, name='router')()
    idx_BLk = jnp.broadcast_to(jnp.arange(m.top_k), tokens_BL.shape + (m.top_k,))
    gates_BLk = jnp.broadcast_to(jax.nn.softmax(g_k), idx_BLk.shape)
    probs_BLE = jnp.sum(jax.nn.one_hot(idx_BLk, m.num_experts) * gates_BLk[..., None], axis=-2)
    del x_BLD
    return routers.Routing(idx_BLk, gates_BLk, probs_BLE, None)

  @staticmethod
  def num_params(d_model, moe):
    del d_model
    return moe.top_k

  @staticmethod
  def check(moe):
    if moe.use_bias:
      raise ConfigError("moe.use_bias needs a router with scores, not 'toy'")


@pytest.fixture
def toy(monkeypatch):
  monkeypatch.setattr(routers.REGISTRY, 'entries', dict(routers.REGISTRY.entries))
  routers.register('toy')(_Toy)
  yield


def test_builtin_routers_are_registered():
  assert set(routers.names()) >= {'learned', 'hash'}
  with pytest.raises(ConfigError, match=r"moe.router='nope' is not one of"):
    fixtures.tiny_model_config(num_experts=4, router='nope')


@pytest.mark.usefixtures('toy')
def test_a_toy_router_registered_in_one_file_runs_everywhere():
  cfg = fixtures.tiny_model_config(num_experts=4, top_k=2, router='toy')
  model = transformer.Transformer(cfg)
  tokens_BL = fixtures.tokens(2, 5)
  params = model.init(jax.random.key(0), tokens_BL)['params']
  assert set(params['layers_0']['moe']['router']) == {'g'}   # its params under moe/router
  logits, aux = model.apply({'params': params}, tokens_BL)
  assert logits.shape == (2, 5, cfg.vocab_size) and np.all(np.isfinite(logits))
  # Only experts 0 and 1 get tokens; the z-loss is 0 without logits.
  np.testing.assert_array_equal(np.asarray(aux['moe']['layers_0']['counts']), [10, 10, 0, 0])
  assert float(aux['moe']['layers_0']['z_loss']) == 0.0

  batch = dict(inputs=tokens_BL, segment_ids=jnp.ones((2, 5), jnp.int32),
               positions=jnp.broadcast_to(jnp.arange(5), (2, 5)))
  idx = routing.experts_of(model, params, batch)
  assert sorted(idx) == [f'layers_{i}' for i in cfg.moe_layers]
  np.testing.assert_array_equal(np.asarray(idx['layers_0'])[..., 0], 0)

  learned = fixtures.tiny_model_config(num_experts=4, top_k=2)
  per_layer = accounting.counts(learned).router - accounting.counts(cfg).router
  assert accounting.counts(cfg).router == 2 and per_layer == cfg.d_model * 4 - 2

  with pytest.raises(ConfigError, match="not 'toy'"):
    fixtures.tiny_model_config(num_experts=4, router='toy', use_bias=True)


def test_hash_router_checks_its_options():
  with pytest.raises(ConfigError, match='moe.hash_seed=-1'):
    fixtures.tiny_model_config(num_experts=4, router='hash', hash_seed=-1)
  with pytest.raises(ConfigError, match='moe.use_bias needs'):
    model_config.from_config(fixtures.tiny_config(
        num_experts=4, router='hash', use_bias=True))
