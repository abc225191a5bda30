"""Each op on toy leaves: values, shapes, shared randomness, optimizer moments."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax.errors import ConfigError
from moe_jax.upcycle import heuristics, layout, ops
from moe_jax.upcycle.rules import Ctx

D, F, E = 4, 6, 3


def _ctx(path, seed=0, layer_seed=1):
  return Ctx(path, jax.random.key(seed), jax.random.key(layer_seed))


def _t(*shape):
  return jax.ShapeDtypeStruct(shape, jnp.float32)


def _dense(seed=0):
  rng = np.random.default_rng(seed)
  return {'wi_0': rng.normal(size=(D, F)).astype(np.float32),
          'wo': rng.normal(size=(F, D)).astype(np.float32)}


def test_tile_copy_is_exact():
  w = _dense()['wi_0']
  out = ops.tile_experts(E).init([jnp.asarray(w)], _t(E, D, F), _ctx('layers_0/moe/experts/wi_0'))
  np.testing.assert_array_equal(out, np.broadcast_to(w, (E, D, F)))


def test_tile_noise_is_scaled_by_weight_std():
  w = jnp.asarray(_dense()['wi_0']) * 10
  out = ops.tile_experts(64, 'noise', noise=0.1).init(
      [w], _t(64, D, F), _ctx('layers_0/moe/experts/wi_0'))
  ratio = float(jnp.std(out - w) / (0.1 * jnp.std(w)))
  assert 0.9 < ratio < 1.1


def test_tile_subset_masks_or_slices_neurons():
  dense = _dense()
  wo = jnp.asarray(dense['wo'])
  masked = ops.tile_experts(E, 'subset').init([wo], _t(E, F, D), _ctx('layers_0/moe/experts/wo'))
  for e in range(E):
    keep = np.zeros(F, bool)
    keep[e * 2:(e + 1) * 2] = True
    np.testing.assert_array_equal(masked[e][keep], dense['wo'][keep])
    np.testing.assert_array_equal(masked[e][~keep], 0)
  sliced = ops.tile_experts(E, 'subset').init([jnp.asarray(dense['wi_0'])], _t(E, D, 2),
                                              _ctx('layers_0/moe/experts/wi_0'))
  np.testing.assert_array_equal(sliced[1], dense['wi_0'][:, 2:4])
  with pytest.raises(ConfigError, match='subset init needs the expert width 4'):
    ops.tile_experts(E, 'subset').init([wo], _t(E, 4, D), _ctx('layers_0/moe/experts/wo'))


def test_tile_permute_permutes_each_expert_and_matrix():
  w = jnp.asarray(_dense()['wi_0'])
  out = np.asarray(ops.tile_experts(E, 'permute').init([w], _t(E, D, F),
                                                       _ctx('layers_0/moe/experts/wi_0')))
  for e in range(E):  # same multiset of columns
    np.testing.assert_array_equal(np.sort(out[e], axis=1), np.sort(np.asarray(w), axis=1))
  assert not all(np.array_equal(out[0], out[e]) for e in range(1, E))


def test_drop_upcycling_shares_neurons_across_gate_up_down():
  d = _dense()
  op = ops.tile_experts(E, 'drop', drop=0.5)
  a = np.asarray(op.init([jnp.asarray(d['wi_0'])], _t(E, D, F), _ctx('l/moe/experts/wi_0', 5, 7)))
  b = np.asarray(op.init([jnp.asarray(d['wo'])], _t(E, F, D), _ctx('l/moe/experts/wo', 6, 7)))
  changed_a = np.any(a != d['wi_0'][None], axis=1)   # [E, F]
  changed_b = np.any(b != d['wo'][None], axis=2)     # [E, F]
  np.testing.assert_array_equal(changed_a, changed_b)
  np.testing.assert_array_equal(changed_a.sum(1), [3] * E)


def test_tile_random_redraws_every_expert_at_the_mlp_scale():
  w = jnp.asarray(np.random.default_rng(3).normal(0.5, 2.0, size=(16, 32)), jnp.float32)
  out = np.asarray(ops.tile_experts(E, 'random').init([w], _t(E, 16, 32),
                                                      _ctx('layers_0/moe/experts/wi_0')))
  assert not np.any(np.isclose(out, np.asarray(w)[None]).all(axis=(1, 2)))
  assert not np.array_equal(out[0], out[1])
  # Fresh draws, not the MLP: no correlation with it, its mean and std kept.
  assert abs(np.corrcoef(out[0].ravel(), np.asarray(w).ravel())[0, 1]) < 0.2
  np.testing.assert_allclose(out.mean(), float(jnp.mean(w)), atol=0.15)
  np.testing.assert_allclose(out.std(), float(jnp.std(w)), rtol=0.1)


def test_replica_slots_layouts():
  app = layout.replica_slots([2, 1, 3], 'append')
  np.testing.assert_array_equal(app.src_of, [0, 1, 2, 0, 2, 2])
  np.testing.assert_array_equal(app.replica, [0, 0, 0, 1, 1, 1])
  inp = layout.replica_slots([2, 1, 3], 'in_place')
  np.testing.assert_array_equal(inp.src_of, [0, 0, 1, 2, 2, 2])
  np.testing.assert_array_equal(inp.replica, [0, 1, 0, 0, 1, 1])
  with pytest.raises(ConfigError, match="layout='side'"):
    layout.replica_slots([2], 'side')


def test_in_place_keeps_expert_parallel_shards():
  # 4 experts on 2 shards -> 8 experts on 2 shards: shard s holds copies of its own experts.
  s = layout.replica_slots([2] * 4, 'in_place')
  assert set(s.src_of[:4]) == {0, 1} and set(s.src_of[4:]) == {2, 3}


def test_replicate_experts_and_moments():
  rng = np.random.default_rng(0)
  w = jnp.asarray(rng.normal(size=(E, D, F)), jnp.float32)
  slots = {'layers_1': layout.replica_slots([2, 1, 3], 'append')}
  op = ops.replicate_experts(slots)
  out = op.init([w], _t(6, D, F), _ctx('layers_1/moe/experts/wi_0'))
  np.testing.assert_array_equal(out, np.asarray(w)[[0, 1, 2, 0, 2, 2]])
  nu = op.moment([w], _t(6, D, F), _ctx('layers_1/moe/experts/wi_0'), 2)
  np.testing.assert_allclose(nu[3], np.asarray(w)[0] / 4)
  np.testing.assert_allclose(nu[1], np.asarray(w)[1])
  with pytest.raises(ConfigError, match='source has 2 experts, the source config says 3'):
    op.init([w[:2]], _t(6, D, F), _ctx('layers_1/moe/experts/wi_0'))


def test_replicate_heuristic_leaves_originals_exact():
  w = jnp.asarray(np.random.default_rng(1).normal(size=(E, D, F)), jnp.float32)
  slots = {'layers_0': layout.replica_slots([2, 2, 2], 'in_place')}
  out = np.asarray(ops.replicate_experts(slots, 'scaled_copy').init(
      [w], _t(6, D, F), _ctx('layers_0/moe/experts/wi_0')))
  np.testing.assert_array_equal(out[0::2], w)
  np.testing.assert_allclose(out[1::2], 0.9 * np.asarray(w), rtol=1e-6)


def test_extend_router_bias_noise_on_replicas_only():
  slots = {'layers_0': layout.replica_slots([2, 2, 2], 'append')}
  w = jnp.asarray(np.random.default_rng(2).normal(size=(D, E)), jnp.float32)
  b = jnp.asarray([0.5, -0.5, 0.0])
  op = ops.extend_router(slots, delta=0.01)
  w2 = op.init([w], _t(D, 6), _ctx('layers_0/moe/router/w'))
  b2 = np.asarray(op.init([b], _t(6), _ctx('layers_0/moe/router/bias')))
  np.testing.assert_array_equal(w2, np.asarray(w)[:, [0, 1, 2, 0, 1, 2]])
  np.testing.assert_array_equal(b2[:3], b)
  gap = np.abs(b2[3:] - np.asarray(b))
  assert np.all(gap <= 0.01) and np.all(gap > 0)


def test_fresh_ops_have_zero_moments():
  op = ops.normal(0.5)
  assert op.fresh
  out = op.init([], _t(200, 50), _ctx('layers_0/moe/router/w'))
  assert 0.45 < float(jnp.std(out)) < 0.55
  np.testing.assert_array_equal(op.moment([], _t(3), _ctx('x'), 1), 0)


def test_unknown_init_and_heuristic_names():
  with pytest.raises(ConfigError, match="expert_init='clone'"):
    ops.tile_experts(E, 'clone')
  with pytest.raises(ConfigError, match="expert_heuristic='magic'"):
    ops.replicate_experts({}, 'magic')
  with pytest.raises(ConfigError, match="router_heuristic='magic'"):
    ops.extend_router({}, 'magic')
  with pytest.raises(ConfigError, match=r"upcycle.args.expert_args \['beta'\] are not options of 'interpolate'"):
    heuristics.options('expert', 'interpolate', {'beta': 1})
