"""A directory published whole: commit, and recovery from a kill at any point."""
import os
import subprocess
import sys

import pytest

from moe_jax.workdir import publish

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dir(path, text):
  os.makedirs(path)
  with open(os.path.join(path, 'f.txt'), 'w') as f:
    f.write(text)


def _read(path):
  with open(os.path.join(path, 'f.txt')) as f:
    return f.read()


def test_commit_creates_and_replaces(tmp_path):
  dst = str(tmp_path / 'out')
  for text in ('one', 'two'):
    staging = publish.stage(dst)
    _dir(os.path.join(staging, 'sub'), text)
    publish.commit(staging, dst)
    assert _read(os.path.join(dst, 'sub')) == text and os.listdir(tmp_path) == ['out']


@pytest.mark.parametrize('state, want, note', [
    # Killed after step 1 (the new copy complete), before the old one moved.
    ({'out': 'old', 'out.moe_jax-new': 'new'}, 'new', 'finished publishing'),
    # Killed after step 2: the old copy aside, the new one not yet in place.
    ({'out.moe_jax-old': 'old', 'out.moe_jax-new': 'new'}, 'new', 'finished publishing'),
    # Killed after step 3: only the old copy's removal was left.
    ({'out': 'new', 'out.moe_jax-old': 'old'}, 'new', 'removed'),
    # The old copy aside and nothing else: put back.
    ({'out.moe_jax-old': 'old'}, 'old', 'restored'),
])
def test_recover_finishes_or_undoes_a_killed_commit(tmp_path, state, want, note):
  for name, text in state.items():
    _dir(str(tmp_path / name), text)
  (done,) = publish.recover(str(tmp_path / 'out'))
  assert note in done
  assert os.listdir(tmp_path) == ['out'] and _read(str(tmp_path / 'out')) == want
  assert publish.recover(str(tmp_path / 'out')) == []


def test_recover_removes_staging_of_killed_processes_only(tmp_path):
  dst = str(tmp_path / 'out')
  dies_while_building = (
      'import os, signal, sys; from moe_jax.workdir import publish; '
      'os.mkdir(os.path.join(publish.stage(sys.argv[1]), "half")); '
      'print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGKILL)')
  proc = subprocess.run([sys.executable, '-c', dies_while_building, dst], capture_output=True,
                        text=True, env=dict(os.environ, PYTHONPATH=_REPO), check=False)
  assert proc.returncode == -9
  pid = int(proc.stdout)
  mine = publish.stage(dst)   # a live run's (this process)
  other_host = tmp_path / f'out{publish.TMP}-00000000-{pid}-abc'
  other_host.mkdir()
  (stale,) = [n for n in os.listdir(tmp_path) if f'-{pid}-' in n and n != other_host.name]
  (done,) = publish.recover(dst)
  assert stale in done and 'interrupted run' in done
  assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(mine), other_host.name])
