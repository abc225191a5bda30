"""Checks of the run-level config keys, before anything is written."""
import json
import os

from moe_jax.errors import ConfigError

_POSITIVE = ('total_steps', 'batch_size', 'seq_len', 'log_every_steps')
_NON_NEGATIVE = ('eval_every_steps', 'eval_batches', 'checkpoint_every_steps')
# Keys that change parameter shapes: a workdir trained with other values is refused.
SHAPE_KEYS = ('model.vocab_size', 'model.d_model', 'model.num_layers', 'model.num_heads',
              'model.num_kv_heads', 'model.head_dim', 'model.d_ff', 'model.tie_embeddings',
              'moe.num_experts', 'moe.d_ff', 'moe.num_shared_experts', 'moe.every',
              'moe.first_dense', 'moe.router', 'moe.use_bias')


def check_run(config):
  for key in _POSITIVE:
    if not isinstance(config[key], int) or config[key] <= 0:
      raise ConfigError(f'{key}={config[key]!r} must be a positive integer')
  for key in _NON_NEGATIVE:
    if not isinstance(config[key], int) or config[key] < 0:
      raise ConfigError(f'{key}={config[key]!r} must be a non-negative integer')
  if config.init_from and not os.path.exists(os.path.expanduser(config.init_from)):
    raise ConfigError(f'init_from={config.init_from!r} does not exist')


def _get(config, dotted):
  value = config
  for part in dotted.split('.'):
    value = value.get(part) if isinstance(value, dict) else value[part]
  return value


def check_workdir(config, workdir):
  """Refuses a workdir whose saved config has other parameter shapes."""
  path = os.path.join(workdir, 'config.json')
  if not os.path.exists(path):
    return
  with open(path) as f:
    saved = json.load(f)
  diffs = [f'{k}: workdir {_get(saved, k)!r} vs requested {_get(config, k)!r}'
           for k in SHAPE_KEYS if _get(saved, k) != _get(config, k)]
  if diffs:
    raise ConfigError(f'workdir {workdir} holds a model of another shape ({"; ".join(diffs)}); '
                      'use a new --workdir')
