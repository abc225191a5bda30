"""The memory report (moe_jax/train/memory.py) over presets x remat x grad_accum_steps.

  XLA_FLAGS=--xla_cpu_enable_concurrency_optimized_scheduler=false \
    python -m experiments.bench.memory_grid --out=/tmp/memory_grid.jsonl

(on CPU without that flag every remat policy reports the same temporaries:
moe_jax/train/memory.py).

One JSON line per (preset, remat, grad_accum_steps), appended as each compile
finishes (a long grid can be cut short and keeps what it has). Every row is
an AOT compile on this backend with abstract inputs: nothing is allocated.
The shapes are the presets'; the batch is --batch_per_device rows of
--seq_len tokens on one device, compute in --dtype.
"""
import argparse
import datetime
import json

import jax
import jaxlib

from configs import common
from experiments import provenance
from moe_jax.train import memory
from moe_jax.workdir import placement

PRESETS = ('8x0.5b', '8x15m', '10layer', '8x44m', '8x0.1b', '8x0.2b', '8x1b')
REMATS = ('none', 'full', 'save_dots_no_batch', 'save_moe', 'save_dots')


def rows(presets, remats, accums):
  """(preset, remat, grad_accum_steps), the accumulation rows at none and full only."""
  for preset in presets:
    for remat in remats:
      yield preset, remat, 1
    for accum in accums:
      if accum != 1:
        for remat in ('none', 'full'):
          yield preset, remat, accum


def main():
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument('--out', required=True)
  p.add_argument('--presets', default=','.join(PRESETS))
  p.add_argument('--remats', default=','.join(REMATS))
  p.add_argument('--accums', default='1,4')
  p.add_argument('--batch_per_device', type=int, default=16)
  p.add_argument('--seq_len', type=int, default=1024)
  p.add_argument('--dtype', default='bfloat16')
  p.add_argument('--num_layers', type=int, default=None,
                 help="the presets' depth cut or grown to this many layers")
  args = p.parse_args()
  for preset, remat, accum in rows(args.presets.split(','), args.remats.split(','),
                                   [int(a) for a in args.accums.split(',')]):
    config = common.base()
    common.apply_preset(config, preset)
    config.model.vocab_size = config.model.vocab_size or 32_000
    config.model.update(remat=remat, dtype=args.dtype)
    if args.num_layers:
      config.model.num_layers = args.num_layers
    config.update(seq_len=args.seq_len, grad_accum_steps=accum)
    mesh = placement.make_mesh(config.mesh)
    t0 = datetime.datetime.now()
    row = memory.measure(config, mesh, args.batch_per_device)
    row.update(preset=preset, num_layers=config.model.num_layers, remat=remat,
               grad_accum_steps=accum, seq_len=args.seq_len, dtype=args.dtype,
               devices=mesh.size, backend=jax.default_backend(),
               jax=jax.__version__, jaxlib=jaxlib.__version__,
               compile_s=round((datetime.datetime.now() - t0).total_seconds(), 1),
               date=t0.strftime('%Y-%m-%d'), provenance=provenance.record())
    with open(args.out, 'a') as f:
      f.write(json.dumps(row) + '\n')
    print(json.dumps(row), flush=True)


if __name__ == '__main__':
  main()
