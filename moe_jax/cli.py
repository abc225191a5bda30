"""What every entry point shares: one-line errors instead of tracebacks."""
import sys

from absl import app, flags, logging

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
    argv = flags.FLAGS(argv)
  except flags.Error as e:  # bad value, missing flag, a config file that raised
    lines = [line for line in str(e).splitlines() if line.strip()]
    message = lines[0]
    if len(lines) > 1:  # the config file's own error closes its traceback
      message = f'{message.rstrip(":")}: {lines[-1].split(": ", 1)[-1]}'
    print(f'error: {message}', file=sys.stderr)
    sys.exit(2)
  except (AttributeError, KeyError) as e:  # ml_collections: --config.KEY not in the config
    overrides = ' '.join(a for a in argv[1:] if a.startswith('--config.'))
    key = str(e).splitlines()[0].strip('"\'')
    print(f'error: config has no key {key!r} (overrides: {overrides})', file=sys.stderr)
    sys.exit(2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every file it writes at INFO
  return argv


def run_app(main):
  """absl's app.run, with flag errors (including config overrides) on one line."""
  app.run(main, flags_parser=_parse_flags)
