"""Reading a JSON object from disk with a one-line error naming the file.

Below workdir/ and scaling_laws/ (docs/internals.md, "Layers"), so the
workdir's files (workdir/files.py) and the scaling-law tools that read runs
without the model share one reader, and one test of what a run's config.json
is (`read_config`).
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


# What every reader of a run's config.json takes for granted (configs/common.py
# base() writes them all, and so does every command that makes a workdir).
CONFIG_KEYS = ('seed', 'total_steps', 'batch_size', 'seq_len')
CONFIG_GROUPS = ('model', 'moe', 'data', 'opt', 'ckpt', 'mesh')


def read_config(path):
  """A run's config.json as a dict; a JSON object without its keys and groups
  (another file written over it, say) is a one-line ConfigError naming the
  first one missing, rather than an AttributeError deep in a reader."""
  record = read_json(path)
  missing = [k for k in CONFIG_KEYS if k not in record] + [
      g for g in CONFIG_GROUPS if not isinstance(record.get(g), dict)]
  if missing:
    what = 'group' if missing[0] in CONFIG_GROUPS else 'key'
    raise ConfigError(f'{path}: not a run config (no {what} {missing[0]!r}; its keys: '
                      f'{", ".join(sorted(record)[:6]) or "none"})')
  return record
