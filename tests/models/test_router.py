"""Router selection, balance losses and the bias update against hand computations."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.models import router


def _switch_loss(probs_TE, idx_Tk):
  """E * sum_e f_e P_e written out with loops."""
  t, e = probs_TE.shape
  k = idx_Tk.shape[1]
  f = np.zeros(e)
  for row in idx_Tk:
    for j in row:
      f[j] += 1.0 / (t * k)
  return e * float(np.sum(f * probs_TE.mean(0)))


def _case():
  rng = np.random.default_rng(0)
  probs_BLE = rng.dirichlet(np.ones(4), size=(2, 5)).astype(np.float32)
  idx_BLk = np.argsort(-probs_BLE, axis=-1)[..., :2].astype(np.int32)
  valid_BL = np.ones((2, 5), bool)
  valid_BL[0, 3:] = False      # padding at the end of row 0
  return probs_BLE, idx_BLk, valid_BL


def test_global_balance_loss_by_hand():
  probs_BLE, idx_BLk, valid_BL = _case()
  want = _switch_loss(probs_BLE[valid_BL], idx_BLk[valid_BL])
  got = router.balance_loss(probs_BLE, idx_BLk, valid_BL, 'global')
  np.testing.assert_allclose(got, want, rtol=1e-6)


def test_sequence_balance_loss_by_hand():
  probs_BLE, idx_BLk, valid_BL = _case()
  want = np.mean([_switch_loss(probs_BLE[b][valid_BL[b]], idx_BLk[b][valid_BL[b]])
                  for b in range(2)])
  got = router.balance_loss(probs_BLE, idx_BLk, valid_BL, 'sequence')
  np.testing.assert_allclose(got, want, rtol=1e-6)
  assert abs(float(got) - float(router.balance_loss(probs_BLE, idx_BLk, valid_BL))) > 1e-4


def test_sequence_balance_loss_skips_empty_rows():
  probs_BLE, idx_BLk, valid_BL = _case()
  valid_BL[1] = False
  want = _switch_loss(probs_BLE[0][valid_BL[0]], idx_BLk[0][valid_BL[0]])
  np.testing.assert_allclose(router.balance_loss(probs_BLE, idx_BLk, valid_BL, 'sequence'),
                             want, rtol=1e-6)


def test_balance_loss_is_one_at_perfect_balance():
  probs_BLE = np.full((1, 4, 4), 0.25, np.float32)
  idx_BLk = np.array([[[0], [1], [2], [3]]], np.int32)
  np.testing.assert_allclose(router.balance_loss(probs_BLE, idx_BLk, np.ones((1, 4), bool)), 1.0)


def test_balance_loss_gradient_flows_through_probs_only():
  probs_BLE, idx_BLk, valid_BL = _case()
  grad = jax.grad(lambda p: router.balance_loss(p, idx_BLk, valid_BL))(jnp.asarray(probs_BLE))
  # d/dP_e of E * sum f_e P_e with P_e = mean over valid tokens is E f_e / n.
  f = np.bincount(idx_BLk[valid_BL].ravel(), minlength=4) / (valid_BL.sum() * 2)
  np.testing.assert_allclose(grad[valid_BL], np.broadcast_to(4 * f / valid_BL.sum(), (8, 4)),
                             rtol=1e-6)
  assert not np.any(grad[~valid_BL])


def test_z_loss_and_entropy_by_hand():
  logits_BLE = np.array([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [9.0, 9.0, 9.0]]], np.float32)
  valid_BL = np.array([[True, True, False]])
  lse = [np.log(np.exp([1.0, 2.0, 3.0]).sum()), np.log(3.0)]
  np.testing.assert_allclose(router.z_loss(logits_BLE, valid_BL), np.mean(np.square(lse)),
                             rtol=1e-6)
  p = np.exp([1.0, 2.0, 3.0]) / np.exp([1.0, 2.0, 3.0]).sum()
  want = np.mean([-(p * np.log(p)).sum(), np.log(3.0)])
  np.testing.assert_allclose(router.entropy(jax.nn.softmax(logits_BLE), valid_BL), want,
                             rtol=1e-6)


def test_update_biases_sign_rule():
  params = {
      'layers_0': {'mlp': {'wo': jnp.ones((2, 2))}},
      'layers_1': {'moe': {'router': {'w': jnp.ones((3, 4)),
                                      'bias': jnp.array([0.5, 0.0, 0.0, -0.5])}}},
  }
  aux = {'moe': {'layers_1': {'counts': jnp.array([3.0, 1.0, 2.0, 2.0])}}}
  new = router.update_biases(params, aux, rate=0.1)
  # mean load 2: the overloaded expert 0 goes down, the underloaded 1 up.
  np.testing.assert_allclose(new['layers_1']['moe']['router']['bias'], [0.4, 0.1, 0.0, -0.5])
  assert new['layers_1']['moe']['router']['w'] is params['layers_1']['moe']['router']['w']
  assert new['layers_0'] is params['layers_0']
  np.testing.assert_allclose(params['layers_1']['moe']['router']['bias'], [0.5, 0, 0, -0.5])


def test_bias_moves_selection_not_gates():
  logits_BLE = jnp.array([[[2.0, 1.0, 0.0]]])
  bias_E = jnp.array([0.0, 0.0, 10.0])
  idx, gates, probs = router.select(logits_BLE, bias_E, 1, renormalize=False)
  assert int(idx[0, 0, 0]) == 2
  np.testing.assert_allclose(gates[0, 0, 0], jax.nn.softmax(logits_BLE)[0, 0, 2], rtol=1e-6)
  np.testing.assert_allclose(probs, jax.nn.softmax(logits_BLE), rtol=1e-6)


@pytest.mark.parametrize('score,order,renormalize', [
    ('softmax', 'softmax_then_topk', True), ('softmax', 'softmax_then_topk', False),
    ('sigmoid', 'softmax_then_topk', True), ('sigmoid', 'softmax_then_topk', False),
    ('softmax', 'topk_then_softmax', False)])
def test_select_gates(score, order, renormalize):
  logits = np.array([0.3, -1.0, 2.0, 0.9, -0.2], np.float32)
  idx, gates, probs = router.select(jnp.asarray(logits)[None, None], jnp.zeros(5), 2,
                                    score, order, renormalize)
  assert list(idx[0, 0]) == [2, 3]
  if order == 'topk_then_softmax':
    want = np.exp(logits[[2, 3]]) / np.exp(logits[[2, 3]]).sum()
  else:
    s = (np.exp(logits) / np.exp(logits).sum() if score == 'softmax'
         else 1 / (1 + np.exp(-logits)))
    want = s[[2, 3]] / (s[[2, 3]].sum() if renormalize else 1.0)
  np.testing.assert_allclose(gates[0, 0], want, rtol=1e-6)
  np.testing.assert_allclose(probs[0, 0].sum(), 1.0, rtol=1e-6)


def test_hash_table_is_fixed_distinct_and_spread():
  table = router.hash_table(1000, 8, 3, 0)
  assert table.shape == (1000, 3) and table.dtype == np.int32
  assert all(len(set(row)) == 3 for row in table)
  assert table.min() == 0 and table.max() == 7
  np.testing.assert_array_equal(table, router.hash_table.__wrapped__(1000, 8, 3, 0))
  assert not np.array_equal(table, router.hash_table(1000, 8, 3, 1))
  counts = np.bincount(table.ravel(), minlength=8)
  assert counts.min() > 0.8 * 3000 / 8     # roughly uniform over experts


def test_jitter_is_multiplicative_and_bounded():
  # |x| from 2 to 50, both signs: additive noise U(-eps, eps) would keep
  # |y - x| <= eps yet break |y / x - 1| <= eps only where |x| > 1, so x = 1
  # cannot tell the two apart.
  rng = np.random.default_rng(0)
  x = (rng.uniform(2, 50, (2, 3, 64)) * rng.choice([-1, 1], (2, 3, 64))).astype(np.float32)
  y = np.asarray(router.jitter(jnp.asarray(x), 0.1, jax.random.key(0)))
  ratio = y / x - 1
  assert np.max(np.abs(ratio)) <= 0.1 * (1 + 1e-6)
  assert np.max(np.abs(ratio)) > 0.08 and np.std(ratio) > 0.03   # U(-0.1, 0.1): sd 0.058
  # Jitter changes scale, never sign.
  np.testing.assert_array_equal(np.sign(y), np.sign(x))


def test_router_init_follows_seed_002():
  # N(0, 2 / (5 d_model)) (seed 002 appendix A.6); the bias starts at zero.
  d_model = 256
  std = (2.0 / (5.0 * d_model)) ** 0.5
  params = router.Router(64, std, True).init(jax.random.key(0), jnp.ones((1, 1, d_model)))
  w = np.asarray(params['params']['w'])
  assert w.shape == (d_model, 64) and abs(w.mean()) < 0.05 * std
  np.testing.assert_allclose(w.std(), std, rtol=0.03)   # 16k samples: sd of the estimate ~0.6%
  assert not np.any(params['params']['bias'])


def test_router_loss_sums_or_averages_over_layers():
  stats = {f'layers_{i}': dict(balance_loss=jnp.float32(b), z_loss=jnp.float32(z))
           for i, (b, z) in enumerate([(1.0, 4.0), (2.0, 8.0), (1.5, 0.0)])}
  want = 0.01 * 4.5 + 1e-3 * 12.0
  np.testing.assert_allclose(router.router_loss(stats, 0.01, 1e-3), want, rtol=1e-6)
  np.testing.assert_allclose(router.router_loss(stats, 0.01, 1e-3, 'mean'), want / 3, rtol=1e-6)
  assert float(router.router_loss({}, 0.01, 1e-3, 'mean')) == 0.0


def _monitor(loads):
  """seed 001's monitor_expert_utilization, as the blog writes it."""
  loads = np.asarray(loads, np.float64)
  cv = np.std(loads) / (np.mean(loads) + 1e-10)
  return dict(cv=cv, dead=int(np.sum(loads < 0.01)),
              healthy=bool(cv < 0.3 and np.min(loads) > 0.02))


@pytest.mark.parametrize('loads', [
    [0.125] * 8,                                     # uniform: healthy
    [0.3, 0.25, 0.2, 0.1, 0.1, 0.04, 0.005, 0.005],  # two dead, unhealthy
    [0.8] + [0.2 / 7] * 7,                           # collapse to one expert, none dead
    [0.15, 0.15, 0.13, 0.12, 0.12, 0.12, 0.11, 0.1],  # healthy, cv near 0.14
    [0.985 / 15] * 15 + [0.015],                     # cv under 0.3, min under 2%
])
def test_health_is_seed_001s_monitor(loads):
  got = router.health(np.asarray(loads, np.float32))
  want = _monitor(loads)
  np.testing.assert_allclose(got['cv'], want['cv'], rtol=1e-5)
  assert int(got['dead_1pct']) == want['dead']
  assert bool(got['healthy']) == want['healthy']
  np.testing.assert_allclose((got['min_load'], got['max_load']), (min(loads), max(loads)),
                             rtol=1e-6)
@pytest.mark.parametrize('renormalize', [True, False])
def test_copied_experts_teach_the_router_only_with_unnormalised_gates(renormalize):
  """Upcycled copies (dense_to_moe init=copy) with renormalised top-k gates
  compute the dense MLP whatever the router says, so the LM loss gives the
  router no gradient at all and it stays where it started (seed 004's runs
  before 2026-11-26). Seed 004's gates, TopK(softmax(Wx)) unnormalised, scale
  the copies' output by the picked probabilities: the router learns from step 0."""
  from moe_jax.models import moe  # pylint: disable=g-import-not-at-top
  from tests.models import fixtures  # pylint: disable=g-import-not-at-top
  cfg = fixtures.tiny_model_config(num_experts=4, top_k=2, renormalize=renormalize,
                                   dispatch='einsum', capacity_factor=4.0)
  layer = moe.MoE(cfg)
  x_BLD = jax.random.normal(jax.random.key(0), (2, 7, 32))
  tokens_BL, valid_BL = jnp.zeros((2, 7), jnp.int32), jnp.ones((2, 7), bool)
  params = layer.init(jax.random.key(1), x_BLD, tokens_BL, valid_BL)['params']
  params['experts'] = jax.tree.map(lambda w: jnp.broadcast_to(w[:1], w.shape),
                                   params['experts'])   # every expert a copy of expert 0
  c_BLD = jax.random.normal(jax.random.key(2), x_BLD.shape)
  loss = lambda p: jnp.sum(layer.apply({'params': p}, x_BLD, tokens_BL, valid_BL)[0] * c_BLD)
  g = jax.grad(loss)(params)['router']['w']
  if renormalize:
    np.testing.assert_allclose(g, 0.0, atol=1e-6)
  else:
    assert float(jnp.abs(g).max()) > 1e-4   # ~3e-3 here; the renormalised case is < 1e-6
