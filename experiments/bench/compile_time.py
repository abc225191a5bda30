"""Compile time of the train step with and without model.scan_layers.

  python -m experiments.bench.compile_time --preset=10layer --layers=24,6 \
    --out=/tmp/compile_time.jsonl

For each depth and scan setting: the train step of the preset's shape at
--layers layers is lowered and compiled ahead of time with abstract inputs
(nothing allocated, nothing run; as moe_jax/train/memory.py does), and
the seconds of each phase are written as one JSON line: build (the Program:
model, optimizer, shardings; init traced by jax.eval_shape), lower (trace +
StableHLO) and compile (XLA), each as wall clock (`_s`) and as this process'
CPU time, all its threads (`_cpu_s`): on a shared machine the wall clock
measures the load as much as the compile, the CPU time much less so.

With scan_layers the train state is stacked per scan column
(moe_jax/models/stacking.py), so the row measures that state's step.
"""
import argparse
import datetime
import json
import os
import time

import jax
import jax.numpy as jnp
import jaxlib

from configs import common
from experiments import provenance
from moe_jax.train import phases as phases_lib, program as program_lib, step
from moe_jax.workdir import placement


def measure(config):
  mesh = placement.make_mesh(config.mesh)
  c0, t0 = time.process_time(), time.perf_counter()
  program = program_lib.build(config, mesh)
  phases = phases_lib.build(config, config.upcycle.step)
  jitted = step.jit_train_step(program.model, program.tx, program.lr_fn, config,
                               program.state_shardings, program.batch_sharding, phases)
  batch = {k: jax.ShapeDtypeStruct((config.batch_size, config.seq_len), jnp.int32,
                                   sharding=program.batch_sharding)
           for k in ('inputs', 'targets', 'segment_ids', 'positions', 'loss_mask')}
  c1, t1 = time.process_time(), time.perf_counter()
  with jax.set_mesh(mesh):
    lowered = jitted.lower(program.abstract_state, batch)
    c2, t2 = time.process_time(), time.perf_counter()
    lowered.compile()
  c3, t3 = time.process_time(), time.perf_counter()
  return dict(build_s=round(t1 - t0, 2), lower_s=round(t2 - t1, 2), compile_s=round(t3 - t2, 2),
              build_cpu_s=round(c1 - c0, 2), lower_cpu_s=round(c2 - c1, 2),
              compile_cpu_s=round(c3 - c2, 2), hlo_chars=len(lowered.as_text()))


def main():
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument('--out', required=True)
  p.add_argument('--preset', default='10layer')
  p.add_argument('--layers', default='24')
  p.add_argument('--remat', default='none')
  p.add_argument('--batch_size', type=int, default=1)
  p.add_argument('--seq_len', type=int, default=128)
  args = p.parse_args()
  for layers in [int(n) for n in args.layers.split(',')]:
    for scan_layers in (False, True):
      config = common.base()
      common.apply_preset(config, args.preset)
      config.model.vocab_size = config.model.vocab_size or 32_000
      config.model.update(num_layers=layers, scan_layers=scan_layers, remat=args.remat)
      config.update(batch_size=args.batch_size, seq_len=args.seq_len)
      row = dict(preset=args.preset, num_layers=layers, scan_layers=config.model.scan_layers,
                 remat=args.remat, batch_size=args.batch_size, seq_len=args.seq_len,
                 **measure(config),
                 backend=jax.default_backend(), jax=jax.__version__,
                 jaxlib=jaxlib.__version__, load_avg_1m=round(os.getloadavg()[0], 1),
                 date=datetime.date.today().isoformat(), provenance=provenance.record())
      with open(args.out, 'a') as f:
        f.write(json.dumps(row) + '\n')
      print(json.dumps(row), flush=True)


if __name__ == '__main__':
  main()
