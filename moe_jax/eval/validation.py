"""Validation loss of a checkpoint: what `moe_jax.evaluate` prints."""
import os

import jax

from moe_jax import sharding
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import checkpoint, program as program_lib


def evaluate_checkpoint(ckpt, config=None, num_batches=None):
  """Returns dict(val_loss, val_tokens, step, ...) on the validation split.

  num_batches=None uses config.eval_batches; 0 uses the whole split.
  """
  config = (config or checkpoint.workdir_config(ckpt)).copy_and_resolve_references()
  if num_batches:
    config.eval_batches = num_batches
  directory, step = checkpoint.resolve(ckpt)
  workdir = os.path.dirname(directory)
  tokenizer = pipeline.tokenizer_for(config, workdir)
  if not config.model.vocab_size:
    config.model.vocab_size = tokenizer.vocab_size
  mesh = sharding.make_mesh(config.mesh)
  program = program_lib.build(config, mesh)
  manager = checkpoint.Manager(directory, async_save=False, read_only=True)
  step = manager.latest_step() if step is None else step
  if step is None:
    raise ConfigError(f'no checkpoint in {directory}')
  params = manager.restore(step, program.abstract_state.params)['params']
  manager.close()
  batches = pipeline.eval_batches(config, tokenizer, full=num_batches == 0)
  result = program_lib.evaluate(program, params, batches)
  return dict(result, step=int(step), ckpt=os.path.join(directory, str(step)),
              devices=jax.device_count())
