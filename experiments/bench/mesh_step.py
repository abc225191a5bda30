"""Train-step time and tokens/s against device count and mesh shape.

  python -m experiments.bench.mesh_step --out=mesh.json           # GPU / TPU host
  python -m experiments.bench.mesh_step --out=mesh.json --small   # CPU smoke run

Times the trainer's own step (`moe_jax.train.program.build`: model, AdamW,
param / optimizer-state shardings, donation, and expert-parallel dispatch when
the mesh has expert > 1) on a fixed synthetic batch, for every mesh of the
grid. Weak scaling: the global batch is `--batch_per_device` times the number
of devices, so ideal scaling keeps tokens/s per device constant; `efficiency`
is tokens/s per device over the same quantity for the first row. The default
grid (`default_meshes`) takes n = 1, 2, 4, ... up to all devices and, for
each n, pure data parallelism and mixes with the expert axis; `--meshes`
replaces it ('data=2,expert=4;fsdp=2,expert=2,tensor=2', each on its product
of devices). `--small` is a tiny float32 model for a CPU smoke run (fake
devices via XLA_FLAGS=--xla_force_host_platform_device_count=8): it checks
the script end to end; its timings mean nothing.

Several processes (`python -m moe_jax.multiprocess --processes=2
--devices_per_process=2 -- python -m experiments.bench.mesh_step ...`) time
the meshes that span every device (the default grid keeps only those); each
process places its block of the batch and process 0 writes --out.
"""
import argparse
import datetime
import itertools
import math
import time

import jax
import jaxlib
import numpy as np

from configs import common
from experiments.bench import cpu_step
from experiments.bench import moe_layer
from moe_jax import sharding
from moe_jax.errors import ConfigError
from moe_jax.models import accounting
from moe_jax.train import program as program_lib
from moe_jax.workdir import placement

FULL = dict(preset='10layer', vocab_size=32_000, seq_len=1024, batch_per_device=8,
            dtype='bfloat16', remat='none', attention='auto', loss_chunk=0,
            cross_entropy='reference', warmup=3, reps=20)
SMALL = dict(preset='tiny', vocab_size=259, seq_len=32, batch_per_device=2,
             dtype='float32', remat='none', attention='auto', loss_chunk=0,
             cross_entropy='reference', warmup=1, reps=3)


def parse_meshes(text):
  """'data=2,expert=4;fsdp=8' -> [{'data': 2, 'expert': 4}, {'fsdp': 8}]."""
  out = []
  for item in filter(None, text.split(';')):
    sizes = {}
    for pair in item.split(','):
      axis, eq, size = pair.partition('=')
      if not eq or axis.strip() not in sharding.MESH_AXES or not size.strip().isdigit():
        raise ConfigError(f'--meshes item {item!r}: want AXIS=SIZE,... with AXIS one of '
                          f'{sharding.MESH_AXES}')
      sizes[axis.strip()] = int(size)
    out.append(sizes)
  return out


def default_meshes(num_devices, num_experts):
  """For n = 1, 2, 4, ... and all devices: data=n; as many experts per axis as
  divide (data=n/e, expert=e); from n = 4 data=2 x expert=n/2; from n = 8
  fsdp=2 x expert=n/4 x tensor=2 (the test meshes at n = 8)."""
  counts = sorted({2**i for i in range(int(math.log2(num_devices)) + 1)} | {num_devices})
  out = []
  for n in counts:
    e = math.gcd(n, num_experts or 1)
    shapes = [dict(data=n), dict(data=n // e, expert=e)]
    if n >= 4 and n % 2 == 0:
      shapes.append(dict(data=2, expert=n // 2))
    if n >= 8 and n % 4 == 0:
      shapes.append(dict(fsdp=2, expert=n // 4, tensor=2))
    for shape in shapes:   # size-1 axes dropped, so equal meshes compare equal
      shape = {a: size for a, size in shape.items() if size > 1} or dict(data=1)
      if shape not in out and (num_experts or 1) % shape.get('expert', 1) == 0:
        out.append(shape)
  return out


def make_config(grid, num_experts, top_k, sizes):
  config = common.base()
  common.apply_preset(config, grid['preset'])
  if num_experts:
    config.moe.update(num_experts=num_experts, top_k=top_k)
  config.moe.dispatch = grid['dispatch']
  config.model.vocab_size = config.model.vocab_size or grid['vocab_size']
  config.model.dtype = grid['dtype']
  config.model.remat = grid['remat']
  config.model.attention = grid['attention']
  config.model.loss_chunk = grid['loss_chunk']
  config.model.cross_entropy = grid['cross_entropy']
  n = math.prod(sizes.values())
  config.mesh.update(data=1, fsdp=1, expert=1, tensor=1, num_devices=n)
  config.mesh.update(sizes)
  config.update(seq_len=grid['seq_len'], batch_size=grid['batch_per_device'] * n)
  return config, n


def synthetic_batch(config):
  """One batch shaped like the pipeline's: random tokens, one segment per row."""
  shape = (config.batch_size, config.seq_len)
  tokens = np.random.default_rng(0).integers(3, config.model.vocab_size, (shape[0], shape[1] + 1))
  return dict(inputs=tokens[:, :-1].astype(np.int32), targets=tokens[:, 1:].astype(np.int32),
              segment_ids=np.ones(shape, np.int32),
              positions=np.broadcast_to(np.arange(shape[1], dtype=np.int32), shape).copy(),
              loss_mask=np.ones(shape, np.float32))


def bench_mesh(config, warmup, reps):
  """Median seconds per train step on config.mesh, and the compile+first step."""
  mesh = placement.make_mesh(config.mesh)
  program = program_lib.build(config, mesh)
  state = program_lib.init_state(program, config.seed)
  local = config.batch_size // jax.process_count()
  batch = placement.put_batch(
      {k: v[jax.process_index() * local:(jax.process_index() + 1) * local]
       for k, v in synthetic_batch(config).items()}, program.batch_sharding)
  t0 = time.perf_counter()
  for _ in range(warmup):   # the first call compiles
    state, metrics = program.train_step(state, batch)
    jax.block_until_ready(metrics['loss'])
  first = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    state, metrics = program.train_step(state, batch)
    jax.block_until_ready((state.params, metrics['loss']))
    times.append(time.perf_counter() - t0)
  cfg = program.model.cfg
  flops = 3 * accounting.forward_flops_per_token(cfg, config.seq_len)
  logits_flops = 3 * 2 * cfg.d_model * cfg.vocab_size   # the output projection's matmul
  return float(np.median(times)), first, flops, logits_flops, float(metrics['loss'])


def run_row(grid, args, sizes):
  config, n = make_config(grid, args.experts, args.top_k, sizes)
  row = dict(preset=grid['preset'], dispatch=grid['dispatch'], mesh=sizes, devices=n,
             global_batch=config.batch_size, seq_len=config.seq_len, remat=grid['remat'],
             attention=grid['attention'], loss_chunk=grid['loss_chunk'],
             cross_entropy=grid['cross_entropy'])
  try:
    seconds, first, flops, logits_flops, loss = bench_mesh(config, grid['warmup'], grid['reps'])
  except Exception as err:  # pylint: disable=broad-except
    # One mesh failing (out of memory on too few devices) must not lose the rest.
    row['error'] = f'{type(err).__name__}: {str(err).splitlines()[0][:200]}'
    return row
  tokens_per_s = config.batch_size * config.seq_len / seconds
  tflops = tokens_per_s * flops / n / 1e12
  with_logits = tokens_per_s * (flops + logits_flops) / n
  return dict(row, step_ms=seconds * 1e3, warmup_s=first, tokens_per_s=tokens_per_s,
              tokens_per_s_per_device=tokens_per_s / n, tflops_per_device=tflops,
              mfu=tflops * 1e12 / grid['peak'] if grid['peak'] else None,
              mfu_with_logits=with_logits / grid['peak'] if grid['peak'] else None, loss=loss,
              peak_bytes_in_use=_peak_bytes())


def _peak_bytes():
  """The device's peak bytes in use so far in this process (None where the
  backend keeps no statistics, as XLA:CPU): a later row reports the most of
  every row before it too."""
  stats = jax.devices()[0].memory_stats()
  return stats.get('peak_bytes_in_use') if stats else None


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--out', required=True, help='results JSON path')
  ap.add_argument('--small', action='store_true', help='tiny model: CPU smoke run')
  ap.add_argument('--meshes', default='', help="'data=2,expert=4;fsdp=8' (default: a grid)")
  ap.add_argument('--preset', default=None,
                  help='model preset(s) (moe_jax/models/presets.py), e.g. 8x15m,8x44m')
  ap.add_argument('--dispatch', default='auto',
                  help="moe.dispatch value(s), e.g. 'einsum,ragged,pallas'")
  ap.add_argument('--experts', type=int, default=8, help='moe.num_experts (0: the preset\'s)')
  ap.add_argument('--top_k', type=int, default=2)
  ap.add_argument('--seq_len', type=int, default=None)
  ap.add_argument('--batch_per_device', default='',
                  help="sequences per device, one or several ('8,16,32': the best-batch sweep)")
  ap.add_argument('--remat', default=None, help='model.remat (models/remat.py)')
  ap.add_argument('--attention', default='auto',
                  help="model.attention value(s), e.g. 'pallas,reference'")
  ap.add_argument('--loss_chunk', default='0',
                  help="model.loss_chunk value(s), e.g. '0,4096' (0: the whole batch's logits)")
  ap.add_argument('--cross_entropy', default='reference',
                  help="model.cross_entropy value(s): 'reference,fused' (models/losses.py)")
  ap.add_argument('--dtype', default=None, help="model.dtype (default: the grid's)")
  args = ap.parse_args(argv)
  placement.initialize(common.mesh())   # joins a run of moe_jax.multiprocess, if any
  grid = dict(SMALL if args.small else FULL)
  grid.update({k: v for k, v in dict(seq_len=args.seq_len, remat=args.remat,
                                     dtype=args.dtype).items() if v})
  batches = [int(b) for b in args.batch_per_device.split(',') if b] or [grid['batch_per_device']]
  meshes = parse_meshes(args.meshes) or [
      m for m in default_meshes(jax.device_count(), args.experts)
      if jax.process_count() == 1 or math.prod(m.values()) == jax.device_count()]

  dev = jax.devices()[0]
  grid['peak'] = next((p for name, p in moe_layer.PEAK_FLOPS if name in dev.device_kind), None)
  meta = dict(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
              jax=jax.__version__, jaxlib=jaxlib.__version__, platform=dev.platform,
              device=dev.device_kind, device_count=jax.device_count(),
              process_count=jax.process_count(), grid=grid,
              experts=args.experts, top_k=args.top_k,
              mfu='6*N_active*tokens/s (+ attention, models/accounting.py) over the '
                  'nominal dense bf16 peak of the device',
              mfu_with_logits='as mfu, plus the output projection (6*d_model*vocab per '
                              'token), as Megatron-style MFU counts it',
              timing=(f'trainer train_step (jitted, donated state), {grid["warmup"]} warm-up '
                      f'steps incl. compile, then {grid["reps"]} steps each followed by '
                      'block_until_ready; median reported'))
  rows = []
  presets = (args.preset or grid['preset']).split(',')
  for preset, dispatch, batch, attention, loss_chunk, cross_entropy in itertools.product(
      presets, args.dispatch.split(','), batches, args.attention.split(','),
      [int(c) for c in args.loss_chunk.split(',')], args.cross_entropy.split(',')):
    runs = dict(grid, preset=preset, dispatch=dispatch, batch_per_device=batch,
                attention=attention, loss_chunk=loss_chunk, cross_entropy=cross_entropy)
    first = len(rows)
    for sizes in meshes:
      rows.append(run_row(runs, args, sizes))
      base = next((r for r in rows[first:] if 'error' not in r), None)
      if base and 'error' not in rows[-1]:
        rows[-1]['efficiency'] = rows[-1]['tokens_per_s_per_device'] / base['tokens_per_s_per_device']
      if jax.process_index() == 0:
        print(_line(rows[-1]), flush=True)
        cpu_step.write_json(args.out, dict(meta=meta, results=rows))


def _line(row):
  chunk = f" chunk{row['loss_chunk']}" if row['loss_chunk'] else ''
  chunk += ' fused' if row.get('cross_entropy') == 'fused' else ''
  mesh = (f"{row['preset']} {row['dispatch']} {row['attention']}{chunk} b{row['global_batch']} "
          + ','.join(f'{k}={v}' for k, v in row['mesh'].items()))
  if 'error' in row:
    return f'{row["devices"]:>3} {mesh:<28} error: {row["error"]}'
  mfu = f'  MFU {row["mfu"]:.3f} ({row["mfu_with_logits"]:.3f} with logits)' if row['mfu'] else ''
  return (f'{row["devices"]:>3} {mesh:<40} step {row["step_ms"]:9.2f} ms  '
          f'{row["tokens_per_s"]:12.0f} tok/s  {row["tokens_per_s_per_device"]:10.0f} tok/s/dev  '
          f'eff {row["efficiency"]:.2f}{mfu}')


if __name__ == '__main__':
  main()
