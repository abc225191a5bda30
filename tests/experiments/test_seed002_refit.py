"""Seed 002 without new training: the refit of a runs table (its results file
alone rebuilds the report, the claims read the per-size fits, bad input is a
one-line error), and the plan that extends the grid past D*."""
import os
import subprocess
import sys

import pytest

from experiments import hyper, stats, sweep
from experiments.seed002 import common, extend, refit
from moe_jax.workdir import files
from tests.experiments import runs

CSV = os.path.join(runs.REPO, 'docs', 'seed002', 'grid_runs.csv')


def test_refit_of_the_committed_table_rebuilds_from_its_results(tmp_path):
  res = refit.compute(CSV)
  path = str(tmp_path / 'refit.json')
  files.write_json(path, res)
  text = refit.text(res)
  assert refit.from_results(path) == text
  # The claim is the t interval of the three sizes' eq. 10 slopes at E = 0.
  gammas = [v['eq10']['gamma'] for v in res['bottom_up']['0.0'].values()]
  assert len(gammas) == 3
  assert stats.interval_text(stats.paired(gammas)) in text
  assert sorted(res['bottom_up']) == sorted(str(e) for e in refit.FLOORS)
  # Every optimum of our laws lies inside the runs' ranges.
  assert tuple(res['fig16']['bounds']['upcycled']['D2']) == (25600.0, 204800.0)
  for row in res['fig16']['rows']:
    assert row['upcycled'] is None or 0 < row['upcycled_dense_share'] < 1


@pytest.mark.parametrize('args,message', [
    ((), 'give one of --csv'),
    (('--csv=x.csv',), '--csv needs --out'),
    (('--csv=none.csv', '--out=o.json'), '--csv=none.csv is not a file'),
])
def test_bad_input_is_one_line_and_writes_nothing(args, message, tmp_path):
  proc = subprocess.run([sys.executable, '-m', 'experiments.seed002.refit', *args],
                        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=runs.REPO),
                        capture_output=True, text=True, check=False)
  assert proc.returncode == 2 and proc.stderr.strip().startswith('error:'), proc.stderr
  assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
  assert os.listdir(tmp_path) == [] and not proc.stdout


def _plan(arg=''):
  _, planned = sweep.plan(os.path.join(runs.REPO, 'experiments', 'seed002', 'extend.py')
                          + (f':{arg}' if arg else ''))
  return {r.name: r.overrides for r in planned}


def test_extension_reaches_past_the_grids_dstar():
  points, b = _plan(), extend.budgets()
  assert len(points) == len(b['sizes']) * (len(b['dense']) * (1 + len(b['up'])) + len(b['moe']))
  # Eq. 13's diagonal D1 = D2 reaches past the first extension's fitted D* (5.3e6 tokens).
  assert min(max(b['dense']), max(b['up']), max(b['moe'])) * 1024 > 5.3e6
  big = common.SIZES[-1]
  up = points[f'up{big}_D1=1600_D2=6400']
  assert up['upcycle.src'] == hyper.run(f'dense{big}_D1=1600', step=1600)
  short = points[f'dense{big}_D1=1600']   # a decay branch of the 6,400-step run
  assert short['resume_from'] == hyper.run(f'dense{big}_D1=6400', step=1600 - 320)
  assert set(_plan('small')) == {n for n in _plan_grid_small()}
  # :diagonal: one run per kind and size at D1 = D2 = D = 12,800 steps, no branches.
  diagonal = _plan('diagonal')
  assert set(diagonal) == {name for d in b['sizes'] for name in (
      f'dense{d}_D1=12800', f'up{d}_D1=12800_D2=12800', f'moe{d}_D=12800')}
  assert not any('resume_from' in o for o in diagonal.values())


def _plan_grid_small():
  _, planned = sweep.plan(os.path.join(runs.REPO, 'experiments', 'seed002', 'grid.py:small'))
  return [r.name for r in planned]
