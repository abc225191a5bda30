"""Fixtures of the robustness suite: one fork server per test process, and a
tiny trained workdir that rows read (and the suite checks they never change)."""
import os
import shutil
import subprocess

import pytest

from tests.robustness import harness, tiny_config


@pytest.fixture(scope='session')
def cli():
  server = harness.ForkServer()
  yield server
  server.close()


@pytest.fixture(scope='session')
def trained(tmp_path_factory):
  """A 2-step MoE run checkpointed at steps 1 and 2 (in-process, no CLI)."""
  from moe_jax.train import trainer   # pylint: disable=g-import-not-at-top
  workdir = str(tmp_path_factory.mktemp('trained') / 'run')
  trainer.train_and_evaluate(tiny_config.get_config(), workdir)
  return workdir


@pytest.fixture
def copy_of(tmp_path):
  """copy_of(workdir) -> a private copy under tmp_path, to damage."""
  def copy(workdir, name='copy'):
    dst = os.path.join(tmp_path, name)
    shutil.copytree(workdir, dst, symlinks=True)
    return dst
  return copy


@pytest.fixture
def read_only_dir(tmp_path):
  """A directory this process cannot write into: chmod 555, or for root (whom
  modes do not stop) a read-only tmpfs mounted over it; skipped if neither."""
  path = tmp_path / 'ro'
  path.mkdir()
  (path / 'old.txt').write_text('kept')
  path.chmod(0o555)
  mounted = False
  if os.access(path, os.W_OK):
    path.chmod(0o755)
    mounted = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', str(path)],
                             capture_output=True, check=False).returncode == 0
    if not mounted or os.access(path, os.W_OK):
      pytest.skip('cannot make a read-only directory here (root without mount)')
  yield str(path)
  if mounted:
    subprocess.run(['umount', str(path)], check=True)
  path.chmod(0o755)


@pytest.fixture
def small_filesystem(tmp_path):
  """small_filesystem(nbytes) -> a directory on a tmpfs of that size, where
  writes fail with ENOSPC for real; skipped where mounting is not allowed."""
  mounts = []

  def mount(nbytes):
    path = tmp_path / f'fs{len(mounts)}'
    path.mkdir()
    proc = subprocess.run(['mount', '-t', 'tmpfs', '-o', f'size={nbytes}', 'tmpfs', str(path)],
                          capture_output=True, text=True, check=False)
    if proc.returncode:
      pytest.skip('cannot mount a small tmpfs here (needs root; CI runs as root): '
                  + ' '.join(proc.stderr.split())[:200])
    mounts.append(path)
    return str(path)
  yield mount
  for path in mounts:
    subprocess.run(['umount', str(path)], check=True)
