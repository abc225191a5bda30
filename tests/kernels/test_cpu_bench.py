"""The CPU benchmarks run end to end and compute their ratios from paired
repetitions. Timings are not checked: not a timed test."""
import json
import types

import pytest

from experiments.bench import cpu_layer, cpu_profile, cpu_step, cpu_trace, step_trace


def test_step_ratios_pair_adjacent_repetitions():
  rows = [dict(case='moe4', side='jax', steps=2, seconds=[1.0, 4.0], cpu_seconds=[1.0, 2.0]),
          dict(case='moe4', side='torch', steps=2, seconds=[2.0, 2.0], cpu_seconds=[1.0, 1.0]),
          dict(case='dense', side='jax', steps=2, seconds=[1.0], cpu_seconds=[1.0])]
  jax_row, torch_row, alone = cpu_step.summarize(rows, tokens_of=lambda case: 100)
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


def test_profile_table_subtracts_the_layers_from_fwd_bwd():
  ms = dict(step=10.0, fwd=3.0, fwd_bwd=9.0, optimizer=1.0, ffn=2.0)
  rows = [dict(case='moe4', side='moe_jax', cpu_ms=dict(ms, attention=1.5)),
          dict(case='moe4', side='transformers', cpu_ms=ms)]
  jax_line, torch_line = cpu_profile.markdown(rows, layers=2).splitlines()[2:]
  assert jax_line.endswith('| 4.0 | 3.0 | 2.0 |')               # 9 - 2 * (2 + 1.5)
  assert torch_line.endswith('| 4.0 |  | 5.0 (attention included) |')


def test_trace_self_times_subtract_nested_thunks():
  event = lambda name, start, duration: types.SimpleNamespace(
      name=name, start_ns=start, duration_ns=duration)
  loop = [event('while', 0, 100), event('dot', 10, 30), event('fusion', 50, 20),
          event('after', 100, 5)]
  assert sorted(cpu_trace.self_times(loop)) == [
      ('after', 5), ('dot', 30), ('fusion', 20), ('while', 50)]


def test_trace_parts_from_op_names():
  hlo = '\n'.join(f'  %{name} = f32[2] op(), metadata={{op_name="{op_name}"}}' for name, op_name in [
      ('a', 'jit(train_step)/jvp(Transformer)/layers_0/attn/exp'),
      ('b', 'jit(train_step)/transpose(jvp(Transformer))/layers_1/moe/while/body/dot_general'),
      ('c', 'jit(train_step)/transpose(jvp(Transformer))/layers_1/moe/gather'),
      ('d', 'jit(train_step)/mul'),
      ('e', 'jit(train_step)/transpose(jvp(Transformer))/dot_general'),
      ('f', 'jit(train_step)/jvp(Transformer)/layers_0/mlp_norm/rsqrt')])
  assert cpu_trace.op_parts(hlo) == {
      'a': 'attention (fwd)', 'b': 'moe: experts (bwd)',
      'c': 'moe: router, routing, statistics (bwd)', 'd': 'optimizer + metrics',
      'e': 'head + loss (bwd)', 'f': 'norms (fwd)'}


def test_trace_names_each_instruction_by_shape_and_op():
  hlo = """  %dot.6 = f32[384,96]{1,0} dot(%a, %b), lhs_contracting_dims={0}
  ROOT %fusion.3 = f32[16,2,256,24]{3,2,1,0} fusion(%c, %d), kind=kLoop, calls=%fc"""
  assert cpu_trace.instructions(hlo) == {
      'dot.6': 'f32[384,96] dot', 'fusion.3': 'f32[16,2,256,24] fusion kLoop'}


@pytest.mark.slow
def test_profile_and_trace_run(tmp_path):
  cpu_profile.main(['--out', str(tmp_path / 'p.json'), '--cases=moe4', '--reps=1', '--no_torch'])
  [row] = json.loads((tmp_path / 'p.json').read_text())['results']
  assert set(row['cpu_ms']) == {'step', 'fwd', 'fwd_bwd', 'optimizer', 'ffn', 'attention'}
  cpu_trace.main(['--out', str(tmp_path / 't.json'), '--cases=moe4', '--steps=1', '--top=3'])
  [row] = json.loads((tmp_path / 't.json').read_text())['results']
  assert row['dispatch'] == 'grouped' and row['ms_per_step']['moe: experts (bwd)'] > 0
  assert len(row['top']) == 3 and row['top'][0]['ms_per_step'] >= row['top'][2]['ms_per_step']


def test_step_trace_counts_gpu_kernels_whole_and_cpu_thunks_by_self_time():
  """On a GPU stream consecutive kernels' timestamps overlap a little, and each
  kernel still counts its whole duration under its HLO instruction; XLA:CPU's
  thunks nest, and count their self time."""
  ns = types.SimpleNamespace
  event = lambda name, start, duration, module='jit_train_step': ns(
      name=f'kernel_{name}', start_ns=start, duration_ns=duration,
      stats=[('hlo_module', module), ('hlo_op', name)])
  stream = ns(name='Stream #14', events=[
      event('fusion.1', 0, 100), event('custom-call.2', 99, 50), event('other', 150, 9, 'jit_x')])
  gpu = ns(planes=[ns(name='/host:CPU', lines=[]), ns(name='/device:GPU:0', lines=[stream])])
  assert step_trace._step_times(gpu) == {  # pylint: disable=protected-access
      '/device:GPU:0 Stream #14': [('fusion.1', 100), ('custom-call.2', 50)]}
  thread = ns(name='thread', events=[ns(name='while', start_ns=0, duration_ns=100,
                                        stats=[('hlo_module', 'jit_train_step')]),
                                     ns(name='dot', start_ns=10, duration_ns=30,
                                        stats=[('hlo_module', 'jit_train_step')])])
  cpu = ns(planes=[ns(name='/host:CPU', lines=[thread])])
  assert sorted(step_trace._step_times(cpu)['/host:CPU thread']) == [  # pylint: disable=protected-access
      ('dot', 30), ('while', 70)]


@pytest.mark.slow
def test_step_trace_runs_and_reads_its_raw_folder_again(tmp_path):
  raw = tmp_path / 'raw'
  step_trace.main(['--out', str(tmp_path / 'a.json'), '--small', '--steps=1', '--top=3',
                   f'--raw={raw}'])
  step_trace.main(['--out', str(tmp_path / 'b.json'), '--from_raw', str(raw), '--top=3'])
  a, b = (json.loads((tmp_path / f).read_text()) for f in ('a.json', 'b.json'))
  assert a['results'] == b['results'] and b['meta']['from_raw']
  [row] = a['results']
  assert row['ms_per_step']['moe: experts (bwd)'] > 0 and len(row['top']) == 3
  assert a['meta']['grid']['preset'] == 'tiny' == b['meta']['grid']['preset']
