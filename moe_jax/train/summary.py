"""The lines a training run prints when it starts: what it trains, on what,
for how long, and where it writes. A run that says so up front is one whose
wrong config is caught before it has cost an hour."""
import os

from moe_jax import xla_flags
from moe_jax.model_name import describe
from moe_jax.workdir import lineage_table

# The first word of each line, so a reader can tell them from the rest.
LABELS = ('model', 'grows', 'tokens', 'devices', 'memory', 'steps', 'writes')


def _model(summary):
  return (f'{describe(summary)}, {lineage_table.num(summary["params"])} params '
          f'({lineage_table.num(summary["params_active"])} active)')


def _accum(config, accum):
  """'grad_accum_steps N', saying where 'auto' (0) chose N."""
  if config.grad_accum_steps:
    return f'grad_accum_steps {accum}'
  return f'grad_accum_steps auto: {accum} microbatches (CPU, cache-sized)'


def _memory(config, kinds, accum):
  """The memory settings that are not the plain step's, and on CPU whether
  remat can free anything there (moe_jax/xla_flags.py); '' for the plain step."""
  model = config.model
  parts = ([f'remat {model.remat}'] if model.remat != 'none' else []) + (
      [_accum(config, accum)] if accum > 1 else []) + (
      [f'loss_chunk {model.loss_chunk}'] if model.loss_chunk else []) + (
      ['scan_layers'] if model.scan_layers else [])
  note = xla_flags.describe(model.remat) if 'cpu' in kinds else ''
  return ', '.join(parts) + (f'; {note}' if note else '')


def start_lines(config, run_info, mesh, workdir, start, grad_accum_steps=None):
  """The start summary: model and parameter counts (total, active), tokens
  per step, devices and mesh, the MoE dispatch path, steps (and where it
  resumes or grows), and what it writes where. `run_info` is run.json's
  record (run_record.build); `start` the step it resumes from (0: new);
  `grad_accum_steps` the microbatch count the step runs (default: the
  config's, 0 counting as 1)."""
  kinds = sorted({d.platform for d in mesh.devices.flat})
  expert_parallel = mesh.shape.get('expert', 1) > 1
  shape = ' '.join(f'{axis}={size}' for axis, size in mesh.shape.items())
  lines = [f'model    {_model(run_info["model"])}, {config.model.num_layers} layers, d_model '
           f'{config.model.d_model}']
  if run_info.get('grown'):
    lines.append(f'grows    at step {config.upcycle.step} by {config.upcycle.recipe} to '
                 f'{_model(run_info["grown"])}')
  lines += [
      f'tokens   {run_info["tokens_per_step"]:,} per step (batch {config.batch_size} x seq_len '
      f'{config.seq_len})',
      f'devices  {mesh.devices.size} {"/".join(kinds)}, mesh {shape}' + (
          f', moe.dispatch {config.moe.dispatch}' + (
              ' (expert-parallel all-to-all)' if expert_parallel else '')
          if config.moe.num_experts else ''),
  ]
  memory = _memory(config, kinds, grad_accum_steps or config.grad_accum_steps or 1)
  if memory:
    lines.append(f'memory   {memory}')
  lines += [
      f'steps    {start} -> {config.total_steps}' + (
          f' (resuming from checkpoint {start})' if start else ''),
      f'writes   {os.path.abspath(workdir)}: checkpoints/ every '
      f'{config.checkpoint_every_steps or config.total_steps} steps (and at the end or on '
      'SIGTERM), metrics.jsonl, tb/',
  ]
  return lines
