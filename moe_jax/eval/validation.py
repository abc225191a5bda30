"""Validation loss of a checkpoint: what `moe_jax.evaluate` prints."""
import os

import jax

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import checkpoint, placement, program as program_lib
from moe_jax.upcycle import transition


def evaluate_checkpoint(ckpt, config=None, num_batches=None):
  """Returns dict(val_loss, val_tokens, step, ...) on the validation split.

  num_batches=None uses config.eval_batches; 0 uses the whole split. A
  checkpoint past an in-run upcycle is evaluated as the grown model.
  """
  directory, step = checkpoint.resolve(ckpt)
  manager = checkpoint.Manager(directory, async_save=False, read_only=True)
  step = manager.latest_step() if step is None else step
  if step is None:
    raise ConfigError(f'no checkpoint in {directory}')
  config = transition.config_at(config or checkpoint.workdir_config(ckpt), step)
  config = config.copy_and_resolve_references()
  if num_batches:
    config.eval_batches = num_batches
  workdir = os.path.dirname(directory)
  tokenizer = pipeline.tokenizer_for(config, workdir)
  if not config.model.vocab_size:
    config.model.vocab_size = tokenizer.vocab_size
  program = program_lib.build(config, placement.make_mesh(config.mesh))
  params = manager.restore(step, program.abstract_state.params)['params']
  manager.close()
  batches = pipeline.eval_batches(config, tokenizer, full=num_batches == 0)
  result = program_lib.evaluate(program, params, batches)
  return dict(result, step=int(step), ckpt=os.path.join(directory, str(step)),
              devices=jax.device_count())
