"""What every entry point shares: one-line errors instead of tracebacks.

Bad input (a flag, a config file or override, a path) prints `error:
<message>` on one line and exits 2 before anything is written; a run that
failed on its own (a diverged loss, a checkpoint the disk would not take)
exits 1; Ctrl-C outside the training loop exits 130 with one line. These exits
skip interpreter shutdown (os._exit, after flushing): at shutdown, reads a
failed Orbax restore left in flight, tensorboardX's atexit flush on a full disk
and XLA compile threads cut off by Ctrl-C each print tracebacks or crash.
"""
import ast
import functools
import json
import logging as std_logging
import os
import sys
import traceback

from absl import app, flags, logging
import ml_collections

from moe_jax.errors import ConfigError, RunError


def _exit(message, code):
  print(message, file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)   # pylint: disable=protected-access


def _one_line(error):
  return ' '.join(str(error).split())


def run_reporting_errors(fn, *args):
  """Calls fn; a user error prints `error: <message>` and exits 2, a failed
  run exits 1 (a diverged loss, a failed save, an OS error such as a full
  disk), Ctrl-C exits 130; never a traceback."""
  try:
    return fn(*args)
  except ConfigError as e:
    _exit(f'error: {_one_line(e)}', 2)
  except (RunError, OSError) as e:
    _exit(f'error: {_one_line(e)}', 1)
  except KeyboardInterrupt:
    _exit('interrupted', 130)


def print_json_result(fn, *args):
  """The main of a flags-only command (run_app refuses extra arguments) whose
  result is one JSON line: `fn(*args)` runs under run_reporting_errors."""
  print(json.dumps(run_reporting_errors(fn, *args)))


def _config_flags():
  """Names of the config-file flags (ml_collections' DEFINE_config_file)."""
  return [name for name in flags.FLAGS if flags.FLAGS[name].flag_type() == 'config object']


def _flag_value(argv, name):
  """The value given to --name on the command line, or None."""
  for i, arg in enumerate(argv):
    for prefix in (f'--{name}=', f'-{name}='):
      if arg.startswith(prefix):
        return arg[len(prefix):]
    if arg in (f'--{name}', f'-{name}') and i + 1 < len(argv):
      return argv[i + 1]
  return None


def _check_config_file(name, spec):
  """The file behind --name=PATH[:ARG] exists, parses and defines get_config;
  checked before ml_collections loads it, whose errors say none of this."""
  path = spec.split(':', 1)[0]
  where = f'--{name}={path}'
  if not os.path.isfile(path):
    raise ConfigError(f'{where}: no such file' if not os.path.exists(path) else
                      f'{where}: not a file')
  try:
    with open(path, 'rb') as f:
      tree = ast.parse(f.read(), path)
  except OSError as e:
    raise ConfigError(f'{where}: cannot read ({e.strerror})') from None
  except (SyntaxError, ValueError) as e:
    line = f':{e.lineno}' if getattr(e, 'lineno', None) else ''
    raise ConfigError(f'{where}{line}: {getattr(e, "msg", e)}') from None
  defined = set()
  for node in tree.body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      defined.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      defined.update((a.asname or a.name).split('.')[0] for a in node.names)
    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      defined.update(t.id for t in targets if isinstance(t, ast.Name))
  if 'get_config' not in defined:
    raise ConfigError(f'{where}: defines no get_config(arg)')


def _config_file_error(error, files):
  """`--config=PATH: get_config raised ...` when `error` came out of one of
  the config `files` ({path: flag name}), else None."""
  frames = [f for f in traceback.extract_tb(error.__traceback__)
            if os.path.abspath(f.filename) in files]
  if not frames:
    return None
  frame = frames[-1]
  path = os.path.abspath(frame.filename)
  return (f'--{files[path]}={frame.filename}:{frame.lineno}: get_config raised '
          f'{type(error).__name__}: {_one_line(error)}')


def _unknown_key(error, argv, names):
  """"config has no key 'topk' (--config.moe.topk=3); did you mean 'top_k'?"
  from ml_collections' error, a KeyError wrapped in an AttributeError whose
  str() is the repr of a repr."""
  while error.args and isinstance(error.args[0], BaseException):
    error = error.args[0]
  text = str(error.args[0]) if error.args else str(error)
  first, _, hint = text.partition('\n')
  key = first.strip('"\'')
  prefixes = tuple(f'--{n}.' for n in names)
  overrides = [a for a in argv[1:] if a.startswith(prefixes)]
  named = [a for a in overrides if a.split('=', 1)[0].split('.')[-1] == key] or overrides
  hint = hint.split('"')
  hint = f'; did you mean {hint[1]!r}?' if len(hint) > 2 else ''
  return f'config has no key {key!r} ({" ".join(named)}){hint}'


def _parse(argv, positional=()):
  names, specs, config_files = _config_flags(), {}, {}
  for name in names:
    specs[name] = _flag_value(argv[1:], name)
    if specs[name] is not None:
      _check_config_file(name, specs[name])
      config_files[os.path.abspath(specs[name].split(':', 1)[0])] = name
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:  # bad value, missing flag, a config file that raised
    for name in names:   # get_config returned None: absl then calls the flag missing
      if specs[name] is not None and 'other than None' in str(e) and f'--{name}' in str(e):
        raise ConfigError(f'--{name}={specs[name]}: get_config returned None, not a '
                          'ConfigDict') from None
    lines = [line for line in str(e).splitlines() if line.strip()]
    message = lines[0]
    if len(lines) > 1:  # the config file's own error closes its traceback
      message = f'{message.rstrip(":")}: {lines[-1].split(": ", 1)[-1]}'
    raise ConfigError(message) from None
  except Exception as e:  # pylint: disable=broad-except
    message = _config_file_error(e, config_files)
    if message:
      raise ConfigError(message) from None
    if not isinstance(e, (AttributeError, KeyError)):
      raise
    raise ConfigError(_unknown_key(e, argv, names)) from None
  for name in names:
    if flags.FLAGS[name].present:
      try:
        value = flags.FLAGS[name].value
        ok = isinstance(value, ml_collections.ConfigDict)
      except OSError as e:   # ml_collections defers a failed load to the first access
        raise ConfigError(f'--{name}: {_one_line(e)}') from None
      if not ok:
        raise ConfigError(f'--{name}={specs[name]}: get_config returned '
                          f'{type(value).__name__}, not a ConfigDict')
  if len(rest) > 1 + len(positional):
    extra = rest[1 + len(positional):]
    raise ConfigError(f'unexpected argument{"s" if len(extra) > 1 else ""}: '
                      f'{" ".join(extra)} (flags are --name=value)')
  if len(rest) < 1 + len(positional):
    raise ConfigError(f'missing argument {positional[len(rest) - 1]}')
  return rest


class _QuietOrbaxErrors(std_logging.Filter):
  """Orbax logs each failed background write with its traceback, and asyncio
  logs the writes of that save nobody awaited any more ("Task exception was
  never retrieved", their coroutines defined in orbax); the error reaches the
  caller too, which reports it once."""

  def filter(self, record):
    if record.levelno < std_logging.ERROR:
      return True
    orbax = f'{os.sep}orbax{os.sep}'
    return not (orbax in record.pathname or
                record.name == 'asyncio' and orbax in record.getMessage())


def _quiet_abandoned_orbax_io(unraisablehook):
  """Drops the unraisable errors Orbax's abandoned I/O leaves behind after a
  failure that was already reported once.

  Two kinds reach sys.unraisablehook, not sys.excepthook, and print as bare
  tracebacks, dozens of them, by chance (when I/O is still in flight):

  - After a failed save, TensorStore's other writes still complete. Orbax
    runs a save's coroutine on a fresh event loop (orbax-checkpoint 0.12:
    asyncio_utils._run_sync_via_new_loop) and closes it as soon as the first
    write fails; each write still in flight then completes on a TensorStore
    thread, whose done-callback calls the closed loop's call_soon_threadsafe,
    which raises inside PyErr_WriteUnraisable
    (PythonFutureBase::RunCallbacks).
  - After a failed restore, the reads nobody awaits any more are closed when
    collected. Orbax's read coroutine
    (serialization._read_array_index_and_device_put) catches BaseException,
    GeneratorExit included, and raises a new Exception, so close() fails.
  """
  orbax = f'{os.sep}orbax{os.sep}'

  def hook(unraisable):
    if (unraisable.exc_type is RuntimeError and
        str(unraisable.exc_value) == 'Event loop is closed'):
      return
    code = getattr(unraisable.object, 'cr_code', None)
    if code is not None and orbax in code.co_filename:
      return
    unraisablehook(unraisable)
  return hook


_HELP = ('--help', '-help', '-h', '-?', '--helpshort', '--helpfull', '-helpfull')


def _without_config_overrides(argv):
  """(argv, []) when argv gives --config; else argv less its --config.KEY=VALUE
  arguments, and those (ml_collections knows no overrides without a file)."""
  if _flag_value(argv[1:], 'config') is not None:
    return argv, []
  is_override = lambda a: a.startswith(('--config.', '-config.'))
  return [a for a in argv if not is_override(a)], [a for a in argv[1:] if is_override(a)]


def _parse_flags(argv, positional=(), overrides_without_config=False):
  if any(a in _HELP for a in argv[1:]):   # help is no error: absl's own exits 1
    app.usage(shorthelp='--helpfull' not in argv and '-helpfull' not in argv,
              writeto_stdout=True, exitcode=0)
  logging.set_verbosity(logging.ERROR)   # ml_collections warns while loading a config
  overrides = []
  if overrides_without_config:
    argv, overrides = _without_config_overrides(argv)
  try:
    argv = _parse(argv, positional) + overrides
  except ConfigError as e:
    _exit(f'error: {_one_line(e)}', 2)
  if not flags.FLAGS['verbosity'].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every file it writes at INFO
  for logger in (logging.get_absl_logger(), std_logging.getLogger('asyncio')):
    logger.addFilter(_QuietOrbaxErrors())
  sys.unraisablehook = _quiet_abandoned_orbax_io(sys.unraisablehook)
  return argv


def run_app(main, positional=(), overrides_without_config=False):
  """absl's app.run, with flag errors (including config overrides and the
  config file itself) on one line, and --help on stdout with exit 0.
  `positional` names the arguments the command takes besides flags (main
  gets them in argv[1:]); any other is refused. With
  `overrides_without_config`, a command line without --config hands its
  --config.KEY=VALUE arguments to `main` after them (the trainer applies them
  to a workdir's own config.json)."""
  app.run(main, flags_parser=functools.partial(
      _parse_flags, positional=positional, overrides_without_config=overrides_without_config))
