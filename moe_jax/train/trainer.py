"""train_and_evaluate(config, workdir): the whole training run, importable from a
notebook. `moe_jax.main` is only its command-line wrapper."""
import os
import signal
import time

import jax
import numpy as np
import tqdm

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError, NonFiniteLossError
from moe_jax.models import accounting
from moe_jax.models import config as model_config
from moe_jax.train import config_check, metrics, program as program_lib
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, files, placement, run_record


class _Preemption:
  """SIGTERM sets a flag; the loop saves and exits cleanly at the next step."""

  def __init__(self):
    self.requested = False
    try:
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    except ValueError:  # not the main thread (a notebook worker): no handler
      self._previous = None

  def _handle(self, *_):
    self.requested = True

  def restore(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


def _check_finite(pending):
  """Raises at the first step whose loss, gradient or updated params are not finite."""
  for step_, values in pending:
    for key in ('loss', 'grad_norm', 'param_norm'):
      if not np.isfinite(values[key]):
        raise NonFiniteLossError(f'{key} is {values[key]} at step {step_}; stopped, the last '
                                 'checkpoint before it is kept')


def _write_json(workdir, name, record):
  if jax.process_index() == 0:
    files.write_json(os.path.join(workdir, name), record)


def _source(config, workdir):
  """The checkpoint this run started from (run.json `source`): as recorded at
  its first start (the upcycle CLI records its --src in the workdir it
  writes), else `init_from` or `upcycle.source`."""
  recorded, ckpt = run_record.read_source(workdir), config.init_from or config.upcycle.source
  return recorded or (run_record.source_info(ckpt) if ckpt else None)


def _peek(config, tokenizer, train_it, num_batches):
  """The next `num_batches` training batches, leaving `train_it` where it is."""
  side = pipeline.train_iterator(config, tokenizer)
  side.set_state(train_it.get_state())
  return [next(side) for _ in range(num_batches)]


def train_and_evaluate(config, workdir, stop_at=None):
  """Trains `config` in `workdir`, resuming from its newest checkpoint.

  With `upcycle.step` = tau > 0 the model grows in memory after step tau by
  `upcycle.recipe`; checkpoints from tau on hold the grown model, so resuming
  on either side of tau works. `stop_at` saves and returns once that step is
  reached (a time-sliced job, or a test of resuming). Returns the last logged
  metrics (with val_loss at eval steps).
  """
  config = config.copy_and_resolve_references()
  config_check.check_run(config)
  if config.mesh.distributed:
    jax.distributed.initialize()
  mesh = placement.make_mesh(config.mesh)
  # Model errors first: a BPE tokenizer is trained and cached in the workdir.
  model_config.ModelConfig.from_config(config, vocab_size=1)
  tokenizer = pipeline.tokenizer_for(config, workdir)
  if not config.model.vocab_size:
    config.model.vocab_size = tokenizer.vocab_size
  files.check_compatible(config, workdir)
  program = program_lib.build(config, mesh)   # validates the model config before any write
  tau = config.upcycle.step
  dst_config = transition.target_config(config) if tau else None
  if tau >= config.total_steps:
    raise ConfigError(f'upcycle.step={tau} must be below total_steps={config.total_steps}')

  train_it = pipeline.train_iterator(config, tokenizer)
  val_batches = pipeline.eval_batches(config, tokenizer) if config.eval_every_steps else []
  init_params = None
  if config.init_from and not os.path.isdir(os.path.join(workdir, checkpoint.CHECKPOINTS)):
    init_params, _ = checkpoint.restore_params(config.init_from, checkpoint.abstract_like(
        program.abstract_state.params, program.state_shardings.params))

  run_info = run_record.build(config, dst_config, _source(config, workdir))
  os.makedirs(workdir, exist_ok=True)
  _write_json(workdir, files.CONFIG, config.to_dict())
  _write_json(workdir, files.RUN, run_info)
  manager = checkpoint.Manager.for_workdir(workdir, config.ckpt)

  start = manager.latest_step()
  if start is not None:
    if tau and start >= tau:
      program = program_lib.build(dst_config, mesh, start_step=tau)
    state, data_state = program_lib.restore_state(program, manager, start)
    if data_state is not None:
      train_it.set_state(data_state)
  else:
    start, state = 0, program_lib.init_state(program, config.seed)
    if init_params is not None:
      state = state.replace(params=init_params)

  writer = metrics.Writer(workdir, resume_step=start)
  peak = metrics.peak_flops(jax.devices()[0])
  preemption = _Preemption()
  pending, last = [], {}
  t0, t0_step = time.perf_counter(), start

  def save(step_):
    manager.save(step_, state.params, state.opt_state, train_it.get_state(),
                 meta=dict(config=program.config.to_dict()))

  try:
    bar = tqdm.tqdm(range(start, config.total_steps), initial=start, total=config.total_steps,
                    desc='train', disable=jax.process_index() != 0, dynamic_ncols=True)
    for i in bar:
      batch = placement.put_batch(next(train_it), program.batch_sharding)
      state, step_metrics = program.train_step(state, batch)
      done = i + 1
      pending.append((done, step_metrics))
      is_last, grow = done == config.total_steps, bool(tau) and done == tau
      stop = preemption.requested or done == stop_at
      eval_now = bool(val_batches) and (done % config.eval_every_steps == 0 or is_last or grow)
      log = done % config.log_every_steps == 0 or is_last or eval_now
      ckpt = (config.checkpoint_every_steps and done % config.checkpoint_every_steps == 0) or (
          is_last or stop or grow)
      if not (log or ckpt):
        continue
      pending = jax.device_get(pending)
      _check_finite(pending)
      last = dict(pending[-1][1])
      pending = []
      if grow:
        up = config.upcycle
        scores = (_peek(config, tokenizer, train_it, up.utility_batches)
                  if up.args.get('allocation') == 'utility' else ())
        report_batches = (val_batches or pipeline.eval_batches(config, tokenizer))
        program, state, report, record = program_lib.upcycle(
            program, dst_config, state, mesh, scores, report_batches[:up.report_batches])
        last.update({f'upcycle/{k}': v for k, v in report.items()})
        _write_json(workdir, 'upcycle_report.json', dict(report, step=tau, recipe=up.recipe))
        if record:
          _write_json(workdir, 'upcycle_scores.json', record)
      if log:
        elapsed = time.perf_counter() - t0
        tokens_per_s = (done - t0_step) * config.batch_size * config.seq_len / elapsed
        t0, t0_step = time.perf_counter(), done
        last.update(perplexity=float(np.exp(min(last['loss'], 50.0))), tokens_per_s=tokens_per_s)
        if peak:
          flops = 3 * accounting.forward_flops_per_token(program.model.cfg, config.seq_len)
          last['mfu'] = tokens_per_s * flops / (peak * jax.device_count())
        if eval_now:
          last.update(program_lib.evaluate(program, state.params, val_batches))
        writer.write(done, last)
        bar.set_postfix(loss=f'{last["loss"]:.3f}', **(
            {'val': f'{last["val_loss"]:.3f}'} if 'val_loss' in last else {}))
      if ckpt:
        save(done)
      if stop:
        break
    if not last and val_batches:   # nothing left to train: report the final model
      last = program_lib.evaluate(program, state.params, val_batches)
  finally:
    preemption.restore()
    manager.wait()
    manager.close()
    writer.close()
  if 'val_loss' in last:
    # The loss of the best context-free model: what "learned something" beats.
    last['val_unigram_entropy'] = pipeline.validation_entropy(config, tokenizer)
  return last
