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
  assert list(steps) == ['tests', 'workflow', 'speed_attention', 'speed_loss', 'speed_8x05b']
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
  rows = [r for name in ('speed_attention', 'speed_loss') for r in steps[name]['rows']]
  assert [(r['attention'], r['cross_entropy'], r['loss_chunk']) for r in rows] == [
      ('cudnn', 'reference', 0), ('reference', 'fused', 16)]
  assert all(r['step_ms'] > 0 and 'mfu_with_logits' in r for r in rows)


def test_refuses_an_out_that_holds_files(tmp_path):
  (tmp_path / 'keep.txt').write_text('mine')
  proc = _run(f'--out={tmp_path}', '--dry_run')
  assert proc.returncode == 2 and proc.stderr.startswith('error: --out=')
  assert os.listdir(tmp_path) == ['keep.txt']
