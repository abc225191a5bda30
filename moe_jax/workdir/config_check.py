"""Checks of the run-level config keys, before anything is written."""
import math
import os


from moe_jax.errors import ConfigError
from moe_jax.workdir import files, placement

_POSITIVE = ('total_steps', 'batch_size', 'seq_len', 'log_every_steps')
_NON_NEGATIVE = ('eval_every_steps', 'eval_batches', 'checkpoint_every_steps',
                 'data.worker_count')
_RANGES = (  # key, lower bound, upper bound (None: open), lower bound exclusive
    ('opt.lr', 0.0, None, True), ('opt.warmup_steps', 0, None, False),
    ('opt.rewarm_steps', 0, None, False), ('opt.decay_fraction', 0.0, 1.0, False),
    ('opt.final_lr_fraction', 0.0, 1.0, False), ('opt.clip_norm', 0.0, None, False),
    ('opt.weight_decay', 0.0, None, False), ('ckpt.keep', 0, None, False),
    ('ckpt.keep_every', 0, None, False), ('moe.balance_loss_weight', 0.0, None, False),
    ('moe.z_loss_weight', 0.0, None, False), ('moe.bias_update_rate', 0.0, None, False),
    ('upcycle.step', 0, None, False), ('opt.eps', 0.0, None, True),
)
_UNIT = ('opt.b1', 'opt.b2')   # in [0, 1)


def check_run(config):
  for key in _POSITIVE:
    if not isinstance(config[key], int) or config[key] <= 0:
      raise ConfigError(f'{key}={config[key]!r} must be a positive integer')
  for key in _NON_NEGATIVE:
    value = files.get(config, key)
    if not isinstance(value, int) or value < 0:
      raise ConfigError(f'{key}={value!r} must be a non-negative integer')
  for key in [k for k, *_ in _RANGES] + list(_UNIT):
    if not math.isfinite(files.get(config, key)):   # nan passes every comparison
      raise ConfigError(f'{key}={files.get(config, key)!r} must be a finite number')
  for key in _UNIT:
    if not 0 <= files.get(config, key) < 1:
      raise ConfigError(f'{key}={files.get(config, key)!r} must be in [0, 1)')
  for key, low, high, strict in _RANGES:
    value = files.get(config, key)
    if value < low or (strict and value == low) or (high is not None and value > high):
      bound = f'> {low}' if strict else f'>= {low}' if high is None else f'in [{low}, {high}]'
      raise ConfigError(f'{key}={value!r} must be {bound}')
  _check_memory_keys(config)
  experts, shards = config.moe.num_experts, config.mesh.expert
  if experts and shards > 1 and experts % shards:
    raise ConfigError(f'moe.num_experts={experts} is not divisible by mesh.expert={shards}')
  if config.init_from and not os.path.exists(os.path.expanduser(config.init_from)):
    raise ConfigError(f'init_from={config.init_from!r} does not exist')


def _check_memory_keys(config):
  """grad_accum_steps splits each process' rows (0: 'auto', train/accumulate.py);
  loss_chunk splits a microbatch's tokens."""
  n = config.get('grad_accum_steps', 1)
  rows = config.batch_size // placement.process_count(config.mesh)
  if not isinstance(n, int) or n < 0 or (n and rows % n):
    raise ConfigError(f'grad_accum_steps={n!r} must be 0 (auto) or a positive integer dividing '
                      f'the per-process batch ({rows} rows of batch_size={config.batch_size})')
  chunk = config.model.get('loss_chunk', 0)
  tokens = config.batch_size // max(n, 1) * config.seq_len
  if not isinstance(chunk, int) or chunk < 0 or (chunk and tokens % chunk):
    raise ConfigError(f'model.loss_chunk={chunk!r} must be 0 or divide the {tokens} tokens of '
                      f'a microbatch (batch_size / grad_accum_steps x seq_len)')
