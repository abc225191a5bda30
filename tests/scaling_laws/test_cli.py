"""`python -m moe_jax.scaling_laws` end to end, in subprocesses."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from moe_jax.scaling_laws import __main__ as main
from moe_jax.scaling_laws import table
from tests.scaling_laws import synthetic, test_collect

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cli(*args):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
  return subprocess.run([sys.executable, '-m', 'moe_jax.scaling_laws', *args], cwd=ROOT,
                        env=env, capture_output=True, text=True, timeout=120)


def ok(*args):
  proc = cli(*args)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout


def test_fit_writes_json_and_plot_then_predict_reads_it(tmp_path):
  truth = synthetic.table2('table2_upcycled')
  cols = synthetic.runs('joint', truth, {'N1': np.geomspace(1e7, 1e10, 4),
                                         'D1': np.geomspace(1e9, 1e12, 3),
                                         'D2': np.geomspace(1e9, 1e12, 3)}, noise=0.0)
  cols['kind'] = np.array(['upcycled'] * len(cols['loss']))
  table.write(cols, str(tmp_path / 'runs.jsonl'))
  out = json.loads(ok('fit', f'--runs={tmp_path}/runs.jsonl', '--form=joint', '--kind=upcycled',
                      '--fix=E=0.165', '--max_inits=8', f'--plot={tmp_path}/fit.png',
                      f'--out={tmp_path}/fit.json'))
  (entry,) = out['fits']
  assert entry['fixed'] == {'E': 0.165} and entry['n'] == 36
  for p, v in truth.items():
    assert entry['params'][p] == pytest.approx(v, rel=1e-4), p
  assert (tmp_path / 'fit.png').read_bytes()[:4] == b'\x89PNG'
  pred = json.loads(ok('predict', f'--params={tmp_path}/fit.json', '--at=D1=1e10,D2=2e10,N1=1e9'))
  want = json.loads(ok('predict', '--params=table2_upcycled', '--at=D1=1e10,D2=2e10,N1=1e9'))
  assert pred['predictions'][0]['loss'] == pytest.approx(want['predictions'][0]['loss'], rel=1e-5)


def test_dstar_and_optimal(tmp_path):
  out = json.loads(ok('dstar', '--n1=3e8,1e9,7e9', f'--plot={tmp_path}/d.png'))
  rows = {r['N1']: r for r in out['dstar']}
  assert rows[1e9]['eq2'] == pytest.approx(4e9)
  assert rows[1e9]['D_star'] == pytest.approx(3.0e9, rel=0.02)
  assert rows[3e8]['D_star'] > rows[1e9]['D_star'] > rows[7e9]['D_star']
  assert (tmp_path / 'd.png').exists()
  opt = json.loads(ok('optimal', '--d1=2e12', '--c2=1e23'))
  assert 6 * 1.75 * opt['N1_opt'] * opt['D2_opt'] == pytest.approx(1e23)


def test_cost_reproduces_seed000():
  out = json.loads(ok('cost', '--s_E=2.1', '--s_mE=4.1', '--T=567000', '--tau_fraction=0.6666666666666666',
                      '--devices=64', '--loss_fixed_E=1.339', '--loss_upcycled=1.305',
                      '--loss_fixed_mE=1.308'))
  assert [round(out[k]) for k in ('C_fixed_E', 'C_fs', 'C_up')] == [21_168, 41_328, 27_888]
  assert out['eta'] == pytest.approx(0.034 / 0.031)


def test_collect_then_fit_needs_enough_runs(tmp_path):
  dirs = [test_collect.make_workdir(tmp_path, f'run{i}', {300: 3.0 - 0.1 * i},
                                    **{'model.d_model': 32 * (i + 1)}) for i in range(3)]
  text = ok('collect', *dirs, f'--out={tmp_path}/runs.jsonl')
  rows = [json.loads(line) for line in text.splitlines()]
  assert [r['loss'] for r in rows] == [3.0, 2.9, 2.8]
  assert rows[0]['N1'] < rows[1]['N1'] < rows[2]['N1']
  proc = cli('fit', f'--runs={tmp_path}/runs.jsonl', '--form=chinchilla')
  assert proc.returncode == 2 and proc.stdout == ''
  assert proc.stderr == ("error: form 'chinchilla' has 5 free parameters; it needs at least "
                         "6 runs, got 3\n")


@pytest.mark.parametrize('args,match', [
    (('cost', '--s_E=1', '--s_mE=2', '--T=10'), 'needs --tau or --tau_fraction'),
    (('predict', '--params=nope', '--at=D1=1'), "--params 'nope' is neither a preset"),
    (('fit', '--runs=/nonexistent.csv'), 'no such file'),
])
def test_errors_are_one_line_exit_2(args, match):
  proc = cli(*args)
  assert proc.returncode == 2
  assert proc.stderr.startswith('error: ') and match in proc.stderr
  assert proc.stderr.count('\n') == 1


@pytest.mark.parametrize('command', ['fit', 'predict', 'dstar', 'optimal', 'cost', 'collect'])
def test_every_subcommand_has_help(command, capsys):
  # In-process: argparse's --help prints usage and exits 0.
  with pytest.raises(SystemExit) as e:
    main.main([command, '--help'])
  assert e.value.code == 0 and 'usage: python -m moe_jax.scaling_laws ' + command in capsys.readouterr().out
