"""Token-parallel dispatch (expert = 1, tokens split) against the reference."""
import functools
import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
import numpy as np
import pytest

from configs import common
from moe_jax import sharding
from moe_jax.kernels import reference
from moe_jax.models import dispatch, moe
from moe_jax.parallel import local
from tests.models import fixtures

# 37 tokens: a multiple of no shard count, so padding is exercised. F = 24
# divides by tensor = 2, so the F-split path runs on the second mesh.
TOKENS, E, K = 37, 8, 2
MESHES = {
    'data8': dict(data=8),
    'data2_fsdp2_tensor2': dict(data=2, fsdp=2, tensor=2),
}
TOKEN_AXES = {'data8': ('data',), 'data2_fsdp2_tensor2': ('data', 'fsdp')}
_ARGS = ('x_TD', 'idx_Tk', 'gates_Tk', 'wi_0_EDF', 'wi_1_EDF', 'wo_EFD')
_DIFF = (0, 2, 3, 4, 5)   # all but idx


def make_mesh(name):
  cfg = common.mesh()
  cfg.update(dict(dict(data=1, fsdp=1, expert=1, tensor=1), **MESHES[name]))
  return sharding.make_mesh(cfg)


def inputs(kind='skewed'):
  inp = fixtures.moe_inputs(kind, tokens=TOKENS, experts=E, top_k=K)
  return tuple(inp[a] for a in _ARGS)


def loss(ffn):
  # sin makes every output element's gradient differ.
  return lambda *a: jnp.sum(jnp.sin(ffn(*a)))


ref_ffn = jax.jit(reference.moe_ffn)
ref_grad = jax.jit(jax.grad(loss(reference.moe_ffn), _DIFF))


@functools.lru_cache(maxsize=None)
def local_fns(name, mesh_name, capacity_factor=None):
  """Jitted forward and grads of `dispatch.get(name, ...)` on the mesh."""
  fn = dispatch.get(name, capacity_factor, make_mesh(mesh_name))
  return jax.jit(fn), jax.jit(jax.grad(loss(lambda *a: fn(*a)[0]), _DIFF))


@pytest.mark.parametrize('mesh_name', sorted(MESHES))
def test_get_picks_the_local_path(mesh_name):
  fn = dispatch.get('ragged', mesh=make_mesh(mesh_name))
  assert fn.func is local.moe_ffn_local
  assert fn.keywords['token_axes'] == TOKEN_AXES[mesh_name]
  assert fn.keywords['dispatch'] is dispatch.ragged
  # Tokens not split (tensor only): the one-device path, unwrapped.
  cfg = common.mesh()
  cfg.update(data=1, tensor=8)
  assert dispatch.get('ragged', mesh=sharding.make_mesh(cfg)) is dispatch.ragged


# Capacity factor E / k gives C = T_l: no expert can overflow.
@pytest.mark.parametrize('name,capacity_factor', [('ragged', None), ('einsum', E / K),
                                                  ('pallas', None)])
@pytest.mark.parametrize('mesh_name', sorted(MESHES))
def test_matches_reference(mesh_name, name, capacity_factor):
  args = inputs()
  ffn, grad = local_fns(name, mesh_name, capacity_factor)
  y, dropped_frac = ffn(*args)
  np.testing.assert_allclose(y, ref_ffn(*args), atol=1e-5, rtol=1e-5)
  assert float(dropped_frac) == 0.0
  for i, got, want in zip(_DIFF, grad(*args), ref_grad(*args)):
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=_ARGS[i])


def kept_per_shard(idx_Tk, gates_Tk, shards, cap):
  """Hand simulation: each shard of ceil(T / shards) tokens is one GShard
  group (all first choices, then second choices); zero gates take no slot."""
  per = -(-len(idx_Tk) // shards)
  keep = np.zeros(idx_Tk.shape, bool)
  for s in range(shards):
    fill = np.zeros(E, int)
    for j in range(idx_Tk.shape[1]):
      for t in range(s * per, min((s + 1) * per, len(idx_Tk))):
        e = idx_Tk[t, j]
        if gates_Tk[t, j] != 0 and fill[e] < cap:
          fill[e] += 1
          keep[t, j] = True
  return keep


@pytest.mark.parametrize('mesh_name', sorted(MESHES))
def test_einsum_capacity_is_per_token_shard(mesh_name):
  x, idx, gates, w0, w1, wo = inputs('all_to_one')
  # Zero gates (padding) on a run of tokens: shards then route unequal
  # numbers of assignments, so only a weighted mean gives the global fraction.
  gates = gates.at[3:9].set(0.0)
  shards = math.prod(make_mesh(mesh_name).shape[a] for a in TOKEN_AXES[mesh_name])
  per = -(-TOKENS // shards)
  cap = dispatch.capacity(per, K, E, 1.0)
  keep = kept_per_shard(np.asarray(idx), np.asarray(gates), shards, cap)
  routed = np.asarray(gates) != 0
  assert 0 < (routed & ~keep).sum()   # something is dropped

  y, dropped_frac = local_fns('einsum', mesh_name, 1.0)[0](x, idx, gates, w0, w1, wo)
  np.testing.assert_allclose(dropped_frac, (routed & ~keep).sum() / routed.sum(), rtol=1e-6)
  # Kept assignments equal the reference with the dropped ones' gates zeroed,
  # and each shard equals einsum run on its own (padded) tokens.
  np.testing.assert_allclose(y, ref_ffn(x, idx, gates * keep, w0, w1, wo), atol=1e-5)
  pad = shards * per - TOKENS
  padded = [jnp.pad(a, [(0, pad), (0, 0)]) for a in (x, idx, gates)]
  per_shard = [dispatch.einsum(*(a[s * per:(s + 1) * per] for a in padded), w0, w1, wo,
                               capacity_factor=1.0)[0] for s in range(shards)]
  np.testing.assert_allclose(y, jnp.concatenate(per_shard)[:TOKENS], atol=1e-5)


def test_data_mesh_dispatch_gathers_no_tokens():
  """With tokens split over data=8 and replicated weights, each shard has all
  it needs: the compiled step has no all-gather (the one-device ragged path,
  left to XLA's partitioner, compiles with several on jax 0.10.2)."""
  mesh = make_mesh('data8')
  x, idx, gates, w0, w1, wo = inputs()
  tokens = NamedSharding(mesh, P('data'))
  x, idx, gates = (jax.device_put(a[:32], tokens) for a in (x, idx, gates))
  fn = dispatch.get('ragged', mesh=mesh)
  for f in (fn, jax.grad(loss(lambda *a: fn(*a)[0]), _DIFF)):
    hlo = jax.jit(f).lower(x, idx, gates, w0, w1, wo).compile().as_text()
    assert 'all-reduce' in hlo   # shards do meet: drop counts, weight grads
    assert 'all-gather' not in hlo


def test_moe_block_under_data_mesh_is_token_local():
  cfg = fixtures.tiny_model_config(num_experts=4, top_k=2)
  block = moe.MoE(cfg)
  x_BLD = jax.random.normal(jax.random.key(1), (8, 4, cfg.d_model))
  tokens_BL = jnp.zeros((8, 4), jnp.int32)
  valid_BL = jnp.arange(4) < jnp.array([[4]] * 6 + [[2], [0]])   # some padding
  params = block.init(jax.random.key(0), x_BLD, tokens_BL, valid_BL)
  apply = jax.jit(lambda p, x: block.apply(p, x, tokens_BL, valid_BL))
  assert 'shard_map' not in str(jax.make_jaxpr(apply)(params, x_BLD))
  with jax.set_mesh(make_mesh('data8')):
    assert 'shard_map' in str(jax.make_jaxpr(apply)(params, x_BLD))
    got = apply(params, x_BLD)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), got,
               apply(params, x_BLD))
