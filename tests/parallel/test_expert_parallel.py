"""Expert-parallel dispatch (shard_map + all_to_all) against the reference."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from moe_jax import sharding
from moe_jax.errors import ConfigError
from moe_jax.kernels import reference
from moe_jax.models import dispatch
from moe_jax.parallel import expert
from tests.parallel import capacity_model

# 37 tokens: a multiple of no shard count, so padding is exercised.
TOKENS, D, F, E, K = 37, 8, 16, 8, 2
MESHES = {
    'data2_expert4': dict(data=2, fsdp=1, expert=4, tensor=1),
    'fsdp2_expert2_tensor2': dict(data=1, fsdp=2, expert=2, tensor=2),
}
ON_CPU = jax.default_backend() not in ('gpu', 'tpu')


def routing(kind, seed=0):
  """idx_Tk with distinct experts per token, and softmax gates."""
  rng = np.random.default_rng(seed)
  if kind == 'uniform':
    idx = np.stack([rng.permutation(E)[:K] for _ in range(TOKENS)])
  elif kind == 'skewed':  # expert e drawn with weight 2^-e
    p = 0.5 ** np.arange(E)
    idx = np.stack([rng.choice(E, K, replace=False, p=p / p.sum())
                    for _ in range(TOKENS)])
  else:  # all_to_one: every token picks experts 0 and 1, both on shard 0
    idx = np.tile(np.arange(K), (TOKENS, 1))
  gates = jax.nn.softmax(jnp.asarray(rng.normal(size=(TOKENS, K)), jnp.float32))
  return jnp.asarray(idx, jnp.int32), gates


def weights(seed=0):
  keys = jax.random.split(jax.random.key(seed), 4)
  x = jax.random.normal(keys[0], (TOKENS, D))
  w0, w1 = (0.3 * jax.random.normal(k, (E, D, F)) for k in keys[1:3])
  wo = 0.3 * jax.random.normal(keys[3], (E, F, D))
  return x, w0, w1, wo


def loss(ffn):
  # sin makes every output element's gradient differ.
  return lambda x, idx, g, w0, w1, wo: jnp.sum(
      jnp.sin(ffn(x, idx, g, w0, w1, wo)))


# Jitted once per shape and mesh, shared by the routing cases.
ARGNUMS = (0, 2, 3, 4, 5)  # all but idx
STATIC = ('mesh', 'capacity', 'exchange', 'local_ffn')
ref_ffn = jax.jit(reference.moe_ffn)
ref_grad = jax.jit(jax.grad(loss(reference.moe_ffn), ARGNUMS))
ep_ffn = jax.jit(expert.moe_ffn_ep, static_argnames=STATIC)


@functools.partial(jax.jit, static_argnames=STATIC)
def ep_grad(*args, **kw):
  return jax.grad(loss(lambda *a: expert.moe_ffn_ep(*a, **kw)[0]),
                  ARGNUMS)(*args)


def check_matches_reference(mesh, kind, exchange, local_ffn='ragged'):
  x, w0, w1, wo = weights()
  idx, gates = routing(kind)
  args = (x, idx, gates, w0, w1, wo)
  kw = dict(mesh=mesh, exchange=exchange, local_ffn=local_ffn)
  y, dropped_frac = ep_ffn(*args, **kw)
  np.testing.assert_allclose(y, ref_ffn(*args), atol=1e-5)
  assert float(dropped_frac) == 0.0
  for got, want in zip(ep_grad(*args, **kw), ref_grad(*args)):
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize('kind', ['uniform', 'skewed', 'all_to_one'])
@pytest.mark.parametrize('mesh_name', sorted(MESHES))
def test_dropless_matches_reference(mesh_name, kind):
  check_matches_reference(sharding.make_mesh(MESHES[mesh_name]), kind,
                          'padded')


# Local experts by the Pallas kernels (interpret mode on CPU): the receive
# buffer's empty rows are "no expert" rows of the kernel's routing. Several
# row tiles per shard (tile_m = 8 in interpret mode; 40 receive rows).
@pytest.mark.parametrize('kind', ['uniform', 'all_to_one'])
def test_pallas_local_experts_match_reference(kind):
  check_matches_reference(sharding.make_mesh(MESHES['data2_expert4']), kind,
                          'padded', local_ffn='pallas')


@pytest.mark.parametrize('kind', ['skewed', 'all_to_one'])
def test_pallas_local_experts_split_over_tensor_match_reference(kind):
  check_matches_reference(
      sharding.make_mesh(MESHES['fsdp2_expert2_tensor2']), kind, 'padded',
      local_ffn='pallas')


# The grouped loop (moe_jax/kernels/grouped.py) with the same "no expert" rows.
def test_grouped_local_experts_match_reference():
  check_matches_reference(sharding.make_mesh(MESHES['fsdp2_expert2_tensor2']), 'skewed',
                          'padded', local_ffn='grouped')


def test_get_under_expert_mesh_picks_local_ffn():
  mesh = sharding.make_mesh(MESHES['data2_expert4'])
  for name, local_ffn in [('pallas', 'pallas'), ('pallas_mosaic_gpu', 'pallas_mosaic_gpu'),
                          ('ragged', 'ragged'), ('grouped', 'grouped'),
                          ('einsum', 'ragged'), ('reference', 'ragged'),
                          ('auto', dispatch.resolve('auto'))]:
    fn = dispatch.get(name, mesh=mesh)
    assert fn.func is dispatch.expert_parallel, name
    assert fn.keywords['local_ffn'] == local_ffn, name


@pytest.mark.skipif(ON_CPU, reason='XLA:CPU has no ragged-all-to-all')
@pytest.mark.parametrize('kind', ['uniform', 'skewed', 'all_to_one'])
def test_ragged_exchange_matches_reference(kind):
  experts = math.gcd(E, jax.device_count())
  mesh = sharding.make_mesh(dict(data=-1, fsdp=1, expert=experts, tensor=1))
  check_matches_reference(mesh, kind, 'ragged')


@pytest.mark.parametrize('mesh_name', sorted(MESHES))
def test_capacity_drops_are_counted(mesh_name):
  cfg = MESHES[mesh_name]
  mesh = sharding.make_mesh(cfg)
  shards = cfg['data'] * cfg['fsdp'] * cfg['expert']
  x, w0, w1, wo = weights()
  idx, gates = routing('skewed')
  gates = gates.at[::5].set(0.0)  # padding tokens: routed nowhere, not counted
  capacity = 2
  keep = capacity_model.kept_by_capacity(idx, gates, capacity, shards, E)
  routed = np.asarray(gates) != 0
  dropped = (routed & ~keep).sum()
  assert 0 < dropped < routed.sum()  # the case really drops some
  y, dropped_frac = ep_ffn(x, idx, gates, w0, w1, wo, mesh=mesh,
                           capacity=capacity, exchange='padded')
  np.testing.assert_allclose(
      y, ref_ffn(x, idx, jnp.where(keep, gates, 0), w0, w1, wo), atol=1e-5)
  np.testing.assert_allclose(dropped_frac, dropped / routed.sum(), rtol=1e-6)


def test_large_capacity_is_dropless():
  mesh = sharding.make_mesh(MESHES['data2_expert4'])
  x, w0, w1, wo = weights()
  idx, gates = routing('all_to_one')
  args = (x, idx, gates, w0, w1, wo)
  y, dropped_frac = ep_ffn(*args, mesh=mesh, capacity=TOKENS,
                           exchange='padded')
  np.testing.assert_allclose(y, ref_ffn(*args), atol=1e-5)
  assert float(dropped_frac) == 0.0


def test_odd_d_ff_keeps_experts_whole_over_tensor():
  mesh = sharding.make_mesh(MESHES['fsdp2_expert2_tensor2'])
  x, w0, w1, wo = weights()
  w0, w1, wo = w0[:, :, :15], w1[:, :, :15], wo[:, :15]  # 15 % tensor=2 != 0
  idx, gates = routing('skewed')
  args = (x, idx, gates, w0, w1, wo)
  y, _ = ep_ffn(*args, mesh=mesh, exchange='padded')
  np.testing.assert_allclose(y, ref_ffn(*args), atol=1e-5)


def test_experts_must_divide_expert_axis():
  mesh = sharding.make_mesh(MESHES['data2_expert4'])
  x, w0, w1, wo = weights()
  idx, gates = routing('uniform')
  with pytest.raises(ConfigError, match='num_experts=6'):
    expert.moe_ffn_ep(x, idx % 6, gates, w0[:6], w1[:6], wo[:6], mesh=mesh)
  with pytest.raises(ConfigError, match='capacity=0'):
    expert.moe_ffn_ep(x, idx, gates, w0, w1, wo, mesh=mesh, capacity=0)
  with pytest.raises(ConfigError, match="local_ffn='triton'"):
    expert.moe_ffn_ep(x, idx, gates, w0, w1, wo, mesh=mesh, local_ffn='triton')
