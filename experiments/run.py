r"""One run of a launched sweep (what both backends start, once per run).

  python -m experiments.run --workdir=SWEEP_DIR --run=NAME [--processes=N]

Its output goes to SWEEP_DIR/NAME/log.txt; see experiments/runner.py.
"""
import os
import sys

from absl import flags

from experiments import runner
from moe_jax import cli


def define_flags():
  """The command line; defined only when run as a program, so importing this
  module beside another entry point defines no clashing flags."""
  flags.DEFINE_string('workdir', None, 'The sweep directory (holds sweep.json).')
  flags.DEFINE_string('run', None, 'The name of the run.')
  flags.DEFINE_integer('processes', 1, 'Train as N local processes of one run.', lower_bound=1)
  flags.mark_flags_as_required(['workdir', 'run'])


def main(argv):
  del argv   # cli.run_app refuses positional arguments
  f = flags.FLAGS
  sys.exit(cli.run_reporting_errors(runner.execute, os.path.abspath(f.workdir), f.run, f.processes))


if __name__ == '__main__':
  define_flags()
  cli.run_app(main)
