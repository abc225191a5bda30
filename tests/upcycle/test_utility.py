"""Utility scores (seed 000 §4.2) and greedy allocation with replacement."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.data import pipeline
from moe_jax.errors import ConfigError
from moe_jax.train import trainer
from moe_jax.upcycle import paths, transition, utility
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


def test_dump_is_json_and_errors():
  params, batches, loss_fn = _setup()
  acc = utility.accumulate_sq_grads(loss_fn, params, batches[:1])
  scores = utility.expert_scores(params, acc, 'grad_norm')
  record = json.loads(json.dumps(utility.dump(scores, utility.replica_counts(scores, 2),
                                              'grad_norm', acc)))
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
  batches = [next(it) for _ in range(config.upcycle.utility_batches)]
  config.upcycle.utility_metric = 'curvature'
  one, _ = transition.utility_scores(config, params, batches[:1])
  assert all(np.ptp(s) == 0 for s in one.values())
  scores, _ = transition.utility_scores(config, params, batches)
  counts = utility.replica_counts(scores, 2)
  assert any(list(c) != [2] * 8 for c in counts.values()), counts
