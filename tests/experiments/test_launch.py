"""The launcher end to end: runs in parallel, a stop, a relaunch that resumes
and retrains nothing, and the report; a sweep with dependencies; the xm backend."""
import json
import os
import signal
import time

import pytest

from experiments import report, runner
from tests.experiments import runs

# Dense and MoE, two seeds; the other tests' runs have these shapes too, so
# with the shared compilation cache they compile nothing new.
_FOUR = "h.product([h.sweep('config.seed', [0, 1]), h.sweep('config.moe.num_experts', [0, 8])])"
_NAMES = ['seed=0_num_experts=0', 'seed=0_num_experts=8', 'seed=1_num_experts=0',
          'seed=1_num_experts=8']


def _states(workdir, names):
  return {n: runner.status(os.path.join(workdir, n)) for n in names}


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  return True


def test_four_runs_stop_resume_and_report(tmp_path, jax_cache):
  config, workdir = runs.sweep_file(str(tmp_path), _FOUR), str(tmp_path / 'sweep')
  args = [f'--config={config}', f'--workdir={workdir}', '--parallel=2']
  launcher = runs.start('experiments.launch', *args, cache_dir=jax_cache)
  # Stop the launcher once the first run is done (the next ones are then starting).
  deadline = time.time() + 300
  while not any(s.get('state') == 'done' for s in _states(workdir, _NAMES).values()):
    assert launcher.poll() is None and time.time() < deadline, launcher.communicate()
    time.sleep(0.2)
  launcher.send_signal(signal.SIGTERM)
  _, err = launcher.communicate(timeout=300)
  assert launcher.returncode == 128 + signal.SIGTERM, err
  first = _states(workdir, _NAMES)
  done_first = [n for n, s in first.items() if s.get('state') == 'done']
  assert 1 <= len(done_first) < 4, first
  for s in first.values():   # every started run ended: interrupted or done, its process gone
    assert s.get('state') in (None, 'done', 'interrupted'), first
    assert not s or not _alive(s['pid'])

  code, out, err = runs.run('experiments.launch', *args, cache_dir=jax_cache)
  assert code == 0, err
  assert f'{len(done_first)} done, {4 - len(done_first)} to run' in out
  second = _states(workdir, _NAMES)
  assert all(s['state'] == 'done' for s in second.values()), second
  for n in done_first:   # not retrained
    assert second[n] == first[n]
  code, out, _ = runs.run('experiments.launch', *args, cache_dir=jax_cache)
  assert code == 0 and '4 done, 0 to run' in out
  assert _states(workdir, _NAMES) == second

  code, out, err = runs.run('experiments.report', f'--workdir={workdir}', cache_dir=jax_cache)
  assert code == 0, err
  with open(os.path.join(workdir, 'report.md')) as f:
    table = [l for l in f if l.startswith('| ')]
  assert len(table) == 2 + 4
  assert [c.strip() for c in table[0].split('|')[1:4]] == ['run', 'seed', 'num_experts']
  assert out.count('| seed=') == 4
  loaded = report.load_runs(workdir)
  assert [r['name'] for r in loaded] == _NAMES
  for r in loaded:
    assert r['state'] == 'done' and r['step'] == 4 and r['tokens'] == 4 * 8 * 16
    assert r['metrics'][-1]['val_loss'] > 0 and r['wall_s'] > 0
  pngs = ['loss.png'] + [f'load_{n}.png' for n in _NAMES if n.endswith('=8')]   # MoE runs
  assert sorted(os.listdir(os.path.join(workdir, 'plots'))) == sorted(pngs)
  for png in pngs:
    with open(os.path.join(workdir, 'plots', png), 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'


_GROWN = """h.chainit([
    h.product([h.fixed('name', 'dense'), h.fixed('config.moe.num_experts', 0),
               h.fixed('config.ckpt.keep', 1), h.fixed('config.ckpt.keep_every', 2)]),
    h.product([h.fixed('name', 'grown'),
               h.fixed('upcycle.config', 'configs/upcycle/dense_to_moe.py:experts=8,top_k=2'),
               h.fixed('upcycle.src', h.run('dense', step=2))]),
    h.product([h.fixed('name', 'continued'), h.fixed('config.moe.num_experts', 0),
               h.fixed('config.init_from', h.run('dense'))]),
    h.product([h.fixed('name', 'branch'), h.fixed('config.moe.num_experts', 0),
               h.fixed('resume_from', h.run('dense', step=2))]),
])"""


def test_children_start_from_their_parents_checkpoints(tmp_path, jax_cache):
  config, workdir = runs.sweep_file(str(tmp_path), _GROWN), str(tmp_path / 'sweep')
  args = [f'--config={config}', f'--workdir={workdir}', '--parallel=2']
  code, out, err = runs.run('experiments.launch', *args, '--only=grown', '--dry_run',
                            cache_dir=jax_cache)
  assert code == 0 and not os.path.exists(workdir), err
  assert '  dense  [to run]' in out and '  grown  [to run]  after dense' in out
  assert '  branch  [not selected]  after dense' in out
  assert f'--src={workdir}/dense/checkpoints/2 --dst={workdir}/grown/.upcycle/dst' in out

  code, out, err = runs.run('experiments.launch', *args, '--only=grown,branch',
                            cache_dir=jax_cache)
  assert code == 0 and '3 of 3 runs done' in out, err
  # The parent kept step 2 for its children although ckpt.keep=1.
  assert sorted(os.listdir(os.path.join(workdir, 'dense', 'checkpoints'))) == ['2', '4']
  grown = os.path.join(workdir, 'grown')
  assert sorted(os.listdir(os.path.join(grown, 'checkpoints'))) == ['2', '4']
  with open(os.path.join(grown, 'upcycle_report.json')) as f:
    assert json.load(f)['source'] == os.path.join(workdir, 'dense', 'checkpoints', '2')
  assert not os.path.exists(os.path.join(grown, '.upcycle'))
  # The branch goes on from the parent's step 2 with the parent's config: it
  # retraces the parent's steps 3 and 4 exactly (optimizer state and data position too).
  assert sorted(os.listdir(os.path.join(workdir, 'branch', 'checkpoints'))) == ['2', '4']
  # ... and continues the parent's lineage (so a branch of a grown run stays grown).
  with open(os.path.join(workdir, 'branch', 'lineage.json')) as f:
    stages = json.load(f)['stages']
  assert [s['workdir'] for s in stages] == [os.path.join(workdir, 'dense')]
  # The run not asked for waits, its placeholder resolved to the parent's directory.
  code, out, _ = runs.run('experiments.launch', *args, '--dry_run', cache_dir=jax_cache)
  assert code == 0 and '  continued  [to run]  after dense' in out
  assert (f'--workdir={workdir}/continued --config.moe.num_experts=0 '
          f'--config.init_from={workdir}/dense\n') in out

  loaded = {r['name']: r for r in report.load_runs(workdir)}
  assert loaded['branch']['metrics'][-1]['step'] == 4
  for key in ('loss', 'val_loss', 'grad_norm'):
    assert loaded['branch']['metrics'][-1][key] == loaded['dense']['metrics'][-1][key], key
  assert loaded['grown']['start_step'] == 2 and loaded['grown']['state'] == 'done'
  assert loaded['grown']['tokens_total'] == 6 * 8 * 16   # 2 steps of the parent, 4 of its own
  assert abs(loaded['grown']['upcycle_jump']) < 1e-4     # dense -> MoE by copies is exact
  assert 'moe/layers_0/load' in loaded['grown']['metrics'][-1]
  assert loaded['branch']['start_step'] == 0 and loaded['branch']['tokens'] == 2 * 8 * 16
  assert loaded['branch']['tokens_total'] == 4 * 8 * 16
  assert loaded['continued']['state'] == 'not started'


def test_xm_backend_runs_the_same_runs(tmp_path, jax_cache):
  pytest.importorskip('xmanager')
  config = runs.sweep_file(str(tmp_path), "h.sweep('config.seed', [0, 1])")   # E=8 MoE
  workdir = str(tmp_path / 'sweep')
  args = [f'--config={config}', f'--workdir={workdir}', '--backend=xm', '--parallel=2']
  code, _, err = runs.run('experiments.launch', *args, cache_dir=jax_cache, HOME=str(tmp_path))
  assert code == 0, err
  for name in ('seed=0', 'seed=1'):
    assert runner.status(os.path.join(workdir, name))['state'] == 'done'
  assert os.path.exists(tmp_path / '.xmanager' / 'experiments.sqlite3')
  code, out, _ = runs.run('experiments.launch', *args, cache_dir=jax_cache, HOME=str(tmp_path))
  assert code == 0 and '2 done, 0 to run' in out
