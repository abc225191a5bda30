"""A config key's whole contract as one dataclass field:
`field(50, at_least=0, added=1, shape=True)`.

  default       what a new config has (configs/common.py builds every group from it)
  at_least, above, at_most, below, choices
                its bounds, refused by `check` before anything is written
  added         the value runs written before the key existed ran with; a
                config.json without the key reads with it (schema.upgrade).
                Absent for a key every run has had (those of 7520b85, the
                trainer's first run)
  shape         a different value gives other parameter shapes (or, as
                norm_position, another function of the same params): a workdir
                is refused for it (workdir/files.check_compatible)
  stream        a different value gives another data stream, whatever the
                source: a resumed run must keep it (data/sources/ adds each
                source's own keys)
  numerics      how the same function of the same params is computed (a
                numerics or memory choice of a run, not its architecture):
                a merge of runs that differ in it takes --src 0's

Nothing here imports JAX, so a config file loads fast.
"""
import copy
import dataclasses
import math
import operator

from moe_jax.errors import ConfigError

_OPS = {'>=': operator.ge, '>': operator.gt, '<=': operator.le, '<': operator.lt}
_NONE = object()   # `added` not given: every run has had the key


def field(default, *, at_least=None, above=None, at_most=None, below=None, choices=None,
          added=_NONE, shape=False, stream=False, numerics=False):
  """A dataclass field with its key's contract as metadata (the module's
  docstring). A dict or list default is copied for each instance."""
  bounds = tuple((op, bound) for op, bound in (('>=', at_least), ('>', above), ('<=', at_most),
                                               ('<', below)) if bound is not None)
  metadata = dict(bounds=bounds, choices=choices, shape=shape, stream=stream,
                  numerics=numerics)
  if added is not _NONE:
    metadata['added'] = added
  if isinstance(default, (dict, list)):
    return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def default(f):
  return f.default_factory() if f.default is dataclasses.MISSING else f.default


def defaults(cls):
  """{key: default} of a group in field order, without nested groups (ModelConfig's
  `moe` is a group of its own)."""
  out = {}
  for f in dataclasses.fields(cls):
    value = default(f)
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
      if not dataclasses.is_dataclass(default(f)):
        raise ConfigError(f'{where}: no key {key!r} (its default: {default(f)!r})')
      continue
    if f.type not in _TYPES:
      continue
    value = group[f.name]
    if not _is(value, f.type):
      raise ConfigError(f'{where}: {key}={value!r} must be {_TYPES[f.type][1]}, not '
                        f'{"null" if value is None else type(value).__name__}')


def _is(value, kind):
  """Whether `value` is a value of a field of type `kind` (a bool is no number)."""
  return isinstance(value, _TYPES[kind][0]) and (kind is bool or not isinstance(value, bool))


def check_value(key, value, kind):
  """A one-line ConfigError naming `key` for a `value` that is not of type
  `kind` (bool, int, float or str; a float finite), as `check` refuses a field's."""
  if not _is(value, kind):
    raise ConfigError(f'{key}={value!r} must be {_TYPES[kind][1]}')
  if kind is float and not math.isfinite(value):
    raise ConfigError(f'{key}={value!r} must be a finite number')


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
  field's bounds or choices, or of another type than its field. An int field
  takes integers only; a float field finite numbers only (nan passes every
  comparison)."""
  for f in dataclasses.fields(cls):
    if dataclasses.is_dataclass(default(f)):
      continue
    bounds, choices = f.metadata.get('bounds', ()), f.metadata.get('choices')
    key, value = f'{name}.{f.name}' if name else f.name, group[f.name]
    if choices is not None:
      if value not in choices:
        raise ConfigError(f'{key}={value!r} is not one of {choices}')
      continue
    if not bounds:
      if f.type in _TYPES:
        check_value(key, value, f.type)
      continue
    integer = f.type is int
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
      raise ConfigError(f'{key}={value!r} must be {_describe(bounds, integer)}')
    if not math.isfinite(value):
      raise ConfigError(f'{key}={value!r} must be a finite number')
    if not all(_OPS[op](value, bound) for op, bound in bounds):
      raise ConfigError(f'{key}={value!r} must be {_describe(bounds, integer)}')
