"""Utility scores (seed 000 §4.2) and greedy allocation with replacement."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from moe_jax.upcycle import paths, recipes, transition, utility
from moe_jax.workdir import checkpoint
from tests.train import tiny
from tests.upcycle import toy


def _setup():
  c = toy.config(num_experts=4, layers=2)
  params = toy.params(c)
  rng = np.random.default_rng(0)
  batches = [rng.normal(size=(5, 8)).astype(np.float32) for _ in range(3)]

  def loss_fn(p, x):  # uses every expert differently so gradients differ per expert
    out = 0.0
    for i in range(2):
      ex = p[f'layers_{i}']['moe']['experts']
      h = jnp.einsum('td,edf->etf', x, ex['wi_0']) * jnp.einsum('td,edf->etf', x, ex['wi_1'])
      y = jnp.einsum('etf,efd->etd', h, ex['wo'])
      out = out + jnp.sum(jnp.arange(1.0, 5.0)[:, None, None] * y ** 2) * 1e-3
    return out

  return params, batches, loss_fn


def test_scores_match_hand_computation():
  params, batches, loss_fn = _setup()
  acc = utility.accumulate_sq_grads(loss_fn, params, batches)
  assert acc['num_batches'] == 3
  grads = [paths.flatten(jax.grad(loss_fn)(params, b)) for b in batches]
  flat = paths.flatten(params)
  names = ('wi_0', 'wi_1', 'wo')
  for e in range(4):
    g = np.concatenate([np.mean([gr[f'layers_1/moe/experts/{n}'][e] for gr in grads], 0).ravel()
                        for n in names])
    f = np.concatenate([np.mean([gr[f'layers_1/moe/experts/{n}'][e] ** 2 for gr in grads], 0)
                        .ravel() for n in names])
    w = np.concatenate([flat[f'layers_1/moe/experts/{n}'][e].ravel() for n in names])
    want = {'grad_norm': g @ g, 'saliency': np.linalg.norm(w) * np.linalg.norm(g),
            'weight_norm': w @ w, 'curvature': np.sum(g * g / f)}
    for metric, value in want.items():
      got = utility.expert_scores(params, acc, metric)['layers_1'][e]
      np.testing.assert_allclose(got, value, rtol=1e-4)
  curv = utility.expert_scores(params, acc, 'curvature')['layers_0']
  assert np.all(curv <= 3 * 2 * 8 * 16 + 1e-3)  # each term <= 1


def test_allocation_greedy_with_replacement():
  np.testing.assert_array_equal(utility.allocate([1.0, 1.0, 1.0, 1.0], 2), [2, 2, 2, 2])
  np.testing.assert_array_equal(utility.allocate([0.0, 0.0, 0.0], 3), [3, 3, 3])
  r = utility.allocate([9.0, 1.0, 1.0, 1.0], 2)
  assert r.sum() == 8 and r.min() >= 1 and r[0] == 5
  r = utility.allocate(np.random.default_rng(0).random(16), 4)
  assert r.sum() == 64 and r.min() >= 1


def test_allocation_rules_exact_counts():
  # [4, 2, 1, 1] at m = 2: 4 extra copies.
  # dhondt: u/r picks 0 (4), then 0 or 1 at 2 (1 has fewer copies), then 0 (4/2=2 > 1), 0 (4/3).
  np.testing.assert_array_equal(utility.allocate([4.0, 2.0, 1.0, 1.0], 2, 'dhondt'), [4, 2, 1, 1])
  # proportional: quotas 2, 1, 0.5, 0.5 -> floors 2, 1, 0, 0; the last copy to the lower index.
  np.testing.assert_array_equal(
      utility.allocate([4.0, 2.0, 1.0, 1.0], 2, 'proportional'), [3, 2, 2, 1])
  # [9, 1, 1, 1]: quotas 3, 1/3, 1/3, 1/3 -> one remainder copy, to expert 1.
  np.testing.assert_array_equal(
      utility.allocate([9.0, 1.0, 1.0, 1.0], 2, 'proportional'), [4, 2, 1, 1])
  # At m = 2 proportional is not the less uniform rule: a spread below the mean
  # score keeps it uniform where D'Hondt (ratio 2.6 > 2) is not ...
  u = [1.45, 1.45, 0.55, 0.55]
  np.testing.assert_array_equal(utility.allocate(u, 2, 'dhondt'), [3, 3, 1, 1])
  np.testing.assert_array_equal(utility.allocate(u, 2, 'proportional'), [2, 2, 2, 2])
  # ... and both are uniform within a factor of two.
  for rule in ('dhondt', 'proportional'):
    np.testing.assert_array_equal(utility.allocate([1.9, 1.2, 1.0, 1.0], 2, rule), [2, 2, 2, 2])
  # m = 3: 8 extra copies of scores 1 : 3 -> quotas 2, 6.
  np.testing.assert_array_equal(utility.allocate([1.0, 3.0, 0.0, 0.0], 3, 'proportional'),
                                [3, 7, 1, 1])
  # Sampled: all the mass on one expert takes every extra copy, whatever the seed.
  for seed in range(3):
    np.testing.assert_array_equal(utility.allocate([0.0, 5.0, 0.0], 3, 'sampled', seed), [1, 7, 1])


@pytest.mark.parametrize('rule', utility.ALLOCATIONS)
def test_allocation_rules_invariants(rule):
  for m in (2, 3, 4):
    for u in ([1.0] * 6, [0.0] * 5, np.random.default_rng(m).random(16), [7.0, 0.0, 0.0, 1e-9]):
      r = utility.allocate(u, m, rule, seed=m)
      assert r.dtype == np.int64 and r.sum() == m * len(u) and r.min() >= 1, (rule, m, u, r)
      if rule not in ('sampled', 'equal') and np.ptp(u) == 0:   # equal scores: uniform
        np.testing.assert_array_equal(r, [m] * len(u))


@pytest.mark.parametrize('m', [2, 4])
def test_proportional_allocation_is_within_one_of_its_quota(m):
  """Hamilton's rule on 200 random utility vectors (skewed, with zeros, over
  E = 2 ... 32): each expert keeps its copy plus (m - 1) * E * its share,
  rounded down or up, never further, and the counts add to m * E."""
  rng = np.random.default_rng(m)
  for _ in range(200):
    e = int(rng.integers(2, 33))
    u = rng.pareto(1.0, e) * (rng.random(e) > 0.2)
    r = utility.allocate(u, m, 'proportional')
    share = u / u.sum() if u.sum() > 0 else np.full(e, 1 / e)
    quota = 1 + (m - 1) * e * share
    assert r.sum() == m * e and r.min() >= 1, (u, r)
    assert np.all(np.abs(r - quota) < 1), (u, r, quota)


def test_sampled_allocation_is_seeded_and_proportional_on_average():
  u = np.random.default_rng(0).random(8)
  a, b = (utility.allocate(u, 2, 'sampled', seed=7) for _ in range(2))
  np.testing.assert_array_equal(a, b)
  draws = [utility.allocate(u, 2, 'sampled', seed=s) for s in range(50)]
  assert any(not np.array_equal(d, a) for d in draws)   # the seed matters
  # 50 x 8 extra copies: each expert's mean extra copies within 4 standard errors of 8 p_e.
  p = u / u.sum()
  mean = np.mean(draws, axis=0) - 1
  assert np.all(np.abs(mean - 8 * p) < 4 * np.sqrt(8 * p * (1 - p) / 50))


def test_allocation_rule_errors_name_the_key():
  with pytest.raises(ConfigError, match=r"utility_allocation='largest' is not one of"):
    utility.allocate([1.0, 2.0], 2, 'largest')
  # The recipe checks the rule before any gradient is taken (target_config).
  c = toy.config(num_experts=4)
  c.upcycle.update(recipe='expand_experts', factor=2)
  c.upcycle.args = {'allocation': 'utility', 'utility_allocation': 'largest'}
  with pytest.raises(ConfigError, match=r"utility_allocation='largest'"):
    transition.target_config(c)


def test_dump_is_json_and_errors():
  params, batches, loss_fn = _setup()
  acc = utility.accumulate_sq_grads(loss_fn, params, batches[:1])
  scores = utility.expert_scores(params, acc, 'grad_norm')
  record = json.loads(json.dumps(utility.dump(scores, utility.replica_counts(scores, 2),
                                              'grad_norm', acc['num_batches'])))
  assert sum(record['layers']['layers_0']['counts']) == 8
  with pytest.raises(ConfigError, match='no data'):
    utility.accumulate_sq_grads(loss_fn, params, [])
  with pytest.raises(ConfigError, match="'grad_norm' requested with no data"):
    utility.expert_scores(params, None, 'grad_norm')
  with pytest.raises(ConfigError, match="metric='fisher'"):
    utility.expert_scores(params, acc, 'fisher')
  with pytest.raises(ConfigError, match='expansion factor 1'):
    utility.allocate([1.0, 2.0], 1)


def test_curvature_allocation_is_not_uniform_on_a_trained_model(tmp_path):
  # u_CN sums gbar^2 / mean(g^2) per parameter: with one batch every term is 1
  # and every expert scores its parameter count (the uniform allocation); the
  # default batch count must give an estimate that tells experts apart. One
  # device: 8 fake ones wait on each other in collectives, and 200 queued steps
  # on a busy machine outlast XLA's 40 s rendezvous timeout.
  config = tiny.config(**{'total_steps': 200, 'eval_every_steps': 0, 'log_every_steps': 100,
                          'checkpoint_every_steps': 200, 'moe.num_experts': 8,
                          'moe.use_bias': True, 'mesh.num_devices': 1})
  trainer.train_and_evaluate(config, str(tmp_path))
  config.model.vocab_size = 259
  params, _ = checkpoint.restore_params(str(tmp_path), checkpoint.abstract_like(
      transition.abstract_params(config)))
  it = pipeline.train_iterator(config, pipeline.tokenizer_for(config, str(tmp_path)))
  batches = [next(it) for _ in range(recipes.defaults('expand_experts')['utility_batches'])]
  one = utility.model_scores(config, params, batches[:1], 'curvature')
  assert all(np.ptp(s) == 0 for s in one.values())
  scores = utility.model_scores(config, params, batches, 'curvature')
  counts = utility.replica_counts(scores, 2)
  assert any(list(c) != [2] * 8 for c in counts.values()), counts


def test_equal_allocation_is_sampled_with_the_scores_ignored():
  """The control draws what `sampled` draws from equal scores, whatever the
  scores are: the same seeded randomness, no utility."""
  u = np.random.default_rng(1).pareto(1.0, 8)
  for seed in range(5):
    np.testing.assert_array_equal(utility.allocate(u, 2, 'equal', seed),
                                  utility.allocate(np.ones(8), 2, 'sampled', seed))
  assert not np.array_equal(utility.allocate([0.0, 5.0, 0.0], 3, 'equal', 0), [1, 7, 1])
