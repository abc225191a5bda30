"""How much device memory a config's train step needs, before a run starts.

    report(config, batch_per_device=8, device_memory=parse_bytes('80GB'))

The train step is compiled ahead of time for this backend with abstract
inputs (ShapeDtypeStructs with the run's shardings: nothing is allocated), and
XLA's own accounting of that executable (`compiled.memory_analysis()`) gives
the bytes per device:

  params, opt_state  the state the step reads (its shards on one device)
  batch              the step's input arrays
  temporaries        everything else live at the peak: activations kept for
                     the backward pass, gradients, logits, XLA scratch
  total              arguments + temporaries + outputs that do not reuse an
                     argument's buffer (the state is donated, so ~0)

What fits: total(b) is affine in the batch per device b (params and optimizer
state are fixed, temporaries grow with b), so two compiles at b and 2b give a
line and the largest b with total(b) <= device_memory (rounded down to a
multiple of grad_accum_steps; with 0, 'auto', both compiles use the count
auto chose at b, `accumulate.steps`). It is a fit, not a third compile; XLA's buffer
assignment is not exactly linear, so leave a margin. `python -m moe_jax.plan
--memory` prints this; docs/benchmarks.md ("Memory") checks it against runs.

On CPU, remat saves memory only under
XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false: XLA:CPU's
default scheduler runs each recomputation as early as it can, so what remat
dropped stays alive (same peak with and without; the per-compile option does
not reach it, jax 0.10.2). `python -m moe_jax.plan --memory` and
`moe_jax.main` add it to XLA_FLAGS for a remat config unless XLA_FLAGS names
it (moe_jax/xla_flags.py). The report names the XLA_FLAGS it ran under.
"""
import os
import re

import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import phases as phases_lib
from moe_jax.train import program as program_lib, step
from moe_jax.workdir import config_check, placement

_UNITS = {'B': 1, 'KB': 10**3, 'MB': 10**6, 'GB': 10**9, 'TB': 10**12,
          'KIB': 2**10, 'MIB': 2**20, 'GIB': 2**30, 'TIB': 2**40}
_BATCH_KEYS = ('inputs', 'targets', 'segment_ids', 'positions', 'loss_mask')


def parse_bytes(text):
  """'80GB', '24GiB', '512MB' -> bytes; a number without a unit (80 what?)
  or no bytes at all (0GB: nothing fits, not a plan) is refused."""
  match = re.fullmatch(r'\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([A-Za-z]+)\s*', str(text))
  if not match or match.group(2).upper() not in _UNITS:
    raise ConfigError(f'--device_memory={text!r}: expected a number with a unit '
                      f'(e.g. 80GB, 24GiB; units {sorted(_UNITS)})')
  nbytes = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
  if nbytes <= 0:
    raise ConfigError(f'--device_memory={text!r} must be at least 1 byte')
  return nbytes


def _tree_bytes(tree):
  """Bytes on one device of a tree of sharded ShapeDtypeStructs."""
  return int(sum(np.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize
                 for x in jax.tree.leaves(tree)))


def _vocab_size(config):
  """model.vocab_size, or the tokenizer's (a BPE not trained yet: its target size)."""
  if config.model.vocab_size:
    return config.model.vocab_size
  if config.data.tokenizer == 'bpe' and not config.data.tokenizer_path:
    return config.data.bpe_vocab_size
  return pipeline.tokenizer_for(config, None, train=False).vocab_size


def batch_shards(config, mesh):
  """How many ways the batch is split (rows per device = batch_size / this)."""
  rows = mesh.size
  sharding_ = placement.batch_sharding(mesh, config.mesh)
  return rows // sharding_.shard_shape((rows, 1))[0]


def compile_step(config, mesh):
  """(memory_analysis, abstract state, abstract batch, microbatches per step)
  of `config`'s train step."""
  program = program_lib.build(config, mesh)
  phases = phases_lib.build(config, config.upcycle.step)
  jitted = step.jit_train_step(program.model, program.tx, program.lr_fn, config,
                               program.state_shardings, program.batch_sharding, phases)
  shape = (config.batch_size, config.seq_len)
  batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=program.batch_sharding)
           for k in _BATCH_KEYS}
  with jax.set_mesh(mesh):
    compiled = jitted.lower(program.abstract_state, batch).compile()
  return compiled.memory_analysis(), program.abstract_state, batch, program.grad_accum_steps


def measure(config, mesh, batch_per_device):
  """Bytes per device of the train step at `batch_per_device` rows a device."""
  config = config.copy_and_resolve_references()
  config.batch_size = batch_per_device * batch_shards(config, mesh)
  config_check.check_run(config)
  stats, state, batch, accum = compile_step(config, mesh)
  params, opt_state = _tree_bytes(state.params), _tree_bytes(state.opt_state)
  arguments = int(stats.argument_size_in_bytes)
  outputs = int(stats.output_size_in_bytes) - int(stats.alias_size_in_bytes)
  temporaries = int(stats.temp_size_in_bytes)
  return dict(batch_per_device=batch_per_device, grad_accum_steps=accum, params=params,
              opt_state=opt_state, batch=_tree_bytes(batch), temporaries=temporaries,
              outputs_not_aliased=outputs, total=arguments + temporaries + outputs)


def report(config, batch_per_device=None, device_memory=None):
  """The memory report (one dict, bytes per device); with `device_memory`
  (bytes) also the largest batch per device that fits, by a linear fit over
  compiles at batch_per_device and twice that."""
  config = config.copy_and_resolve_references()
  config.model.vocab_size = _vocab_size(config)
  mesh = placement.make_mesh(config.mesh)
  shards = batch_shards(config, mesh)
  if batch_per_device is None:
    if config.batch_size % shards:
      raise ConfigError(f'batch_size={config.batch_size} is not divisible by the {shards} '
                        'batch shards of the mesh')
    batch_per_device = config.batch_size // shards
  if batch_per_device <= 0:
    raise ConfigError(f'--batch_per_device={batch_per_device} must be positive')
  out = dict(measure(config, mesh, batch_per_device), devices=mesh.size, batch_shards=shards,
             backend=jax.default_backend(), seq_len=config.seq_len,
             remat=config.model.remat,
             loss_chunk=config.model.loss_chunk, mu_dtype=config.opt.mu_dtype,
             xla_flags=os.environ.get('XLA_FLAGS', ''))
  if device_memory is not None:
    # The same microbatch count at 2b: auto's count grows with the batch,
    # which would bend the line.
    config.grad_accum_steps = out['grad_accum_steps']
    twice = measure(config, mesh, 2 * batch_per_device)
    per_row = (twice['total'] - out['total']) / batch_per_device
    fixed = out['total'] - per_row * batch_per_device
    n = out['grad_accum_steps']
    fit = int((device_memory - fixed) // per_row) // n * n if per_row > 0 else None
    out.update(device_memory=device_memory, max_batch_per_device=max(fit, 0),
               max_batch_method=f'linear fit of total over compiles at batch_per_device '
                                f'{batch_per_device} and {2 * batch_per_device}',
               bytes_per_row=int(per_row), fixed_bytes=int(fixed))
  return out
