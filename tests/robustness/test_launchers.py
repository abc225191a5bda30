"""No process outlives its launcher: moe_jax.multiprocess (children and what
they start) and data.prepare's worker pool, whether the launcher is sent
SIGKILL, SIGHUP or SIGTERM; and the launcher's bad input and bounds."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from moe_jax.errors import RunError
from moe_jax.workdir import coordinator
from tests.robustness import harness

_WAIT_S = 10   # the bound on how long a process may linger after its launcher


def _alive(pid):
  """Whether `pid` runs (a zombie, dead but not reaped, does not count)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rpartition(')')[2].split()[0] != 'Z'
  except (FileNotFoundError, ProcessLookupError):
    return False


def _wait_gone(pids):
  deadline = time.monotonic() + _WAIT_S
  while time.monotonic() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.05)
  return [p for p in pids if _alive(p)]


@pytest.fixture
def reaper():
  """started(pid) registers a process to SIGKILL at the end, whatever happened."""
  pids = []
  yield pids.append
  for pid in pids:
    try:
      os.kill(pid, signal.SIGKILL)
    except OSError:
      pass


def _read_pids(proc, count, timeout=60):
  """The pids the processes print (`pids A B`), from the launcher's stdout."""
  pids, deadline = [], time.monotonic() + timeout
  while len(pids) < count and time.monotonic() < deadline:
    line = proc.stdout.readline()
    if not line:
      break
    if 'pids' in line:
      pids += [int(p) for p in line.split('pids', 1)[1].split()]
  return pids


def _signal_and_check_gone(proc, count, signum, reaper):
  """`proc` prints the `count` pids of its family; all alive, then `signum`
  to `proc` alone, and none of them may be left within _WAIT_S."""
  reaper(proc.pid)
  pids = _read_pids(proc, count)
  for pid in pids:
    reaper(pid)
  assert len(pids) == count and all(_alive(p) for p in pids), pids
  proc.send_signal(signum)
  proc.wait(timeout=_WAIT_S)
  assert _wait_gone(pids) == []


# Each process: a shell (the child) with a sleep of its own (the grandchild).
_FAMILY = 'sleep 60 & echo pids $$ $!; wait'


@pytest.mark.parametrize('signum', [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_multiprocess_leaves_no_process_behind(signum, reaper):
  proc = subprocess.Popen([sys.executable, '-m', 'moe_jax.multiprocess', '--processes=2', '--',
                           'bash', '-c', _FAMILY], cwd=harness.REPO, env=harness.env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _signal_and_check_gone(proc, 4, signum, reaper)


def _pool_script(workers):
  # SIGHUP's default action (exit), as a terminal's parent gets it: under
  # nohup the test session ignores SIGHUP, and an ignored signal is inherited.
  return ('import signal, sys, time\n'
          'signal.signal(signal.SIGHUP, signal.SIG_DFL)\n'
          'from moe_jax.data import prepare\n'
          f'pool = prepare.worker_pool({workers})\n'
          f'futures = [pool.submit(time.sleep, 60) for _ in range({workers})]\n'
          'while len(pool._processes) < %d: time.sleep(0.01)\n' % workers +
          'print("pids", *pool._processes, flush=True)\n'
          'time.sleep(60)\n')


@pytest.mark.parametrize('signum', [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_prepare_workers_die_with_the_parent(signum, reaper):
  proc = subprocess.Popen([sys.executable, '-c', _pool_script(2)], cwd=harness.REPO,
                          env=harness.env(), stdout=subprocess.PIPE, text=True)
  _signal_and_check_gone(proc, 2, signum, reaper)


def test_sigterm_stops_the_start_loop_at_once(reaper):
  from moe_jax import multiprocess  # pylint: disable=g-import-not-at-top
  started = []
  real_popen = subprocess.Popen

  def popen(*args, **kwargs):
    p = real_popen(*args, **kwargs)
    reaper(p.pid)
    started.append(p)
    if len(started) == 3:   # the guardian and two processes: a signal arrives
      os.kill(os.getpid(), signal.SIGTERM)
    return p

  multiprocess.subprocess.Popen = popen
  try:
    code = multiprocess.run(['sleep', '30'], 50, out=open(os.devnull, 'wb'))
  finally:
    multiprocess.subprocess.Popen = real_popen
  assert len(started) == 3 and code != 0 and _wait_gone([p.pid for p in started]) == []


@pytest.mark.parametrize('flags, pattern', [
    (['--processes=100000'], r'--processes=100000 must be between 1 and 64'),
    (['--processes=2', '--grace_s=-1'], r'--grace_s=-1.0 must be a finite number >= 0'),
    (['--processes=2', '--grace_s=nan'], r'--grace_s=nan must be a finite number >= 0'),
])
def test_multiprocess_refuses_bad_numbers(cli, tmp_path, flags, pattern):
  result = cli.run('moe_jax.multiprocess', *flags, '--', 'true', cwd=tmp_path)
  harness.assert_one_error_line(result, 2, pattern)


def test_a_failure_is_an_error_line_on_stderr_and_grandchildren_stop_within_the_grace(reaper):
  proc = subprocess.run(
      [sys.executable, '-m', 'moe_jax.multiprocess', '--processes=2', '--grace_s=1', '--',
       'bash', '-c', 'if [ "$MOE_JAX_PROCESS_ID" = 1 ]; then exit 3; fi; ' + _FAMILY],
      cwd=harness.REPO, env=harness.env(), capture_output=True, text=True, timeout=60,
      check=False)
  pids = [int(p) for line in proc.stdout.splitlines() if 'pids' in line
          for p in line.split('pids', 1)[1].split()]
  for pid in pids:
    reaper(pid)
  assert proc.returncode == 3
  assert proc.stderr.strip().startswith('error: process 1 of 2 exited with status 3')
  assert 'error:' not in proc.stdout
  seconds = float(proc.stderr.split('stopped the others in ')[1].split()[0])
  assert seconds < 1 + 0.5 and _wait_gone(pids) == []


def test_joining_something_that_is_no_coordinator_fails_fast():
  with socket.socket() as server:
    server.bind(('localhost', 0))
    server.listen()
    held = []
    accept = threading.Thread(target=lambda: held.append(server.accept()), daemon=True)
    accept.start()
    t0 = time.monotonic()
    with pytest.raises(RunError, match='something listens there but is not a JAX coordinator'):
      coordinator.check(f'localhost:{server.getsockname()[1]}', answer_s=0.5, connect_s=5)
    assert time.monotonic() - t0 < 5
  with pytest.raises(RunError, match='nothing accepted a connection in 0.3 s'):
    coordinator.check(f'localhost:{_free_port()}', connect_s=0.3)


def _free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]
