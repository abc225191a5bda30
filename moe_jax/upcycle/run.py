"""Checkpoints to a new workdir: what `python -m moe_jax.upcycle` does.

  read each source (paths, step, config at that step, tokenizer; several
  sources must be distinct and of one architecture: sources.py) -> target
  config -> restore -> the training batches the recipe reads
  (transition.batches_needed) -> transition.grow (prepare, build, jitted and
  sharded transform, each source's function-preservation report on its own
  validation batches) -> a new workdir at --dst with config.json, run.json,
  lineage.json (the chain of source 0 plus this growth; several sources are
  its `parents`, the others' own records its `parent_lineages`), tokenizer,
  the recipe's records, a step-0 checkpoint and the report.

One source: the step-0 checkpoint keeps the source's data position, so
training starts a fresh optimizer state and continues the data stream (seed
000 §5.1: CPT reads data pre-training did not), and the recipe's batches are
the ones CPT reads first. Several sources: each read its own data; the grown
model starts a fresh stream, and the recipe reads each source's first
batches.

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
from moe_jax.upcycle import recipes, sources as sources_lib, transition
from moe_jax.workdir import checkpoint, files, lineage, placement, run_record, staging


def check_report(report, where):
  bad = {k: v for k, v in report.items() if isinstance(v, float) and not math.isfinite(v)}
  if bad:
    raise NonFiniteLossError(f'{where}: the function-preservation report is not finite ('
                             + ', '.join(f'{k}={v}' for k, v in bad.items())
                             + '); nothing was written')


def _source_paths(recipe, srcs):
  """--src as a list: comma-separated for a several-source recipe."""
  several = recipes.get(recipe).sources == 'several'
  if isinstance(srcs, str):
    srcs = srcs.split(',') if several else [srcs]
  srcs = list(srcs)
  if several and (len(srcs) < 2 or not all(srcs)):
    raise ConfigError(f'{recipe} needs --src=A,B[,...]: at least 2 non-empty paths, got '
                      f'{",".join(srcs)!r}')
  if not several and len(srcs) != 1:
    raise ConfigError(f'upcycle.recipe={recipe} grows one source; --src names {len(srcs)}')
  return srcs


def upcycle_checkpoint(up_config, srcs, dst, overwrite=False):
  """Grows the checkpoint(s) `srcs` (a path; for a several-source recipe a
  list, or paths joined by commas) by `up_config` (an `upcycle` config group)
  into a new workdir `dst`; returns the preservation report."""
  srcs = _source_paths(up_config.recipe, srcs)
  sources = [sources_lib.Source(s, dst) for s in srcs]
  one = len(sources) == 1
  if not one:
    sources_lib.check_distinct(srcs, sources)
  dst = staging.check(dst, overwrite, '--dst')
  if not one:
    sources_lib.check_same_architecture(sources)
  config = sources[0].config.copy_and_resolve_references()
  config.upcycle = up_config.copy_and_resolve_references()
  config.upcycle.step = 0
  up = config.upcycle
  dst_config = transition.target_config(config, len(sources))

  mesh = placement.make_mesh(config.mesh)
  num_batches = transition.batches_needed(config, len(sources))
  inputs, data_state = [], None
  for s in sources:
    params, data = s.restore(mesh)
    data_state = data if one else None
    inputs.append(recipes.Input(s.config, params, s.batches(num_batches, data_state), s.ckpt,
                                s.step))
  dst_abstract = transition.abstract_params(dst_config)
  growth = transition.grow(
      config, dst_config, inputs,
      [pipeline.eval_batches(s.config, s.tokenizer)[:up.report_batches] for s in sources],
      placement.param_shardings(dst_abstract, mesh, config.mesh))
  for i, (s, r) in enumerate(zip(sources, growth.reports)):
    check_report(r, f'checkpoint {s.ckpt}' if one else f'--src {i} ({s.ckpt})')
  preserved = transition.preserved(growth.reports)

  dst_config.upcycle.source = sources[0].ckpt
  run_info = run_record.build(dst_config, source=run_record.source_info(sources[0].ckpt))
  parents = {} if one else dict(
      parents=[dict(checkpoint=s.ckpt, step=s.step) for s in sources],
      parent_lineages=[lineage.at_checkpoint(s.ckpt)[0] for s in sources[1:]])
  history = transition.grow_lineage(
      *lineage.at_checkpoint(sources[0].ckpt), config, growth.recipe, preserved, workdir=dst,
      start_step=0, how='upcycle', parent=dict(checkpoint=sources[0].ckpt, step=sources[0].step),
      tokens_per_step=run_info['tokens_per_step'], model=run_info['model'], **parents)
  # The tokenizer files are the same in every source (checked).
  meta = dict(upcycled_from=sources[0].ckpt if one else [s.ckpt for s in sources],
              recipe=up.recipe, seed=up.seed)
  write_workdir(dst, sources[0].workdir, dst_config, growth.record, run_info, history,
                growth.params, meta, records=growth.recipe.records, data_state=data_state)
  return growth.record


def write_workdir(dst, tokenizer_workdir, dst_config, report, run_info, history, params, meta,
                  records=None, data_state=None):
  """The grown model as a new workdir `dst`, whole or absent: the tokenizer
  files of `tokenizer_workdir`, config, upcycle report (and the recipe's
  records), run record, lineage and the step-0 checkpoint (`meta` plus
  lineage and config)."""
  with staging.staged(dst) as tmp:
    for name in pipeline.TOKENIZER_FILES:   # the tokenizer goes with the model
      if os.path.exists(os.path.join(tokenizer_workdir, name)):
        shutil.copy(os.path.join(tokenizer_workdir, name), tmp)
    files.write_config(tmp, dst_config)
    files.write_json(os.path.join(tmp, files.REPORT), report)
    for name, record in (records or {}).items():
      files.write_json(os.path.join(tmp, name), record)
    run_record.write(tmp, run_info)
    lineage.write(tmp, history)
    out = checkpoint.Manager(os.path.join(tmp, files.CHECKPOINTS), async_save=False)
    out.save(0, params, data_state=data_state, meta=dict(
        meta, lineage=history, config=json.loads(dst_config.to_json_best_effort())))
    out.close()
