"""The GPU script's dry run (experiments/gpu/run.py --dry_run): every step at
tiny shapes on the CPU, through the same commands a GPU call runs."""
import json
import os
import subprocess
import sys

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args):
  env = dict(os.environ, PYTHONPATH=_REPO)
  env.pop('XLA_FLAGS', None)   # one CPU device, as on a lent GPU machine's one GPU
  return subprocess.run([sys.executable, '-m', 'experiments.gpu.run', *args], cwd=_REPO,
                        env=env, capture_output=True, text=True, check=False, timeout=1200)


def test_dry_run_passes_every_step(tmp_path):
  out = tmp_path / 'gpu'
  proc = _run(f'--out={out}', '--dry_run')
  assert proc.returncode == 0, proc.stderr[-2000:]
  record = json.loads((out / 'gpu_run.json').read_text())
  steps = record['steps']
  assert list(steps) == ['workflow', 'tests', 'speed_10layer', 'speed_8x05b']
  failed = {name: s for name, s in steps.items() if s['status'] != 'ok'}
  assert not failed, json.dumps(failed, indent=1)[-3000:]
  prov = record['provenance']
  assert len(prov['commit']) == 40 and prov['jax'] and prov['flax'] and prov['device'] == 'cpu'
  # The GPU tests were collected; both memory plans compiled.
  assert 'tests collected' in steps['tests']['summary']
  for plan in steps['tests']['memory_plan'].values():
    assert plan['plan']['total'] > 0
  # Preempted after the transition and resumed: every step's loss as uninterrupted.
  work = steps['workflow']
  assert work['losses']['equal'] and work['losses']['compared'] == 8
  assert sorted(os.listdir(out / 'workflow' / 'interrupted' / 'checkpoints')) == ['6', '8']
  assert work['evaluate']['result']['step'] == 8
  assert work['export_hf']['result']['arch'] == 'mixtral'
  assert work['hf_logits']['result']['status'] in ('ok', 'skipped')
  rows = steps['speed_10layer']['rows']
  assert sorted((r['attention'], r['cross_entropy'], r['loss_chunk']) for r in rows) == [
      ('cudnn', 'fused', 0), ('cudnn', 'fused', 16), ('reference', 'fused', 0),
      ('reference', 'fused', 16)]
  assert all(r['step_ms'] > 0 and 'mfu_with_logits' in r for r in rows)
  # Every command's whole output is kept.
  logs = set(os.listdir(out / 'logs'))
  assert {'uninterrupted.txt', 'resumed.txt', 'tests.txt', 'speed_10layer.txt'} <= logs


def test_refuses_an_out_that_holds_files(tmp_path):
  (tmp_path / 'keep.txt').write_text('mine')
  proc = _run(f'--out={tmp_path}', '--dry_run')
  assert proc.returncode == 2 and proc.stderr.startswith('error: --out=')
  assert os.listdir(tmp_path) == ['keep.txt']


def test_a_command_past_its_time_says_where_it_was(tmp_path):
  """SIGABRT before SIGKILL: faulthandler prints the stuck thread's stack."""
  from experiments.gpu import run   # pylint: disable=g-import-not-at-top
  stuck = [sys.executable, '-c', 'import time\ndef stuck_here():\n  time.sleep(60)\nstuck_here()']
  result = run._run(stuck, 3, run._env(), str(tmp_path / 'logs' / 'stuck.txt'))  # pylint: disable=protected-access
  assert result['timed_out'] and result['seconds'] < 30
  assert 'stuck_here' in result['abort_trace']
  assert 'stuck_here' in (tmp_path / 'logs' / 'stuck.txt').read_text()
