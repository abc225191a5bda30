"""Seed 000 Tables 9 and 10: every heuristic keeps originals exact and shapes,
changes replicas the way its one-line definition says."""
import jax
import jax.numpy as jnp
import numpy as np

from moe_jax.upcycle import heuristics, layout, ops
from moe_jax.upcycle.rules import Ctx

E, D, F = 3, 4, 6
SLOTS = {'layers_0': layout.replica_slots([2, 2, 2], 'in_place')}
OVERRIDES = {'svd_perturb': dict(sigma_v=0.1, sigma_u=0.1, drop=0.25),
             'sparse_code_mix': dict(dict_size=16, n_iter=50)}


def _all_experts(w):
  ctx = Ctx('layers_0/moe/experts/wi_0', jax.random.key(0), jax.random.key(1))
  target = jax.ShapeDtypeStruct((2 * E, D, F), jnp.float32)
  return {name: ops.replicate_experts(SLOTS, name, OVERRIDES.get(name)).init([w], target, ctx)
          for name in heuristics.EXPERT}


def test_expert_heuristics():
  w = np.random.default_rng(0).normal(size=(E, D, F)).astype(np.float32)
  out = {k: np.asarray(v) for k, v in jax.jit(_all_experts)(w).items()}
  for name, x in out.items():
    assert x.shape == (2 * E, D, F) and np.all(np.isfinite(x)), name
    np.testing.assert_array_equal(x[0::2], w, err_msg=name)
    if name != 'copy':
      assert not np.allclose(x[1::2], w), name
  np.testing.assert_array_equal(out['copy'][1::2], w)
  nbr = w[[1, 2, 0]]
  np.testing.assert_allclose(out['interpolate'][1::2], 0.2 * w + 0.8 * nbr, rtol=1e-5)
  np.testing.assert_allclose(out['scaled_copy'][1::2], 0.9 * w, rtol=1e-6)
  orth = out['orthogonal'][1::2].reshape(E, -1)
  flat = w.reshape(E, -1)
  np.testing.assert_allclose(np.sum(orth * flat, 1) / np.sum(flat * flat, 1), 0, atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(orth, axis=1), np.linalg.norm(flat, axis=1),
                             rtol=1e-5)
  s = np.linalg.svd(out['svd_perturb'][1::2], compute_uv=False)
  assert np.all(s[:, -1] < 1e-4)  # drop=0.25 of 4 singular values: the smallest is gone
  shuffled = out['shuffle_columns'][1::2]
  np.testing.assert_allclose(np.sort(shuffled, axis=2), np.sort(w, axis=2))
  dropped = np.any(out['drop_upcycle'][1::2] != w, axis=1)  # [E, F] re-initialised neurons
  np.testing.assert_array_equal(dropped.sum(1), [2] * E)    # round(0.3 * 6)


def test_sparse_code_mix_without_mixing_is_a_copy():
  w = np.random.default_rng(1).normal(size=(E, D, F)).astype(np.float32)
  kw = heuristics.options('expert', 'sparse_code_mix',
                          dict(dict_size=16, n_iter=20, mix=0.0))
  out = heuristics.expert('sparse_code_mix', kw, w, w[[1, 2, 0]], 2, jax.random.key(0), None)
  np.testing.assert_array_equal(out, w)


def _all_routers(w, b):
  ctx = Ctx('layers_0/moe/router/w', jax.random.key(0), jax.random.key(1))
  bctx = Ctx('layers_0/moe/router/bias', jax.random.key(2), jax.random.key(1))
  tw = jax.ShapeDtypeStruct((D, 2 * E), jnp.float32)
  tb = jax.ShapeDtypeStruct((2 * E,), jnp.float32)
  out = {}
  for name in heuristics.ROUTER:
    op = ops.extend_router(SLOTS, name)
    out[name] = (op.init([w], tw, ctx), op.init([b], tb, bctx))
  return out


def test_router_heuristics():
  w = np.random.default_rng(2).normal(size=(D, E)).astype(np.float32)
  b = np.asarray([0.3, -0.2, 0.1], np.float32)
  out = jax.tree_util.tree_map(np.asarray, jax.jit(_all_routers)(w, b))
  weight_same = ('copy', 'bias_only')
  bias_changed = ('bias_only', 'temperature_scaled')
  for name, (w2, b2) in out.items():
    assert w2.shape == (D, 2 * E) and b2.shape == (2 * E,), name
    if name != 'copy_noise':
      np.testing.assert_array_equal(w2[:, 0::2], w, err_msg=name)
    else:
      assert not np.allclose(w2[:, 0::2], w)
    assert np.array_equal(w2[:, 1::2], w) == (name in weight_same), name
    np.testing.assert_array_equal(b2[0::2], b, err_msg=name)
    assert np.array_equal(b2[1::2], b) != (name in bias_changed), name
  np.testing.assert_allclose(out['temperature_scaled'][0][:, 1::2], w / 1.5, rtol=1e-6)
  np.testing.assert_allclose(out['temperature_scaled'][1][1::2], b / 1.5, rtol=1e-6)
  mean = w.mean(1, keepdims=True)
  np.testing.assert_allclose(out['adversarial'][0][:, 1::2], w - 0.1 * (w - mean), rtol=1e-5)
  orth = out['orthogonal'][0][:, 1::2]
  np.testing.assert_allclose(np.sum(orth * w, 0), 0, atol=1e-5)


def test_random_replicas_are_kaiming_and_forget_the_source():
  # Seed 000 Table 4's Random: new experts N(0, 2 / fan_in), nothing of w kept.
  w = np.random.default_rng(3).normal(size=(2, 64, 96)).astype(np.float32) + 5.0
  kw = heuristics.options('expert', 'random', {})
  out = np.asarray(heuristics.expert('random', kw, w, w[::-1], 2, jax.random.key(0), None))
  assert abs(out.std() / np.sqrt(2.0 / 64) - 1) < 0.05 and abs(out.mean()) < 0.01
  assert abs(np.corrcoef(out.ravel(), w.ravel())[0, 1]) < 0.05
