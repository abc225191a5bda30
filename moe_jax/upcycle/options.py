"""What the planner (moe_jax/scaling_laws/plan.py, which reads no model code)
needs to know of a checkpoint: the facts of its workdir (model, tokens seen
over its whole lineage, seconds per step measured) and the sizes of the
models it can grow into, made by the recipes' own target configs.

  source = options.source(ckpt)
  targets = options.targets(ckpt, experts=(8,), top_k=2, factors=(2, 4))
"""
import os

import numpy as np

from moe_jax.errors import ConfigError
from moe_jax.upcycle import transition
from moe_jax.workdir import files, lineage, run_record


def step_seconds(workdir, tokens_per_step, first=0, last=None):
  """Median seconds per step over the tokens_per_s logged in metrics.jsonl at
  steps in (first, last] (the median skips the compile and eval intervals),
  or None."""
  rates = [r['tokens_per_s'] for r in files.metrics(workdir)
           if r.get('tokens_per_s') and first < r.get('step', 0) <= (last or float('inf'))]
  return float(tokens_per_step / np.median(rates)) if rates else None


def _run(workdir):
  run = files.read_json(os.path.join(workdir, files.RUN))
  for key in ('tokens_per_step', 'model'):
    if not run.get(key):
      raise ConfigError(f'{workdir}/{files.RUN}: missing field {key!r}')
  return run


def source(ckpt, tokens=None):
  """dict(workdir, step, model, tokens, tokens_per_step, seconds_per_step,
  devices, val_loss and val_step: its last measured val_loss) of the
  checkpoint at CKPT. `tokens` overrides the tokens seen (an import whose
  training is not recorded)."""
  workdir, _ = lineage.locate(ckpt)
  record, step = lineage.at_checkpoint(ckpt)
  if step is None:
    raise ConfigError(f'{workdir} has no checkpoint')
  run, last = _run(workdir), record['stages'][-1]
  tps = last['tokens_per_step'] or run['tokens_per_step']
  if tokens is None and last['tokens_before'] is not None:
    tokens = last['tokens_before'] + (step - last['start_step']) * tps
  val_step, val_loss = files.last_val_loss(workdir, last['start_step'], step)
  return dict(workdir=workdir, step=step, model=last['model'] or run['model'], tokens=tokens,
              tokens_per_step=tps, devices=run.get('devices'),
              seconds_per_step=step_seconds(workdir, tps, last['start_step'], step),
              val_loss=val_loss, val_step=val_step)


def targets(ckpt, experts=(8,), top_k=2, factors=(2, 4), granularity=(1,), shared=False):
  """[dict(name, how, model)]: a dense checkpoint sparse-upcycled to each of
  `experts` (top_k, renormalised gates as configs/upcycle/dense_to_moe.py;
  every expert a copy of the MLP, so as wide) at each `granularity` G (G > 1
  or `shared`: recipe finegrained, E G experts of width d_ff / G, top-(k G),
  and one shared expert with `shared`), an MoE one expert-upcycled by each of
  `factors` (top-k kept)."""
  workdir, _ = lineage.locate(ckpt)
  _, step = lineage.at_checkpoint(ckpt)
  config = transition.config_at(files.read_config(workdir), step or 0)
  out = []
  if not config.moe.num_experts:
    for e in experts:
      for g in granularity:
        c = config.copy_and_resolve_references()
        if g == 1 and not shared:
          c.upcycle.update(recipe='dense_to_moe', step=0)
          c.upcycle.target = {'moe': dict(num_experts=e, top_k=top_k, renormalize=True, d_ff=0)}
          name = f'sparse_{e}x'
        else:
          c.upcycle.update(recipe='finegrained', step=0)
          c.upcycle.args = dict(experts=e, top_k=top_k, granularity=g, shared=shared)
          c.upcycle.target = {'moe': dict(renormalize=True)}
          name = f'fine_{e}x_g{g}' + ('_shared' if shared else '')
        out.append(dict(name=name, how='sparse',
                        model=run_record.summary(transition.target_config(c))))
  else:
    for m in factors:
      c = config.copy_and_resolve_references()
      c.upcycle.update(recipe='expand_experts', factor=m, step=0)
      out.append(dict(name=f'expert_x{m}', how='expert',
                      model=run_record.summary(transition.target_config(c))))
  return out


def measured(workdir, tokens_per_step, devices):
  """(model, seconds per step at `tokens_per_step` on `devices`) of another
  workdir's newest stage: device-seconds per token carry over."""
  run, (record, step) = _run(workdir), lineage.at_checkpoint(workdir)
  last = record['stages'][-1]
  seconds = step_seconds(workdir, run['tokens_per_step'], last['start_step'], step)
  if seconds is None:
    raise ConfigError(f'--measured={workdir}: no tokens_per_s in its metrics.jsonl')
  per_token = seconds * (run.get('devices') or 1) / run['tokens_per_step']
  return last['model'] or run['model'], per_token * tokens_per_step / devices
