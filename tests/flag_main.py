"""An absl entry point called in-process, as its command line would call it.

The entry points whose flags live under `if __name__ == '__main__'`
(moe_jax/plan.py, moe_jax/lineage.py) expose define_flags(fv) and
from_flags(fv); this parses argv into a FlagValues of its own (no global
state between calls) and prints what the command prints: the text on
stdout and exit 0, or `error: ...` on stderr and exit 2.
"""
import sys

from absl import flags

from moe_jax.errors import ConfigError


def call(module, argv):
  fv = flags.FlagValues()
  module.define_flags(fv)
  rest = fv(['prog'] + list(argv))
  try:
    sys.stdout.write(module.from_flags(fv, *rest[1:]))
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  return 0
