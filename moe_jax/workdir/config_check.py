"""Checks of a whole config before anything is written: each group's bounds,
read from its dataclass (moe_jax/config_group.py), and the rules between keys.

`opt` is checked by the optimizer that reads it (train/optimizer.py) and the
upcycle group's recipe keys by upcycle/transition.py: both sit above workdir/.
"""
import os

from moe_jax import config_group
from moe_jax.errors import ConfigError
from moe_jax.workdir import config_types, placement

GROUPS = config_types.GROUPS


def check_run(config):
  for name, cls in GROUPS:
    config_group.check(name, config[name] if name else config, cls)
  _check_memory_keys(config)
  experts, shards = config.moe.num_experts, config.mesh.expert
  if experts and shards > 1 and experts % shards:
    raise ConfigError(f'moe.num_experts={experts} is not divisible by mesh.expert={shards}')
  tau = config.upcycle.step
  if isinstance(tau, bool) or not isinstance(tau, int) or tau < 0:
    raise ConfigError(f'upcycle.step={tau!r} must be a non-negative integer')
  if tau >= config.total_steps:
    raise ConfigError(f'upcycle.step={tau} must be below total_steps={config.total_steps}')
  if config.init_from and not os.path.exists(os.path.expanduser(config.init_from)):
    raise ConfigError(f'init_from={config.init_from!r} does not exist')


def _check_memory_keys(config):
  """grad_accum_steps splits each process' rows (0: 'auto', train/accumulate.py);
  loss_chunk splits a microbatch's tokens."""
  n = config.grad_accum_steps
  rows = config.batch_size // placement.process_count(config.mesh)
  if n and rows % n:
    raise ConfigError(f'grad_accum_steps={n!r} must be 0 (auto) or a positive integer dividing '
                      f'the per-process batch ({rows} rows of batch_size={config.batch_size})')
  chunk = config.model.loss_chunk
  tokens = config.batch_size // max(n, 1) * config.seq_len
  if not isinstance(chunk, int) or chunk < 0 or (chunk and tokens % chunk):
    raise ConfigError(f'model.loss_chunk={chunk!r} must be 0 or divide the {tokens} tokens of '
                      f'a microbatch (batch_size / grad_accum_steps x seq_len)')
