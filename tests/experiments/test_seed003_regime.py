"""Seed 003's own regime (experiments/seed003/regime.py): growth from a stable
base, grown runs and scratch at equal total tokens, the two sequential orders;
`:small` plans the same shape, and CI runs one sequential growth end to end."""
import os

import pytest

from experiments import hyper, report, sweep
from experiments.seed003 import common, regime
from tests.experiments import runs


def _plan(arg=''):
  _, planned = sweep.plan(os.path.join(runs.REPO, 'experiments', 'seed003', 'regime.py')
                          + (f':{arg}' if arg else ''))
  return {r.name: r.overrides for r in planned}


@pytest.mark.parametrize('arg', ['', 'small'])
def test_plan_grows_a_stable_base_and_matches_total_tokens(arg):
  points, p, b = _plan(arg), common.plan(arg), regime.budget(arg)
  assert len(points) == b['seeds'] * (1 + 2 * len(regime.ARMS) + 2 * 2 + 3)
  short, long_ = b['more']
  for s in range(b['seeds']):
    base = points[f'base_s{s}']
    assert base['config.opt.schedule'] == 'constant' and base['config.total_steps'] == b['base']
    for arm in regime.ARMS:
      grown = points[f'{arm}_{long_}_s{s}']
      assert grown['upcycle.src'] == hyper.run(f'base_s{s}', step=b['base'])
      assert grown['config.total_steps'] == long_ and grown['config.seed'] == s
      branch = points[f'{arm}_{short}_s{s}']
      d = regime.decay_steps(short)
      assert branch['resume_from'] == hyper.run(f'{arm}_{long_}_s{s}', step=short - d)
      assert branch['config.opt.decay_fraction'] == pytest.approx(d / short)
      # The long run keeps the branch's start and the sequential growth's step,
      # both before its own decay.
      every = grown['config.checkpoint_every_steps']
      assert (short - d) % every == 0 and short % every == 0
      assert short <= long_ - regime.decay_steps(long_)
    assert points[f'stack_{long_}_s{s}']['config.model.num_layers'] == 2 * p.layers
    wide = points[f'width_a0.01_{long_}_s{s}']
    assert (wide['config.moe.num_experts'], wide['config.moe.top_k']) == (2 * p.experts,
                                                                         2 * p.top_k)
    assert wide['upcycle.config'].endswith('grow_width.py:alpha=0.01')
    # Scratch of each grown size trains the base's tokens plus the grown run's.
    for n in b['more']:
      for kind, arm in (('depth', 'interpose'), ('width', 'width_a0')):
        scratch = points[f'scratch_{kind}_{b["base"] + n}_s{s}']
        grown = points[f'{arm}_{n}_s{s}']
        assert scratch['config.total_steps'] == b['base'] + grown['config.total_steps']
        assert {k: v for k, v in scratch.items() if k.startswith('config.m')} == {
            k: v for k, v in grown.items() if k.startswith('config.m')}
    dw, wd = points[f'depth_width_s{s}'], points[f'width_depth_s{s}']
    assert dw['upcycle.src'] == hyper.run(f'interpose_{long_}_s{s}', step=short)
    assert wd['upcycle.src'] == hyper.run(f'width_a0.01_{long_}_s{s}', step=short)
    assert 'grow_width' in dw['upcycle.config'] and 'method=interpose' in wd['upcycle.config']
    both = points[f'scratch_both_s{s}']
    for point in (dw, wd, both):
      assert point['config.model.num_layers'] == 2 * p.layers
      assert point['config.moe.num_experts'] == 2 * p.experts
    assert both['config.total_steps'] == b['base'] + 2 * short


# Three chained runs, ~35 s of a CI worker: slow. The plan and the rows are
# tested above and below; a grown run grown again is tests/experiments/
# test_moesturizer.py's chain (depth up-scaling, then experts) in CI.
@pytest.mark.slow
def test_small_sequential_growth_end_to_end(tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)   # upcycle.config paths are relative to the repository
  workdir = str(tmp_path / 'sweep')
  code, out, err = runs.run('experiments.launch', '--config=experiments/seed003/regime.py:small',
                            f'--workdir={workdir}', '--parallel=2', '--only=depth_width_s0',
                            cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  done = {r['name']: r for r in report.load_runs(workdir) if r['state'] == 'done'}
  assert sorted(done) == ['base_s0', 'depth_width_s0', 'interpose_8_s0'], out
  cfg = done['depth_width_s0']['config']['model']
  assert cfg['num_layers'] == 4 and done['depth_width_s0']['config']['moe']['num_experts'] == 8
  assert done['depth_width_s0']['metrics'][-1]['val_loss'] > 0


def _run(name, loss, total=None):
  return dict(name=name, state='done', total_steps=total, metrics=[{'step': 1, 'val_loss': loss}])


def test_regime_rows_pair_each_arm_with_its_scratch_by_seed(tmp_path):
  from experiments.seed003 import analysis, report as seed003_report   # pylint: disable=g-import-not-at-top
  losses = {}
  for s, shift in ((0, 0.0), (1, 0.1), (2, 0.2)):
    losses.update({f'stack_4_s{s}': 1.0 + shift, f'interpose_4_s{s}': 0.9 + shift + 0.01 * s,
                   f'scratch_depth_8_s{s}': 1.5 + shift})
  runs_ = {n: _run(n, v) for n, v in losses.items()}
  runs_.update({f'base_s{s}': _run(f'base_s{s}', 2.0, total=4) for s in range(3)})
  rows = {r['label']: r for r in analysis.regime_rows(runs_)}
  growth = rows['stack +4 - scratch_depth (same tokens)']
  assert growth['n'] == 3 and growth['diff']['mean'] == pytest.approx(-0.5)
  assert growth['verdict'] == 'agrees'
  order = rows['interpose - stack, +4']
  assert order['diff']['mean'] == pytest.approx(-0.09) and order['verdict'] == 'agrees'
  # The sequential orders have not run: no pair, no verdict.
  assert rows['depth_width - width_depth']['n'] == 0
  assert rows['depth_width - width_depth']['verdict'] is None
  text = seed003_report.render(runs_, str(tmp_path))
  assert "Growth in seed 003's regime" in text and '-0.5000 [95% CI' in text
