"""The programs the in-run transition compiles at the GPU workflow's size, on
this machine's CPU (issue 74): each program's name, when it started and its
XLA compile time, then the save of the grown state.

  python -m experiments.bench.transition_compiles --ckpt_dir=/tmp/transition_ckpt

tests/train/test_transition_compiles.py holds the same list at a tiny size.
Random tokens stand in for the corpus (compiles do not depend on them).
"""
import argparse
import logging
import os
import sys
import time

import jax

from experiments.bench import mesh_step
from experiments.gpu import config as gpu_config
from moe_jax.train import program as program_lib
from moe_jax.upcycle import transition
from moe_jax.workdir import checkpoint, placement

class _Compiles(logging.Handler):
  """[name, start, XLA compile seconds] per program, from JAX's compile log."""

  def __init__(self):
    super().__init__()
    self.events = []

  def emit(self, record):
    message = record.getMessage()
    if message.startswith('Compiling '):
      self.events.append([message.split(' with')[0][len('Compiling '):], time.perf_counter(), None])
    elif message.startswith('Finished XLA compilation') and self.events:
      self.events[-1][2] = float(message.split(' in ')[-1].split()[0])


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument('--ckpt_dir', required=True, help='a new directory for the save')
  args = ap.parse_args(argv)
  if os.path.lexists(args.ckpt_dir):
    print(f'error: --ckpt_dir={args.ckpt_dir} exists; the save needs a new directory',
          file=sys.stderr)
    return 2
  compiles = _Compiles()
  for name in ('jax._src.interpreters.pxla', 'jax._src.dispatch'):
    logger = logging.getLogger(name)
    logger.addHandler(compiles)
    logger.propagate = False
  jax.config.update('jax_log_compiles', True)
  c = gpu_config.get_config('workflow')
  c.model.vocab_size = 259   # the default corpus's byte-level tokenizer
  mesh = placement.make_mesh(c.mesh)
  program = program_lib.build(c, mesh)
  state = program_lib.init_state(program, c.seed)
  # One batch repeated: what is measured is compiles and time, not the report's numbers.
  reports = [mesh_step.synthetic_batch(c)] * min(c.upcycle.report_batches, c.eval_batches)
  del compiles.events[:]
  t0 = time.perf_counter()
  new, grown, _ = program_lib.upcycle(program, transition.target_config(c), state, mesh, (),
                                      reports, print)
  jax.block_until_ready(grown)
  t1, in_transition = time.perf_counter(), len(compiles.events)
  manager = checkpoint.Manager(args.ckpt_dir, async_save=False)
  saved = new.to_checkpoint(grown)
  manager.save(c.upcycle.step, saved.params, saved.opt_state, None)
  manager.close()
  t2 = time.perf_counter()
  for name, start, seconds in compiles.events:
    print(f'{name:24s} at +{start - t0:6.1f} s, XLA compile {seconds:.1f} s')
  print(f'transition: {in_transition} programs, {t1 - t0:.1f} s; save: '
        f'{len(compiles.events) - in_transition} programs, {t2 - t1:.1f} s; jax {jax.__version__}, '
        f'{jax.devices()[0].platform}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
