"""Reading a JSON object from disk with a one-line error naming the file.

Below workdir/ and scaling_laws/ (docs/internals.md, "Layers"), so the
workdir's files (workdir/files.py) and the scaling-law tools that read runs
without the model share one reader.
"""
import json

from moe_jax.errors import ConfigError


def read_json(path):
  """The JSON object at `path`; a missing, unreadable or malformed file is a
  one-line ConfigError naming it."""
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except FileNotFoundError:
    raise ConfigError(f'{path} is missing') from None
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(f'{path}: cannot read ({e})') from None
  except json.JSONDecodeError as e:
    raise ConfigError(f'{path}: not JSON ({e.msg} at line {e.lineno})') from None
  if not isinstance(record, dict):
    raise ConfigError(f'{path}: expected a JSON object, got {type(record).__name__}')
  return record
