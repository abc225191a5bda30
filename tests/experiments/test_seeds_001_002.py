"""Seeds 001 and 002 as experiments: the sweeps plan what their docstrings say,
the fits recover a law from a table made by it (slow), and every `:small`
sweep runs end to end into a report with its rows (seed 002's ablations
report also on made-up runs, cell by cell)."""
import os

import numpy as np
import pytest

from experiments import hyper, sweep
from experiments.seed001 import report as seed001_report
from experiments.seed002 import (ablations, common, dstar_seeds, extend, fits, grid,
                                 report as seed002_report)
from moe_jax.scaling_laws import forms, presets, table
from tests.experiments import runs


def _plan(path):
  _, planned = sweep.plan(os.path.join(runs.REPO, path))
  return {r.name: r.overrides for r in planned}


def test_grid_branches_decay_from_the_long_runs_stable_phase():
  points = _plan('experiments/seed002/grid.py')
  b = grid.budgets()
  per_size = len(b['dense']) + len(b['dense']) * len(b['up']) + len(b['moe'])
  assert len(points) == len(common.SIZES) * per_size
  # dense48_D1=150 continues dense48_D1=400 from step 150 - 30 and decays over 30 steps.
  short = points['dense48_D1=150']
  assert short['resume_from'] == hyper.run('dense48_D1=400', step=120)
  assert short['config.opt.decay_fraction'] == pytest.approx(30 / 150)
  assert 120 % points['dense48_D1=400']['config.checkpoint_every_steps'] == 0
  up = points['up48_D1=150_D2=200']
  assert up['upcycle.src'] == hyper.run('dense48_D1=150', step=150)
  assert up['config.moe.num_experts'] == 8 and up['config.opt.lr'] == common.LR_MOE
  assert points['up48_D1=150_D2=50']['resume_from'] == hyper.run('up48_D1=150_D2=200', step=40)


def test_seed001_sweeps_share_runs_and_only_the_phases_differ():
  schedule = _plan('experiments/seed001/schedule.py:small')
  routed = _plan('experiments/seed001/routing.py:small')
  both = _plan('experiments/seed001/all.py:small')
  assert both == {**schedule, **routed}
  assert schedule['dense'] == routed['dense'] and schedule['up_single'] == routed['up_single']
  single, three = schedule['up_single'], schedule['up_three_phase']
  assert {k: v for k, v in three.items() if 'phases' not in k and k != 'name'} == {
      k: v for k, v in single.items() if k != 'name'}
  assert three['config.phases.fractions'] == (0.05, 0.70, 0.25)
  assert routed['scratch']['config.total_steps'] == (
      routed['dense']['config.total_steps'] + routed['up_single']['config.total_steps'])


def test_seed001_seeds_pairs_each_seeds_runs_and_scratch_at_the_moe_steps():
  points = _plan('experiments/seed001/seeds.py:seeds=2')
  single = _plan('experiments/seed001/all.py')
  assert sorted(points) == sorted(f'{n}_s{s}' for s in (0, 1) for n in (
      'dense', 'up_single', 'up_three_phase', 'scratch', 'scratch_up'))
  for s in (0, 1):
    assert points[f'up_single_s{s}']['upcycle.src'] == hyper.run(f'dense_s{s}', step=150)
    for name in ('dense', 'up_single', 'up_three_phase', 'scratch'):   # all.py's, seeded
      assert {k: v for k, v in points[f'{name}_s{s}'].items() if k not in (
          'name', 'config.seed', 'upcycle.src')} == {
              k: v for k, v in single[name].items() if k not in ('name', 'upcycle.src')}
      assert points[f'{name}_s{s}']['config.seed'] == s
  assert points['scratch_up_s0']['config.total_steps'] == (
      points['up_single_s0']['config.total_steps'])


def test_seed001_seeds_report_pairs_by_seed(tmp_path):
  """Made-up final losses: the differences, their t interval and verdict."""
  losses = {'dense': 2.3, 'up_single': 2.10, 'up_three_phase': 2.08, 'scratch': 2.12,
            'scratch_up': 2.2}
  shift = (0.0, 0.01, -0.004)
  runs = {f'{name}_s{s}': dict(metrics=[dict(step=1, loss=loss, lr=1e-3, val_loss=loss + (s == 1) * 0.002 + d)])
          for name, loss in losses.items() for s, d in enumerate(shift)}
  sections, _ = seed001_report.seeds_report(runs, {}, str(tmp_path))
  rows = {row[0]: row for row in _cells(sections[1][1])}
  schedule = rows['three phases - one phase (schedule)']
  assert schedule[1] == '3' and schedule[2] == '-0.0200, -0.0200, -0.0200'
  assert schedule[-1] == 'agrees'   # the same difference in every seed
  assert rows['upcycled - scratch, equal MoE steps'][2] == '-0.1000, -0.1000, -0.1000'
  assert _cells(sections[0][1])[2][:2] == ['up_single', '2.1000']   # [0] is the header


def _synthetic_table():
  """Rows of seed 002's Table 2 laws on a grid like ours (no noise)."""
  rows = []
  for n1 in (1e5, 3e5, 1e6):
    for d in (5e4, 1e5, 2e5, 4e5):
      for kind in ('dense', 'moe'):
        p = presets.PRESETS[f'table2_{kind}']['params']
        rows.append(dict(kind=kind, N1=n1, D1=d, D2=0.0,
                         loss=float(forms.predict(forms.get('chinchilla'), p,
                                                  {'N1': np.array([n1]), 'D1': np.array([d])})[0])))
    for d1 in (5e4, 1.5e5, 4e5):
      for d2 in (2.5e4, 5e4, 1e5, 2e5):
        p = presets.PRESETS['table2_upcycled']['params']
        c = {'N1': np.array([n1]), 'D1': np.array([d1]), 'D2': np.array([d2])}
        rows.append(dict(kind='upcycled', N1=n1, D1=d1, D2=d2,
                         loss=float(forms.predict(forms.get('joint'), p, c)[0])))
  return table.from_rows(rows)


@pytest.mark.slow   # dozens of BFGS fits with leave-one-out refits
def test_joint_laws_recover_table2_from_its_own_losses():
  cols = _synthetic_table()
  laws = fits.joint_laws(cols, n_boot=0)
  assert laws['E']['params']['E'] == pytest.approx(presets.TABLE2_E, rel=0.05)
  for kind in ('dense', 'moe', 'upcycled'):
    assert laws[kind]['loo_rms'] < 1e-3, kind
  ours = fits.rows(cols, 'upcycled')
  predicted = forms.predict(forms.get('joint'), laws['upcycled']['params'], ours)
  np.testing.assert_allclose(predicted, ours['loss'], rtol=1e-3)
  by_size = fits.dataset_forms(cols)
  assert sorted(by_size) == [1e5, 3e5, 1e6]
  assert by_size[1e5]['mul']['loo_rms'] < 1e-3


def _launch(tmp_path, config, jax_cache):
  workdir = str(tmp_path / 'sweep')
  code, out, err = runs.run('experiments.launch', f'--config={config}',
                            f'--workdir={workdir}', '--parallel=2', cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  return workdir


def _sections(text):
  return {s.split('\n', 1)[0]: s for s in text.split('\n## ')[1:]}


def _cells(text):
  """Every markdown table row of `text` as its stripped cells (padding and
  separator rows left out)."""
  rows = [[c.strip() for c in line.strip()[1:-1].split('|')]
          for line in text.splitlines() if line.startswith('|')]
  return [r for r in rows if not all(set(c) <= {'-', ':'} for c in r)]


def _number(cell):
  return float(cell.split()[0])   # raises for '-' (a run without a result)


# The ablations' sweep trains under -m slow (8 runs, ~40 s of a CI worker):
# its plan and its report on made-up runs are tested below, and its runs are
# the grid's kinds under three learning-rate schedules.
@pytest.mark.parametrize('study', ['grid', pytest.param('ablations', marks=pytest.mark.slow)])
def test_seed002_small_sweep_end_to_end(study, tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)   # upcycle.config paths are relative to the repository
  workdir = _launch(tmp_path, f'experiments/seed002/{study}.py:small', jax_cache)
  text = seed002_report.write(study, workdir, 'small')
  sections = _sections(text)
  if study == 'grid':
    assert len(sections) == 7, list(sections)
    runs_md = next(s for t, s in sections.items() if t.startswith('Runs'))
    kinds = [row[0] for row in _cells(runs_md)[1:]]
    assert kinds.count('upcycled') == 4 and kinds.count('moe') == 2, kinds
    # Eq. 13's two sides where the runs hold both: D1 = D2 = 5 and 10 steps.
    diagonal = _cells(next(s for t, s in sections.items() if t.startswith("Eq. 13's")))[1:]
    assert [int(row[1]) for row in diagonal] == [5 * 1024, 10 * 1024], diagonal
    for row in diagonal:
      assert float(row[4]) == pytest.approx(float(row[2]) - float(row[3]), abs=2e-4)
    assert os.path.exists(os.path.join(workdir, 'fits.json'))
  else:
    assert len(sections) == 2
    rows = {row[1]: row for row in _cells(text) if row[1].startswith('lr=')}
    assert sorted(rows) == ['lr=const', 'lr=dense', 'lr=moe']
    for row in rows.values():
      _number(row[2])
  pngs = os.listdir(os.path.join(workdir, 'plots'))
  assert len([p for p in pngs if p.startswith('seed002_')]) == 2
  # The results file alone rebuilds every section (the fits are seeded).
  runs.assert_rebuilds(seed002_report.rebuild(os.path.join(workdir, f'seed002_{study}.json')),
                      text)


@pytest.mark.parametrize('arg', ['small', ''])
def test_seed002_ablations_upcycle_one_dense_source_under_three_lrs(arg):
  points = _plan(f'experiments/seed002/ablations.py:{arg}')
  s = ablations.steps(arg)
  source = f'dense_D1={s["d1"]}'
  assert points[source]['resume_from'] == hyper.run('dense_wsd', step=s['d1'] - s['d1'] // 5)
  lrs = {}
  for name in ablations.LR_ARMS:
    arm = points[name]
    assert arm['upcycle.src'] == hyper.run(source, step=s['d1'])
    assert (arm['config.total_steps'], arm['config.moe.num_experts']) == (s['up'], 8)
    lrs[name] = (arm['config.opt.lr'], arm.get('config.opt.schedule', 'wsd'))
  assert lrs == {'lr=const': (common.LR_DENSE * common.FINAL_LR_FRACTION, 'constant'),
                 'lr=dense': (common.LR_DENSE, 'wsd'), 'lr=moe': (common.LR_MOE, 'wsd')}
  assert points['lr=const']['config.opt.warmup_steps'] == 0
  bookkeeping = ('name', 'config.checkpoint_every_steps', 'config.ckpt.keep_every')
  training = lambda point: {k: v for k, v in point.items() if k not in bookkeeping}
  for kind in ('dense', 'moe'):
    wsd, cosine = points[f'{kind}_wsd'], points[f'{kind}_cosine']
    assert cosine.pop('config.opt.schedule') == 'cosine' and 'config.opt.schedule' not in wsd
    assert training(wsd) == training(cosine)
    assert wsd['config.total_steps'] == s['long']


def test_seed002_ablations_report_from_made_up_runs(tmp_path):
  """Each arm's final validation loss in its row and column, both plots, and
  the results file rebuilding the report, every section of it."""
  val = {'dense_wsd': 2.50, 'dense_D1=5': 2.90, 'lr=const': 2.31, 'lr=dense': 2.22,
         'lr=moe': 2.13, 'dense_cosine': 2.52, 'moe_wsd': 2.40, 'moe_cosine': 2.45}

  def rows(r):   # a train row per step; an early eval (9.99, not final) and the last
    total = r.overrides['config.total_steps']
    evals = {2: 9.99, total: val[r.name]}
    return [dict(step=t, loss=3.0 - t / 100, lr=1e-3,
                 **({'val_loss': evals[t]} if t in evals else {})) for t in range(1, total + 1)]
  workdir = str(tmp_path)
  runs.made_up_sweep(workdir, 'experiments/seed002/ablations.py:small', rows,
                     lambda r: dict(batch_size=8, seq_len=128, total_steps=len(rows(r))))
  text = seed002_report.write('ablations', workdir, 'small')
  assert len(_sections(text)) == 2
  lr_rows = {row[0]: row[1:] for row in _cells(text) if row[1].startswith('lr=')}
  assert lr_rows == {label: [name, f'{val[name]:.4f}'] for name, label in
                     ablations.LR_ARMS.items()}
  sched = {row[0]: row[1:] for row in _cells(text) if row[0] in ('dense', 'moe')}
  assert sched == {'dense': ['2.5000', '2.5200'], 'moe': ['2.4000', '2.4500']}
  pngs = os.listdir(os.path.join(workdir, 'plots'))
  assert sorted(p for p in pngs if p.startswith('seed002_')) == ['seed002_lr.png',
                                                                  'seed002_schedules.png']
  # The rebuild is the whole report between its title and its plots, not a part of it.
  rebuilt = seed002_report.rebuild(os.path.join(workdir, 'seed002_ablations.json'))
  assert text.split('\n\n', 1)[1].split('![')[0] == rebuilt


@pytest.mark.slow   # 6 launched runs; the plan and report tests of test_seed002_refit.py
                   # check the seeds' points and pairing in the default suite
def test_seed002_seeds_small_sweep_end_to_end(tmp_path, jax_cache, monkeypatch):
  """extend.py's D1 = D2 points over two seeds: each run trains under its
  seed, the report pairs them by it, and its results file rebuilds it."""
  monkeypatch.chdir(runs.REPO)
  workdir = _launch(tmp_path, 'experiments/seed002/extend.py:small,diagonal,seeds=2', jax_cache)
  text = seed002_report.write('seeds', workdir)
  bracket, paired, per_seed = (_cells(s)[1:] for s in _sections(text).values())
  assert [row[1:3] for row in bracket] == [['D* is at most 1.02e+04 tokens', bracket[0][2]]]
  assert [row[2] for row in per_seed] == ['0', '1']
  for row in per_seed:
    assert float(row[5]) == pytest.approx(float(row[3]) - float(row[4]), abs=2e-4)
  assert paired[0][2] == '2' and paired[0][-1] in ('agrees', 'disagrees', 'inconclusive')
  cols = table.load(os.path.join(workdir, dstar_seeds.RUNS_CSV))
  assert sorted(cols['seed']) == [0, 0, 0, 1, 1, 1]   # config.seed of each run, as it ran
  runs.assert_rebuilds(seed002_report.rebuild(os.path.join(workdir, 'seed002_seeds.json')), text)


def test_seed001_small_sweeps_end_to_end(tmp_path, jax_cache, monkeypatch):
  # all.py is the union of schedule.py and routing.py (the plan test above):
  # one launch runs both studies' runs, each report reads its own.
  monkeypatch.chdir(runs.REPO)
  workdir = _launch(tmp_path, 'experiments/seed001/all.py:small', jax_cache)
  texts = {study: seed001_report.write(study, workdir, batches=1)
           for study in ('schedule', 'routing')}
  rows = {row[0]: row for row in _cells(texts['schedule'])}
  for name in ('up_single', 'up_three_phase'):
    _number(rows[name][1])
  rows = _cells(texts['routing'])
  for name in ('up_single', 'scratch'):
    assert any(row[:2] == [name, 'layers_1'] and _number(row[2]) >= 0 for row in rows), name
  assert os.path.exists(os.path.join(workdir, 'plots', 'routing_scratch.json'))
  # Both reports rebuild from their results files alone (no checkpoint read).
  for study, text in texts.items():
    runs.assert_rebuilds(seed001_report.rebuild(os.path.join(workdir, f'seed001_{study}.json')),
                        text)


def test_dstar_bootstrap_pairs_the_draws():
  moe, up = fits.TABLE2['moe'], fits.TABLE2['upcycled']
  n1s = [1e9, 1e10]
  point = {n: fits.dstar.solve(moe, up, n, 1e3, 1e16)[0] for n in n1s}
  laws = {'moe': {'draws': [moe] * 3}, 'upcycled': {'draws': [up] * 3}}
  got = fits.dstar_bootstrap(laws, n1s, hi=1e16)
  none = fits.dstar_bootstrap(laws, [1e8], hi=1e16)   # these laws never cross at 1e8
  assert none['by_n1'][1e8] == dict(lo=None, hi=None, crossed=0.0) and none['falls'] is None
  for n in n1s:   # identical draws: the interval is the point
    assert got['by_n1'][n] == dict(lo=pytest.approx(point[n]), hi=pytest.approx(point[n]),
                                   crossed=1.0)
  assert got['n'] == got['n_both'] == 3
  assert got["falls"] == float(point[1e10] < point[1e9])
  assert fits.dstar_bootstrap({'moe': {'draws': [moe]}}, n1s) is None


def test_seed002_extend_end_plan_is_one_point_over_nine_seeds():
  """Issue 71's sweep: eq. 13's nearest bracket end alone (the largest size,
  D1 = D2 = D = 12,800 steps), seeds 0-8 in one workdir, 27 runs."""
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  points = {p['name']: p for p in extend.get_hyper(hyper, 'end,seeds=9')}
  assert len(points) == 27
  assert {p.get('config.seed', 0) for p in points.values()} == set(range(9))
  assert {p['config.model.d_model'] for p in points.values()} == {common.SIZES[-1]}
  assert {p['config.total_steps'] for p in points.values()} == {12800}
  up = points['up64_D1=12800_D2=12800_s8']
  assert up['upcycle.src'] == '{run:dense64_D1=12800_s8}/checkpoints/12800'
  assert up['upcycle.config'].endswith(',seed=8')
  with pytest.raises(ValueError, match='one of diagonal, bracket, end'):
    extend.parse('end,bracket')
