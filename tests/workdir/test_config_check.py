"""The checks before anything is written take each key's bounds from its
field in the schema: every bounded field of every group (schema.GROUPS, `opt`
and `upcycle` included) refuses a value past its bound in one line naming
the key."""
import dataclasses

import pytest

from configs import common
from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.schema import field
from moe_jax.workdir import config_check


def _outside(f):
  """A value of field `f` past its bounds (or not one of its choices)."""
  if f.metadata['choices'] is not None:
    return 'no such choice'
  op, bound = f.metadata['bounds'][0]
  step = 1 if f.type is int else 0.5
  return {'>=': bound - step, '>': bound}[op]


def _bounded(cls):
  return [f for f in dataclasses.fields(cls) if f.metadata.get('bounds') or
          f.metadata.get('choices') is not None]


def _refused(check, config, group, f):
  node = config[group] if group else config
  node[f.name] = _outside(f)
  with pytest.raises(ConfigError) as err:
    check(config)
  key = f'{group}.{f.name}' if group else f.name
  message = str(err.value)
  assert message.startswith(f'{key}=') and '\n' not in message, message


@pytest.mark.parametrize('group, f', [(group, f) for group, cls in schema.GROUPS.items()
                                      for f in _bounded(cls)],
                         ids=lambda x: getattr(x, 'name', x))
def test_check_run_refuses_a_value_past_its_dataclass_bound(group, f):
  _refused(config_check.check_run, common.base(), group, f)


def test_every_group_is_checked():
  """opt and upcycle too, which sit above workdir/: one table, one check."""
  groups = {group for group, cls in schema.GROUPS.items() if _bounded(cls)}
  assert {'', 'model', 'moe', 'opt', 'data', 'ckpt', 'upcycle'} <= groups


@pytest.mark.parametrize('group, key, value, message', [
    ('model', 'scan_layers', 1, 'model.scan_layers=1 must be true or false'),
    ('mesh', 'rules', None, 'mesh.rules=None must be a string'),
    ('model', 'rope_factor', float('inf'), 'model.rope_factor=inf must be a finite number'),
])
def test_an_unbounded_key_of_another_type_is_refused(group, key, value, message):
  config = common.base()
  with config.unlocked(), config.ignore_type():
    config[group][key] = value
  with pytest.raises(ConfigError, match=f'^{message}$'):
    config_check.check_run(config)


def test_a_bound_is_read_from_the_dataclass(monkeypatch):
  """Tightening a field's metadata is all it takes to refuse a value."""
  f = next(f for f in dataclasses.fields(schema.GROUPS['opt']) if f.name == 'warmup_steps')
  monkeypatch.setattr(f, 'metadata', dict(f.metadata, bounds=(('<=', 10),)))
  field.check('opt', dict(common.opt(), warmup_steps=10), schema.GROUPS['opt'])
  with pytest.raises(ConfigError, match=r'^opt.warmup_steps=11 must be an integer <= 10$'):
    field.check('opt', dict(common.opt(), warmup_steps=11), schema.GROUPS['opt'])


@pytest.mark.parametrize('value, message', [
    (float('nan'), 'opt.lr=nan must be a finite number'),
    (True, 'opt.lr=True must be > 0.0'),
    ('1e-3', "opt.lr='1e-3' must be > 0.0"),
])
def test_a_bounded_float_takes_finite_numbers_only(value, message):
  with pytest.raises(ConfigError, match=f'^{message}$'):
    field.check('opt', dict(common.opt(), lr=value), schema.GROUPS['opt'])


def test_upcycle_step_is_a_step_of_the_run():
  config = common.base()
  config.upcycle.step = config.total_steps
  with pytest.raises(ConfigError, match=r'^upcycle.step=300 must be below total_steps=300$'):
    config_check.check_run(config)
  config.upcycle.step = -1
  with pytest.raises(ConfigError, match=r'^upcycle.step=-1 must be a non-negative integer$'):
    config_check.check_run(config)
