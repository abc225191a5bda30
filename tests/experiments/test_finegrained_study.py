"""The fine-grained upcycling study: its plan (every arm's training config is
the model its upcycle grows, at equal active and total expert parameters and
equal tokens, paired by seed) and its claims (paired differences by hand)."""
import os

import numpy as np
import pytest

from configs.upcycle import finegrained
from experiments import stats, sweep
from experiments.finegrained import report as study_report
from experiments.finegrained import study
from moe_jax.models import accounting, config as model_config
from moe_jax.upcycle import transition
from tests.experiments import runs


def _plan(arg):
  _, planned = sweep.plan(os.path.join(runs.REPO, f'experiments/finegrained/study.py{arg}'))
  return {r.name: r.overrides for r in planned}


def test_the_full_study_is_three_seeds_of_nine_arms_from_one_dense_run():
  points = _plan('')
  assert len(points) == 1 + 3 * len(study.KINDS) * study.SEEDS
  for seed in range(study.SEEDS):
    for g in study.GRANULARITIES:
      p = points[study.run_name(g, '', seed)]
      assert p['config.seed'] == seed and p['upcycle.config'].endswith(f',seed={seed}')
      assert p['config.total_steps'] == study.UP and p['upcycle.src'] == f'{{run:dense}}/checkpoints/{study.DENSE}'


@pytest.mark.parametrize('granularity', [1, 2])
def test_each_arm_trains_the_model_its_upcycle_grows_at_equal_parameters(granularity):
  points, dense = _plan(':small'), study.get_config('small')
  counts = {}
  for kind in study.KINDS:
    p = points[study.run_name(granularity, kind, 0)]
    src = dense.copy_and_resolve_references()
    src.upcycle = finegrained.get_config(p['upcycle.config'].split(':', 1)[1])
    grown = transition.target_config(src)
    trained = dense.copy_and_resolve_references()
    for key, value in p.items():
      if key.startswith('config.moe.'):
        trained.moe[key.split('.')[-1]] = value
    for key in ('num_experts', 'top_k', 'd_ff', 'num_shared_experts', 'order', 'renormalize',
                'use_bias', 'score', 'shared_gate', 'every'):
      assert trained.moe[key] == grown.moe[key], (kind, key)
    c = accounting.counts(model_config.from_config(trained, vocab_size=259))
    counts[kind] = (c.active_nonembed - c.router * 2, c.total_nonembed - c.router * 2)
  # Equal active and total parameters but for the routers (2 MoE layers).
  assert len(set(counts.values())) == 1, counts


def _run(final, state='done'):
  return dict(state=state,
              metrics=[dict(step=1, loss=3.0, val_loss=3.0), dict(step=2, val_loss=final)])


def test_a_run_not_done_has_no_final_loss():
  """A report on a sweep under way pairs only finished runs: seed 1's G=4 run
  is still running, so G=4 - G=1 is over seed 0 alone."""
  runs_ = {study.run_name(g, '', s): _run(2.0 - 0.1 * (g == 4) + 0.01 * s,
                                          'running' if (g, s) == (4, 1) else 'done')
           for g in (1, 4) for s in range(2)}
  got = {c['claim']: c for c in study_report.claims(runs_, granularities=(1, 4))}
  g4 = got['higher granularity helps: G=4 beats G=1']
  assert g4['estimate']['n'] == 1 and g4['verdict'] == 'not run'


def test_claims_are_paired_differences_graded_by_their_interval():
  rng = np.random.default_rng(0)
  runs_, final = {'dense': _run(2.5)}, {}
  for seed in range(3):
    for g in study.GRANULARITIES:
      for kind in study.KINDS:
        # G = 4 clearly better, G = 2 a coin flip; top-k-then-softmax clearly worse.
        value = 2.0 - 0.1 * (g == 4) + 0.1 * (kind == '_topk_softmax') + 0.01 * rng.normal()
        final[g, kind, seed] = value
        runs_[study.run_name(g, kind, seed)] = _run(value)
  got = {c['claim']: c for c in study_report.claims(runs_)}
  g4 = got['higher granularity helps: G=4 beats G=1']
  want = stats.paired([final[4, '', s] - final[1, '', s] for s in range(3)])
  assert g4['estimate']['mean'] == pytest.approx(want['mean'])
  assert g4['estimate']['lo'] == pytest.approx(want['lo']) and g4['verdict'] == 'agrees'
  assert got['softmax-then-top-k beats top-k-then-softmax at G=2']['verdict'] == 'agrees'
  assert got['a shared expert helps at G=1 (equal active and total parameters)']['verdict'] \
      == 'inconclusive'
  del runs_[study.run_name(4, '', 1)], runs_[study.run_name(4, '', 2)]
  assert study_report.claims(runs_)[1]['verdict'] == 'not run'   # one seed of G = 4
  text = study_report.render(runs_)
  assert 'higher granularity helps, with a shared expert: G=4 beats G=1' in text
