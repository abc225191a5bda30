"""An output directory published whole: check, staged, and recovery from a
kill at any point of the commit."""
import os
import subprocess
import sys

import pytest

from moe_jax.errors import ConfigError
from moe_jax.workdir import staging

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _dir(path, text):
  os.makedirs(path)
  with open(os.path.join(path, 'f.txt'), 'w') as f:
    f.write(text)


def _read(path):
  with open(os.path.join(path, 'f.txt')) as f:
    return f.read()


def test_staged_creates_and_replaces(tmp_path):
  dst = str(tmp_path / 'out')
  for text in ('one', 'two'):
    with staging.staged(staging.check(dst, overwrite=True, flag='--out')) as tmp:
      _dir(os.path.join(tmp, 'sub'), text)
    assert _read(os.path.join(dst, 'sub')) == text and os.listdir(tmp_path) == ['out']
  with pytest.raises(ConfigError, match='--out=.*/out exists; pass --overwrite'):
    staging.check(dst, overwrite=False, flag='--out')
  with pytest.raises(RuntimeError), staging.staged(dst) as tmp:
    _dir(os.path.join(tmp, 'sub'), 'three')
    raise RuntimeError('failed while building')
  assert _read(os.path.join(dst, 'sub')) == 'two' and os.listdir(tmp_path) == ['out']


def test_a_link_at_dst_is_replaced_not_followed(tmp_path):
  _dir(str(tmp_path / 'target'), 'kept')
  os.symlink(tmp_path / 'target', tmp_path / 'link')
  dst = staging.check(str(tmp_path / 'link'), overwrite=True, flag='--out')
  with staging.staged(dst) as tmp:
    _dir(os.path.join(tmp, 'sub'), 'new')
  assert not os.path.islink(tmp_path / 'link') and _read(str(tmp_path / 'target')) == 'kept'


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
  (done,) = staging.recover(str(tmp_path / 'out'))
  assert note in done
  assert os.listdir(tmp_path) == ['out'] and _read(str(tmp_path / 'out')) == want
  assert staging.recover(str(tmp_path / 'out')) == []


def test_recover_removes_staging_of_killed_processes_only(tmp_path):
  dst = str(tmp_path / 'out')
  dies_while_building = (
      'import os, signal, sys; from moe_jax.workdir import staging; '
      'cm = staging.staged(sys.argv[1]); os.mkdir(os.path.join(cm.__enter__(), "half")); '
      'print(os.getpid(), flush=True); os.kill(os.getpid(), signal.SIGKILL)')
  proc = subprocess.run([sys.executable, '-c', dies_while_building, dst], capture_output=True,
                        text=True, env=dict(os.environ, PYTHONPATH=_REPO), check=False)
  assert proc.returncode == -9
  pid = int(proc.stdout)
  live = staging.staged(dst)   # this process's, being built
  mine = live.__enter__()
  other_host = tmp_path / f'out{staging.TMP}-00000000-{pid}-abc'
  other_host.mkdir()
  (stale,) = [n for n in os.listdir(tmp_path) if f'-{pid}-' in n and n != other_host.name]
  (done,) = staging.recover(dst)
  assert stale in done and 'interrupted run' in done
  assert sorted(os.listdir(tmp_path)) == sorted([os.path.basename(mine), other_host.name])
  live.__exit__(None, None, None)
  assert os.path.isdir(dst)
