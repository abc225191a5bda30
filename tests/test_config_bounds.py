"""Every bound a typed config field declares (config_group.field), at the
bound itself and one step either side: at_least / at_most take the bound,
above / below refuse it, the step outside is refused and the step inside
taken. The fields are found, not listed: every dataclass of a module that
declares fields with config_group.field (the recipes' options too)."""
import dataclasses
import importlib
import math
import os

import pytest

from moe_jax import config_group
from moe_jax.errors import ConfigError

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INCLUSIVE = {'>=': True, '<=': True, '>': False, '<': False}
_LOWER = {'>=': True, '>': True, '<=': False, '<': False}


def _bounded_fields():
  """(dataclass, field, op, bound) of every declared bound."""
  out = []
  for base, _, names in os.walk(os.path.join(_ROOT, 'moe_jax')):
    for name in sorted(names):
      path = os.path.join(base, name)
      with open(path) as f:
        if not name.endswith('.py') or 'config_group import field' not in f.read():
          continue
      module = importlib.import_module(os.path.relpath(path, _ROOT)[:-len('.py')].replace(
          os.sep, '.').removesuffix('.__init__'))
      for cls in vars(module).values():
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__:
          for f in dataclasses.fields(cls):
            out += [(cls, f, op, bound) for op, bound in f.metadata.get('bounds', ())]
  return out


_FIELDS = _bounded_fields()


def _step(value, integer, lower, outside):
  """The value one step past `value`: below it for a lower bound's outside."""
  down = lower == outside
  if integer:
    return value - 1 if down else value + 1
  return math.nextafter(value, -math.inf if down else math.inf)


def _passes(cls, f, value):
  group = dict(config_group.defaults(cls), **{f.name: value})
  try:
    config_group.check('g', group, cls)
  except ConfigError as e:
    assert f'g.{f.name}={value!r}' in str(e)   # the message names the key and the value
    return False
  return True


def test_the_typed_groups_declare_bounds():
  names = {(cls.__name__, f.name) for cls, f, _, _ in _FIELDS}
  assert {('RunConfig', 'total_steps'), ('OptConfig', 'b1'), ('UpcycleConfig', 'factor'),
          ('DataConfig', 'worker_count'), ('MoEConfig', 'z_loss_weight'),
          ('Options', 'utility_batches')} <= names   # a recipe's options (expand_experts)


@pytest.mark.parametrize('cls, f, op, bound', _FIELDS,
                         ids=[f'{c.__name__}.{f.name}{op}{b}' for c, f, op, b in _FIELDS])
def test_each_bound_at_and_beside_itself(cls, f, op, bound):
  integer = f.type is int
  at = int(bound) if integer else float(bound)
  assert _passes(cls, f, at) is _INCLUSIVE[op]
  assert not _passes(cls, f, _step(at, integer, _LOWER[op], outside=True))
  assert _passes(cls, f, _step(at, integer, _LOWER[op], outside=False))
