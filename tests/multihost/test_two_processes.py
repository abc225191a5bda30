"""The trainer as 2 processes of 2 CPU devices each (gloo collectives),
started by `python -m moe_jax.multiprocess`, against the same global mesh in
one process: data, checkpoints, process-0-only writes, a killed process,
SIGTERM, a checkpoint restored under another process count, the in-run
transition and expert parallelism across processes."""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from moe_jax.train import trainer
from moe_jax.workdir import files
from tests.train import tiny

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONFIG = 'tests/multihost/tiny_run.py'
_BASE = dict(total_steps=6, checkpoint_every_steps=3, eval_every_steps=0, log_every_steps=1)
# Where every process has the devices it has in one process: the same rows, the
# same computation, so only the order of gloo's sums may differ (docs/multihost.md).
_RTOL = 1e-5


def _launch(workdir, keys, env=(), timeout=400):
  # --stop_grace_s: after a stop signal both processes finish their step,
  # which may compile (the grown model's), and save; on a loaded 2-core
  # machine that took over the default 120 s (CI, 2026-11-29).
  argv = [sys.executable, '-m', 'moe_jax.multiprocess', '--processes=2',
          '--devices_per_process=2', f'--stop_grace_s={timeout - 60}', '--', sys.executable, '-m', 'tests.multihost.child',
          f'--config={_CONFIG}', f'--workdir={workdir}',
          *(f'--config.{k}={v}' for k, v in keys.items())]
  return subprocess.run(argv, cwd=_REPO, env=dict(os.environ, PYTHONPATH=_REPO, **dict(env)),
                        capture_output=True, text=True, timeout=timeout, check=False)


def _losses(workdir):
  return {r['step']: r['loss'] for r in files.metrics(workdir)}


def _steps(workdir):
  return sorted(int(d) for d in os.listdir(os.path.join(workdir, files.CHECKPOINTS))
                if d.isdigit())


def _writes(output, process, workdir):
  """Files under `workdir` that process `process` wrote, checkpoints/ aside."""
  root = os.path.realpath(workdir)
  found = re.findall(rf'^\[{process}\] audit-write (.*)$', output, re.M)
  found = [os.path.realpath(p) for p in found]
  return {os.path.relpath(p, root) for p in found
          if p.startswith(root + os.sep) and not p.startswith(
              os.path.join(root, files.CHECKPOINTS) + os.sep)}


def _one_process(workdir, devices, keys, stop_at=None):
  config = tiny.config(**keys, **{'mesh.num_devices': devices})
  trainer.train_and_evaluate(config, workdir, stop_at=stop_at)
  return _losses(workdir)


def _assert_close(got, want, steps):
  np.testing.assert_allclose([got[s] for s in steps], [want[s] for s in steps], rtol=_RTOL)


def test_killed_process_stops_the_run_which_resumes_on_any_process_count(tmp_path):
  run = str(tmp_path / 'run')
  killed = _launch(run, _BASE, env={'MOE_JAX_TEST_KILL_AT': '5'})
  last = killed.stderr.strip().splitlines()[-1]   # the launcher's error: line
  assert killed.returncode == 128 + 9, killed.stdout[-3000:]
  seconds = float(re.fullmatch(r'error: process 1 of 2 was killed by SIGKILL; stopped the '
                               r'others in ([\d.]+) s', last).group(1))
  assert seconds < 10   # the launcher's 3 s grace, not a collective's timeout
  assert _steps(run) == [3] and max(_losses(run)) == 4

  resumed = _launch(run, _BASE)
  assert resumed.returncode == 0, resumed.stdout[-3000:]
  assert _steps(run) == [3, 6]
  assert [r['step'] for r in files.metrics(run)] == [1, 2, 3, 4, 5, 6]
  # Only process 0 writes the run's files; both write their checkpoint shards.
  assert not _writes(killed.stdout + resumed.stdout, 1, run)
  assert {files.CONFIG, files.RUN, files.METRICS, 'lineage.json'} <= _writes(resumed.stdout, 0,
                                                                               run)
  assert any(p.startswith('tb' + os.sep) for p in _writes(resumed.stdout, 0, run))

  one = _one_process(str(tmp_path / 'one'), 4, _BASE)   # the same 4-device mesh
  _assert_close(_losses(run), one, range(1, 7))

  # Written by 2 processes, continued by 1 process on 1 device from step 3.
  moved = str(tmp_path / 'moved')
  shutil.copytree(run, moved)
  shutil.rmtree(os.path.join(moved, files.CHECKPOINTS, '6'))
  trainer.train_and_evaluate(tiny.config(**_BASE, **{'mesh.num_devices': 1}), moved)
  _assert_close(_losses(moved), _losses(run), range(4, 7))


def test_sigterm_stops_both_processes_at_one_step_with_experts_across_processes(tmp_path):
  """mesh.expert=4 over 2 processes: the all-to-all crosses them; the in-run
  transition (4 -> 8 experts at step 2) and evaluation run under both."""
  keys = dict(_BASE, total_steps=12, checkpoint_every_steps=0, eval_every_steps=2,
              **{'mesh.expert': 4, 'mesh.data': 1, 'moe.use_bias': True, 'upcycle.step': 2,
                 'upcycle.recipe': 'expand_experts', 'upcycle.factor': 2})
  run = str(tmp_path / 'run')
  # Process 0 sends SIGTERM to the launcher when it places its 4th batch (in
  # step 2's evaluation), which passes it to both; they stop at one step after.
  proc = _launch(run, keys, env={'MOE_JAX_TEST_TERM_AT': '4'})
  assert proc.returncode == 0, proc.stdout[-3000:]
  stopped = max(_losses(run))
  assert 2 < stopped < 12 and _steps(run) == [2, stopped]
  records = list(files.metrics(run))
  assert [r['step'] for r in records] == list(range(1, stopped + 1))
  assert 'upcycle/loss_after' in records[1] and os.path.exists(
      os.path.join(run, 'upcycle_report.json'))

  one = _one_process(str(tmp_path / 'one'), 4, keys, stop_at=stopped)
  _assert_close(_losses(run), one, range(1, stopped + 1))
  one_val = {r['step']: r['val_loss'] for r in files.metrics(str(tmp_path / 'one'))
             if 'val_loss' in r}
  val = [(r['val_loss'], one_val[r['step']]) for r in records if 'val_loss' in r]
  assert val   # step 2's, after the transition
  np.testing.assert_allclose(*zip(*val), rtol=_RTOL)


@pytest.mark.parametrize('keys, message', [
    (dict(coordinator_address='localhost:1'), 'set all three'),
    (dict(coordinator_address='localhost:1', num_processes=2, process_id=2), 'set all three'),
])
def test_partial_coordinates_are_refused(keys, message):
  from moe_jax.workdir import placement  # pylint: disable=g-import-not-at-top
  from moe_jax.errors import ConfigError  # pylint: disable=g-import-not-at-top
  mesh = tiny.config().mesh
  mesh.update(keys)
  with pytest.raises(ConfigError, match=message):
    placement.initialize(mesh)
