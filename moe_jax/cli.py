"""What every entry point shares: one-line errors instead of tracebacks."""
import sys

from absl import app, flags

from moe_jax.errors import ConfigError, NonFiniteLossError


def run_reporting_errors(fn, *args):
  """Calls fn; a user error prints `error: <message>` and exits 2 (1 for a
  diverged run), with no traceback."""
  try:
    return fn(*args)
  except ConfigError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  except NonFiniteLossError as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(1)


def _parse_flags(argv):
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:  # unknown --config.KEY, bad value, missing flag
    print(f'error: {str(e).splitlines()[0]}', file=sys.stderr)
    sys.exit(2)


def run_app(main):
  """absl's app.run, with flag errors (including config overrides) on one line."""
  app.run(main, flags_parser=_parse_flags)
