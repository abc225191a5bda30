"""The `shape` flag of a model field (moe_jax/schema/) says whether another
value gives other parameter shapes, which a workdir then refuses
(files.check_compatible). Each model and moe key that could (an int, a bool,
or `moe.router`, a name of a router with its own params) is changed once on
a tiny MoE model and its params' shapes compared by jax.eval_shape: a
flagged key changes them, an unflagged one leaves them; so a new key that
changes shapes without the flag fails here. `model.norm_position` is
flagged for what the same params compute, not their shapes."""
import jax
import jax.numpy as jnp
import pytest

from moe_jax import schema
from moe_jax.models import config as model_config, transformer
from tests.models import fixtures

_BASE = dict(num_experts=4, num_shared_experts=1)   # so shared_gate and the shared width count
# A changed value the tiny model can build, where +1 or `not` cannot.
_OTHER = {'model.head_dim': 10, 'model.num_heads': 6, 'model.num_kv_heads': 1,
          'model.rope_original_max_len': 4096, 'model.loss_chunk': 8, 'moe.top_k': 1,
          'moe.every': 2, 'moe.first_dense': 1, 'moe.router': 'hash'}
_FUNCTION_ONLY = {'model.norm_position'}


def _keys():
  out = []
  for key, f in schema.fields():
    group = key.split('.')[0]
    if group in ('model', 'moe') and (f.type in (int, bool) or key in _OTHER):
      out.append(key)
  return out


def _shapes(**changes):
  config = fixtures.tiny_config(**_BASE)
  config.model.num_layers = 4
  for key, value in changes.items():
    group, name = key.split('.')
    config[group][name] = value
  cfg = model_config.from_config(config)
  params = jax.eval_shape(transformer.Transformer(cfg).init, jax.random.key(0),
                          jnp.zeros((1, 8), jnp.int32))
  return jax.tree_util.tree_map(lambda x: x.shape, params)


def _other(key, value):
  if key in _OTHER:
    return _OTHER[key]
  return (not value) if isinstance(value, bool) else value + 1


@pytest.fixture(scope='module')
def base_shapes():
  return _shapes()


@pytest.mark.parametrize('key', _keys())
def test_a_key_is_flagged_iff_it_changes_the_params_shapes(base_shapes, key):
  group, name = key.split('.')
  value = fixtures.tiny_config(**_BASE)[group][name]
  changed = _shapes(**{key: _other(key, value)}) != base_shapes
  assert changed == (key in schema.SHAPE_KEYS), (
      f'{key}: another value {"changes" if changed else "keeps"} the params\' shapes, but its '
      f'field says shape={key in schema.SHAPE_KEYS} (moe_jax/schema/model.py)')


def test_every_flagged_model_key_is_tried_or_changes_the_function():
  flagged = {k for k in schema.SHAPE_KEYS if k.split('.')[0] in ('model', 'moe')}
  assert flagged - set(_keys()) == _FUNCTION_ONLY
