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
import copy
import json
import os

import ml_collections

from moe_jax import json_file
from moe_jax.atomic import write_text
from moe_jax.data import sources
from moe_jax.errors import ConfigError
from moe_jax.json_file import read_json  # pylint: disable=unused-import (files.read_json)
from moe_jax.workdir import config_types

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


# Keys added after runs were written, each with the value those runs ran with
# (git log -S on configs/common.py and models/config.py; the trainer first ran
# at 7520b85, when every key before these was in place). A config read from
# disk is upgraded once, where it is read: config.json (`read_config_record`)
# and a checkpoint's meta (checkpoint.Manager.restore).
ADDED = {
    # 3486b55: the in-run transition; no run before it grew in-run.
    'upcycle.factor': 2, 'upcycle.report_batches': 4, 'upcycle.seed': 0, 'upcycle.source': '',
    'upcycle.target': {},
    'mesh.num_devices': 0,                                      # f563b3b: every device
    'model.qk_norm': False, 'model.qkv_bias': False, 'model.rope_scaling': 'none',  # 81ac58c
    'model.rope_factor': 8.0, 'model.rope_low_freq_factor': 1.0,
    'model.rope_high_freq_factor': 4.0, 'model.rope_original_max_len': 8192,
    'model.max_position_embeddings': 0,
    'data.encoding': '',                                        # 6aedcec
    'phases.fractions': [], 'phases.lr': [], 'phases.balance': [], 'phases.z_loss': [],  # d317086
    'model.norm_position': 'pre',                               # b4599c7
    'data.chat_template': 'model',                              # 4986e54: the sft source
    'mesh.coordinator_address': '', 'mesh.num_processes': 0, 'mesh.process_id': -1,  # 31e30d6
    'data.path': '',                                            # b552563: the prepared source
    # edc4fca: one batch a step, no chunks, no remat, Adam's moment as the params.
    'grad_accum_steps': 1, 'model.loss_chunk': 0, 'model.remat': 'none', 'opt.mu_dtype': '',
    'model.attention': 'reference',                             # 9b88ab5: whole-array attention
    'model.scan_layers': False,                                 # 65811f0
    'moe.router_loss_reduction': 'sum',                         # 21b6cc9
    'data.part': '', 'data.cpt_fraction': 0.5,                  # 802a292: every document
    'opt.router_lr_multiplier': 1.0,                            # 890832d
    'model.cross_entropy': 'reference',                         # ce36b46
    'moe.shared_gate': False,                                   # the Qwen2-MoE shared gate
}


def upgrade(record):
  """`record`, a config as a dict, with each key of ADDED it lacks set to
  the value runs had before the key existed, and the upcycle group's keys
  that became recipe args moved (upgrade_recipe_args; in place; returned)."""
  for dotted, value in ADDED.items():
    *groups, key = dotted.split('.')
    node = record
    for group in groups:
      node = node.setdefault(group, {})
    node.setdefault(key, copy.deepcopy(value))
  return upgrade_recipe_args(record)


# Keys of the upcycle group that became one recipe's args (upcycle.args.KEY),
# each with its default then, which that recipe's arg of the same name has
# too: the recipe read the group's value wherever its args left the key out.
MOVED_TO_ARGS = {'utility_metric': 'grad_norm', 'utility_batches': 64, 'split_bias': False}


def upgrade_recipe_args(record):
  """An old config's upcycle.KEY of MOVED_TO_ARGS moved to upcycle.args.KEY
  where the args leave it out (as the recipe read it), and dropped where it
  holds its default (what the recipe's own default gives), so a config
  written before the move reads as the same run (in place; returned).

  Knowing no recipe, this moves a value that is not the default whatever
  upcycle.recipe names: every config saved so far with one (the committed
  results of docs/ included) names the recipe that had these args or none;
  a recipe without them then refuses the key (recipes.parse) rather than
  ignoring it."""
  up = record.get('upcycle')
  if not isinstance(up, dict):
    return record
  for key, default in MOVED_TO_ARGS.items():
    if key in up:
      value = up.pop(key)
      if value != default:
        up.setdefault('args', {}).setdefault(key, value)
  return record


def read_config_record(path):
  """A run's config.json as a dict (json_file.read_config), upgraded, each
  key there and of its type (config_types: a hand edit is named at load)."""
  record = upgrade(json_file.read_config(path))
  config_types.check(record, path)
  return record


def read_config(workdir):
  """The ConfigDict saved in `workdir`/config.json, upgraded."""
  return ml_collections.ConfigDict(read_config_record(os.path.join(workdir, CONFIG)))


def write_config(workdir, config):
  write_text(os.path.join(workdir, CONFIG), config.to_json_best_effort(indent=2) + '\n')


# A workdir is refused when its saved config differs in a key that changes
# parameter shapes (or, as norm_position, what the same params compute), or
# the data stream a resumed run must continue exactly.
SHAPE_KEYS = ('model.vocab_size', 'model.d_model', 'model.num_layers', 'model.num_heads',
              'model.num_kv_heads', 'model.head_dim', 'model.d_ff', 'model.tie_embeddings',
              'model.qk_norm', 'model.qkv_bias', 'model.norm_position', 'moe.num_experts',
              'moe.d_ff', 'moe.num_shared_experts', 'moe.shared_gate', 'moe.every',
              'moe.first_dense', 'moe.router', 'moe.use_bias', 'upcycle.step', 'upcycle.recipe',
              'upcycle.factor')


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
  checks = [(SHAPE_KEYS, 'a model of another shape')]
  if _trained_on_a_stream(workdir):
    checks.append((sources.stream_keys(saved, config), 'a run on another data stream'))
  for keys, what in checks:
    found = diffs(saved, config, keys)
    if found:
      raise ConfigError(f'workdir {workdir} holds {what} ({"; ".join(found)}); continue it '
                        f'from its own config.json with python -m moe_jax.main --workdir='
                        f'{workdir} [--config.KEY=VALUE], or use a new --workdir')
