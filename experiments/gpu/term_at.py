"""`python -m moe_jax.main` that sends itself SIGTERM when its K-th batch is placed.

  python -m experiments.gpu.term_at --term_at_batch=K --config=... --workdir=DIR

The GPU script's preemption check: a step takes milliseconds, so a signal sent
from outside would land at no step one could name. Here the signal comes from
inside the step loop, at a known batch, and everything after it is the
trainer's own handling: finish the step, save, exit 0 (tests/train/
test_preemption.py does the same in-process).
"""
import os
import signal

from absl import flags

from moe_jax import cli
from moe_jax import main as main_lib
from moe_jax.workdir import placement


def _term_at(k):
  put, calls = placement.put_batch, []

  def put_then_term(*args, **kwargs):
    calls.append(1)
    if len(calls) == k:
      os.kill(os.getpid(), signal.SIGTERM)
    return put(*args, **kwargs)

  placement.put_batch = put_then_term


def main(argv):
  _term_at(flags.FLAGS.term_at_batch)
  main_lib.main(argv)


if __name__ == '__main__':
  flags.DEFINE_integer('term_at_batch', None, 'Send SIGTERM when this batch (1-based) is placed.')
  flags.mark_flags_as_required(['term_at_batch'])
  main_lib.define_flags()
  cli.run_app(main, overrides_without_config=True)
