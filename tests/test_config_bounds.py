"""Every bound a config field declares (moe_jax/schema/field.py), at the
bound itself and one step either side: at_least / at_most take the bound,
above / below refuse it, the step outside is refused and the step inside
taken. The fields are found, not listed: every group of schema.GROUPS and
every recipe's options (upcycle/recipes/)."""
import dataclasses
import math

import pytest

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.schema import field
from moe_jax.upcycle import recipes

_INCLUSIVE = {'>=': True, '<=': True, '>': False, '<': False}
_LOWER = {'>=': True, '>': True, '<=': False, '<': False}


def _bounded_fields():
  """(dataclass, field, op, bound) of every declared bound."""
  classes = [*schema.GROUPS.values(), *(recipes.get(n).options for n in recipes.names())]
  return [(cls, f, op, bound) for cls in classes for f in dataclasses.fields(cls)
          for op, bound in f.metadata.get('bounds', ())]


_FIELDS = _bounded_fields()


def _step(value, integer, lower, outside):
  """The value one step past `value`: below it for a lower bound's outside."""
  down = lower == outside
  if integer:
    return value - 1 if down else value + 1
  return math.nextafter(value, -math.inf if down else math.inf)


def _passes(cls, f, value):
  group = dict(field.defaults(cls), **{f.name: value})
  try:
    field.check('g', group, cls)
  except ConfigError as e:
    assert f'g.{f.name}={value!r}' in str(e)   # the message names the key and the value
    return False
  return True


def test_the_typed_groups_declare_bounds():
  names = {(cls.__name__, f.name) for cls, f, _, _ in _FIELDS}
  assert {('RunConfig', 'total_steps'), ('OptConfig', 'b1'), ('UpcycleConfig', 'factor'),
          ('DataConfig', 'worker_count'), ('MoEConfig', 'z_loss_weight'),
          ('ModelConfig', 'd_model'),
          ('Options', 'utility_batches')} <= names   # a recipe's options (expand_experts)


@pytest.mark.parametrize('cls, f, op, bound', _FIELDS,
                         ids=[f'{c.__module__.rsplit(".", 1)[-1]}.{c.__name__}.{f.name}{op}{b}'
                              for c, f, op, b in _FIELDS])
def test_each_bound_at_and_beside_itself(cls, f, op, bound):
  integer = f.type is int
  at = int(bound) if integer else float(bound)
  assert _passes(cls, f, at) is _INCLUSIVE[op]
  assert not _passes(cls, f, _step(at, integer, _LOWER[op], outside=True))
  assert _passes(cls, f, _step(at, integer, _LOWER[op], outside=False))
