"""One rule for every command that writes: it never writes into or over its
sources, never over a file it did not create (unless the user says
--overwrite) and never over a run's own files.

  containment.apart(dst, '--out', src, '--ckpt', 'workdir')
  path = containment.output_file(out, '--out', overwrite, sources=[(src, '--data_dir', 'tasks')])
  containment.not_run_file(dst, '--dst')   # staging.check, for a directory output

A destination inside the source, equal to it or above it (a directory that
holds it) is refused, with or without --overwrite: writing there changes the
source, and replacing it deletes the source. Both sides are compared as real
paths (symbolic links followed), and the destination also as given with only
its parent's links resolved (a link at the destination itself is replaced,
never written through, moe_jax/workdir/staging.py), so neither a link to the
source nor a link inside it slips past.

A run's own files are what the trainer and its tools keep in a workdir (a
directory holding config.json and checkpoints/): RUN_FILES at its top and
everything under RUN_DIRS. No command replaces one, whatever flag it is
given and whichever workdir it is (the one it reads or another), so a typo
in --out cannot destroy a run; a new file beside them (evaluate's results
beside the run it scored) is fine.
"""
import os

from moe_jax.errors import ConfigError

RUN_FILES = ('config.json', 'run.json', 'metrics.jsonl', 'lineage.json', 'tokenizer.json',
             'tokenizer_config.json', 'status.json', 'log.txt')
RUN_DIRS = ('checkpoints', 'tb')


def _resolved(path):
  """`path` absolute with its parent's links resolved (staging.resolve)."""
  path = os.path.abspath(os.path.expanduser(path))
  return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def overlaps(a, b):
  """Whether one of the two absolute paths is, or lies inside, the other."""
  common = os.path.commonpath([a, b])
  return common in (a, b)


def within(path, root):
  """Whether the absolute `path` lies strictly inside `root` (never equal)."""
  return path != root and os.path.commonpath([path, root]) == root


def apart(dst, dst_flag, src, src_flag, what='source', inside_ok=False):
  """Refuses `dst` (a destination, as the user gave it) that is, lies inside
  or holds `src`, compared as resolved paths; `what` names the source in the
  message ('workdir', 'checkpoint', ...). `inside_ok`: a file a read-only
  command writes where the user named it explicitly (inspect --plot) may lie
  inside the source, never be it or hold it."""
  if not dst or not src:
    return
  real_src = os.path.realpath(os.path.abspath(os.path.expanduser(src)))
  given = _resolved(dst)
  for path in (given, os.path.realpath(given)):
    if overlaps(path, real_src) and not (inside_ok and within(path, real_src)):
      raise ConfigError(f'{dst_flag}={dst} ({path}) must lie outside {src_flag} '
                        f'({what} {real_src}): it would write into or delete it')


def _is_workdir(path):
  return (os.path.isfile(os.path.join(path, RUN_FILES[0]))
          and os.path.isdir(os.path.join(path, RUN_DIRS[0])))


def run_owning(path):
  """The workdir of which the absolute `path` is one of the run's own files
  (see the module docstring), or None."""
  directory = os.path.dirname(path)
  while True:
    if _is_workdir(directory):
      first, *rest = os.path.relpath(path, directory).split(os.sep)
      if first in RUN_DIRS or (not rest and first in RUN_FILES):
        return directory
    parent = os.path.dirname(directory)
    if parent == directory:
      return None
    directory = parent


def not_run_file(dst, flag):
  """Refuses a destination that is one of a run's own files or lies inside
  one of its directories, with or without --overwrite."""
  for path in {_resolved(dst), os.path.realpath(_resolved(dst))}:
    run = run_owning(path)
    if run:
      raise ConfigError(f'{flag}={dst} ({path}) is a file of the run in {run}; write it '
                        'elsewhere (no flag replaces a run\'s own files)')


def output_file(path, flag, overwrite=False, sources=(), beside=()):
  """The resolved `path` of a file a command is about to write, once it is
  known to be none of: inside, equal to or above any of `sources` ((path,
  flag, what) triples such as --data_dir, `apart`), equal to or above any of
  `beside` (the same, but a new file inside is fine: evaluate's results
  beside the run it scored), a directory, in a missing or unwritable
  directory, a run's own file (`not_run_file`), or an existing file (unless
  `overwrite`)."""
  if not path:
    raise ConfigError(f'{flag} is empty')
  for src, src_flag, what in sources:
    apart(path, flag, src, src_flag, what)
  for src, src_flag, what in beside:
    apart(path, flag, src, src_flag, what, inside_ok=True)
  resolved = _resolved(path)
  if os.path.isdir(resolved):
    raise ConfigError(f'{flag}={path} is not a file path (a directory)')
  parent = os.path.dirname(resolved)
  if not os.path.isdir(parent):
    raise ConfigError(f'{flag}={path}: directory {parent} does not exist')
  if not os.access(parent, os.W_OK | os.X_OK):
    raise ConfigError(f'{flag}={path}: directory {parent} is not writable')
  not_run_file(path, flag)
  if os.path.lexists(resolved) and not overwrite:
    raise ConfigError(f'{flag}={path} exists; pass --overwrite to replace it')
  return resolved
