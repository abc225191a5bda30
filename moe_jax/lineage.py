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
import argparse
import json
import sys

from moe_jax.errors import ConfigError
from moe_jax.workdir import lineage, lineage_table


def _text(table):
  cells = [lineage_table.cells(r) for r in table]
  keys = [k for k, _ in lineage_table.COLUMNS]
  width = {k: max(len(t), *(len(c[k]) for c in cells)) for k, t in lineage_table.COLUMNS}
  line = lambda row: '  '.join(row[k].ljust(width[k]) for k in keys).rstrip()
  return '\n'.join([line(dict(lineage_table.COLUMNS))] + [line(c) for c in cells])


def main(argv=None):
  p = argparse.ArgumentParser(prog='python -m moe_jax.lineage', description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('dir', help='workdir or checkpoint step directory')
  p.add_argument('--json', action='store_true', help='one JSON object instead of the table')
  args = p.parse_args(argv)
  try:
    workdir, _ = lineage.locate(args.dir)
    record, step = lineage.at_checkpoint(args.dir)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  table = lineage_table.rows(record, step)
  problems = lineage.check(record, workdir)
  if args.json:
    print(json.dumps(dict(workdir=workdir, step=step, chain=lineage_table.chain(table),
                          stages=table, problems=problems, record=record), indent=1))
  else:
    print(lineage_table.chain(table) + '\n\n' + _text(table))
    for problem in problems:
      print(f'warning: {problem}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
