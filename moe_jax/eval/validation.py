"""Validation loss of a checkpoint: what `moe_jax.evaluate` prints, and the
eval step the trainer runs at its eval steps."""
import functools
import math
import os

import jax

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError, NonFiniteLossError
from moe_jax.models import config as model_config, losses, transformer
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, placement


def eval_step(params, batch, *, model):
  """Summed cross-entropy and token count of one batch (sum, so batches add up)."""
  logits, _ = model.apply({'params': params}, batch['inputs'], segment_ids=batch['segment_ids'],
                          positions=batch['positions'], train=False)
  ce, count = losses.cross_entropy(logits, batch['targets'], batch['loss_mask'])
  return ce * count, count


def jit_eval_step(model, param_shardings, batch_sharding, view=None):
  """`eval_step` jitted; `view` turns the params it is given into the
  model's (the train state's stacked layout, models/stacking.py)."""
  fn = functools.partial(eval_step, model=model)
  return jax.jit(fn if view is None else lambda params, batch: fn(view(params), batch),
                 in_shardings=(param_shardings, batch_sharding))


def mean_loss(eval_fn, params, batches, batch_sharding):
  """dict(val_loss, val_tokens): the token-weighted mean over `batches`."""
  total, count = 0.0, 0.0
  for batch in batches:
    ce_sum, n = eval_fn(params, placement.put_batch(batch, batch_sharding))
    total, count = total + float(ce_sum), count + float(n)
  return dict(val_loss=total / max(count, 1.0), val_tokens=int(count))


def evaluate_checkpoint(ckpt, config=None, num_batches=None):
  """Returns dict(val_loss, val_tokens, step, ...) on the validation split.

  num_batches=None uses config.eval_batches; 0 uses the whole split. A
  checkpoint past an in-run upcycle is evaluated as the grown model. Reads
  only: a BPE run's tokenizer.json must be in the workdir (or named by
  data.tokenizer_path), never trained here. A damaged step or a non-finite
  loss is an error naming the step.
  """
  if num_batches is not None and num_batches < 0:
    raise ConfigError(f'--batches={num_batches} must be >= 0 (0: the whole validation split)')
  directory, step = checkpoint.resolve(ckpt)
  manager = checkpoint.Manager(directory, async_save=False, read_only=True)
  try:
    step = manager.latest_step() if step is None else step
    if step is None:
      raise ConfigError(f'no checkpoint in {directory}')
    where = f'checkpoint {directory}/{step}'
    config = transition.config_at(
        config or checkpoint.workdir_config(ckpt, f': pass --config for checkpoint {ckpt}'), step)
    config = config.copy_and_resolve_references()
    if num_batches:
      config.eval_batches = num_batches
    tokenizer = pipeline.tokenizer_for(config, os.path.dirname(directory), train=False)
    pipeline.resolve_vocab_size(config, tokenizer)
    mesh = placement.make_mesh(config.mesh)
    model = transformer.Transformer(model_config.from_config(config))
    abstract = transformer.abstract_params(model, config.seq_len)
    shardings = placement.param_shardings(abstract, mesh, config.mesh)
    batch_sharding = placement.batch_sharding(mesh, config.mesh, config.batch_size)
    batches = pipeline.eval_batches(config, tokenizer, full=num_batches == 0)
    if not batches:
      raise ConfigError(f'eval_batches={config.eval_batches}: no validation batches to '
                        'evaluate (pass --batches=N, or 0 for the whole split)')
    params = manager.restore(step, checkpoint.abstract_like(abstract, shardings))['params']
  finally:
    manager.close()
  eval_fn = placement.on_mesh(mesh, jit_eval_step(model, shardings, batch_sharding))
  result = mean_loss(eval_fn, params, batches, batch_sharding)
  if not math.isfinite(result['val_loss']):
    raise NonFiniteLossError(f'{where}: val_loss is {result["val_loss"]}')
  return dict(result, step=int(step), ckpt=os.path.join(directory, str(step)),
              devices=jax.device_count())
