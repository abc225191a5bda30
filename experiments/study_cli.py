r"""The one entry point of the seed reports (experiments/seed00N/report.py).

  python -m experiments.seed000.report --table=3 --workdir=DIR [--arg=small]
  python -m experiments.seed000.report --results=DIR/table3.json [--out=DIR2]

Every seed report is a `write(study, workdir, option)` that reads a launched
sweep and writes its markdown, plots and a results file (experiments/report.py
`write_results`), and a `rebuild(path, out)` that makes the same markdown
from the results file alone. This module gives them one command line: the
study flag (its name and choices are the report's), --workdir or --results,
--out, and at most one option of the report's own (e.g. --arg, --batches).
"""
import os

from absl import flags

from moe_jax import cli
from moe_jax.errors import ConfigError


def run(write, rebuild, studies=None, study_flag='study', option=None):
  """Defines the flags and runs the report: `write([study,] workdir[, option])`
  with --workdir, `rebuild(results, out)` with --results. `option` is a
  function defining the report's one extra flag (absl's DEFINE_*), or None."""
  if studies is not None:
    study = flags.DEFINE_enum(study_flag, None, list(studies), 'Which study (with --workdir).')
  workdir = flags.DEFINE_string('workdir', None, 'The launched sweep directory.')
  results = flags.DEFINE_string('results', None, 'A results file the report wrote: rebuild its '
                                'markdown from it alone (runs not needed).')
  out = flags.DEFINE_string('out', None, 'With --results: where the markdown and plots go '
                            '(default: only printed).')
  extra = option() if option else None

  def report():
    if results.value:
      return rebuild(results.value, out.value)
    if not workdir.value or (studies is not None and study.value is None):
      raise ConfigError('give --workdir=DIR' + (f' and --{study_flag}' if studies else '')
                        + ', or --results=FILE')
    if out.value:
      raise ConfigError('--out goes with --results (with --workdir the report is written there)')
    args = ([study.value] if studies is not None else []) + [os.path.abspath(workdir.value)]
    return write(*args, *([extra.value] if extra is not None else []))

  def main(argv):
    del argv   # cli.run_app refuses positional arguments
    print(cli.run_reporting_errors(report))

  cli.run_app(main)
