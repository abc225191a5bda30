"""A launcher's children die with it however it dies (SIGKILL to its whole
process group; experiments.launch's run drivers and what they start), and a
stop signal they ignore ends in SIGKILL: after --stop_grace_s, or at once on
a second signal."""
import os
import signal
import subprocess
import sys
import time

from tests.robustness import harness
from tests.robustness.test_launchers import _FAMILY, _alive, _read_pids, _wait_gone
from tests.robustness.test_launchers import reaper  # pylint: disable=unused-import (a fixture)

# _FAMILY, deaf to SIGTERM (an ignored signal is inherited, so the sleep too).
_DEAF_FAMILY = 'trap "" TERM; ' + _FAMILY


def _launcher(*flags, family=_FAMILY):
  """The launcher of two families, in a session and group of its own."""
  return subprocess.Popen([sys.executable, '-m', 'moe_jax.multiprocess', '--processes=2', *flags,
                           '--', 'bash', '-c', family], cwd=harness.REPO, env=harness.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True)


def _family(proc, reaper, count=4):
  reaper(proc.pid)
  pids = _read_pids(proc, count)
  for pid in pids:
    reaper(pid)
  assert len(pids) == count and all(_alive(p) for p in pids), pids
  return pids


def test_sigkill_to_the_launchers_group_leaves_no_process(reaper):
  proc = _launcher()
  pids = _family(proc, reaper)
  os.killpg(proc.pid, signal.SIGKILL)   # kill -9 -PGID: the launcher and all of its group
  proc.wait(timeout=10)
  assert _wait_gone(pids) == []


def test_children_deaf_to_sigterm_are_killed_after_the_stop_grace(reaper):
  proc = _launcher('--stop_grace_s=1', family=_DEAF_FAMILY)
  pids = _family(proc, reaper)
  t0 = time.monotonic()
  proc.send_signal(signal.SIGTERM)
  _, err = proc.communicate(timeout=30)
  assert proc.returncode == 128 + signal.SIGKILL
  assert time.monotonic() - t0 < 10
  assert err.strip().splitlines() == [
      'error: 2 of 2 processes still ran 1 s after the stop signal was passed on; killed them '
      '(--stop_grace_s)']
  assert _wait_gone(pids) == []


def test_a_second_stop_signal_kills_at_once(reaper):
  proc = _launcher('--stop_grace_s=600', family=_DEAF_FAMILY)
  pids = _family(proc, reaper)
  proc.send_signal(signal.SIGTERM)
  time.sleep(0.5)
  assert all(_alive(p) for p in pids)   # deaf to the first
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=30)
  assert _wait_gone(pids) == []


# A sweep launcher (experiments.launch's _start, as experiments.rerun calls
# it) whose run driver is runner._Forward starting a sleep: the chain
# launcher -> driver -> trainer, with a sleep for the trainer.
_SWEEP_LAUNCHER = """
import os, sys, time
from experiments import launch, runner
driver = ('from experiments import runner\\n'
          'import sys\\n'
          'runner._Forward().call(["bash", "-c", "echo pids $$; exec sleep 60"], sys.stdout)\\n')
runner.driver_argv = lambda *_: [sys.executable, '-c', driver]
os.makedirs(os.path.join(sys.argv[1], 'r'))
print('pids', launch._start(sys.argv[1], 'r', 1).pid, flush=True)
time.sleep(60)
"""


def test_sigkill_to_a_sweep_launcher_ends_its_run_drivers_and_their_trainers(tmp_path, reaper):
  proc = subprocess.Popen([sys.executable, '-c', _SWEEP_LAUNCHER, str(tmp_path)],
                          cwd=harness.REPO, env=harness.env(), stdout=subprocess.PIPE, text=True)
  reaper(proc.pid)
  driver, = _read_pids(proc, 1)
  reaper(driver)
  log, deadline = tmp_path / 'r' / 'log.txt', time.monotonic() + 60
  while 'pids' not in (log.read_text() if log.exists() else '') and time.monotonic() < deadline:
    time.sleep(0.05)
  trainer = int(log.read_text().split('pids', 1)[1].split()[0])
  reaper(trainer)
  assert _alive(driver) and _alive(trainer)
  proc.kill()
  proc.wait(timeout=10)
  assert _wait_gone([driver, trainer]) == []


def test_a_rerun_removes_the_temporary_workdirs_of_dead_reruns(tmp_path, monkeypatch):
  from experiments import rerun  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(rerun.tempfile, 'tempdir', str(tmp_path))
  gone = subprocess.Popen(['true'])
  gone.wait()   # a pid that no longer runs: a rerun SIGKILLed
  dead = tmp_path / f'rerun_{gone.pid}_x1'
  dead.mkdir()
  (dead / 'run').mkdir()
  alive = tmp_path / f'rerun_{os.getpid()}_y2'   # a rerun still running
  alive.mkdir()
  other = tmp_path / 'rerun_notes'
  other.mkdir()
  own = rerun.own_workdir()
  assert not dead.exists() and alive.exists() and other.exists()
  assert os.path.basename(own).startswith(f'rerun_{os.getpid()}_')


# A sweep of one run whose driver (runner._Forward, as experiments.run) starts
# a trainer deaf to SIGTERM: run_local's first stop signal is not enough.
_DEAF_SWEEP = """
import os, sys, types
from experiments import launch, runner
driver = ('from experiments import runner\\n'
          'import sys\\n'
          'runner._Forward().call(["bash", "-c", "trap \\\\"\\\\" TERM; echo pids $$; '
          'exec sleep 60"], sys.stdout)\\n')
runner.driver_argv = lambda *_: [sys.executable, '-c', driver]
os.makedirs(os.path.join(sys.argv[1], 'r'))
progress = types.SimpleNamespace(outcome={}, started=lambda n: print('started', flush=True),
                                 ended=lambda n, s: None)
run = types.SimpleNamespace(name='r', parents=[])
print('stopped by', launch.run_local(sys.argv[1], [run], 1, progress), flush=True)
"""


def test_a_second_stop_signal_to_a_sweep_launcher_kills_its_runs(tmp_path, reaper):
  proc = subprocess.Popen([sys.executable, '-c', _DEAF_SWEEP, str(tmp_path)], cwd=harness.REPO,
                          env=harness.env(), stdout=subprocess.PIPE, text=True)
  reaper(proc.pid)
  assert proc.stdout.readline() == 'started\n'
  log, deadline = tmp_path / 'r' / 'log.txt', time.monotonic() + 60
  while 'pids' not in (log.read_text() if log.exists() else '') and time.monotonic() < deadline:
    time.sleep(0.05)
  trainer = int(log.read_text().split('pids', 1)[1].split()[0])
  reaper(trainer)
  proc.send_signal(signal.SIGTERM)
  time.sleep(1)
  assert proc.poll() is None and _alive(trainer)   # deaf to the first
  proc.send_signal(signal.SIGTERM)
  out, _ = proc.communicate(timeout=30)
  assert out.strip() == f'stopped by {int(signal.SIGTERM)}'
  assert _wait_gone([trainer]) == []
