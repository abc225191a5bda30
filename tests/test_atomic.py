"""Atomic writes: a kill before the rename leaves the old file whole."""
import os
import stat
import subprocess
import sys

from moe_jax import atomic

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_replaces_with_the_default_mode(tmp_path):
  path = str(tmp_path / 'a.json')
  atomic.write_text(path, 'one')
  atomic.write_text(path, 'two')
  with open(path) as f:
    assert f.read() == 'two'
  mask = os.umask(0)
  os.umask(mask)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~mask
  assert os.listdir(tmp_path) == ['a.json']


def test_a_kill_before_the_rename_keeps_the_old_file(tmp_path):
  path = str(tmp_path / 'a.json')
  atomic.write_text(path, 'old')
  killed_before_rename = (
      'import os, signal, sys; from moe_jax import atomic; '
      'os.replace = lambda *_: os.kill(os.getpid(), signal.SIGKILL); '
      'atomic.write_text(sys.argv[1], "new")')
  proc = subprocess.run([sys.executable, '-c', killed_before_rename, path],
                        env=dict(os.environ, PYTHONPATH=_REPO), check=False)
  assert proc.returncode == -9
  with open(path) as f:
    assert f.read() == 'old'
