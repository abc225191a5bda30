"""An output directory that appears whole or not at all.

  dst = staging.check(dst, overwrite, '--out')     # before any work: refusals first
  with staging.staged(dst) as tmp:                   # after every check has passed
    ... write into tmp ...
  # renamed to dst here; on an exception tmp is removed and dst is untouched

An existing `dst` is replaced only after the new one is complete.
"""
import contextlib
import os
import shutil
import tempfile

from moe_jax.errors import ConfigError


def check(dst, overwrite, flag):
  """The absolute `dst`, or a ConfigError if it exists (without `overwrite`)
  or its parent does not."""
  dst = os.path.abspath(os.path.expanduser(dst))
  if os.path.exists(dst) and not overwrite:
    raise ConfigError(f'{flag}={dst} exists; pass --overwrite to replace it')
  if not os.path.isdir(os.path.dirname(dst)):
    raise ConfigError(f'the parent directory of {flag}={dst} does not exist')
  return dst


@contextlib.contextmanager
def staged(dst):
  tmp = tempfile.mkdtemp(prefix=os.path.basename(dst) + '.tmp-', dir=os.path.dirname(dst))
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)   # mkdtemp's 0700 would outlive the rename
  try:
    yield tmp
    old = None
    if os.path.exists(dst):
      old = tempfile.mkdtemp(prefix=os.path.basename(dst) + '.old-', dir=os.path.dirname(dst))
      os.rename(dst, os.path.join(old, 'dst'))
    os.rename(tmp, dst)
    if old:
      shutil.rmtree(old)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
