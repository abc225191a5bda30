"""One rule for every command that reads a source and writes a destination:
the destination lies apart from the source.

  containment.apart(dst, '--out', src, '--ckpt', 'workdir')

A destination inside the source, equal to it or above it (a directory that
holds it) is refused, with or without --overwrite: writing there changes the
source, and replacing it deletes the source. Both sides are compared as real
paths (symbolic links followed), and the destination also as given with only
its parent's links resolved (a link at the destination itself is replaced,
never written through, moe_jax/workdir/staging.py), so neither a link to the
source nor a link inside it slips past.
"""
import os

from moe_jax.errors import ConfigError


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
