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
    # Interpret-mode Pallas against ragged, in bf16 within check.rtol.
    assert case['check']['ok'], case['check']


def test_grid_slice_rewrites_results_after_each_case(tmp_path):
  out = tmp_path / 'results.json'
  moe_layer.main(['--small', f'--out={out}', '--experts_k=4:2',
                  '--routing=skewed'])
  results = json.loads(out.read_text())
  assert results['meta']['grid']['experts_k'] == [[4, 2]]
  [case] = results['results']
  assert (case['experts'], case['top_k'], case['routing']) == (4, 2, 'skewed')
  assert case['check']['ok'], case['check']
  assert not (tmp_path / 'results.json.tmp').exists()


def test_bad_grid_slice_is_a_one_line_error(tmp_path, capsys):
  with pytest.raises(moe_layer.ConfigError, match='--routing=zipf'):
    moe_layer.main(['--small', f'--out={tmp_path / "r.json"}', '--routing=zipf'])
  with pytest.raises(SystemExit):
    moe_layer.main(['--small', f'--out={tmp_path / "r.json"}', '--experts_k=8x2'])
  assert "--experts_k: '8x2' is not a list like 8:2,64:8" in capsys.readouterr().err
  assert not (tmp_path / 'r.json').exists()


def test_full_grid_on_cpu_is_refused(tmp_path):
  with pytest.raises(moe_layer.ConfigError, match='--small'):
    moe_layer.main([f'--out={tmp_path / "r.json"}'])


def test_tile_tuning_times_the_pallas_path_at_each_setting(tmp_path):
  out = tmp_path / 'tune.json'
  moe_layer.main(['--small', f'--out={out}', '--experts_k=4:2',
                  '--routing=uniform', '--tiles=8:16:16:16:4:3,16:16:16:8:4:2'])
  tuning = json.loads(out.read_text())['tuning']
  assert [t['tiles'] for t in tuning] == [
      dict(m=8, n=16, k=16, w=16, warps=4, stages=3),
      dict(m=16, n=16, k=16, w=8, warps=4, stages=2)]
  for t in tuning:
    assert set(t['ms']) == {'fwd', 'fwd_bwd', 'gmm'}
    assert all(isinstance(v, float) for v in t['ms'].values()), t


def test_bad_tile_setting_is_a_one_line_error(tmp_path, capsys):
  with pytest.raises(SystemExit):
    moe_layer.main(['--small', f'--out={tmp_path / "r.json"}', '--tiles=8:16'])
  assert "is not a list like 128:256:64:128:8:3" in capsys.readouterr().err
  assert not (tmp_path / 'r.json').exists()


def test_paths_limits_the_timed_paths_but_not_the_check(tmp_path):
  out = tmp_path / 'r.json'
  moe_layer.main(['--small', f'--out={out}', '--experts_k=4:2',
                  '--routing=uniform', '--paths='])
  [case] = json.loads(out.read_text())['results']
  assert set(case['fwd_bwd_ms']) == {'dense', 'pallas'}
  assert case['checks']['pallas']['ok'], case['checks']   # ragged still ran
  with pytest.raises(moe_layer.ConfigError, match="--paths=zipf"):
    moe_layer.main(['--small', f'--out={tmp_path / "b.json"}', '--paths=zipf'])
  assert not (tmp_path / 'b.json').exists()


def test_fused_gate_is_a_path_of_its_own():
  """--kernels=...,mosaic_gpu_fused times the Mosaic GPU kernels with the
  fused gate beside the default ones, under names of their own."""
  bs = [moe_layer._backend(name, 'interpret')  # pylint: disable=protected-access
        for name in ('triton', 'mosaic_gpu', 'mosaic_gpu_fused')]
  assert [b.fuse_gate for b in bs] == [False, False, True]
  assert [moe_layer._pallas_name(b) for b in bs] == [  # pylint: disable=protected-access
      'pallas', 'pallas_mosaic_gpu', 'pallas_mosaic_gpu_fused']
  assert [moe_layer._gmm_name(b) for b in bs] == [  # pylint: disable=protected-access
      'gmm', 'gmm_mosaic_gpu', 'gmm_mosaic_gpu_fused']
