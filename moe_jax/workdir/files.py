"""The small JSON files of a workdir, written atomically and read with
one-line errors.

  config.json  the resolved training config (the trainer, the upcycle CLI)
  run.json     what a run is, for tools that must not import the model:
               parameter counts, FLOPs per token, tokens per step (written by
               the trainer at start; scaling_laws/collect reads it)
  upcycle_report.json  a growth's report (transition.report_record; `read_report`)
and reads the trainer's metrics.jsonl (`metrics`).

Writes are atomic (moe_jax/atomic.py): a reader sees the old file or the new
one, never a torn one, whenever the writer is killed.
"""
import json
import os

import ml_collections

from moe_jax import json_file, schema
from moe_jax.atomic import write_text
from moe_jax.data import sources
from moe_jax.errors import ConfigError
from moe_jax.json_file import read_json  # pylint: disable=unused-import (files.read_json)

CONFIG = 'config.json'
RUN = 'run.json'
METRICS = 'metrics.jsonl'
REPORT = 'upcycle_report.json'   # a growth's report: upcycle/transition.py report_record
CHECKPOINTS = 'checkpoints'   # the Orbax step directories of a workdir


def write_json(path, record):
  write_text(path, json.dumps(record, indent=2) + '\n')


def check_dir_writable(path, what):
  """Refuses a directory `path` that cannot be created or written into: a
  file, a path under a file, a read-only or unwritable place. Named `what`."""
  if not path:
    raise ConfigError(f'{what} is empty')
  path = os.path.abspath(os.path.expanduser(path))
  if os.path.lexists(path):
    if not os.path.isdir(path):
      raise ConfigError(f'{what} {path} is not a directory')
    existing = path
  else:
    existing = os.path.dirname(path)
    while not os.path.lexists(existing):
      existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
      raise ConfigError(f'{what} {path} lies under {existing}, which is not a directory')
  if not os.access(existing, os.W_OK | os.X_OK):
    raise ConfigError(f'{what} {path} is not writable' if existing == path else
                      f'{what} {path}: {existing} is not writable')



def read_report(workdir):
  """`workdir`/upcycle_report.json in the schema of transition.report_record,
  or None when the run did not grow. A report of the in-run transition written
  before that schema held the recipe's name as `recipe` and its replica counts
  as `counts`: they read as recipe.recipe and recipe.args.counts (its rules,
  source and seed were not recorded)."""
  path = os.path.join(workdir, REPORT)
  if not os.path.exists(path):
    return None
  record = read_json(path)
  if isinstance(record.get('recipe'), str):
    args = {'counts': record.pop('counts')} if 'counts' in record else {}
    record['recipe'] = dict(recipe=record['recipe'], args=args)
  return record


def metrics(workdir):
  """The records of `workdir`/metrics.jsonl, in order; none when it is
  missing, and a torn line (a crash mid-write) is skipped."""
  try:
    with open(os.path.join(workdir, METRICS)) as f:
      lines = f.readlines()
  except OSError:
    return
  for line in lines:
    try:
      record = json.loads(line)
    except ValueError:
      continue
    if isinstance(record, dict):
      yield record


def last_val_loss(workdir, first, last):
  """(step, val_loss) of the last val_loss logged in `workdir` at a step in
  [first, last], or (None, None)."""
  found = [(r['step'], r['val_loss']) for r in metrics(workdir)
           if 'val_loss' in r and first <= r.get('step', -1) <= last]
  return found[-1] if found else (None, None)


def read_config_record(path):
  """A run's config.json as a dict (json_file.read_config), upgraded, each
  key there and of its type (schema.check_types: a hand edit is named at load)."""
  record = schema.upgrade(json_file.read_config(path))
  schema.check_types(record, path)
  return record


def read_config(workdir):
  """The ConfigDict saved in `workdir`/config.json, upgraded."""
  return ml_collections.ConfigDict(read_config_record(os.path.join(workdir, CONFIG)))


def write_config(workdir, config):
  write_text(os.path.join(workdir, CONFIG), config.to_json_best_effort(indent=2) + '\n')


def get(config, dotted):
  """config['a']['b'] for 'a.b', on a ConfigDict or a plain dict (None if absent)."""
  value = config
  for part in dotted.split('.'):
    value = value.get(part) if value is not None else None
  return value


def _trained_on_a_stream(workdir):
  """Whether a training run has saved a checkpoint in `workdir`: one with an
  optimizer state and a data position. The upcycle CLI's step 0 has no
  optimizer state and at most the source's position, which a run continues
  only on the same stream (trainer._restore); an import's has params only."""
  root = os.path.join(workdir, 'checkpoints')
  return os.path.isdir(root) and any(
      all(os.path.isdir(os.path.join(root, step, item)) for item in ('opt_state', 'data'))
      for step in os.listdir(root))


def diffs(saved, config, keys=None):
  """'key: workdir X vs requested Y' for each of `keys` that differs (default:
  the keys that fix either config's data stream, data/sources/); `saved`
  as read from disk (upgraded)."""
  keys = keys or sources.stream_keys(saved, config)
  return [f'{k}: workdir {get(saved, k)!r} vs requested {get(config, k)!r}'
          for k in keys if get(saved, k) != get(config, k)]


def check_compatible(config, workdir):
  """Refuses a workdir whose saved config has other parameter shapes or, once a
  training run has saved a checkpoint in it, another data stream than `config`."""
  path = os.path.join(workdir, CONFIG)
  if not os.path.exists(path):
    return
  saved = read_config_record(path)
  checks = [(schema.SHAPE_KEYS, 'a model of another shape')]
  if _trained_on_a_stream(workdir):
    checks.append((sources.stream_keys(saved, config), 'a run on another data stream'))
  for keys, what in checks:
    found = diffs(saved, config, keys)
    if found:
      raise ConfigError(f'workdir {workdir} holds {what} ({"; ".join(found)}); continue it '
                        f'from its own config.json with python -m moe_jax.main --workdir='
                        f'{workdir} [--config.KEY=VALUE], or use a new --workdir')
