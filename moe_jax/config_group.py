"""A config group as a frozen dataclass: each key's default and meaning in
one place, and its bounds as field metadata (`field(50, at_least=0)`).

configs/common.py builds every group from `defaults(cls)`, and `check`
refuses a value out of bounds before anything is written: for the groups
below workdir/ in workdir/config_check.py, for `opt` in the optimizer that
reads it (train/ sits above workdir/). Nothing here imports JAX, so a config
file loads fast.
"""
import dataclasses
import math
import operator

from moe_jax.errors import ConfigError

_OPS = {'>=': operator.ge, '>': operator.gt, '<=': operator.le, '<': operator.lt}


def field(default, *, at_least=None, above=None, at_most=None, below=None, choices=None):
  """A dataclass field whose value is bounded below (at_least, above), above
  (at_most, below), or one of `choices`."""
  bounds = tuple((op, bound) for op, bound in (('>=', at_least), ('>', above), ('<=', at_most),
                                               ('<', below)) if bound is not None)
  return dataclasses.field(default=default, metadata=dict(bounds=bounds, choices=choices))


def defaults(cls):
  """{key: default} of a group in field order, without nested groups (ModelConfig's
  `moe` is a group of its own)."""
  out = {}
  for f in dataclasses.fields(cls):
    value = f.default_factory() if f.default is dataclasses.MISSING else f.default
    if not dataclasses.is_dataclass(value):
      out[f.name] = value
  return out


def _describe(bounds, integer):
  if integer and bounds in ((('>=', 0),), (('>=', 1),)):
    return 'a positive integer' if bounds[0][1] else 'a non-negative integer'
  if len(bounds) == 2:
    (low_op, low), (high_op, high) = bounds
    return f'in {"[("[low_op == ">"]}{low!r}, {high!r}{"])"[high_op == "<"]}'
  return ('an integer ' if integer else '') + ' and '.join(f'{op} {b!r}' for op, b in bounds)


def check(name, group, cls):
  """Raises a one-line ConfigError naming the key for a value of `group` (a
  ConfigDict or dict; `name` its prefix, '' for the top level) outside its
  field's bounds or choices. An int field takes integers only; a bounded float
  field finite numbers only (nan passes every comparison)."""
  for f in dataclasses.fields(cls):
    bounds, choices = f.metadata.get('bounds', ()), f.metadata.get('choices')
    if not bounds and choices is None:
      continue
    key, value = f'{name}.{f.name}' if name else f.name, group[f.name]
    if choices is not None:
      if value not in choices:
        raise ConfigError(f'{key}={value!r} is not one of {choices}')
      continue
    integer = f.type is int
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
      raise ConfigError(f'{key}={value!r} must be {_describe(bounds, integer)}')
    if not math.isfinite(value):
      raise ConfigError(f'{key}={value!r} must be a finite number')
    if not all(_OPS[op](value, bound) for op, bound in bounds):
      raise ConfigError(f'{key}={value!r} must be {_describe(bounds, integer)}')
