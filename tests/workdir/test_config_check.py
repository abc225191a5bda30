"""The checks before anything is written take each key's bounds from its
group's dataclass: every bounded field refuses a value past its bound in one
line naming the key, and the optimizer does the same for `opt`."""
import dataclasses

import pytest

from configs import common
from moe_jax import config_group
from moe_jax.errors import ConfigError
from moe_jax.train import config as train_config, optimizer
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


@pytest.mark.parametrize('group, f', [(group, f) for group, cls in config_check.GROUPS
                                      for f in _bounded(cls)],
                         ids=lambda x: getattr(x, 'name', x))
def test_check_run_refuses_a_value_past_its_dataclass_bound(group, f):
  _refused(config_check.check_run, common.base(), group, f)


@pytest.mark.parametrize('f', _bounded(train_config.OptConfig), ids=lambda f: f.name)
def test_the_optimizer_refuses_an_opt_value_past_its_bound(f):
  _refused(lambda c: optimizer.schedule(c.opt, c.total_steps), common.base(), 'opt', f)


def test_a_bound_is_read_from_the_dataclass(monkeypatch):
  """Tightening a field's metadata is all it takes to refuse a value."""
  f = next(f for f in dataclasses.fields(train_config.OptConfig) if f.name == 'warmup_steps')
  monkeypatch.setattr(f, 'metadata', dict(f.metadata, bounds=(('<=', 10),)))
  config_group.check('opt', dict(common.opt(), warmup_steps=10), train_config.OptConfig)
  with pytest.raises(ConfigError, match=r'^opt.warmup_steps=11 must be an integer <= 10$'):
    config_group.check('opt', dict(common.opt(), warmup_steps=11), train_config.OptConfig)


@pytest.mark.parametrize('value, message', [
    (float('nan'), 'opt.lr=nan must be a finite number'),
    (True, 'opt.lr=True must be > 0.0'),
    ('1e-3', "opt.lr='1e-3' must be > 0.0"),
])
def test_a_bounded_float_takes_finite_numbers_only(value, message):
  with pytest.raises(ConfigError, match=f'^{message}$'):
    config_group.check('opt', dict(common.opt(), lr=value), train_config.OptConfig)


def test_upcycle_step_is_a_step_of_the_run():
  config = common.base()
  config.upcycle.step = config.total_steps
  with pytest.raises(ConfigError, match=r'^upcycle.step=300 must be below total_steps=300$'):
    config_check.check_run(config)
  config.upcycle.step = -1
  with pytest.raises(ConfigError, match=r'^upcycle.step=-1 must be a non-negative integer$'):
    config_check.check_run(config)
