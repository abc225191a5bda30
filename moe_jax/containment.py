"""One rule for every command that writes: it never writes into or over its
sources, never over a file it did not create (unless the user says
--overwrite) and never into a workdir.

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

A workdir is a directory with at least two of a run's marks (MARKS:
config.json, checkpoints/, metrics.jsonl, run.json, lineage.json), so that
losing one (a deleted checkpoints/) does not lose its protection, and an HF
export's lone config.json makes none. Everything inside a workdir is the
run's: no command replaces or adds to it, whatever flag it is given and
whichever workdir it is (the one it reads or another), so a typo in --out
cannot destroy a run. The one exception is a new file directly in the
workdir a command reads (`beside`: evaluate's results beside the run it
scored, inspect's plot); even that never replaces a file already there.

A command's outputs are checked together (`output_files`): none may equal,
lie in or hold any of its inputs (`sources`), and no two may share a path.
"""
import os

from moe_jax.errors import ConfigError

MARKS = ('config.json', 'checkpoints', 'metrics.jsonl', 'run.json', 'lineage.json')

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


def is_workdir(path):
  """Whether `path` is a run's directory (two of MARKS; see the module docstring)."""
  return sum(os.path.lexists(os.path.join(path, m)) for m in MARKS) >= 2


def run_holding(path):
  """The workdir inside which the absolute `path` lies (at any depth), or None."""
  directory = os.path.dirname(path)
  while True:
    if is_workdir(directory):
      return directory
    parent = os.path.dirname(directory)
    if parent == directory:
      return None
    directory = parent


def not_run_file(dst, flag, beside=()):
  """Refuses a destination inside any workdir, with or without --overwrite,
  except a new file directly in one of the workdirs `beside` (resolved
  paths of the runs the command reads)."""
  for path in {_resolved(dst), os.path.realpath(_resolved(dst))}:
    run = run_holding(path)
    if run and not (os.path.dirname(path) == run and run in beside
                    and not os.path.lexists(path)):
      raise ConfigError(f'{flag}={dst} ({path}) lies in the run in {run}; write it '
                        'elsewhere (no flag replaces or adds to a run\'s files)')


def output_file(path, flag, overwrite=False, sources=(), beside=()):
  """The resolved `path` of a file a command is about to write, once it is
  known to be none of: inside, equal to or above any of `sources` ((path,
  flag, what) triples such as --data_dir, `apart`), equal to or above any of
  `beside` (the same, but a new file inside is fine: evaluate's results
  beside the run it scored), a directory, in a missing or unwritable
  directory, inside a workdir (`not_run_file`), or an existing file (unless
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
  runs = {os.path.realpath(os.path.abspath(os.path.expanduser(src))) for src, _, _ in beside}
  not_run_file(path, flag, runs)
  if os.path.lexists(resolved) and not overwrite:
    raise ConfigError(f'{flag}={path} exists; pass --overwrite to replace it')
  return resolved


def output_files(outputs, overwrite=False, sources=(), beside=()):
  """`output_file` for each (path, flag) of `outputs` a command writes
  (empty paths skipped), once no two of them are one path; returns their
  resolved paths."""
  seen = {}
  for path, flag in outputs:
    if not path:
      continue
    for key in {_resolved(path), os.path.realpath(_resolved(path))}:
      if key in seen:
        raise ConfigError(f'{flag}={path} and {seen[key][1]}={seen[key][0]} are one path '
                          f'({key}): one output would replace the other')
      seen[key] = (path, flag)
  return [output_file(path, flag, overwrite, sources, beside) for path, flag in outputs if path]
