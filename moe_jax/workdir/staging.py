"""An output directory that appears whole or not at all.

  dst = staging.check(dst, overwrite, '--out')     # before any work: refusals first
  with staging.staged(dst) as tmp:                   # after every check has passed
    ... write into tmp ...
  # renamed to dst here; on an exception tmp is removed and dst is untouched

`dst` is taken with the symbolic links of its parent resolved (`resolve`); a
link at `dst` itself is replaced, never written through. An existing `dst` is
replaced only after the new one is complete. One rename is atomic, but
replacing takes two, and a kill between them must lose neither copy, so a
commit goes through fixed names:

  1. tmp -> DST.moe_jax-new     (the new copy is complete)
  2. DST -> DST.moe_jax-old     (when DST exists)
  3. DST.moe_jax-new -> DST
  4. DST.moe_jax-old is removed

and `check` first recovers from a kill at any point (`recover`): with
DST.moe_jax-new present it finishes steps 2-4 (the run that built it was
allowed to replace DST); with only DST.moe_jax-old present it removes it, or
puts it back if DST is gone. Staging directories (DST.moe_jax-tmp-HOST-PID-*)
whose process is gone (this host, pid not running) are removed. One writer
per DST at a time: two concurrent runs into the same DST are not supported.
"""
import contextlib
import hashlib
import os
import re
import shutil
import socket
import tempfile

from absl import logging

from moe_jax import containment
from moe_jax.atomic import sync_directory
from moe_jax.errors import ConfigError

NEW, OLD, TMP = '.moe_jax-new', '.moe_jax-old', '.moe_jax-tmp'
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def resolve(dst):
  """The absolute `dst` with the symbolic links of its parent resolved."""
  dst = os.path.abspath(os.path.expanduser(dst))
  return os.path.join(os.path.realpath(os.path.dirname(dst)), os.path.basename(dst))


def check(dst, overwrite, flag):
  """`resolve(dst)`, once a killed earlier run's leftovers are dealt with
  (`recover`, which says what it did); a ConfigError if `dst` exists (without
  `overwrite`), its parent is not a writable directory or it lies
  inside a workdir (containment.not_run_file: never replaced)."""
  if not dst:
    raise ConfigError(f'{flag} is empty')
  given, dst = dst, resolve(dst)
  parent = os.path.dirname(dst)
  if not os.path.isdir(parent):
    raise ConfigError(f'the parent directory of {flag}={given} '
                      + ('is not a directory' if os.path.lexists(parent) else 'does not exist'))
  if not os.access(parent, os.W_OK | os.X_OK):
    raise ConfigError(f'the parent directory of {flag}={given} is not writable')
  containment.not_run_file(given, flag)
  for line in recover(dst):
    logging.warning('%s', line)
  if os.path.lexists(dst) and not overwrite:
    raise ConfigError(f'{flag}={given} exists; pass --overwrite to replace it')
  return dst


@contextlib.contextmanager
def staged(dst):
  parent, name = os.path.split(dst)
  tmp = tempfile.mkdtemp(prefix=f'{name}{TMP}-{_HOST}-{os.getpid()}-', dir=parent)
  umask = os.umask(0)
  os.umask(umask)
  os.chmod(tmp, 0o777 & ~umask)   # mkdtemp's 0700 would outlive the rename
  try:
    yield tmp
    os.rename(tmp, dst + NEW)
    _finish(dst)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def _remove(path):
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def _finish(dst):
  """Steps 2-4 of the commit (see the module docstring)."""
  if os.path.lexists(dst):
    os.rename(dst, dst + OLD)
  os.rename(dst + NEW, dst)
  sync_directory(os.path.dirname(dst))
  if os.path.lexists(dst + OLD):
    _remove(dst + OLD)


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass
  return True


def recover(dst):
  """Finishes or undoes a commit a killed run left half done and removes its
  staging directories. Returns one line per thing done."""
  parent, name = os.path.split(dst)
  done = []
  stale = re.compile(re.escape(name + TMP) + r'-([0-9a-f]{8})-(\d+)-[^/]*')
  for entry in sorted(os.listdir(parent)):
    match = stale.fullmatch(entry)
    if match and match.group(1) == _HOST and not _alive(int(match.group(2))):
      shutil.rmtree(os.path.join(parent, entry))
      done.append(f'removed {os.path.join(parent, entry)}, left by an interrupted run')
  if os.path.lexists(dst + NEW):
    _finish(dst)
    done.append(f'finished publishing {dst}, which an interrupted run had built')
  elif os.path.lexists(dst + OLD):
    if os.path.lexists(dst):
      _remove(dst + OLD)
      done.append(f'removed {dst + OLD}, the copy an interrupted run had replaced')
    else:
      os.rename(dst + OLD, dst)
      done.append(f'restored {dst} from {dst + OLD}')
  return done
