"""Checks of a whole config before anything is written: every group's bounds,
read from its fields (moe_jax/schema/: one table of groups, `opt` and
`upcycle` included), and the rules between keys.
"""
import os

from moe_jax import schema
from moe_jax.errors import ConfigError
from moe_jax.workdir import placement


def check_run(config):
  schema.check(config)
  _check_memory_keys(config)
  experts, shards = config.moe.num_experts, config.mesh.expert
  if experts and shards > 1 and experts % shards:
    raise ConfigError(f'moe.num_experts={experts} is not divisible by mesh.expert={shards}')
  tau = config.upcycle.step
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
  if chunk and tokens % chunk:
    raise ConfigError(f'model.loss_chunk={chunk!r} must be 0 or divide the {tokens} tokens of '
                      f'a microbatch (batch_size / grad_accum_steps x seq_len)')
