"""Seed 003's studies (experiments/seed003): the sweeps plan and share runs,
the budgets add up, and `all.py:small` runs end to end into a report with
the rows of its studies (CI: one grown run; the whole sweep is slow)."""
import math
import os

import pytest

from experiments import hyper, sweep
from experiments.seed003 import analysis, common, report as seed_report, sunk_cost
from tests.experiments import runs

_DIR = os.path.join(runs.REPO, 'experiments', 'seed003')
_STUDIES = ('depth', 'width_noise', 'retention', 'sunk_cost')


def _plan(study, arg):
  _, planned = sweep.plan(os.path.join(_DIR, f'{study}.py') + (f':{arg}' if arg else ''))
  return {r.name: r.overrides for r in planned}


@pytest.mark.parametrize('arg', ['small', ''])
def test_studies_plan_and_all_py_shares_their_runs(arg, monkeypatch):
  monkeypatch.chdir(runs.REPO)   # upcycle.config paths are relative to the repository
  everything = _plan('all', arg)
  for study in _STUDIES:
    for name, point in _plan(study, arg).items():
      assert everything[name] == point, (study, name)
  p = common.plan(arg)
  last, first = p.checkpoints[-1], p.checkpoints[0]
  want = {'base', 'base_post', 'scratch', f'stack@{first}', f'post_interpose@{last}',
          f'post_width_a0.01@{last}'} | {f'width_a{a:g}@{last}' for a in p.alphas} | {
              f'interpose@{s}' for s in p.checkpoints} | {
                  f'total_interpose@{s}' for s in p.checkpoints
                  if sunk_cost.total_budget_steps(p, s) > 0}
  assert want <= set(everything)
  assert everything[f'stack@{last}'] == {
      'name': f'stack@{last}', 'upcycle.config': 'configs/upcycle/grow_depth.py:method=stack',
      'upcycle.src': hyper.run('base', step=last), 'config.total_steps': p.additional,
      'config.model.num_layers': 2 * p.layers, 'config.model.norm_position': 'pre'}


def test_total_budget_equals_scratch_flops():
  p = common.plan('')
  config = common.config_for(p)
  small = 3 * common.flops_per_token(config)
  config.model.num_layers *= 2
  grown = 3 * common.flops_per_token(config)
  for step in p.checkpoints:
    extra = sunk_cost.total_budget_steps(p, step)
    assert abs(step * small + extra * grown - p.additional * grown) <= grown / 2


def test_correlation_of_sunk_cost_and_loss():
  rows = [dict(sunk=s, final=l) for s, l in ((0, 3.0), (1, 2.5), (2, 2.4), (3, None))]
  got = analysis.correlation(rows)
  assert got['n'] == 3 and got['spearman'] == pytest.approx(-1.0)
  assert got['pearson'] < -0.9
  assert analysis.correlation(rows[:2]) is None


# CI runs one grown run (base_post and a post-norm interposition: three CLI
# processes, ~50 s of CPU with a cold compilation cache); one run of each
# study's kinds and the whole `all.py:small` sweep are the slow variants.
_EACH = 'stack@4,interpose@4,width_a0.01@4,post_interpose@4,total_interpose@2,scratch'


@pytest.mark.parametrize('only', ['post_interpose@4', pytest.param(_EACH, marks=pytest.mark.slow),
                                  pytest.param('', marks=pytest.mark.slow)])
def test_small_sweep_end_to_end(only, tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)
  workdir = str(tmp_path / 'sweep')
  args = [f'--config={os.path.join(_DIR, "all.py")}:small', f'--workdir={workdir}',
          '--parallel=2'] + ([f'--only={only}'] if only else [])
  code, out, err = runs.run('experiments.launch', *args, cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  text = seed_report.write(workdir)
  done = analysis.load(workdir)
  names = set(only.split(',')) | {'base', 'base_post'} if only else set(_plan('all', 'small'))
  if only == 'post_interpose@4':
    names.remove('base')
  assert {n for n, r in done.items() if r['state'] == 'done'} == names, out

  def rows_of(rows, n=None):
    """The rows of the runs that ran, each with a final loss and FLOPs."""
    got = [r for r in rows if r['run'] in names]
    assert got and all(r['final'] is not None and r['total'] > 0 for r in got)
    assert n is None or len(got) == n
    return got

  # The loss before and right after growth, from the upcycle report.
  retention = rows_of(analysis.retention_rows(done))
  assert ('post', 'interpose') in {(r['norm'], r['growth']) for r in retention}
  assert all(r['before'] > 0 and r['after'] > 0 for r in retention)
  sections = [s.split('\n', 1)[0] for s in text.split('\n## ')[1:]]
  assert any(s.startswith('Immediate retention') for s in sections), sections
  assert os.path.getsize(os.path.join(workdir, 'plots', 'seed003_retention.png')) > 0
  # The results file alone rebuilds the report's sections (checkpoints not read).
  rebuilt = seed_report.rebuild(os.path.join(workdir, 'seed003.json'))
  assert rebuilt and rebuilt in text
  if only == 'post_interpose@4':
    return
  # Every study's table has its rows, with a final loss in each.
  assert len(sections) == 5, sections
  rows_of(analysis.depth_rows(done), 2 if only else 4)
  width = rows_of(analysis.width_rows(done))
  assert [r['alpha'] for r in width] == ([0.01] if only else [0.0, 0.01])
  assert ('pre', 'interpose') in {(r['norm'], r['growth']) for r in retention}
  rows_of(analysis.sunk_rows(done, 'additional'))
  rows_of(analysis.sunk_rows(done, 'total'))
  # Noise breaks the copies' symmetry; exact copies with equal router columns
  # get equal gradients and stay copies.
  assert all((r['drift'] > 0) == (r['alpha'] > 0) for r in width)
  for png in ('depth', 'width', 'sunk_additional', 'sunk_total', 'norms'):
    assert os.path.getsize(os.path.join(workdir, 'plots', f'seed003_{png}.png')) > 0


def test_sunk_cost_correlation_has_its_interval():
  rows = [dict(sunk=float(i), final=v) for i, v in enumerate([3, 1, 2, 0.5, 0.7, 0.2])]
  got = analysis.correlation(rows)
  lo, hi = got['spearman_ci95']
  assert got['n'] == 6 and lo < got['spearman'] < hi < 0
  perfect = analysis.correlation([dict(sunk=float(i), final=-i) for i in range(6)])
  assert perfect['spearman'] == pytest.approx(-1) and math.isnan(perfect['spearman_ci95'][0])
  assert analysis.correlation(rows[:2]) is None
