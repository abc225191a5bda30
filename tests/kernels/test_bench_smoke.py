"""The MoE layer benchmark runs end to end on CPU (--small) and writes every
field the benchmark notes rely on. Timings are not checked: not a timed test."""
import json

import pytest

from experiments.bench import moe_layer


@pytest.mark.slow
def test_small_benchmark_writes_results(tmp_path):
  out = tmp_path / 'results.json'
  moe_layer.main(['--small', f'--out={out}'])
  results = json.loads(out.read_text())
  meta = results['meta']
  for key in ('jax', 'jaxlib', 'device', 'timing', 'routing',
              'copy_bandwidth_GBps'):
    assert meta[key], key
  cases = results['results']
  assert len(cases) == 4   # 1 T x 1 F x 2 (E, k) x 2 routings
  for case in cases:
    for group in ('fwd_ms', 'fwd_bwd_ms'):
      assert set(case[group]) == {'dense', 'pallas', 'ragged', 'einsum'}
      assert all(isinstance(v, float) for v in case[group].values()), case
    assert sum(case['load']['counts']) == case['assignments']
    assert case['padded_rows'] >= case['assignments']
    assert case['ratios']['fwd_bwd_speedup_vs_ragged'] > 0


def test_full_grid_on_cpu_is_refused(tmp_path):
  with pytest.raises(moe_layer.ConfigError, match='--small'):
    moe_layer.main([f'--out={tmp_path / "r.json"}'])
