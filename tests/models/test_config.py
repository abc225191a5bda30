"""models/config.from_config: resolution of defaults, layer patterns, one-line errors."""
import dataclasses
import math

import pytest

from configs import common

from moe_jax.errors import ConfigError
from moe_jax.models import config as model_config
from moe_jax.schema import model as model_schema
from tests.models import fixtures


def _build(model=None, **moe):
  config = fixtures.tiny_config(**moe)
  config.model.update(model or {})
  return model_config.from_config(config)


def test_defaults_are_resolved():
  cfg = _build(num_experts=4)
  assert cfg.moe.d_ff == cfg.d_ff == 48
  assert math.isclose(cfg.moe.router_init_std, math.sqrt(2 / (5 * 32)))
  assert _build(num_experts=4, d_ff=20, router_init_std=0.5).moe.d_ff == 20


def test_vocab_size_from_tokenizer():
  config = fixtures.tiny_config(vocab_size=0)
  assert model_config.from_config(config, vocab_size=300).vocab_size == 300
  with pytest.raises(ConfigError, match='model.vocab_size=0'):
    model_config.from_config(config)


@pytest.mark.parametrize('moe,layers,want', [
    (dict(num_experts=0), 4, ()),
    (dict(num_experts=4), 4, (0, 1, 2, 3)),
    (dict(num_experts=4, every=2), 6, (1, 3, 5)),          # seed 000 Table 6(a)
    (dict(num_experts=4, first_dense=2), 4, (2, 3)),       # seed 000 Table 7(a)
    (dict(num_experts=4, every=3, first_dense=1), 8, (3, 6)),
])
def test_layer_pattern(moe, layers, want):
  assert _build(dict(num_layers=layers), **moe).moe_layers == want


@pytest.mark.parametrize('model,moe,key', [
    (dict(num_kv_heads=3), {}, 'model.num_heads=4 is not divisible by model.num_kv_heads=3'),
    (dict(head_dim=7), {}, 'model.head_dim=7'),
    (dict(d_model=0), {}, 'model.d_model=0'),
    (dict(dtype='float64'), {}, 'model.dtype'),
    (dict(norm_position='sandwich'), {}, "model.norm_position='sandwich'"),
    ({}, dict(num_experts=4, top_k=5), 'moe.top_k=5'),
    ({}, dict(num_experts=4, top_k=0), 'moe.top_k=0'),
    ({}, dict(num_experts=-1), 'moe.num_experts=-1'),
    ({}, dict(num_experts=4, router='switch'), "moe.router='switch'"),
    ({}, dict(num_experts=4, score='relu'), "moe.score='relu'"),
    ({}, dict(num_experts=4, order='random'), "moe.order='random'"),
    ({}, dict(num_experts=4, dispatch='sorted'), "moe.dispatch='sorted'"),
    ({}, dict(num_experts=4, dispatch='pallas_mosaic_gpu'), 'got float32'),
    ({}, dict(num_experts=4, balance_scope='batch'), "moe.balance_scope='batch'"),
    ({}, dict(num_experts=4, router_loss_reduction='avg'), "moe.router_loss_reduction='avg'"),
    ({}, dict(num_experts=4, order='topk_then_softmax', score='sigmoid'), 'moe.order'),
    ({}, dict(num_experts=4, router='hash', use_bias=True), 'moe.use_bias'),
    ({}, dict(num_experts=4, first_dense=2), 'moe.first_dense=2'),
    ({}, dict(num_experts=4, every=0), 'moe.every=0'),
    ({}, dict(num_experts=4, jitter=1.5), 'moe.jitter=1.5'),
    ({}, dict(num_experts=4, capacity_factor=0.0), 'moe.capacity_factor=0.0'),
    ({}, dict(num_experts=4, num_shared_experts=-1), 'moe.num_shared_experts=-1'),
])
def test_validation_errors_name_the_key(model, moe, key):
  with pytest.raises(ConfigError) as err:
    _build(model, **moe)
  assert key in str(err.value) and '\n' not in str(err.value)


def test_unknown_key_is_rejected():
  config = fixtures.tiny_config()
  with config.unlocked():
    config.moe.capcity_factor = 2.0
  with pytest.raises(ConfigError, match='moe.capcity_factor is not a known key'):
    model_config.from_config(config)


def test_dataclasses_mirror_common_groups():
  # Every key of configs/common.py reaches the model, and no field is unreachable.
  fields = lambda cls: {f.name for f in dataclasses.fields(cls)}
  assert fields(model_schema.ModelConfig) - {'moe'} == set(common.model().keys())
  assert fields(model_schema.MoEConfig) == set(common.moe().keys())
  assert hash(_build(num_experts=2))   # frozen: usable as a Linen module attribute


def test_norm_position_is_part_of_a_workdirs_model(tmp_path):
  """The same params compute another function post-norm: resuming a workdir
  under the other position is refused; a config.json from before the key
  existed reads as pre-norm."""
  from moe_jax.workdir import files  # pylint: disable=g-import-not-at-top
  config = fixtures.tiny_config()
  files.write_config(str(tmp_path), config)
  post = fixtures.tiny_config()
  post.model.norm_position = 'post'
  with pytest.raises(ConfigError, match="model.norm_position: workdir 'pre' vs requested 'post'"):
    files.check_compatible(post, str(tmp_path))
  saved = files.read_json(str(tmp_path / files.CONFIG))
  del saved['model']['norm_position']
  files.write_json(str(tmp_path / files.CONFIG), saved)
  files.check_compatible(config, str(tmp_path))
