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


# A field's type -> the JSON values it takes (an int for a float: JSON writes 2.0 as 2
# in other tools), and how to say it.
_TYPES = {bool: ((bool,), 'true or false'), int: ((int,), 'an integer'),
          float: ((int, float), 'a number'), str: ((str,), 'a string')}


def check_types(name, group, cls, where):
  """Raises a one-line ConfigError naming `where` and the key for a field of
  `cls` that `group` (a dict read from `where`; `name` its prefix, '' for the
  top level) lacks or holds a value of another type: a string, null or a
  bool for a number, and a float for an int key (64.0 too: a count is written
  as one, and rounding would hide a hand edit's mistake)."""
  for f in dataclasses.fields(cls):
    key = f'{name}.{f.name}' if name else f.name
    if f.name not in group:
      if f.default is dataclasses.MISSING or not dataclasses.is_dataclass(f.default):
        raise ConfigError(f'{where}: no key {key!r} (its default: '
                          f'{defaults(cls).get(f.name)!r})')
      continue
    if f.type not in _TYPES:
      continue
    value, (types, kind) = group[f.name], _TYPES[f.type]
    if not isinstance(value, types) or (isinstance(value, bool) and f.type is not bool):
      raise ConfigError(f'{where}: {key}={value!r} must be {kind}, not '
                        f'{"null" if value is None else type(value).__name__}')


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
