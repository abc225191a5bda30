"""The CPU benchmarks run end to end and compute their ratios from paired
repetitions. Timings are not checked: not a timed test."""
import json

import pytest

from experiments.bench import cpu_layer, cpu_step


def test_step_ratios_pair_adjacent_repetitions():
  rows = [dict(case='moe4', side='jax', steps=2, seconds=[1.0, 4.0], cpu_seconds=[1.0, 2.0]),
          dict(case='moe4', side='torch', steps=2, seconds=[2.0, 2.0], cpu_seconds=[1.0, 1.0]),
          dict(case='dense', side='jax', steps=2, seconds=[1.0], cpu_seconds=[1.0])]
  jax_row, torch_row, alone = cpu_step.summarize(rows, tokens_per_step=100)
  assert torch_row['tokens_per_s'] == 100.0 and jax_row['tokens_per_s'] == 125.0
  assert jax_row['ratio_s'] == 1.25          # median of 2.0 and 0.5
  assert jax_row['ratio_cpu_s'] == 0.75      # median of 1.0 and 0.5
  assert 'ratio_s' not in alone and 'ratio_s' not in torch_row
  assert '| moe4 | moe_jax |' in cpu_step.markdown(rows)


@pytest.mark.slow
def test_step_benchmark_runs(tmp_path):
  out = tmp_path / 'step.json'
  cpu_step.main(['--out', str(out), '--cases=dense,moe4', '--reps=1', '--steps=1', '--no_torch'])
  results = json.loads(out.read_text())
  assert results['meta']['jax'] and results['meta']['threads'] == 1
  assert [r['dispatch'] for r in results['results']] == [None, 'grouped']
  assert all(r['tokens_per_s'] > 0 for r in results['results'])


@pytest.mark.slow
def test_layer_benchmark_runs_and_checks(tmp_path):
  out = tmp_path / 'layer.json'
  cpu_layer.main(['--out', str(out), '--small', '--paths=grouped,einsum', '--reps=1'])
  [case] = json.loads(out.read_text())['results']
  assert case['check']['grouped']['ok'] and case['check']['einsum']['ok']
  assert set(case['fwd_bwd_ms']) == {'dense', 'grouped', 'einsum'}
