"""Seed 001's init-strategy study: the sweep plans its arms paired by seed, the
claims are paired differences computed by hand, and `:small` runs end to end."""
import os

import numpy as np
import pytest

from experiments import stats, sweep
from experiments.seed001 import init, init_table, report as seed001_report
from tests.experiments import runs


def _plan(path):
  _, planned = sweep.plan(os.path.join(runs.REPO, path))
  return {r.name: r.overrides for r in planned}


def test_arms_of_a_seed_differ_only_by_their_init():
  points = _plan('experiments/seed001/init.py')
  assert len(points) == 1 + len(init.ARMS) * init.SEEDS
  for seed in range(init.SEEDS):
    copy = points[init.run_name('copy', seed)]
    assert copy['config.seed'] == seed and copy['upcycle.config'].endswith(
        f'init=copy,noise=0.0,seed={seed}')
    for arm, (kind, noise, keys) in init.ARMS.items():
      p = points[init.run_name(arm, seed)]
      assert p['upcycle.config'].endswith(f'init={kind},noise={noise},seed={seed}')
      differ = {k for k in set(p) | set(copy) if p.get(k) != copy.get(k)}
      assert differ <= {'name', 'upcycle.config'} | set(keys), (arm, differ)
  assert points[init.run_name('copy_no_balance', 1)]['config.moe.balance_loss_weight'] == 0.0
  small = _plan('experiments/seed001/init.py:small')
  assert sorted(small) == sorted(['dense'] + [init.run_name(a, 0) for a in init.SMALL_ARMS])


def _run(val_losses, load_E, dense=False):
  """A run as report.load_runs gives it: eval rows, the last row with two layers' loads."""
  rows = [dict(step=10 * (i + 1), loss=v, val_loss=v, lr=1e-3) for i, v in enumerate(val_losses)]
  if not dense:
    rows[-1].update({f'moe/layers_{l}/load': list(load_E) for l in range(2)})
    rows[-1].update({f'moe/layers_{l}/cv': 0.0 for l in range(2)})
  return dict(name='', metrics=rows)


def test_claims_are_paired_differences_over_seeds():
  rng = np.random.default_rng(0)
  even = [0.125] * 8
  collapsed = [0.7, 0.2] + [0.1 / 6] * 6
  dead = [0.2] * 4 + [0.1] * 2 + [0.0, 0.0]
  runs_ = {'dense': _run([2.5, 2.3], even, dense=True)}
  final = {}
  for seed in range(3):
    for arm in init.ARMS:
      final[arm, seed] = 2.0 + rng.normal() * 0.05
      load = {'copy_no_balance': collapsed, 'subset': dead}.get(arm, even)
      runs_[init.run_name(arm, seed)] = _run([2.4, 2.2, final[arm, seed]], load)
  got = {c[0]: c for c in init_table.claims(runs_)}
  for claim, a, b in init_table.LOSS_CLAIMS:
    want = stats.paired([final[a, s] - final[b, s] for s in range(3)])
    d = got[f'{claim}: val({a}) - val({b}) < 0'][1]
    assert d['mean'] == pytest.approx(want['mean']) and d['lo'] == pytest.approx(want['lo'])
  collapse = next(c for c in got.values() if 'collapses' in c[0])
  assert collapse[1]['mean'] == pytest.approx(0.9) and collapse[3] == 'agrees'
  dead_claim = next(c for c in got.values() if 'dead experts' in c[0])
  assert dead_claim[1]['mean'] == 4 and dead_claim[3] == 'agrees'   # 2 dead in each of 2 layers
  h = init_table.health(runs_[init.run_name('copy', 0)])
  assert h == dict(cv=pytest.approx(0.0), dead_1pct=0, healthy=1.0, top2=pytest.approx(0.25))
  # The first eval at or below the dense source's final 2.3: step 20 (2.2).
  assert init_table.recovery_step(runs_[init.run_name('copy', 0)], 2.3) == 20


# ~25 s of a CI worker: slow. The arms' configs and the claims are tested
# above, each expert init is dense_to_moe's with its tests in tests/upcycle,
# and seed 001's launch-to-report path stays in CI through
# tests/experiments/test_seeds_001_002.py's small sweeps.
@pytest.mark.slow
def test_init_small_sweep_end_to_end(tmp_path, jax_cache, monkeypatch):
  monkeypatch.chdir(runs.REPO)   # upcycle.config paths are relative to the repository
  workdir = str(tmp_path / 'sweep')
  code, _, err = runs.run('experiments.launch', '--config=experiments/seed001/init.py:small',
                          f'--workdir={workdir}', '--parallel=2', cache_dir=jax_cache)
  assert code == 0, err[-3000:]
  text = seed001_report.write('init', workdir)
  for arm in init.SMALL_ARMS:
    row = next(l for l in text.splitlines() if l.startswith(f'| {arm} '))
    assert float(row.split('|')[3]) > 0, row   # a final val loss
  runs.assert_rebuilds(seed001_report.rebuild(os.path.join(workdir, 'seed001_init.json')), text)
