"""Seed 003 on its own axes (experiments/seed003/equal_flops.py): scratch at the
grown size with the FLOPs of base + growth and with the growth's additional
FLOPs, each on its own schedule; growth from a stable and from an annealed
base; `:small` runs end to end into the report's rows (CI: the runs of the
equal-FLOPs check; the whole sweep is slow)."""
import os

import pytest

from experiments import hyper, sweep
from experiments.seed003 import analysis, common, equal_flops, report as seed_report
from moe_jax.workdir import files
from tests.experiments import runs

_CONFIG = os.path.join('experiments', 'seed003', 'equal_flops.py')


def _plan(arg=''):
  _, planned = sweep.plan(os.path.join(runs.REPO, _CONFIG) + (f':{arg}' if arg else ''))
  return {r.name: r.overrides for r in planned}


@pytest.mark.parametrize('arg', ['', 'small'])
def test_plan_matches_scratch_flops_to_base_plus_growth(arg, monkeypatch):
  monkeypatch.chdir(runs.REPO)   # upcycle.config paths are relative to the repository
  points, p, b = _plan(arg), common.plan(arg), equal_flops.budget(arg)
  assert len(points) == b['seeds'] * (2 + 6 * len(b['more']))
  small = 3 * common.flops_per_token(common.config_for(p))
  grown_config = common.config_for(p)
  grown_config.model.num_layers *= 2
  grown = 3 * common.flops_per_token(grown_config)
  for s in range(b['seeds']):
    stable, annealed = points[f'base_stable_s{s}'], points[f'base_annealed_s{s}']
    assert stable['config.opt.schedule'] == 'constant'
    start = int(annealed['resume_from'].rsplit('/', 1)[1])
    assert annealed['resume_from'] == hyper.run(f'base_stable_s{s}', step=start)
    assert start % stable['config.checkpoint_every_steps'] == 0 and b['base'] - start >= 2
    assert annealed['config.opt.decay_fraction'] == pytest.approx((b['base'] - start) / b['base'])
    for n in b['more']:
      for base in equal_flops.BASES:
        for method in equal_flops.METHODS:
          point = points[f'{method}_{base}_{n}_s{s}']
          assert point['upcycle.src'] == hyper.run(f'base_{base}_s{s}', step=b['base'])
          assert point['upcycle.config'].endswith(f'method={method}')
          assert point['config.total_steps'] == n and point['config.seed'] == s
      total, additional = points[f'scratch_total_{n}_s{s}'], points[f'scratch_additional_{n}_s{s}']
      assert additional['config.total_steps'] == n
      # Equal total FLOPs within half a step of the grown model.
      assert abs(total['config.total_steps'] * grown - (b['base'] * small + n * grown)) <= grown / 2
      for point in (total, additional):
        assert point['config.model.num_layers'] == 2 * p.layers and point['config.seed'] == s
  # Every grown and scratch run trains to its own total with its own decay.
  assert [n for n, point in points.items() if 'resume_from' in point] == [
      f'base_annealed_s{s}' for s in range(b['seeds'])]


def _run(name, loss, info=None, step=4):
  return dict(name=name, state='done', step=step, total_steps=step, info=info,
              metrics=[{'step': step, 'val_loss': loss}])


def test_rows_pair_growth_with_scratch_by_seed(tmp_path):
  losses = {}
  for s, shift in enumerate((0.0, 0.1, 0.2)):
    losses.update({f'interpose_stable_4_s{s}': 1.0 + shift, f'stack_stable_4_s{s}': 1.1 + shift,
                   f'interpose_annealed_4_s{s}': 1.05 + shift + 0.01 * s,
                   f'stack_annealed_4_s{s}': 1.0 + shift,
                   f'scratch_total_4_s{s}': 0.98 + shift + 0.02 * s,
                   f'scratch_additional_4_s{s}': 1.5 + shift})
  runs_ = {n: _run(n, v) for n, v in losses.items()}
  rows = {r['label']: r for r in analysis.equal_flops_rows(runs_)}
  assert rows['interpose_stable +4 - scratch_additional']['verdict'] == 'agrees'
  total = rows['interpose_stable +4 - scratch_total']
  assert total['n'] == 3 and total['diff']['mean'] == pytest.approx(0.0)
  assert total['verdict'] == 'inconclusive'
  assert rows['interpose - stack, stable base, +4']['verdict'] == 'agrees'
  assert rows['interpose - stack, annealed base, +4']['verdict'] == 'disagrees'
  # The stable base grows better here: the claim (annealed - stable >= 0) holds.
  assert rows['interpose, annealed - stable base, +4']['verdict'] == 'agrees'
  text = seed_report.render(runs_, str(tmp_path))
  assert 'Growth against scratch at equal FLOPs' in text and '+0.0000 [95% CI' in text
  assert "Growth in seed 003's regime" not in text


# The equal-FLOPs check's runs (both bases, growth from each, scratch at equal
# total FLOPs: five CLI processes), and the whole `:small` sweep. Both are slow
# (-m slow): the plan and fake-runs tests above keep the FLOPs match and the
# pairing in the default suite, whose 15 minutes these would cost 1-2.
_CHECK = 'interpose_stable_4_s0,interpose_annealed_4_s0,scratch_total_4_s0'


@pytest.mark.slow
@pytest.mark.parametrize('only', [_CHECK, ''])
def test_small_sweep_end_to_end(only, tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)
  workdir = str(tmp_path / 'sweep')
  code, out, err = runs.run('experiments.launch', f'--config={_CONFIG}:small',
                            f'--workdir={workdir}', '--parallel=2',
                            *([f'--only={only}'] if only else []), cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  text = seed_report.write(workdir)
  done = analysis.load(workdir)
  names = (set(only.split(',')) | {'base_stable_s0', 'base_annealed_s0'} if only
           else set(_plan('small')))
  assert {n for n, r in done.items() if r['state'] == 'done'} == names, out
  # Every run that ran has a final loss and its FLOPs in the per-seed table.
  arms = {a['arm'] + '_s0': a for a in analysis.equal_flops_losses(done)}
  ran = {n: a for n, a in arms.items() if a['losses'][0] is not None}
  assert set(ran) == names and all(a['losses'][0] > 0 and a['flops'] > 0 for a in ran.values())
  # The annealed base is a decay of the stable one: same FLOPs, another loss.
  stable, annealed = arms['base_stable_s0'], arms['base_annealed_s0']
  assert stable['flops'] == annealed['flops'] and stable['losses'] != annealed['losses']
  # Scratch at equal total FLOPs is within one of its steps of base + growth.
  gaps = analysis.flops_gaps(done)
  step = analysis.step_flops(done['scratch_total_4_s0'])
  assert [g['base'] for g in gaps] == ['stable', 'annealed']
  assert all(g['growth'] > 0 and abs(g['scratch'] - g['growth']) <= step for g in gaps)
  # The comparisons whose runs ran have numbers (one seed: no interval yet).
  rows = {r['label']: r for r in analysis.equal_flops_rows(done)}
  for label in ('interpose_stable +4 - scratch_total', 'interpose_annealed +4 - scratch_total',
                'interpose, annealed - stable base, +4'):
    assert rows[label]['n'] == 1 and rows[label]['a'] > 0 and rows[label]['b'] > 0, label
    assert rows[label]['verdict'] == 'inconclusive'
  # Both bases' norm profiles, one number per layer.
  norms = analysis.base_norms(done)
  assert set(norms) == {'base_stable_s0', 'base_annealed_s0'}
  assert all(list(p) == list(range(common.plan('small').layers)) and min(p.values()) > 0
             for p in norms.values())
  assert 'Growth against scratch at equal FLOPs' in text and 'FLOPs check' in text
  assert os.path.getsize(os.path.join(workdir, 'plots', 'seed003_equal_flops.png')) > 0
  # The results file holds the verdicts and rebuilds the report alone.
  results = os.path.join(workdir, 'seed003.json')
  saved = files.read_json(results)
  assert saved['provenance'] and len(saved['flops_check']) == 2
  assert {r['label'] for r in saved['equal_flops']} == set(rows)
  rebuilt = seed_report.rebuild(results)
  assert rebuilt and rebuilt in text

