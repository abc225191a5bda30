"""train_and_evaluate(config, workdir): the whole training run, importable from a
notebook. `moe_jax.main` is only its command-line wrapper.

Everything that can refuse a run is checked before its first write: config
values, the workdir path, the tokenizer against model.vocab_size, a saved
config.json, and the checkpoint to resume (shapes and digests, restored in
full). A refused command leaves the workdir as it was, so the corrected one
runs. A damaged newest checkpoint is reported and the newest intact one
resumed; the damaged step is moved aside to `checkpoints/STEP.corrupt`.
"""
import os
import signal
import sys
import threading
import time
from typing import Any, NamedTuple

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import tqdm

from moe_jax import containment
from moe_jax.data import pipeline
from moe_jax.errors import ConfigError, CorruptCheckpointError, NonFiniteLossError
from moe_jax.eval import norms
from moe_jax.models import accounting, stacking
from moe_jax.models import dispatch as dispatch_lib
from moe_jax.models import config as model_config
from moe_jax.train import clock, metrics, program as program_lib, summary
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, config_check, files, lineage, placement, run_record


class _Interrupts:
  """SIGTERM (preemption) and a first SIGINT (Ctrl-C) set a flag: the loop
  saves and returns at the end of the step. A second SIGINT stops at once
  (KeyboardInterrupt; the newest complete checkpoint stays).

  A handler runs only when the main thread runs Python, so a SIGTERM during
  a compile (a minute for a large model's step) waits for it. When nothing
  is unsaved there is nothing to wait for: while `holds` names what the
  in-memory state equals (a complete checkpoint, or the run's seeded start,
  which a rerun makes again), a thread that hears the signal at once (through
  signal.set_wakeup_fd) ends the process there. One process only: several
  stop together at a step (`agreed`)."""

  def __init__(self):
    self.requested = False
    self.holds = None
    self._previous, self._wakeup = {}, None
    for sig in (signal.SIGTERM, signal.SIGINT):
      try:
        self._previous[sig] = signal.signal(sig, self._handle)
      except ValueError:  # not the main thread (a notebook worker): no handler
        pass
    if self._previous and jax.process_count() == 1:
      read, write = os.pipe()
      os.set_blocking(write, False)
      self._wakeup = (signal.set_wakeup_fd(write, warn_on_full_buffer=False), read, write)
      threading.Thread(target=self._watch, args=(read,), daemon=True).start()

  def _watch(self, read):
    while True:
      heard = os.read(read, 64)
      if self._wakeup is None:   # restore() woke it to end
        os.close(read)
        return
      holds = self.holds
      if signal.SIGTERM in heard and holds:
        print(f'\nSIGTERM: {holds} holds this state, nothing to save; stopping now',
              file=sys.stderr, flush=True)
        os._exit(0)   # pylint: disable=protected-access

  def _handle(self, signum, _):
    if signum == signal.SIGINT:
      if self.requested:
        raise KeyboardInterrupt
      print('\ninterrupted: saving a checkpoint after this step (Ctrl-C again to stop without '
            'saving)', file=sys.stderr, flush=True)
    else:
      print('\nSIGTERM: saving a checkpoint after this step, then stopping', file=sys.stderr,
            flush=True)
    self.requested = True

  def agreed(self):
    """Whether any process was asked to stop. Each process of a multi-process
    run sees its signal at its own step, and one stopping alone would leave
    the others waiting in a collective; so they compare flags at a step that
    syncs anyway (logged or checkpointed) and stop there together."""
    return bool(np.max(multihost_utils.process_allgather(np.int32(self.requested))))

  def restore(self):
    self.holds = None
    if self._wakeup:
      (previous, _, write), self._wakeup = self._wakeup, None
      signal.set_wakeup_fd(previous)
      os.write(write, b'\0')
      os.close(write)
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def _say(message):
  """A line above the progress bar, before a phase that can be silent for a
  minute (a compile), so a log attributes the time."""
  if jax.process_index() == 0:
    tqdm.tqdm.write(message, file=sys.stderr)


def _check_finite(pending, last_saved):
  """Raises at the first step whose loss, gradient or updated params are not finite."""
  kept = (f'the last checkpoint before it (step {last_saved}) is kept' if last_saved is not None
          else 'no checkpoint was saved before it')
  for step_, values in pending:
    for key in ('loss', 'grad_norm', 'param_norm'):
      if not np.isfinite(values[key]):
        raise NonFiniteLossError(f'{key} is {values[key]} at step {step_}; stopped, {kept}')


def _write_json(workdir, name, record):
  if jax.process_index() == 0:
    files.write_json(os.path.join(workdir, name), record)


def _set_data_state(train_it, data_state, workdir, where):
  """Resumes the iterator; a state saved under another data.worker_count
  (grain's state differs in form) is a one-line error naming the key."""
  try:
    train_it.set_state(data_state)
  except (KeyError, TypeError, ValueError, IndexError):
    path = os.path.join(workdir, files.CONFIG)
    saved = files.get(files.read_json(path), 'data.worker_count') if os.path.exists(path) else None
    hint = f'; resume with --config.data.worker_count={saved}' if saved is not None else ''
    raise ConfigError(f'{where}: its data iterator state was saved with another '
                      f'data.worker_count{hint}') from None


class Restored(NamedTuple):
  """What `_restore` found: the program the state belongs to (the grown one
  past tau), the state (None: nothing to resume), its step (0: none), the
  damaged steps to set aside, and whether the state must grow before training."""
  program: Any
  state: Any
  step: int
  damaged: list
  grow_first: bool


def _restore(config, dst_config, mesh, program, workdir, train_it):
  """A Restored from the newest intact checkpoint in `workdir` (state None
  when there is none). Restoring reads only, so it runs before the run's
  first write.

  A step-tau checkpoint of the model before the transition comes from another
  run (a branch resumed from Fixed-E at tau): it is restored as it is and
  grows first (grow_first is True)."""
  directory = os.path.join(workdir, files.CHECKPOINTS)
  if os.path.lexists(directory) and not os.path.isdir(directory):
    raise ConfigError(f'{directory} is not a directory')
  if not os.path.isdir(directory):
    return Restored(program, None, 0, [], False)
  tau, grown, damaged = config.upcycle.step, None, []
  manager = checkpoint.Manager(directory, async_save=False, read_only=True)
  try:
    for step in reversed(manager.steps()):
      prog, grow_first = program, False
      if tau and step >= tau:
        grown = grown or program_lib.build(dst_config, mesh, start_step=tau)
        grow_first = step == tau and not manager.matches(step, grown.checkpoint_state.params)
        prog = program if grow_first else grown
      try:
        state, data_state, saved = program_lib.restore_state(prog, manager, step)
      except CorruptCheckpointError as e:
        damaged.append((step, str(e)))
        continue
      for _, message in damaged:
        logging.warning('%s; resuming from step %d, the newest intact checkpoint', message, step)
      other = files.diffs(saved, config) if data_state is not None and saved else []
      if other:   # the upcycle CLI's step 0 carried its source's position (files.py)
        logging.warning('checkpoint %s/%d holds a position in another data stream (%s): '
                        'this one starts from its beginning', directory, step, '; '.join(other))
      elif data_state is not None:
        _set_data_state(train_it, data_state, workdir, f'checkpoint {directory}/{step}')
      return Restored(prog, state, step, [s for s, _ in damaged], grow_first)
  finally:
    manager.close()
  if damaged:
    raise CorruptCheckpointError(f'no intact checkpoint to resume in {directory}: '
                                 + '; '.join(message for _, message in damaged))
  return Restored(program, None, 0, [], False)


def _set_aside(directory, step):
  """Moves a damaged step out of Orbax's sight (it lists digit names only),
  so the run saves that step again and never keeps it over intact ones."""
  src, dst = os.path.join(directory, str(step)), os.path.join(directory, f'{step}.corrupt')
  n = 1
  while os.path.exists(dst):
    n += 1
    dst = os.path.join(directory, f'{step}.corrupt{n}')
  os.rename(src, dst)
  logging.warning('moved the damaged checkpoint %s to %s', src, dst)


def _shut_down(manager, writer, raise_errors):
  """Waits for the last save and closes the sinks, trying each. Raises the
  first failure (a failed save names its step) unless an error is already
  on its way out, which is then the one reported."""
  first = None
  for close in (manager.wait, manager.close, writer.close):
    try:
      close()
    except Exception as e:  # pylint: disable=broad-except
      first = first or e
  if first is not None and raise_errors:
    raise first


def _source(config, workdir):
  """The checkpoint this run started from (run.json `source`): as recorded at
  its first start (the upcycle CLI records its --src in the workdir it
  writes), else `init_from` or `upcycle.source`."""
  recorded, ckpt = run_record.read_source(workdir), config.init_from or config.upcycle.source
  return recorded or (run_record.source_info(ckpt) if ckpt else None)


def _peek(config, tokenizer, train_it, num_batches):
  """The next `num_batches` training batches, leaving `train_it` where it is."""
  if not num_batches:
    return ()
  side = pipeline.train_iterator(config, tokenizer)
  side.set_state(train_it.get_state())
  return [next(side) for _ in range(num_batches)]


def train_and_evaluate(config, workdir, stop_at=None):
  """Trains `config` in `workdir`, resuming from its newest checkpoint.

  With `upcycle.step` = tau > 0 the model grows in memory after step tau by
  `upcycle.recipe`; checkpoints from tau on hold the grown model, so resuming
  on either side of tau works. A workdir whose newest checkpoint is another
  run's step tau, before the transition (a branch of Fixed-E), grows first.
  `stop_at` saves and returns once that step is reached (a time-sliced job, or
  a test of resuming). Returns the last logged metrics (with val_loss at eval
  steps).
  """
  # Init order: (1) checks that need nothing built (config, workdir path);
  # (2) the mesh (after jax.distributed); (3) the model config, checked before
  # a BPE tokenizer is trained, then the tokenizer fills in vocab_size;
  # (4) the compiled program and, with tau, the grown config; (5) the data
  # iterators; (6) the restored checkpoint (or fresh / init_from params), which
  # moves the iterator to its saved position; (7) the lineage. Nothing is
  # written before all of them pass.
  config = config.copy_and_resolve_references()
  config_check.check_run(config)
  files.check_dir_writable(workdir, 'workdir')
  containment.not_run_file(workdir, '--workdir')   # a run never starts inside another
  placement.initialize(config.mesh)
  mesh = placement.make_mesh(config.mesh)
  # 'auto' becomes this platform's path, so config.json and the metrics say what ran.
  config.moe.dispatch = dispatch_lib.resolve(
      config.moe.dispatch, dtype=config.model.dtype,
      dims=(config.model.d_model, config.moe.d_ff or config.model.d_ff), devices=mesh.size)
  model_config.from_config(config, vocab_size=1)   # before a BPE is trained
  tokenizer = pipeline.tokenizer_for(config, workdir)
  pipeline.resolve_vocab_size(config, tokenizer)
  files.check_compatible(config, workdir)
  program = program_lib.build(config, mesh)
  tau = config.upcycle.step
  dst_config = transition.target_config(config) if tau else None

  run_info = run_record.build(config, dst_config, _source(config, workdir), jax.device_count())
  train_it = pipeline.train_iterator(config, tokenizer)
  val_batches = pipeline.eval_batches(config, tokenizer) if config.eval_every_steps else []
  restored = _restore(config, dst_config, mesh, program, workdir, train_it)
  program, state, start, damaged = (restored.program, restored.state, restored.step,
                                    restored.damaged)
  last_saved = start if state is not None else None
  if state is None:
    init_params = None
    if config.init_from:
      init_params = checkpoint.restore_params(config.init_from,
                                              program.checkpoint_state.params)[0]
    state = program_lib.init_state(program, config.seed, init_params)

  # A resumed run has not grown past `start` yet.
  history = lineage.cut(lineage.for_run(
      workdir, run_info, 'init_from' if config.init_from else 'upcycle', config.seed), start)

  # Every check has passed: the first write.
  os.makedirs(workdir, exist_ok=True)
  if jax.process_index() == 0:
    for step_ in damaged:
      _set_aside(os.path.join(workdir, files.CHECKPOINTS), step_)
    cache = pipeline.tokenizer_cache(config, workdir)
    if cache and not os.path.exists(cache):
      files.write_text(cache, tokenizer.to_json())
  if damaged and jax.process_count() > 1:   # every process opens the manager after the move
    multihost_utils.sync_global_devices('moe_jax: damaged checkpoints set aside')
  _write_json(workdir, files.CONFIG, config.to_dict())
  _write_json(workdir, files.RUN, run_info)
  _write_json(workdir, lineage.FILE, history)
  manager = checkpoint.Manager.for_workdir(workdir, config.ckpt)

  if jax.process_index() == 0:
    print('\n'.join(summary.start_lines(program.config, run_info, mesh, workdir, start,
                                      program.grad_accum_steps)),
          file=sys.stderr, flush=True)
  writer = metrics.Writer(workdir, resume_step=start)
  peak = metrics.peak_flops(jax.devices()[0])
  interrupts = _Interrupts()
  # Logged at eval steps (seed 003 Fig. 2), of the params in the checkpoint layout.
  layer_norms = jax.jit(lambda params, cfg: norms.layer_norms(stacking.unstack(params, cfg)),
                        static_argnums=1)
  pending, last, finished, interrupted_at = [], {}, False, None
  t0, t0_step = time.perf_counter(), start

  def save(step_):
    saved = program.to_checkpoint(state)   # a copy under scan_layers, while it is written
    manager.save(step_, saved.params, saved.opt_state, train_it.get_state(),
                 meta=dict(config=program.config.to_dict(), lineage=history))

  def upcycle_now(program, state):
    """The transition at tau: the grown program and state, the lineage with
    the in-run stage, and upcycle/* metrics."""
    up = config.upcycle
    began = time.perf_counter()
    say = lambda message: _say(f'transition at step {tau} (+{time.perf_counter() - began:.1f} '
                               f's): {message}')
    batches = _peek(config, tokenizer, train_it, transition.batches_needed(config))
    report_batches = (val_batches or pipeline.eval_batches(config, tokenizer))
    program, state, growth = program_lib.upcycle(
        program, dst_config, state, mesh, batches, report_batches[:up.report_batches], say,
        source=os.path.abspath(workdir))
    interrupts.holds = None   # grown, and its lineage about to be written
    say('done; the grown model\'s train step compiles at its first step')
    report = transition.preserved(growth.reports)
    grown = transition.grow_lineage(
        history, tau, config, growth.recipe, report, workdir=workdir, start_step=tau,
        how='in_run', parent=dict(workdir=os.path.abspath(workdir), step=tau),
        tokens_per_step=run_info['tokens_per_step'], model=run_info['grown'])
    _write_json(workdir, lineage.FILE, grown)
    _write_json(workdir, files.REPORT, growth.record)
    for name, record in (growth.recipe.records or {}).items():
      _write_json(workdir, name, record)
    return program, state, grown, {f'upcycle/{k}': v for k, v in report.items()}

  interrupts.holds = (f'checkpoint {start}' if restored.state is not None else
                      f'the run\'s start (seed {config.seed})' if not config.init_from else
                      f'the run\'s start (init_from {config.init_from})')
  if restored.grow_first:
    program, state, history, grown_metrics = upcycle_now(program, state)
    writer.write(tau, grown_metrics)

  try:
    # Elapsed from the process's start: imports, backend start and compile show.
    bar = clock.progress_bar(range(start, config.total_steps), initial=start,
                             total=config.total_steps, desc='train',
                             disable=jax.process_index() != 0, dynamic_ncols=True)
    for i in bar:
      batch = placement.put_batch(next(train_it), program.batch_sharding)
      state, step_metrics = program.train_step(state, batch)   # compiled in its first call
      interrupts.holds = None
      done = i + 1
      pending.append((done, step_metrics))
      is_last, grow = done == config.total_steps, bool(tau) and done == tau
      stop = done == stop_at or (interrupts.requested and jax.process_count() == 1)
      eval_now = bool(val_batches) and (done % config.eval_every_steps == 0 or is_last or grow)
      log = done % config.log_every_steps == 0 or is_last or eval_now
      ckpt = (config.checkpoint_every_steps and done % config.checkpoint_every_steps == 0) or (
          is_last or stop or grow)
      if not (log or ckpt):
        continue
      if jax.process_count() > 1 and interrupts.agreed():
        stop = ckpt = True
      pending = jax.device_get(pending)
      _check_finite(pending, last_saved)
      last = dict(pending[-1][1])
      pending = []
      if grow:
        program, state, history, grown_metrics = upcycle_now(program, state)
        last.update(grown_metrics)
      if log:
        elapsed = time.perf_counter() - t0
        tokens_per_s = (done - t0_step) * config.batch_size * config.seq_len / elapsed
        t0, t0_step = time.perf_counter(), done
        last.update(perplexity=float(np.exp(min(last['loss'], 50.0))), tokens_per_s=tokens_per_s)
        if program.model.cfg.moe_layers:
          last['moe/dispatch'] = program.config.moe.dispatch
        if peak:
          flops = 3 * accounting.forward_flops_per_token(program.model.cfg, config.seq_len)
          last['mfu'] = tokens_per_s * flops / (peak * jax.device_count())
        if eval_now:
          last.update(program_lib.evaluate(program, state.params, val_batches))
          last.update(norms.flat(jax.device_get(layer_norms(state.params, program.model.cfg))))
        writer.write(done, last)
        bar.set_postfix(loss=f'{last["loss"]:.3f}', **(
            {'val': f'{last["val_loss"]:.3f}'} if 'val_loss' in last else {}))
      if interrupts.requested and jax.process_count() == 1:
        # A signal during this step's evaluation or transition: stop before
        # the next step, whose program may still have to compile.
        stop = ckpt = True
      if ckpt:
        save(done)
        last_saved = done
        if not (stop or config.ckpt.async_save):   # complete once save returns
          interrupts.holds = f'checkpoint {done}'
      if stop:
        interrupted_at = done if interrupts.requested else None
        break
    if not last and val_batches:   # nothing left to train: report the final model
      last = program_lib.evaluate(program, state.params, val_batches)
    finished = True
  finally:
    interrupts.restore()
    _shut_down(manager, writer, raise_errors=finished)
  if interrupted_at is not None and jax.process_index() == 0:   # the save has completed
    print(f'saved checkpoint {interrupted_at} in {os.path.join(workdir, files.CHECKPOINTS)}; '
          'the same command resumes from it', file=sys.stderr, flush=True)
  if 'val_loss' in last:
    # The loss of the best context-free model: what "learned something" beats.
    last['val_unigram_entropy'] = pipeline.validation_entropy(config, tokenizer)
  return last
