"""Seed 000's studies end to end at `:small` size: each sweep launches, every
run finishes, and its report has every row with numbers (CI-sized; the
full-size runs and their results are in docs/seed000.md); the reports of
Tables 8 and cpt also on made-up runs, cell by cell."""
import json
import os

import pytest

from experiments import runner
from experiments.seed000 import (base, cpt_length, report as seed000_report, staged, table3,
                                 table4, table5, table8)
from moe_jax.workdir import files
from tests.experiments import runs


def _launch(config, workdir, cache):
  code, out, err = runs.run('experiments.launch', f'--config={config}', f'--workdir={workdir}',
                            '--parallel=2', cache_dir=cache)
  assert code == 0, out + err


def _report(table, workdir, cache, arg='small'):
  code, out, err = runs.run('experiments.seed000.report', f'--table={table}',
                            f'--workdir={workdir}', f'--arg={arg}', cache_dir=cache)
  assert code == 0, err
  assert os.path.exists(os.path.join(workdir, 'plots', f'table{table}.png'))
  # The results file alone rebuilds the table (the same code, other input).
  assert seed000_report.from_results(os.path.join(workdir, f'table{table}.json')) in out
  return out


def _row(out, *cells):
  """The markdown row that starts with `cells`, split into its cells."""
  for line in out.splitlines():
    got = [c.strip() for c in line.strip('|').split('|')]
    if got[:len(cells)] == [str(c) for c in cells]:
      return got
  raise AssertionError(f'no row {cells} in\n{out}')


def _numbers(cells):
  assert cells and all(c != '-' for c in cells), cells
  return [float(c.split()[0]) for c in cells]


# Table 4 runs the sweep of issue 35's rerun: utility copies by the proportional rule.
# Table 5 runs its top-1 rows (5 runs, not 9): the top-2 rows' runs are
# test_quickstart_small's arms (Fixed-E, Fixed-2E, expand_experts and
# dense_to_moe in the run, top-2), and top-1 alone has the exact copies.
_ARGS = {'4': 'small,allocation=proportional', '5': 'small,top_k=1'}
_FILES = {'cpt': 'cpt_length'}


# Tables 3, 8 and cpt train under -m slow (3, 5 and 7 runs, ~95 s of a CI
# worker): their reports are tested on made-up runs below, their sweeps plan
# in tests/experiments/test_every_sweep_plans.py, and their in-run recipes and
# the cpt part's data stream have tests of their own (tests/upcycle,
# tests/train; Table 3's one in-run upcycle is test_quickstart_small's).
_SLOW = pytest.mark.slow


@pytest.mark.parametrize('table', [pytest.param('3', marks=_SLOW), '4', '5',
                                   pytest.param('8', marks=_SLOW),
                                   pytest.param('cpt', marks=_SLOW)])
def test_table_sweep_small(tmp_path, jax_cache, table):
  workdir = str(tmp_path / 'sweep')
  arg = _ARGS.get(table, 'small')
  _launch(f'experiments/seed000/{_FILES.get(table, "table" + table)}.py:{arg}', workdir,
          jax_cache)
  out = _report(table, workdir, jax_cache, arg)
  if table == '3':
    part_a, part_b = table3.rows('small')
    for tau, _ in part_a:
      _numbers(_row(out, tau)[2:5])
    for cpt, _ in part_b:
      _numbers(_row(out, cpt)[2:5])
  elif table == '4':
    for seed, f, names in table4.rows(arg):
      cells = _row(out, f'seed {seed}', f'{round(100 * f)}%')
      _numbers([c for c, col in zip(cells[2:], ('fixed', 'fixed2x') + table4.STRATEGIES)
                if col in names])
      with open(os.path.join(workdir, names['curvature'], 'upcycle_scores.json')) as f:
        record = json.load(f)
      assert record['allocation'] == 'proportional'
      for layer in record['layers'].values():
        assert sum(layer['counts']) == 8 and min(layer['counts']) >= 1
  elif table == '5':
    assert table5.top_ks('small') == (1, 2) and table5.top_ks(arg) == (1,)
    for k, _, e, names in table5.rows(arg):
      cells = _row(out, k, f'{100 * k / (2 * e):.2f}% ({2 * e})')
      _numbers(cells[3:7] + cells[10:12])   # four losses, both transitions' jumps
      with open(os.path.join(workdir, names['upcycled'], 'upcycle_report.json')) as f:
        jump = json.load(f)
      # Top-1 copies are exact up to the replicas' U(-delta, delta) bias noise.
      if k == 1:
        assert jump['loss_after'] == pytest.approx(jump['loss_before'], abs=1e-3)
  elif table == 'cpt':
    for _, c, names in cpt_length.rows('small'):
      for arm in ('up', 'annealed', 'disjoint'):
        if arm in names:
          label = 'Upcycled' if arm == 'up' else arm
          _numbers(_row(out, c, cpt_length.budgets('small')[c], label)[4:7])
    # The disjoint arm's CPT read the cpt part, from its beginning (the pretrain
    # source's position is in another stream).
    run = os.path.join(workdir, 's0_T=60_disjoint')
    with open(os.path.join(run, 'config.json')) as f:
      assert json.load(f)['data']['part'] == 'cpt'
    with open(os.path.join(run, 'log.txt')) as f:
      assert 'this one starts from its beginning' in f.read()
  else:
    for kind, entries in table8.rows('small').items():
      for name, _ in entries:
        _numbers(_row(out, kind, name)[2:4])
    assert 'Spearman rho' in out


def _made_up_sweep(root, spec, val, train=None, jump=None):
  """runs.made_up_sweep with each run's final val_loss `val[name]`, training
  losses from `train[name]` = (first after tau, last), and its transition's
  report (the validation loss right after: `jump[name]`)."""
  tau = lambda r: r.overrides.get('config.upcycle.step', 0)
  total = lambda r: r.overrides.get('config.total_steps', 60)

  def rows(r):
    first, last = (train or {}).get(r.name, (3.0, 2.9))
    return [dict(step=tau(r) + 1, loss=first),
            dict(step=total(r), loss=last, val_loss=val[r.name])]
  planned = runs.made_up_sweep(root, spec, rows, lambda r: dict(
      batch_size=8, seq_len=16, total_steps=total(r), upcycle=dict(step=tau(r))))
  for r in planned:
    if tau(r):
      with open(os.path.join(root, r.name, 'upcycle_report.json'), 'w') as f:
        json.dump(dict(loss_before=3.0, loss_after=(jump or {}).get(r.name, 3.0)), f)
  return planned


def _write_report(table, workdir, arg='small'):
  """What `python -m experiments.seed000.report --table=N` prints, in this
  process; its plot and its results file as _report checks them."""
  out = seed000_report.write(table, workdir, arg)
  assert os.path.getsize(os.path.join(workdir, 'plots', f'table{table}.png')) > 0
  assert seed000_report.from_results(os.path.join(workdir, f'table{table}.json')) in out
  return out


def test_table3_report_from_made_up_runs(tmp_path):
  """`:small`'s one tau and one CPT length (the same three runs: CPT = T - tau),
  each with its three losses and the upcycled run's efficiency
  (2.8 - 2.5) / (2.8 - 2.4) = 75 %."""
  workdir = str(tmp_path)
  _made_up_sweep(workdir, 'experiments/seed000/table3.py:small',
                 {'fixed': 2.8, 'fixed2x': 2.4, 'a_tau=20': 2.5})
  out = _write_report('3', workdir)
  part_a, part_b = table3.rows('small')
  assert [tau for tau, _ in part_a] == [cpt for cpt, _ in part_b] == [20]
  for cells in (_row(out, 20, '0.500'), _row(out, 20, '0.50')):
    assert cells[2:6] == ['2.8000', '2.5000', '2.4000', '75.0'], cells


def test_table8_report_from_made_up_runs(tmp_path):
  """Every row of `:small` with its initial and final loss, vs copy and eta;
  both Spearman lines over the three ranked runs (router=copy is expert=copy)."""
  workdir = str(tmp_path)
  init = {'expert=copy': 3.1, 'expert=scaled_copy': 3.3, 'router=copy_noise': 3.2}
  val = {'fixed': 2.8, 'fixed2x': 2.4, 'expert=copy': 2.5, 'expert=scaled_copy': 2.6,
         'router=copy_noise': 2.7}
  train = {'expert=copy': (3.0, 2.45), 'expert=scaled_copy': (3.1, 2.4),
           'router=copy_noise': (3.2, 2.35)}
  _made_up_sweep(workdir, 'experiments/seed000/table8.py:small', val, train, init)
  out = _write_report('8', workdir)
  want = {'expert=copy': ('0.0000', '75.0'), 'expert=scaled_copy': ('0.1000', '50.0'),
          'router=copy_noise': ('0.2000', '25.0')}
  for kind, entries in table8.rows('small').items():
    for name, run in entries:
      cells = _row(out, kind, name)
      _numbers(cells[2:4])
      assert cells[2:6] == [f'{init[run]:.4f}', f'{val[run]:.4f}', *want[run]], cells
  assert 'Fixed-E 2.8000, Fixed-2E 2.4000' in out
  # val: ranks (1, 3, 2) against (1, 2, 3); train: the order reversed.
  assert 'vs terminal loss: val 0.50 [95% CI -1.00, 1.00] (n = 3; seed 000: 0.8' in out
  assert 'vs terminal loss: train -1.00 [95% CI -1.00, 1.00] (n = 3; seed 000: 0.86' in out


def test_table5_report_from_made_up_runs(tmp_path):
  """The premise's gap Fixed-E - Fixed-2E and Sparse - Ours, each paired by
  seed with its t interval: over seeds 0-2, Fixed-E - Fixed-2E is 0.10, 0.07
  and 0.04 (mean 0.07, sd 0.03, t(2) = 4.3027: +- 0.0745)."""
  workdir = str(tmp_path)
  arg = 'top_k=1,seeds=3,experts=4'
  fixed, fixed2x = (2.80, 2.82, 2.78), (2.70, 2.75, 2.74)
  ours, sparse = (2.72, 2.74, 2.76), (2.72, 2.75, 2.77)
  val = {f's{s}_dense': 3.0 for s in range(3)}   # sparse upcycling's sources
  for _, s, _, names in table5.rows(arg):
    for column, losses in zip(('fixed', 'fixed2x', 'upcycled', 'sparse'),
                              (fixed, fixed2x, ours, sparse)):
      val[names[column]] = losses[s]
  _made_up_sweep(workdir, f'experiments/seed000/table5.py:{arg}', val)
  out = _write_report('5', workdir, arg)
  cells = _row(out, 1, '12.50% (8)')
  assert cells[2:7] == ['3/3', '2.8000 +- 0.0200', '2.7300 +- 0.0265', '2.7400 +- 0.0200',
                        '2.7467 +- 0.0252'], cells
  assert cells[8:10] == ['+0.0067 [95% CI -0.0077, +0.0210]',
                         '+0.0700 [95% CI -0.0045, +0.1445]'], cells


def test_table5_report_leaves_out_a_run_that_is_not_done(tmp_path):
  """A report on a sweep still under way: seed 2's upcycled run has logged a
  validation loss but is still running, so its seed is not done and the
  column's mean is over seeds 0-1 (2.72, 2.74: mean 2.73, sd 0.0141)."""
  workdir = str(tmp_path)
  arg = 'top_k=1,seeds=3,experts=4'
  val = {f's{s}_dense': 3.0 for s in range(3)}
  rows = table5.rows(arg)
  for _, s, _, names in rows:
    for column in ('fixed', 'fixed2x', 'upcycled', 'sparse'):
      val[names[column]] = 2.72 + 0.02 * s
  _made_up_sweep(workdir, f'experiments/seed000/table5.py:{arg}', val)
  running = next(names['upcycled'] for _, s, _, names in rows if s == 2)
  with open(os.path.join(workdir, running, runner.STATUS_FILE), 'w') as f:
    json.dump(dict(state='running', attempts=1, wall_s=1.0), f)
  cells = _row(_write_report('5', workdir, arg), 1, '12.50% (8)')
  assert cells[2] == '2/3' and cells[5] == '2.7300 +- 0.0141', cells
  assert cells[3] == '2.7400 +- 0.0200', cells   # Fixed-E: all three seeds are done


def test_cpt_report_from_made_up_runs(tmp_path):
  """`:small`'s one row per arm with its three losses, eta and the arm against
  Upcycled; and the disjoint arm's wiring: its CPT reads the cpt part, grown
  from a run on the pretrain part, so the trainer starts its stream from the
  beginning (the trainer's side: tests/upcycle/test_cli.py,
  test_an_upcycled_workdir_trains_on_another_stream_from_its_start)."""
  workdir = str(tmp_path)
  val = {'s0_fixed': 2.8, 's0_fixed2x': 2.4, 's0_T=60_up': 2.5, 's0_T=60_annealed': 2.46,
         's0_T=60_disjoint': 2.6, 's0_annealed_src': 3.0, 's0_pretrain': 3.0}
  planned = {r.name: r for r in _made_up_sweep(workdir, 'experiments/seed000/cpt_length.py:small',
                                                val)}
  out = _write_report('cpt', workdir)
  (_, c, names), = cpt_length.rows('small')
  t = cpt_length.budgets('small')[c]
  assert (c, t) == (2, 60)
  want = dict(up=('0.75', ''), annealed=('0.85', '-0.0400'), disjoint=('0.50', '+0.1000'))
  for arm in ('up', 'annealed', 'disjoint'):
    cells = _row(out, c, t, 'Upcycled' if arm == 'up' else arm)
    _numbers(cells[4:7])
    assert cells[3:] == ['1/1', '2.8000 +- 0.0000', '2.4000 +- 0.0000',
                         f'{val[names[arm]]:.4f} +- 0.0000', '+0.4000', *want[arm]], cells
  # The launcher trains the disjoint arm on the cpt part, from the pretrain run at tau.
  disjoint = planned[names['disjoint']]
  assert disjoint.parents == ('s0_pretrain',)
  argv = dict(runner.commands(workdir, '', disjoint.name, disjoint.overrides))['train']
  assert '--config.data.part=cpt' in argv
  argv = dict(runner.commands(workdir, '', 's0_pretrain', planned['s0_pretrain'].overrides))
  assert '--config.data.part=pretrain' in argv['train']
  pretrain, cpt = (cpt_length.get_config('small') for _ in range(2))
  pretrain.data.part, cpt.data.part = 'pretrain', 'cpt'
  assert files.diffs(json.loads(pretrain.to_json()), cpt) == [
      "data.part: workdir 'pretrain' vs requested 'cpt'"]


def test_quickstart_small(tmp_path, jax_cache):
  workdir = str(tmp_path / 'qs')
  code, out, err = runs.run('experiments.quickstart', f'--workdir={workdir}', '--arg=small',
                            cache_dir=jax_cache)
  assert code == 0, out + err
  for label in ('Fixed-E', 'Upcycled E->2E', 'Fixed-2E', 'sparse dense->2E', 'unigram'):
    assert any(line.strip().startswith(label) for line in out.splitlines()), out
  assert 'paired differences' in out and 'eta' in out and 'x Fixed-2E' in out
  assert 'one seed: no interval' in out
  assert os.path.exists(os.path.join(workdir, 'quickstart.png'))
  with open(os.path.join(workdir, 'quickstart.json')) as f:
    summary = json.load(f)
  assert all(len(v) == 1 and v[0] is not None for v in summary['losses'].values())
  # the saved file alone rebuilds what was printed
  code, again, err = runs.run('experiments.quickstart',
                              f'--results={os.path.join(workdir, "quickstart.json")}',
                              cache_dir=jax_cache)
  assert code == 0, err
  assert again.strip() in out


def test_table3_part_b_rows_are_branches_at_full_size():
  """(b)'s rows below 100%: Fixed-E and Fixed-2E decayed from their long runs
  and Fixed-E grown at tau, all over the same last D steps (`:small` runs
  only the 100% row, which is (a)'s tau / T = 0.5 row and the long runs)."""
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  points = {p['name']: p for p in table3.get_hyper(hyper)}
  part_a, part_b = table3.rows()
  tau, e = 800, table3.get_config().moe.num_experts
  assert [t for t, _ in part_a] == [80, 200, 400, 600, 800]
  assert [cpt for cpt, _ in part_b] == [80, 200, 400, 600, 800]
  assert part_b[-1][1] == ('fixed', 'a_tau=800', 'fixed2x')
  for cpt, (fixed, up, fixed2x) in part_b[:-1]:
    total, d = tau + cpt, base.decay_steps(tau + cpt, tau)
    assert points[fixed]['resume_from'] == hyper.run('fixed', step=total - d)
    assert points[fixed2x]['resume_from'] == hyper.run('fixed2x', step=total - d)
    assert points[up]['resume_from'] == hyper.run('fixed', step=tau)
    assert points[up]['config.upcycle.step'] == tau
    assert points[fixed2x]['config.moe.num_experts'] == 2 * e
    assert 'config.moe.num_experts' not in points[fixed]
    for name in (fixed, up, fixed2x):
      assert points[name]['config.total_steps'] == total
      assert points[name]['config.opt.decay_fraction'] == d / total
  assert len(points) == 2 + len(part_a) + 3 * (len(part_b) - 1)


def test_cpt_length_arms_at_full_size():
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  points = {p['name']: p for p in cpt_length.get_hyper(hyper)}
  tau = 800
  assert cpt_length.budgets() == {1: 1600, 2: 2400, 4: 4000}
  assert len(points) == 3 * (2 + 2 * 2 + 3 + 4)
  # The annealed source: the long Fixed-E run's stable state at 720, decayed
  # over its last 10% to end at tau; its grown run rewarms.
  src = points['s1_annealed_src']
  assert src['resume_from'] == hyper.run('s1_fixed', step=720)
  assert (src['config.total_steps'], src['config.opt.decay_fraction']) == (tau, 0.1)
  arm = points['s1_T=2400_annealed']
  assert arm['resume_from'] == hyper.run('s1_annealed_src', step=tau)
  assert arm['config.opt.rewarm_steps'] == 40 and arm['config.upcycle.step'] == tau
  # The disjoint arm: pre-trained on one part, grown and trained on the other.
  assert points['s1_pretrain']['config.data.part'] == 'pretrain'
  assert points['s1_pretrain']['config.total_steps'] == tau
  assert points['s1_T=2400_disjoint']['config.data.part'] == 'cpt'
  assert 'config.data.part' not in points['s1_T=2400_up']
  # Fixed runs at T < T_max are decay branches over the same last D steps as the upcycled runs.
  assert points['s0_T=1600_fixed']['resume_from'] == hyper.run('s0_fixed', step=1280)
  assert points['s0_T=1600_up']['config.opt.decay_fraction'] == 320 / 1600


def test_staged_arms_chain_their_transitions_at_full_size():
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  points = {p['name']: p for p in staged.get_hyper(hyper)}
  assert len(points) == 3 * len(staged.ARMS) and staged.transitions() == (375, 750, 1125)
  config = staged.get_config()
  e = config.moe.num_experts
  assert config.total_steps == 2250 and config.checkpoint_every_steps == 375
  # dense -> E at t1 -> 2E at t2 -> 4E at t3, each stage a branch of the last.
  assert points['s1_dense_e']['config.moe.num_experts'] == 0
  assert points['s1_dense_e_2e']['resume_from'] == hyper.run('s1_dense_e', step=750)
  assert points['s1_staged']['resume_from'] == hyper.run('s1_dense_e_2e', step=1125)
  assert [points[f's1_{arm}']['config.upcycle.target.moe.num_experts'] for arm in (
      'dense_e', 'dense_e_2e', 'staged', 'dense_4e', 'e_4e')] == [e, 2 * e, 4 * e, 4 * e, 4 * e]
  # The one jumps grow at t1, E -> 4E by a factor 4.
  assert points['s1_e_4e']['resume_from'] == hyper.run('s1_fixed_e', step=375)
  assert (points['s1_e_4e']['config.upcycle.factor'], points['s1_dense_4e']['config.upcycle.step']
          ) == (4, 375)
  assert all(points[f's2_{arm}']['config.seed'] == 2 for arm in staged.ARMS)


def test_staged_report_stitches_each_arms_curve():
  """Made-up metrics: a chained arm's curve takes each run's steps after the
  one before it; the pairs are the 4E arms'."""
  metrics = lambda *steps: [dict(step=s, val_loss=10.0 - s / 1000) for s in steps]
  runs = {f's{s}_{arm}': dict(state='done',
                               metrics=metrics(375, 750, 1125, 2250) if s == 0 else metrics(2250))
          for s in range(3) for arm in staged.ARMS}
  runs['s0_dense_e_2e']['metrics'] = metrics(1125, 2250)
  runs['s0_staged']['metrics'] = metrics(1500, 2250)
  text, (curves, marks) = seed000_report.report_staged(runs, None)
  assert marks == (375, 750, 1125)
  assert [p[0] for p in curves['staged']] == [375, 750, 1125, 1500, 2250]
  assert [p[0] for p in curves['e_4e']] == [375, 750, 1125, 2250]
  assert '| staged - dense_4e | 3     | +0.0000' in text


def test_table4_greedy_rule_with_its_equal_draw_control_plan():
  """Issue 71's Table 4 sweep as its docstring fixes it: D'Hondt at 25 % CPT,
  seeds 0-5, the six strategies and the equal-probability control, 54 runs."""
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  arg = 'allocation=dhondt,cpt=25,seed_cpt=25,seeds=6,control=True'
  points = {p['name']: p for p in table4.get_hyper(hyper, arg)}
  assert len(points) == 6 * (2 + len(table4.STRATEGIES) + 1)   # one budget: no branches
  assert table4.get_config(arg).upcycle.args.utility_allocation == 'dhondt'
  assert {p['config.seed'] for p in points.values()} == set(range(6))
  control = points['s5_cpt=25_equal_draw']
  assert control['config.upcycle.args.utility_allocation'] == 'equal'
  assert control['config.upcycle.args.utility_metric'] == 'weight_norm'   # no gradients taken
  assert control['resume_from'] == hyper.run('s5_fixed', step=800)
  assert 'config.upcycle.args.utility_allocation' not in points['s5_cpt=25_grad_norm']
  assert 'equal_draw' not in table4.strategies('allocation=dhondt')


def test_table5_paper_ratios_at_a_fixed_t_plan():
  """Issue 71's Table 5 sweep: top-1, 2E = 4 ... 32 (the paper's ratios),
  T = 4500, seeds 3-8 (none of them chose T), 84 runs."""
  from experiments import hyper   # pylint: disable=g-import-not-at-top
  arg = 'top_k=1,steps=4500,experts=2+4+8+16,first_seed=3,seeds=6'
  points = {p['name']: p for p in table5.get_hyper(hyper, arg)}
  assert len(points) == 6 * (5 + 1 + 2 * 4)
  assert {p['config.seed'] for p in points.values()} == set(range(3, 9))
  assert {2 * e / 1 for _, _, e, _ in table5.rows(arg)} == {4, 8, 16, 32}
  assert table5.get_config(arg).total_steps == 4500
  assert points['k1_s8_up_2']['resume_from'] == hyper.run('k1_s8_moe_2', step=2250)
  assert points['k1_s8_up_2']['config.upcycle.target.moe.num_experts'] == 4
  assert points['k1_s3_sparse_32']['resume_from'] == hyper.run('s3_dense', step=2250)
