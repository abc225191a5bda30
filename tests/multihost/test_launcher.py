"""python -m moe_jax.multiprocess: each process's coordinates, prefixed output,
the first failure's status with the others stopped, signals passed on once."""
import os
import re
import signal
import subprocess
import sys
import time

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launcher(code, processes=2, *flags):
  return [sys.executable, '-m', 'moe_jax.multiprocess', f'--processes={processes}', *flags,
          '--', sys.executable, '-c', code]


def _run(argv, **kwargs):
  return subprocess.run(argv, cwd=_REPO, env=dict(os.environ, PYTHONPATH=_REPO),
                        capture_output=True, text=True, timeout=120, check=False, **kwargs)


def test_each_process_gets_its_coordinates_and_devices_and_prefixed_lines():
  code = ('import os; e = os.environ; print("id", e["MOE_JAX_PROCESS_ID"], "of", '
          'e["MOE_JAX_NUM_PROCESSES"], e["MOE_JAX_COORDINATOR_ADDRESS"], e["XLA_FLAGS"])')
  proc = _run(_launcher(code, 2, '--devices_per_process=3'))
  assert proc.returncode == 0, proc.stdout + proc.stderr
  lines = sorted(proc.stdout.splitlines())
  assert len(lines) == 2
  for i, line in enumerate(lines):
    m = re.fullmatch(rf'\[{i}\] id {i} of 2 localhost:(\d+) (.*)', line)
    assert m, line
    assert m.group(2).split().count('--xla_force_host_platform_device_count=3') == 1
  assert lines[0].split()[5] == lines[1].split()[5]   # one coordinator


def test_one_process_needs_no_coordinator():
  proc = _run(_launcher('import os; print("MOE_JAX_PROCESS_ID" in os.environ)', 1))
  assert proc.returncode == 0 and proc.stdout == '[0] False\n', proc.stdout + proc.stderr


def test_first_failure_stops_the_others_and_sets_the_status():
  code = ('import os, sys, time\n'
          'if os.environ["MOE_JAX_PROCESS_ID"] == "1": sys.exit(3)\n'
          'import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(100)')
  t0 = time.monotonic()
  proc = _run(_launcher(code, 2, '--grace_s=1'))
  assert proc.returncode == 3
  assert time.monotonic() - t0 < 30   # SIGTERM ignored: SIGKILL after the grace second
  assert re.fullmatch(r'error: process 1 of 2 exited with status 3; stopped the others in '
                      r'[\d.]+ s', proc.stderr.strip().splitlines()[-1]), proc.stderr


def test_a_signal_to_the_launcher_reaches_every_process_once():
  code = ('import signal, sys, time\n'
          'got = []\n'
          'signal.signal(signal.SIGTERM, lambda *a: got.append(1))\n'
          'print("ready", flush=True)\n'
          'end = time.monotonic() + 6\n'
          'while time.monotonic() < end: time.sleep(0.05)\n'
          'print("terms", len(got))')
  launcher = subprocess.Popen(_launcher(code, 2), cwd=_REPO, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=_REPO))
  ready = 0
  while ready < 2:
    ready += launcher.stdout.readline().endswith('ready\n')
  launcher.send_signal(signal.SIGTERM)   # a second would be SIGKILL (test_process_lifetimes)
  out, _ = launcher.communicate(timeout=60)
  assert launcher.returncode == 0
  assert sorted(out.splitlines()) == ['[0] terms 1', '[1] terms 1']


def test_no_command_is_a_one_line_error():
  proc = _run([sys.executable, '-m', 'moe_jax.multiprocess', '--processes=2'])
  assert proc.returncode == 2 and proc.stderr.startswith('error: no command'), proc.stderr
  assert len(proc.stderr.splitlines()) == 1


def test_a_sweep_trains_each_run_through_the_launcher():
  from experiments import runner  # pylint: disable=g-import-not-at-top
  (stage, argv), = runner.commands('/sw', 'cfg.py', 'run', {'config.seed': 1}, processes=2)
  assert stage == 'train'
  assert argv[1:5] == ['-m', 'moe_jax.multiprocess', '--processes=2', '--']
  assert argv[6:8] == ['-m', 'moe_jax.main'] and '--config.seed=1' in argv
  assert runner.commands('/sw', 'cfg.py', 'run', {})[0][1][1:3] == ['-m', 'moe_jax.main']
  assert runner.driver_argv('/sw', 'run', 2)[-1] == '--processes=2'
