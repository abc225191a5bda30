"""The GPU script's dry runs (experiments/gpu/run.py --call=X --dry_run): each
call at tiny shapes on the CPU, through the commands a GPU call runs, with a
parent process that never imports JAX.

The suite runs call B, the end-to-end workflow; calls A, C and D (about 45 s
of the 2-core CI machine's time together) are marked slow: before a device
session, `python -m pytest -m slow tests/experiments/test_gpu_run.py` runs
all four (docs/benchmarks/gpu.md).
"""
import json
import os
import re
import subprocess
import sys

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# run.main in a process that then says which JAX modules it holds: a backend
# started in the script's own process takes the GPU's memory from its commands.
_AUDIT = ('import json, sys\n'
          'from experiments.gpu import run\n'
          'rc = run.main(sys.argv[1:])\n'
          "jax = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib'))\n"
          "print(json.dumps(dict(jax_modules=jax)))\n"
          'sys.exit(rc)\n')


def _run(*args):
  env = dict(os.environ, PYTHONPATH=_REPO)
  env.pop('XLA_FLAGS', None)   # one CPU device, as on a lent GPU machine's one GPU
  return subprocess.run([sys.executable, '-c', _AUDIT, *args], cwd=_REPO, env=env,
                        capture_output=True, text=True, check=False, timeout=1200)


def _call(tmp_path, call):
  """The call's record, after checking what every call must hold."""
  out = tmp_path / call
  proc = _run(f'--call={call}', f'--out={out}', '--dry_run')
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert json.loads(proc.stdout.splitlines()[-1]) == dict(jax_modules=[])
  record = json.loads((out / f'call_{call}.json').read_text())
  failed = {name: s for name, s in record['steps'].items() if s['status'] != 'ok'}
  assert not failed and record['status'] == 'ok', json.dumps(failed, indent=1)[-3000:]
  prov = record['provenance']
  assert len(prov['commit']) == 40 and prov['jax'] and prov['flax'] and prov['device'] == 'cpu'
  # Every command's output kept, each line stamped: seconds since its start, UTC time.
  logs = os.listdir(out / 'logs')
  for name in logs:
    for line in (out / 'logs' / name).read_text().splitlines():
      assert re.match(r'\[ *\d+\.\d s \d\d:\d\d:\d\d\] ', line), (name, line)
  return record, out, set(logs)


@pytest.mark.slow
def test_call_a_speed_rows(tmp_path):
  record, _, logs = _call(tmp_path, 'A')
  assert list(record['steps']) == ['speed']
  rows = record['steps']['speed']['rows']
  assert [(r['global_batch'], r['attention'], r['cross_entropy']) for r in rows] == [
      (2, 'reference', 'fused'), (2, 'cudnn', 'fused'), (4, 'reference', 'fused'),
      (4, 'cudnn', 'fused')]
  assert all(r['step_ms'] > 0 and 'mfu_with_logits' in r and 'peak_bytes_in_use' in r
             for r in rows)
  assert record['steps']['speed']['run']['env']['XLA_PYTHON_CLIENT_PREALLOCATE'] == 'true'
  assert logs == {'provenance.txt', 'speed.txt'}


def test_call_b_workflow(tmp_path):
  record, out, logs = _call(tmp_path, 'B')
  steps = record['steps']
  assert list(steps) == ['uninterrupted', 'interrupted', 'resumed', 'losses', 'evaluate',
                         'export_hf', 'hf_logits']
  # Preempted after the transition and resumed: every step's loss as uninterrupted.
  assert steps['losses']['equal'] and steps['losses']['compared'] == 8
  assert sorted(os.listdir(out / 'workflow' / 'interrupted' / 'checkpoints')) == ['6', '8']
  assert steps['evaluate']['result']['step'] == 8
  assert steps['export_hf']['result']['arch'] == 'mixtral'
  assert steps['hf_logits']['result']['status'] in ('ok', 'skipped')
  # The trainer's bar counts from its process's start, not from step 0.
  bar = [l for l in (out / 'logs' / 'uninterrupted.txt').read_text().splitlines()
         if 'train:' in l and '0/8 [' in l][0]
  assert not re.search(r'0/8 \[00:00<', bar), bar
  assert {'uninterrupted.txt', 'interrupted.txt', 'resumed.txt', 'hf_logits.txt'} <= logs


@pytest.mark.slow
def test_call_c_tests_and_plans(tmp_path):
  record, _, _ = _call(tmp_path, 'C')
  steps = record['steps']
  assert list(steps) == ['tests', 'plan_small', 'plan_10layer']
  assert 'tests collected' in steps['tests']['summary']
  assert steps['plan_small']['plan']['total'] > 0 and steps['plan_10layer']['plan']['total'] > 0


@pytest.mark.slow
def test_call_d_dispatch_rows(tmp_path):
  record, _, _ = _call(tmp_path, 'D')
  rows = record['steps']['dispatch']['rows']
  assert [r['dispatch'] for r in rows] == ['ragged', 'grouped']
  assert all(r['step_ms'] > 0 for r in rows)


def test_refuses_an_out_that_holds_files(tmp_path):
  (tmp_path / 'keep.txt').write_text('mine')
  proc = _run('--call=A', f'--out={tmp_path}', '--dry_run')
  assert proc.returncode == 2 and proc.stderr.startswith('error: --out=')
  assert os.listdir(tmp_path) == ['keep.txt']


def test_a_command_past_its_time_says_where_it_was(tmp_path):
  """SIGABRT before SIGKILL: faulthandler prints the stuck thread's stack."""
  from experiments.gpu import commands, run   # pylint: disable=g-import-not-at-top
  stuck = [sys.executable, '-c', 'import time\ndef stuck_here():\n  time.sleep(60)\nstuck_here()']
  result = commands.run(stuck, 3, run._env(), str(tmp_path / 'logs' / 'stuck.txt'))  # pylint: disable=protected-access
  assert result['timed_out'] and result['seconds'] < 30
  assert 'stuck_here' in result['abort_trace']
  assert 'stuck_here' in (tmp_path / 'logs' / 'stuck.txt').read_text()


def test_each_line_is_stamped_when_it_was_printed(tmp_path):
  """A tqdm redraw ('\r' then the bar, no newline) keeps the time it was
  drawn, though the next redraw, a second later, is what ends its line."""
  from experiments.gpu import commands, run   # pylint: disable=g-import-not-at-top
  code = ("import sys, time\nprint('start')\nsys.stdout.write('\\rbar 1')\nsys.stdout.flush()\n"
          "time.sleep(1.5)\nsys.stdout.write('\\rbar 2\\n')\n")
  log = tmp_path / 'logs' / 'bar.txt'
  result = commands.run([sys.executable, '-c', code], 30, run._env(), str(log))  # pylint: disable=protected-access
  assert result['rc'] == 0
  lines = log.read_text().splitlines()
  assert [l.split('] ', 1)[1] for l in lines] == ['start', 'bar 1', 'bar 2']
  seconds = [float(re.match(r'\[ *([\d.]+) s', l).group(1)) for l in lines]
  assert seconds[1] < 1.0 <= seconds[2] - seconds[1]
