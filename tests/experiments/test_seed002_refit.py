"""Seed 002 without new training: the refit of a runs table (its results file
alone rebuilds the report, the claims read the per-size fits, bad input is a
one-line error), Fig. 6's test of laws fitted on short runs against longer
ones, and the plans that extend the grid past D* and repeat its D1 = D2
points over seeds."""
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments import hyper, stats, sweep
from experiments.seed002 import common, dstar_seeds, extend, fits, refit
from experiments.seed002 import report as seed002_report
from moe_jax.errors import ConfigError
from moe_jax.scaling_laws import forms, table
from moe_jax.workdir import files
from tests.experiments import runs
from tests.experiments.test_seeds_001_002 import _cells

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
    ((f'--csv={CSV}', '--longer=none.csv', '--out=o.json'), '--longer: none.csv is not a file'),
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
  points, (b,) = _plan(), extend.plans()
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


def _table2_rows(n1s, dense_d, up_d1, up_d2):
  """Runs of seed 002's Table 2 laws (no noise): dense and MoE at each D,
  upcycled at each D1 x D2, at every N1."""
  rows = []
  for n1 in n1s:
    for kind in ('dense', 'moe'):
      for d in dense_d:
        rows.append(dict(kind=kind, N1=n1, D1=d, D2=0.0))
    rows += [dict(kind='upcycled', N1=n1, D1=d1, D2=d2) for d1 in up_d1 for d2 in up_d2]
  cols = table.from_rows([dict(r, loss=0.0) for r in rows])
  for kind, form in fits.LAWS:
    on = cols['kind'] == kind
    cols['loss'][on] = forms.predict(forms.get(form), fits.TABLE2[kind],
                                     {k: cols[k][on] for k in ('N1', 'D1', 'D2')})
  return cols


def test_extrapolation_of_a_known_law_is_exact_and_a_perturbed_run_shows():
  n1s = (1e5, 1e6)
  train = _table2_rows(n1s, (5e4, 1e5, 2e5), (5e4, 2e5), (2.5e4, 1e5))
  # Longer runs, and one the training table holds (a rerun, no extrapolation).
  test, merged = fits.union([_table2_rows(n1s, (8e5,), (8e5,), (1e5, 4e5)),
                             _table2_rows((1e5,), (), (2e5,), (1e5,))] * 2)
  assert len(merged) == len(test['loss'])   # every run twice: one row, mean loss
  up = fits.TABLE2['upcycled']
  # At one N1, eq. 12 is eq. 8 with E -> B N1^-beta + E: Table 1's mul, exactly.
  by_size = {n1: {'mul': dict(up, E=up['B'] * n1 ** -up['beta'] + up['E'])} for n1 in n1s}
  got = fits.extrapolate(train, test, fits.TABLE2, by_size)
  # The rerun is left out.
  assert {law: s['n'] for law, s in got['summary'].items()} == dict(dense=2, moe=2, upcycled=4,
                                                                     mul=4)
  for law, s in got['summary'].items():
    assert s['rms'] < 1e-9 and s['max'] < 1e-9, law
  assert {(r['kind'], r['beyond']) for r in got['rows']} == {
      ('dense', 4.0), ('moe', 4.0), ('upcycled', 4.0)}
  # A longer run 0.05 nats worse than the law: the law predicts it 0.05 too low.
  worse = dict(test, loss=np.where((test['kind'] == 'upcycled') & (test['D2'] == 4e5)
                                   & (test['N1'] == 1e6), test['loss'] + 0.05, test['loss']))
  got = fits.extrapolate(train, worse, fits.TABLE2, by_size)['summary']
  for law in ('upcycled', 'mul'):
    assert got[law]['max'] == pytest.approx(0.05)
    assert got[law]['rms'] == pytest.approx(0.05 / 2)   # one of 4 runs
  assert got['dense']['rms'] < 1e-9


@pytest.mark.slow   # the joint fits of seed 002 sec. 5: two minutes on a loaded 2-core machine
def test_laws_fitted_on_short_runs_of_a_known_law_predict_the_longer_ones():
  n1s = (1e5, 3e5, 1e6)
  train = _table2_rows(n1s, (5e4, 1e5, 2e5, 4e5), (5e4, 1.5e5, 4e5), (2.5e4, 5e4, 1e5, 2e5))
  test = _table2_rows(n1s, (1.6e6, 6.4e6), (1.6e6,), (1.6e6, 6.4e6))
  got = fits.extrapolate(train, test, *fits.fit_on(train))['summary']
  assert sorted(got) == sorted(['dense', 'moe', 'upcycled', *fits.DATASET_FORMS])
  for law in ('dense', 'moe', 'upcycled', 'mul'):
    assert got[law]['rms'] < 2e-3, (law, got[law])


def _committed(name):
  """{run: overrides} of a committed results file of docs/seed002."""
  saved = files.read_json(os.path.join(runs.REPO, 'docs', 'seed002', name))
  return {r['name']: r['overrides'] for r in saved['runs']}


def test_extension_plans_are_the_committed_runs_key_for_key():
  # The seeds argument leaves the plans that made the committed files as they were.
  assert _plan() == _plan('seeds=1') == _committed('extend.json')
  assert _plan('diagonal') == _plan('diagonal,seeds=1') == _committed('extend_diagonal.json')


def test_bracket_repeats_both_ends_of_the_diagonal_per_seed():
  points = _plan('bracket,seeds=3')
  assert len(points) == 3 * 2 * 2 * 3   # seeds x sizes x D x (dense, upcycled, MoE)
  seed0 = {n: o for n, o in points.items() if '_s' not in n}
  # Seed 0 is the committed runs: :diagonal's at 12,800 steps, the extension's
  # long runs at 6,400 (but for the checkpoints those kept for their branches).
  cadence = ('config.checkpoint_every_steps', 'config.ckpt.keep_every')
  strip = lambda o: {k: v for k, v in o.items() if k not in cadence}
  extension = _committed('extend.json')
  assert seed0 == {**_plan('diagonal'), **{n: dict(strip(extension[n]), **{
      k: 6400 for k in cadence}) for n in seed0 if '12800' not in n}}
  for s in (1, 2):
    up = points[f'up64_D1=6400_D2=6400_s{s}']
    assert up['upcycle.src'] == hyper.run(f'dense64_D1=6400_s{s}', step=6400)
    assert up['upcycle.config'] == common.UPCYCLE + f',seed={s}'   # its own router
    for name, o in seed0.items():
      other = points[f'{name}_s{s}']
      assert other['config.seed'] == s
      assert {k: v for k, v in other.items() if k not in ('name', 'config.seed', 'upcycle.src',
                                                          'upcycle.config')} == {
          k: v for k, v in o.items() if k not in ('name', 'upcycle.src', 'upcycle.config')}
  assert not any('resume_from' in o for o in points.values())
  assert len(_plan('small,bracket,seeds=2')) == 2 * 2 * 3


@pytest.mark.parametrize('arg,message', [('diagonal,bracket', 'give one of diagonal, bracket'),
                                         ('seeds=0', 'seeds=0 must be at least 1')])
def test_extension_refuses_a_bad_argument(arg, message):
  with pytest.raises(ConfigError, match=message):
    _plan(arg)


def _seed_rows(diffs):
  """Made-up collected rows: per (N1, D) the MoE from scratch at 1.5 + its
  per-seed difference to the upcycled model at 1.5, and each D's dense source."""
  rows = []
  for (n1, d), per_seed in diffs.items():
    for s, diff in enumerate(per_seed):
      rows += [dict(kind='dense', N1=n1, D1=d, D2=0.0, n_expert=0, top_k=2, seed=s, loss=1.7),
               dict(kind='moe', N1=n1, D1=d, D2=0.0, n_expert=8, top_k=2, seed=s, loss=1.5 + diff),
               dict(kind='upcycled', N1=n1, D1=d, D2=d, n_expert=8, top_k=2, seed=s, loss=1.5)]
  return rows


def test_seeds_report_pairs_by_seed_and_brackets_dstar(tmp_path):
  lo, hi = 6400 * 1024.0, 12800 * 1024.0
  diffs = {(32928.0, lo): (0.010, 0.012, 0.008), (32928.0, hi): (-0.017, -0.020, -0.015),
           (131392.0, lo): (0.011, -0.004, 0.006), (131392.0, hi): (-0.020, -0.018, -0.022)}
  sections, pngs, _ = seed002_report.seeds_report({}, _seed_rows(diffs), '', str(tmp_path))
  assert [os.path.basename(p) for p in pngs] == ['seed002_seeds.png']
  bracket, paired, per_seed = (_cells(body)[1:] for _, body in sections)
  # Upcycling ahead at 6.55M in every seed, the MoE at 13.1M: D* lies between.
  assert [row[0] for row in bracket] == ['32928', '131392']
  assert bracket[0][1].startswith('D* lies between 6.55e+06 and 1.31e+07 tokens')
  assert bracket[0][3] == 'agrees' and bracket[1][3] == 'inconclusive'   # 0 in its 6.55M interval
  for row in paired:
    d = stats.paired(diffs[float(row[0]), float(row[1])])
    assert row[2] == '3' and row[4] == stats.interval_text(d)
    assert row[6] == stats.verdict((d['lo'], d['hi']), high=0.0)
  assert [row[6] for row in paired] == ['disagrees', 'agrees', 'inconclusive', 'agrees']
  assert per_seed[1][2:] == ['1', '1.5120', '1.5000', '+0.0120']
  # One D (`:diagonal`): the claim is one-sided.
  only = {k: v for k, v in diffs.items() if k[1] == hi}
  bracket = _cells(seed002_report.seeds_report({}, _seed_rows(only), '', str(tmp_path))[0][0][1])
  assert bracket[1][1:] == ['D* is at most 1.31e+07 tokens', bracket[1][2], 'agrees']


def test_seeds_runs_table_reads_as_a_runs_table(tmp_path):
  rows = _seed_rows({(32928.0, 5120.0): (0.01, 0.02)})
  path = tmp_path / 'runs.csv'
  path.write_text(dstar_seeds.runs_csv(rows))
  cols = table.load(str(path))
  assert list(cols['seed']) == [0, 0, 0, 1, 1, 1]
  np.testing.assert_allclose(cols['loss'], [r['loss'] for r in rows], atol=1e-6)
  assert path.read_text().splitlines()[2] == 'moe,32928,5120,0,8,2,0,1.510000'
