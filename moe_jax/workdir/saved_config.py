"""A workdir's own config, for `python -m moe_jax.main --workdir=DIR` without --config.

A workdir holds the resolved config it was written with (config.json: by the
trainer, the upcycle CLI, an import), so continuing it needs no config file:
restating one (`--config=configs/lm_moe.py:tiny`) has to agree with every key
that shapes the model, which a workdir grown by a recipe may not. Overrides
`--config.KEY=VALUE` change keys that keep the parameter shapes (total_steps,
the learning rate, eval cadence, ...); one that would change a shape is
refused, since the checkpoint could not be restored into it.
"""
import ast
import difflib
import os

import ml_collections

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.workdir import files

_TRUE, _FALSE = ('true', '1', 'yes'), ('false', '0', 'no')


def split_override(arg):
  """'--config.a.b=V' -> ('a.b', 'V'); anything else is a ConfigError."""
  flag, eq, value = arg.partition('=')
  if not flag.startswith('--config.') or not eq:
    raise ConfigError(f'unexpected argument: {arg} (flags are --name=value)')
  return flag[len('--config.'):], value


def _keys(config, prefix=''):
  for key, value in config.items():
    if isinstance(value, dict):
      yield from _keys(value, f'{prefix}{key}.')
    else:
      yield f'{prefix}{key}'


def _parse(key, text, current, arg):
  """`text` as the type of the saved value `current`."""
  try:
    if isinstance(current, bool):
      if text.lower() not in _TRUE + _FALSE:
        raise ValueError
      return text.lower() in _TRUE
    if isinstance(current, int):
      return int(text)
    if isinstance(current, float):
      return float(text)
    if isinstance(current, str):
      return text
    return ast.literal_eval(text)   # lists, None
  except (ValueError, SyntaxError):
    if current is None:
      return text
    kind = {bool: 'true or false', int: 'an integer', float: 'a number'}.get(
        type(current), f'a Python literal ({type(current).__name__})')
    raise ConfigError(f'{arg}: {key} must be {kind}, not {text!r}') from None


def load(workdir, overrides=()):
  """The config saved in `workdir`, with `overrides` ('--config.KEY=VALUE'
  strings) applied. A workdir without config.json, an unknown key, a value of
  the wrong type or a key that changes parameter shapes is a ConfigError."""
  path = os.path.join(workdir, files.CONFIG)
  if not os.path.exists(path):
    raise ConfigError(f'--workdir={workdir} has no {files.CONFIG} to continue from; start a '
                      'run with --config=configs/NAME.py (e.g. configs/lm_moe.py:tiny)')
  record = files.read_config_record(path)
  known = set(_keys(record))
  for arg in overrides:
    key, text = split_override(arg)
    if key not in known:
      close = difflib.get_close_matches(key, sorted(known), n=1)
      hint = f'; did you mean {close[0]!r}?' if close else ''
      raise ConfigError(f'config has no key {key!r} ({arg}; the keys of {path}){hint}')
    current = files.get(record, key)
    value = _parse(key, text, current, arg)
    if key in schema.SHAPE_KEYS and value != current:
      raise ConfigError(f'{arg}: {key} changes the parameter shapes of the model in '
                        f'{workdir} ({key}={current!r}); grow it with python -m '
                        'moe_jax.upcycle, or train it in a new --workdir')
    *groups, name = key.split('.')
    node = record
    for group in groups:
      node = node[group]
    node[name] = value
  return ml_collections.ConfigDict(record)
