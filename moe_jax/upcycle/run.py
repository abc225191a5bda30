"""Checkpoint to checkpoint: what `python -m moe_jax.upcycle` does.

  restore the source params (shapes checked against the source's config.json)
  -> target config -> utility scores (if asked) -> jitted, sharded transform
  -> function-preservation report on validation batches
  -> a new workdir at --dst with config.json, run.json, lineage.json (the
     source's chain plus this growth), tokenizer, a step-0 checkpoint
     (params and the source's data position: training starts a fresh
     optimizer state and continues the data stream) and the report.

--src is only read, and --dst may not overlap it, through symbolic links
either (compared as real paths). --dst is built in a staging directory beside
it and renamed into place at the end (workdir/staging.py), so it appears whole
or not at all; an existing --dst is refused unless `overwrite`, and then
replaced only after the new one is complete. A run killed on the way is
cleaned up, or its replacement finished, by the next one (which says so).
Otherwise every check (paths, configs, the source's digests, a finite report)
passes before anything is written.
"""
import json
import math
import os
import shutil

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError, NonFiniteLossError
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, containment, files, lineage, placement, run_record, staging


def _paths(src, dst, overwrite):
  """(checkpoints dir, step, source workdir, dst): dst as staging.resolve
  gives it, apart from the source workdir (workdir/containment.py)."""
  src_dir, step = checkpoint.resolve(src)
  src_workdir = os.path.dirname(src_dir)
  containment.apart(dst, '--dst', src_workdir, '--src', 'workdir')
  return src_dir, step, src_workdir, staging.check(dst, overwrite, '--dst')


def check_report(report, where):
  bad = {k: v for k, v in report.items() if isinstance(v, float) and not math.isfinite(v)}
  if bad:
    raise NonFiniteLossError(f'{where}: the function-preservation report is not finite ('
                             + ', '.join(f'{k}={v}' for k, v in bad.items())
                             + '); nothing was written')


def upcycle_checkpoint(up_config, src, dst, overwrite=False):
  """Grows the checkpoint at `src` by `up_config` (an `upcycle` config group)
  into a new workdir `dst`; returns the preservation report."""
  src_dir, step, src_workdir, dst = _paths(src, dst, overwrite)
  manager = checkpoint.Manager(src_dir, async_save=False, read_only=True)
  try:
    step = manager.latest_step() if step is None else step
    if step is None:
      raise ConfigError(f'no checkpoint in {src_dir}')
    # The source's model at that step (the grown one if it was upcycled in-run).
    config = transition.config_at(checkpoint.workdir_config(
        src, ' (--src must be a workdir, or a step inside one)'), step)
    config.upcycle = up_config
    config.upcycle.step = 0
    dst_config = transition.target_config(config)
    tokenizer = pipeline.tokenizer_for(config, src_workdir, train=False)
    pipeline.resolve_vocab_size(config, tokenizer)
    mesh = placement.make_mesh(config.mesh)
    src_abstract = transition.abstract_params(config)
    src_shardings = placement.param_shardings(src_abstract, mesh, config.mesh)
    restored = manager.restore(step, checkpoint.abstract_like(src_abstract, src_shardings))
  finally:
    manager.close()
  params = restored['params']
  dst_config.upcycle.source = os.path.join(src_dir, str(step))

  up = config.upcycle
  score_batches = ()
  if up.args.get('allocation') == 'utility':
    it = pipeline.train_iterator(config, tokenizer)
    if restored['data'] is not None:   # the batches CPT will read first
      it.set_state(restored['data'])
    score_batches = [next(it) for _ in range(up.utility_batches)]
  dst_abstract = transition.abstract_params(dst_config)
  dst_shardings = placement.param_shardings(dst_abstract, mesh, config.mesh)
  dst_params, recipe, scores = transition.apply(config, dst_config, params, score_batches,
                                                dst_shardings)
  report_batches = pipeline.eval_batches(config, tokenizer)[:up.report_batches]
  preserved = transition.preservation_report(config, dst_config, params, dst_params,
                                             report_batches)
  check_report(preserved, f'checkpoint {dst_config.upcycle.source}')
  report = dict(preserved, source=dst_config.upcycle.source, recipe=recipe.describe(),
                seed=up.seed)
  run_info = run_record.build(dst_config, source=run_record.source_info(
      dst_config.upcycle.source))
  history = transition.grow_lineage(
      *lineage.at_checkpoint(dst_config.upcycle.source), config, recipe, preserved, workdir=dst,
      start_step=0, how='upcycle', parent=dict(checkpoint=dst_config.upcycle.source, step=step),
      tokens_per_step=run_info['tokens_per_step'], model=run_info['model'])

  # The data stream goes on where the source stopped (seed 000 §5.1: CPT reads
  # data pre-training did not); a resumed or grown run keeps seed, batch_size
  # and seq_len (files.check_compatible), so the position holds.
  write_workdir(dst, src_workdir, dst_config, report, run_info, history, dst_params,
                dict(upcycled_from=report['source'], recipe=up.recipe, seed=up.seed),
                scores=scores, data_state=restored['data'])
  return report


def write_workdir(dst, tokenizer_workdir, dst_config, report, run_info, history, params, meta,
                  scores=None, data_state=None):
  """The grown model as a new workdir `dst`, whole or absent: the tokenizer
  files of `tokenizer_workdir`, config, upcycle report (and scores), run
  record, lineage and the step-0 checkpoint (`meta` plus lineage and config)."""
  with staging.staged(dst) as tmp:
    for name in pipeline.TOKENIZER_FILES:   # the tokenizer goes with the model
      if os.path.exists(os.path.join(tokenizer_workdir, name)):
        shutil.copy(os.path.join(tokenizer_workdir, name), tmp)
    files.write_config(tmp, dst_config)
    files.write_json(os.path.join(tmp, 'upcycle_report.json'), report)
    if scores:
      files.write_json(os.path.join(tmp, 'upcycle_scores.json'), scores)
    run_record.write(tmp, run_info)
    lineage.write(tmp, history)
    out = checkpoint.Manager(os.path.join(tmp, files.CHECKPOINTS), async_save=False)
    out.save(0, params, data_state=data_state, meta=dict(
        meta, lineage=history, config=json.loads(dst_config.to_json_best_effort())))
    out.close()
