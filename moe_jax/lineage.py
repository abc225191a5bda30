"""Where a checkpoint came from: its chain of stages back to the root.

  python -m moe_jax.lineage DIR [--json]

DIR is a workdir (its newest checkpoint) or a checkpoint step directory. Prints
the chain (dense -> MoE at step S -> ...) and one row per stage: model,
parameters (total, active), steps and tokens trained there and in all, the
loss before and after each growth, the last val_loss of the stage and how it
began; then a `warning:` line for each parent deleted or moved since (the
chain still prints: the record carries it). `--json` prints the same for
tools, with the raw record. The record is moe_jax/workdir/lineage.py's.
"""
import json
import sys

from absl import flags

from moe_jax import cli
from moe_jax.workdir import lineage, lineage_table


def _text(table):
  cells = [lineage_table.cells(r) for r in table]
  keys = [k for k, _ in lineage_table.COLUMNS]
  width = {k: max(len(t), *(len(c[k]) for c in cells)) for k, t in lineage_table.COLUMNS}
  line = lambda row: '  '.join(row[k].ljust(width[k]) for k in keys).rstrip()
  return '\n'.join([line(dict(lineage_table.COLUMNS))] + [line(c) for c in cells])


def text(directory, as_json=False):
  """What the command prints for DIR: the chain and the table (then a
  `warning:` line per problem), or JSON with `as_json`."""
  workdir, _ = lineage.locate(directory)
  lineage.read(workdir)   # DIR's own record malformed (a cycle, steps going back): refused
  record, step = lineage.at_checkpoint(directory)
  table = lineage_table.rows(record, step)
  problems = lineage.check(record, workdir)
  if as_json:
    return json.dumps(dict(workdir=workdir, step=step, chain=lineage_table.chain(table),
                           stages=table, problems=problems, record=record), indent=1) + '\n'
  return '\n'.join([lineage_table.chain(table) + '\n\n' + _text(table)] +
                   [f'warning: {p}' for p in problems]) + '\n'


def define_flags(fv=flags.FLAGS):
  """The command's flags, on `fv` (tests parse into their own FlagValues)."""
  flags.DEFINE_bool('json', False, 'One JSON object instead of the table.', flag_values=fv)


def from_flags(fv, directory):
  return text(directory, fv.json)


def main(argv):
  sys.stdout.write(cli.run_reporting_errors(from_flags, flags.FLAGS, argv[1]))


if __name__ == '__main__':   # flags only here: tests import this module
  define_flags()
  cli.run_app(main, positional=('DIR',))
