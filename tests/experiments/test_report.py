"""The report from files alone: partial and missing runs, parents' tokens,
sorting, and the plots (synthetic workdirs, no training)."""
import json
import shutil
import os
import time

import pytest

from experiments import provenance, report
from moe_jax.errors import ConfigError


def _workdir(root, name, metrics=(), state=None, torn=False, jump=None, **config):
  run_dir = os.path.join(root, name)
  os.makedirs(run_dir)
  if config:
    with open(os.path.join(run_dir, 'config.json'), 'w') as f:
      json.dump(dict(dict(batch_size=8, seq_len=16, total_steps=4, upcycle=dict(step=0)),
                     **config), f)
  with open(os.path.join(run_dir, 'metrics.jsonl'), 'w') as f:
    f.writelines(json.dumps(m) + '\n' for m in metrics)
    if torn:
      f.write('{"step": 9, "lo')
  if state:
    with open(os.path.join(run_dir, 'status.json'), 'w') as f:
      json.dump(dict(state=state, attempts=1, wall_s=75.0, started=time.time() - 10), f)
  if jump:
    with open(os.path.join(run_dir, 'upcycle_report.json'), 'w') as f:
      json.dump(jump, f)


def _rows(steps, loss, load=None):
  out = []
  for s in steps:
    row = dict(step=s, loss=loss - 0.1 * s, val_loss=loss - 0.1 * s + 0.05)
    if load:
      row['moe/layers_1/load'] = load(s)
    out.append(row)
  return out


@pytest.fixture
def sweep_dir(tmp_path):
  root = str(tmp_path)
  runs = [dict(name='dense', overrides={'name': 'dense', 'config.moe.num_experts': 0},
               parents=[]),
          dict(name='grown', parents=['dense'], overrides={
              'upcycle.config': 'configs/upcycle/dense_to_moe.py', 'config.moe.num_experts': 4,
              'upcycle.src': '{run:dense}/checkpoints/2', 'config.total_steps': 6}),
          dict(name='branch', parents=['dense'], overrides={
              'resume_from': '{run:dense}/checkpoints/2', 'config.moe.num_experts': 0}),
          dict(name='later', parents=['grown'], overrides={
              'config.init_from': '{run:grown}', 'config.moe.num_experts': 4})]
  with open(os.path.join(root, 'sweep.json'), 'w') as f:
    json.dump(dict(config='x.py', runs=runs), f)
  _workdir(root, 'dense', _rows([2, 4], 5.0), state='done', **{'total_steps': 4})
  # Grew E=2 -> 4 experts at its step 2 (an in-run transition), still running; a torn line.
  _workdir(root, 'grown', _rows([1, 2, 3], 4.0, lambda s: [0.5] * (2 if s <= 2 else 4)),
           state='running', torn=True, jump=dict(loss_before=3.5, loss_after=3.75),
           total_steps=6, upcycle={'step': 2})
  _workdir(root, 'branch', _rows([3], 4.5), state='failed', total_steps=4)
  os.makedirs(os.path.join(root, 'later'))   # launched, not started
  return root


def test_load_runs_reads_partial_runs_and_counts_parents_tokens(sweep_dir):
  runs = {r['name']: r for r in report.load_runs(sweep_dir)}
  assert [r['state'] for r in runs.values()] == ['done', 'running', 'failed', 'not started']
  assert runs['grown']['step'] == 3 and len(runs['grown']['metrics']) == 3   # torn line dropped
  assert runs['grown']['tokens'] == 3 * 128 and runs['grown']['tokens_total'] == 5 * 128
  assert runs['grown']['start_step'] == 2 and runs['grown']['upcycle_jump'] == 0.25
  assert runs['branch']['start_step'] == 0   # it counts its steps on from the parent's
  assert runs['branch']['tokens'] == 1 * 128 and runs['branch']['tokens_total'] == 3 * 128
  assert runs['grown']['wall_s'] >= 85.0 and runs['dense']['wall_s'] == 75.0   # running: + now
  assert runs['later']['wall_s'] is None
  assert runs['later']['config'] is None and runs['later']['step'] == 0


def test_final_is_the_last_value_of_a_done_run_only(sweep_dir):
  """A running or failed run's last val_loss is not its final one."""
  runs = {r['name']: r for r in report.load_runs(sweep_dir)}
  assert report.final(runs['dense']) == runs['dense']['metrics'][-1]['val_loss']
  assert report.final(runs['dense'], 'loss') == runs['dense']['metrics'][-1]['loss']
  assert [report.final(runs[n]) for n in ('grown', 'branch', 'later')] == [None] * 3
  assert report.final(runs['dense'], 'accuracy') is None


def test_table_columns_and_sorting(sweep_dir):
  runs = report.load_runs(sweep_dir)
  header, rows = report.table(runs)
  assert header == ['run', 'num_experts', 'config', 'src', 'total_steps', 'resume_from',
                    'init_from', 'state', 'progress (steps)', 'val_loss (nats/token)',
                    'best val_loss (nats/token)', 'tokens', 'wall (h/m/s)',
                    'upcycle jump (nats)']
  grown = rows[1]
  assert grown[:5] == ['grown', '4', 'dense_to_moe.py', 'dense@2', '6']
  assert grown[7:] == ['running', '3/6', '3.7500', '3.7500', '384 (640 with parent)',
                       grown[12], '+0.25']
  header, rows = report.table(runs, metric='loss', by=['config.moe.num_experts', 'src'])
  assert header[:3] == ['run', 'num_experts', 'src'] and header[5] == 'loss (nats/token)'
  assert [r[0] for r in rows] == ['dense', 'branch', 'grown', 'later']
  with pytest.raises(ConfigError, match=r'--by=seed is not a key of the sweep'):
    report.table(runs, by=['seed'])


def test_write_makes_report_and_plots(sweep_dir):
  text = report.write(sweep_dir)
  with open(os.path.join(sweep_dir, 'report.md')) as f:
    assert f.read() == text
  assert '![loss.png](plots/loss.png)' in text and '![load_grown.png]' in text
  pngs = sorted(os.listdir(os.path.join(sweep_dir, 'plots')))
  assert pngs == ['load_grown.png', 'loss.png']   # only the run with MoE load metrics
  for png in pngs:
    with open(os.path.join(sweep_dir, 'plots', png), 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n'


def test_a_directory_of_plain_workdirs(tmp_path):
  _workdir(str(tmp_path), 'b', _rows([2], 3.0), total_steps=2)
  _workdir(str(tmp_path), 'a', _rows([2], 3.0), total_steps=2)
  os.makedirs(tmp_path / 'not_a_run')
  assert [r['name'] for r in report.load_runs(str(tmp_path))] == ['a', 'b']
  with pytest.raises(ConfigError, match='is not a directory'):
    report.load_runs(str(tmp_path / 'nowhere'))


def test_results_file_rebuilds_the_table_and_plots_alone(sweep_dir, tmp_path):
  text = report.write(sweep_dir, by=['config.moe.num_experts'])
  path = os.path.join(sweep_dir, 'results.json')
  runs, extra = report.read_results(path)
  assert extra.pop('provenance')['commit'] == provenance.record()['commit']
  assert extra.pop('sweep') == 'x.py'   # the sweep's config, as its sweep.json names it
  assert extra == {'metric': 'val_loss', 'by': ['config.moe.num_experts']}
  grown = {r['name']: r for r in runs}['grown']
  assert grown['final_val_loss'] == 3.75 and grown['final_loss'] is not None
  assert len(grown['config_hash']) == 16 and grown['upcycle_jump'] == 0.25
  table = report.from_results(path)
  assert table in text
  shutil.rmtree(os.path.join(sweep_dir, 'grown'))   # the runs themselves are not needed
  out = str(tmp_path / 'again')
  assert report.rebuild(path) == table
  assert table in report.rebuild(path, out)
  assert sorted(os.listdir(os.path.join(out, 'plots'))) == ['load_grown.png', 'loss.png']
  with pytest.raises(ConfigError, match='is not a file'):
    report.read_results(str(tmp_path / 'none.json'))
