"""Atomic file writes: a reader sees the old file or the new one, never a torn one.

Every file the package writes outside Orbax goes through here: a workdir's
JSON files, the metrics.jsonl rewrite on resume, tokenizer.json, and the
scaling-law tool's outputs. The bytes go to a temporary file in the target's
directory, are flushed to disk and renamed over the target, and the directory
is synced so that the rename survives a power cut as well as a kill.
"""
import os
import tempfile


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


# Read once, at import: os.umask is process-wide, so reading it later could
# race with another thread creating a file.
_MODE = 0o666 & ~_umask()


def write_bytes(path, data):
  """Atomically replaces `path` with `data` (mode as a plain open() would give)."""
  directory = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix=f'.{os.path.basename(path)}.', suffix='.tmp', dir=directory)
  try:
    with os.fdopen(fd, 'wb') as f:
      os.fchmod(f.fileno(), _MODE)   # mkstemp makes 0600
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  sync_directory(directory)


def write_text(path, text):
  write_bytes(path, text.encode('utf-8'))


def sync_directory(directory):
  """Makes renames inside `directory` durable (a no-op where the OS cannot)."""
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)
