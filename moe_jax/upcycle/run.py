"""Checkpoint to checkpoint: what `python -m moe_jax.upcycle` does.

  restore the source params (shapes checked against the source's config.json)
  -> target config -> utility scores (if asked) -> jitted, sharded transform
  -> function-preservation report on validation batches
  -> a new workdir at --dst with config.json, tokenizer, a step-0 checkpoint
     (params only: training starts a fresh optimizer state) and the report.

--src is only read. --dst is built in a temporary sibling directory and
renamed into place at the end, so it appears whole or not at all; an existing
--dst is refused unless `overwrite`, and then replaced only after the new one
is complete.
"""
import json
import os
import shutil

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, files, placement, run_record, staging


def _paths(src, dst, overwrite):
  src_dir, step = checkpoint.resolve(src)
  src_workdir = os.path.dirname(src_dir)
  dst = os.path.abspath(os.path.expanduser(dst))
  if os.path.commonpath([dst, src_workdir]) in (dst, src_workdir):
    raise ConfigError(f'--dst={dst} must lie outside --src (workdir {src_workdir})')
  return src_dir, step, src_workdir, staging.check(dst, overwrite, '--dst')


def upcycle_checkpoint(up_config, src, dst, overwrite=False):
  """Grows the checkpoint at `src` by `up_config` (an `upcycle` config group)
  into a new workdir `dst`; returns the preservation report."""
  src_dir, step, src_workdir, dst = _paths(src, dst, overwrite)
  manager = checkpoint.Manager(src_dir, async_save=False, read_only=True)
  step = manager.latest_step() if step is None else step
  if step is None:
    raise ConfigError(f'no checkpoint in {src_dir}')
  # The source's model at that step (the grown one if it was upcycled in-run).
  config = transition.config_at(checkpoint.workdir_config(src), step)
  config.upcycle = up_config
  config.upcycle.step = 0
  dst_config = transition.target_config(config)
  mesh = placement.make_mesh(config.mesh)

  src_abstract = transition.abstract_params(config)
  src_shardings = placement.param_shardings(src_abstract, mesh, config.mesh)
  params = manager.restore(step, checkpoint.abstract_like(src_abstract, src_shardings))['params']
  manager.close()
  dst_config.upcycle.source = os.path.join(src_dir, str(step))

  with staging.staged(dst) as tmp:
    # The tokenizer goes with the model; reading it from a copy keeps --src untouched.
    for name in pipeline.TOKENIZER_FILES:
      if os.path.exists(os.path.join(src_workdir, name)):
        shutil.copy(os.path.join(src_workdir, name), tmp)
    tokenizer = pipeline.tokenizer_for(config, tmp)
    up = config.upcycle
    score_batches = ()
    if up.args.get('allocation') == 'utility':
      it = pipeline.train_iterator(config, tokenizer)
      score_batches = [next(it) for _ in range(up.utility_batches)]
    dst_abstract = transition.abstract_params(dst_config)
    dst_shardings = placement.param_shardings(dst_abstract, mesh, config.mesh)
    dst_params, recipe, scores = transition.apply(config, dst_config, params, score_batches,
                                                  dst_shardings)
    report_batches = pipeline.eval_batches(config, tokenizer)[:up.report_batches]
    report = transition.preservation_report(config, dst_config, params, dst_params,
                                            report_batches)
    report = dict(report, source=dst_config.upcycle.source, recipe=recipe.describe(),
                  seed=up.seed)

    files.write_config(tmp, dst_config)
    files.write_json(os.path.join(tmp, 'upcycle_report.json'), report)
    if scores:
      files.write_json(os.path.join(tmp, 'upcycle_scores.json'), scores)
    run_record.write(tmp, run_record.build(dst_config, source=run_record.source_info(
        dst_config.upcycle.source)))
    out = checkpoint.Manager(os.path.join(tmp, checkpoint.CHECKPOINTS), async_save=False)
    out.save(0, dst_params, meta=dict(upcycled_from=report['source'], recipe=up.recipe,
                                      seed=up.seed, config=json.loads(
                                          dst_config.to_json_best_effort())))
    out.close()
  return report
