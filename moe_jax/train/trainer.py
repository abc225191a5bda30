"""train_and_evaluate(config, workdir): the whole training run, importable from a
notebook. `moe_jax.main` is only its command-line wrapper."""
import dataclasses
import json
import os
import signal
import time

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from moe_jax import sharding
from moe_jax.data import pipeline
from moe_jax.errors import NonFiniteLossError
from moe_jax.models import accounting, transformer
from moe_jax.models import config as model_config
from moe_jax.train import checkpoint, config_check, metrics, optimizer, placement
from moe_jax.train import state as state_lib, step


@dataclasses.dataclass
class Program:
  """What one model shape needs to train: rebuilt after an in-run upcycle."""
  config: object
  model: object
  tx: object
  lr_fn: object
  abstract_state: object
  state_shardings: object
  batch_sharding: object
  train_step: object
  eval_step: object


def build(config, mesh, start_step=0):
  cfg = model_config.ModelConfig.from_config(config)
  model = transformer.Transformer(cfg)
  tokens = jnp.zeros((1, config.seq_len), jnp.int32)
  abstract_params = jax.eval_shape(lambda: model.init(jax.random.key(0), tokens)['params'])
  tx, lr_fn = optimizer.make(config.opt, config.total_steps, abstract_params, start_step)
  abstract_state = jax.eval_shape(lambda p: state_lib.create(p, tx), abstract_params)
  state_shardings = placement.state_shardings(abstract_state, mesh, config.mesh)
  batch_sharding = placement.batch_sharding(mesh, config.mesh, config.batch_size)
  return Program(
      config, model, tx, lr_fn, abstract_state, state_shardings, batch_sharding,
      step.jit_train_step(model, tx, lr_fn, config, state_shardings, batch_sharding),
      step.jit_eval_step(model, state_shardings.params, batch_sharding))


def init_state(program, seed):
  model, tx = program.model, program.tx
  tokens = jnp.zeros((1, program.config.seq_len), jnp.int32)

  def init():
    params = model.init(jax.random.key(seed), tokens)['params']
    return state_lib.create(params, tx)

  return jax.jit(init, out_shardings=program.state_shardings)()


def restore_state(program, manager, step_):
  """Restores a workdir checkpoint; a params-only one (from the upcycle CLI)
  gets a fresh optimizer state."""
  abstract = program.abstract_state
  out = manager.restore(step_, abstract.params, abstract.opt_state)
  opt_state = out['opt_state']
  if opt_state is None:
    opt_state = jax.jit(program.tx.init, out_shardings=program.state_shardings.opt_state)(
        out['params'])
  return state_lib.TrainState(jnp.asarray(step_, jnp.int32), out['params'], opt_state), out['data']


def evaluate(program, params, batches):
  total, count = 0.0, 0.0
  for batch in batches:
    ce_sum, n = program.eval_step(params, placement.put_batch(batch, program.batch_sharding))
    total, count = total + float(ce_sum), count + float(n)
  return dict(val_loss=total / max(count, 1.0), val_tokens=int(count))


class _Preemption:
  """SIGTERM sets a flag; the loop saves and exits cleanly at the next step."""

  def __init__(self):
    self.requested = False
    self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, *_):
    self.requested = True

  def restore(self):
    signal.signal(signal.SIGTERM, self._previous)


def _check_finite(pending):
  for step_, values in pending:
    if not np.isfinite(values['loss']):
      raise NonFiniteLossError(f'loss is {values["loss"]} at step {step_}; stopped, the last '
                               'checkpoint before it is kept')


def train_and_evaluate(config, workdir, stop_at=None):
  """Trains `config` in `workdir`, resuming from its newest checkpoint.

  `stop_at` saves and returns once that step is reached (a time-sliced job, or a
  test of resuming); the run continues from there next time. Returns the last
  logged metrics (with val_loss at eval steps).
  """
  config = config.copy_and_resolve_references()
  config_check.check_run(config)
  if config.mesh.distributed:
    jax.distributed.initialize()
  mesh = sharding.make_mesh(config.mesh)
  tokenizer = pipeline.tokenizer_for(config, workdir)
  if not config.model.vocab_size:
    config.model.vocab_size = tokenizer.vocab_size
  config_check.check_workdir(config, workdir)
  program = build(config, mesh)   # validates the model config before any write

  train_it = pipeline.train_iterator(config, tokenizer)
  val_batches = pipeline.eval_batches(config, tokenizer) if config.eval_every_steps else []

  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    with open(os.path.join(workdir, 'config.json'), 'w') as f:
      f.write(config.to_json_best_effort(indent=2))
  manager = checkpoint.Manager.for_workdir(workdir, config.ckpt)

  start = manager.latest_step()
  if start is not None:
    state, data_state = restore_state(program, manager, start)
    if data_state is not None:
      train_it.set_state(data_state)
  else:
    start, state = 0, init_state(program, config.seed)
    if config.init_from:
      params, _ = checkpoint.restore_params(config.init_from, program.abstract_state.params)
      state = state.replace(params=params)

  writer = metrics.Writer(workdir, resume_step=start)
  flops_per_token = 3 * accounting.forward_flops_per_token(program.model.cfg, config.seq_len)
  peak = metrics.peak_flops(jax.devices()[0])
  preemption = _Preemption()
  pending, last = [], {}
  t0, t0_step = time.perf_counter(), start

  def save(step_):
    manager.save(step_, state.params, state.opt_state, train_it.get_state(),
                 meta=dict(config=json.loads(config.to_json_best_effort())))

  try:
    bar = tqdm.tqdm(range(start, config.total_steps), initial=start, total=config.total_steps,
                    desc='train', disable=jax.process_index() != 0, dynamic_ncols=True)
    for i in bar:
      batch = placement.put_batch(next(train_it), program.batch_sharding)
      state, step_metrics = program.train_step(state, batch)
      done = i + 1
      pending.append((done, step_metrics))
      is_last = done == config.total_steps
      eval_now = bool(val_batches) and (done % config.eval_every_steps == 0 or is_last)
      log = done % config.log_every_steps == 0 or is_last or eval_now
      stop = preemption.requested or done == stop_at
      ckpt = (config.checkpoint_every_steps and done % config.checkpoint_every_steps == 0) or (
          is_last or stop)
      if not (log or ckpt):
        continue
      pending = jax.device_get(pending)
      _check_finite(pending)
      last = dict(pending[-1][1])
      pending = []
      if log:
        elapsed = time.perf_counter() - t0
        tokens_per_s = (done - t0_step) * config.batch_size * config.seq_len / elapsed
        t0, t0_step = time.perf_counter(), done
        last.update(perplexity=float(np.exp(min(last['loss'], 50.0))), tokens_per_s=tokens_per_s)
        if peak:
          last['mfu'] = tokens_per_s * flops_per_token / (peak * jax.device_count())
        if eval_now:
          last.update(evaluate(program, state.params, val_batches))
        writer.write(done, last)
        bar.set_postfix(loss=f'{last["loss"]:.3f}', **(
            {'val': f'{last["val_loss"]:.3f}'} if 'val_loss' in last else {}))
      if ckpt:
        save(done)
      if stop:
        break
  finally:
    preemption.restore()
    manager.wait()
    manager.close()
    writer.close()
  return last
