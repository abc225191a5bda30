"""Mesh construction, logical-axis rules and param / optimizer-state shardings."""
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P
import numpy as np
import optax
import pytest

from configs import common
from moe_jax import sharding
from moe_jax.errors import ConfigError
from moe_jax.upcycle import paths

# D=8, H=4, G=2, K=4, F=16, E=4; V=13 divides by nothing, so vocab dims fall
# back to replicated.
SHAPES = {
    'embed/embedding': (13, 8),
    'layers_0/attn_norm/scale': (8,),
    'layers_0/attn/q': (8, 4, 4),
    'layers_0/attn/k': (8, 2, 4),
    'layers_0/attn/v': (8, 2, 4),
    'layers_0/attn/o': (4, 4, 8),
    'layers_0/mlp_norm/scale': (8,),
    'layers_0/mlp/wi_0': (8, 16),
    'layers_0/mlp/wi_1': (8, 16),
    'layers_0/mlp/wo': (16, 8),
    'layers_1/moe/router/w': (8, 4),
    'layers_1/moe/router/bias': (4,),
    'layers_1/moe/experts/wi_0': (4, 8, 16),
    'layers_1/moe/experts/wi_1': (4, 8, 16),
    'layers_1/moe/experts/wo': (4, 16, 8),
    'layers_1/moe/shared/wi_0': (8, 32),
    'layers_1/moe/shared/wo': (32, 8),
    'final_norm/scale': (8,),
    'lm_head': (8, 13),
}

# What DEFAULT_RULES say for each mesh (size-1 mesh axes are left out).
WANT = {
    'data2_expert4': {
        'layers_1/moe/experts/wi_0': P('expert', None, None),
        'layers_1/moe/experts/wi_1': P('expert', None, None),
        'layers_1/moe/experts/wo': P('expert', None, None),
    },
    'fsdp2_expert2_tensor2': {
        'embed/embedding': P(None, 'fsdp'),
        'layers_0/attn/q': P('fsdp', 'tensor', None),
        'layers_0/attn/k': P('fsdp', 'tensor', None),
        'layers_0/attn/v': P('fsdp', 'tensor', None),
        'layers_0/attn/o': P('tensor', None, 'fsdp'),
        'layers_0/mlp/wi_0': P('fsdp', 'tensor'),
        'layers_0/mlp/wi_1': P('fsdp', 'tensor'),
        'layers_0/mlp/wo': P('tensor', 'fsdp'),
        'layers_1/moe/router/w': P('fsdp', None),
        'layers_1/moe/experts/wi_0': P('expert', 'fsdp', 'tensor'),
        'layers_1/moe/experts/wi_1': P('expert', 'fsdp', 'tensor'),
        'layers_1/moe/experts/wo': P('expert', 'tensor', 'fsdp'),
        'layers_1/moe/shared/wi_0': P('fsdp', 'tensor'),
        'layers_1/moe/shared/wo': P('tensor', 'fsdp'),
        'lm_head': P('fsdp', None),
    },
}
MESHES = {
    'data2_expert4': dict(data=2, expert=4),
    'fsdp2_expert2_tensor2': dict(data=-1, fsdp=2, expert=2, tensor=2),
}


def abstract_params(shapes=None):
  return paths.unflatten({p: jax.ShapeDtypeStruct(s, jnp.float32)
               for p, s in (shapes or SHAPES).items()})


def mesh_for(name):
  cfg = common.mesh()
  cfg.update(MESHES[name])
  return sharding.make_mesh(cfg)


def flat_specs(tree):
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {sharding.path_str(path): s.spec for path, s in flat}


@pytest.mark.parametrize('name,shape', [
    ('data2_expert4', dict(data=2, fsdp=1, expert=4, tensor=1)),
    ('fsdp2_expert2_tensor2', dict(data=1, fsdp=2, expert=2, tensor=2)),
])
def test_mesh_shapes(name, shape):
  mesh = mesh_for(name)
  assert dict(mesh.shape) == shape
  assert mesh.axis_names == sharding.MESH_AXES
  assert len(set(mesh.devices.flat)) == 8


@pytest.mark.parametrize('sizes', [
    dict(data=-1, expert=3),                     # 3 does not divide 8
    dict(data=2, fsdp=2, expert=1, tensor=1),    # 4 != 8 with no -1
    dict(data=-1, fsdp=-1),                      # two "rests"
    dict(data=0),
])
def test_mesh_errors(sizes):
  cfg = common.mesh()
  cfg.update(sizes)
  with pytest.raises(ConfigError, match='mesh'):
    sharding.make_mesh(cfg)


def test_mesh_on_given_devices():
  mesh = sharding.make_mesh(dict(data=-1, fsdp=1, expert=2, tensor=1),
                            devices=jax.devices()[:4])
  assert dict(mesh.shape)['data'] == 2 and mesh.devices.size == 4


@pytest.mark.parametrize('name', sorted(MESHES))
def test_param_shardings_follow_rules(name):
  mesh = mesh_for(name)
  got = flat_specs(sharding.param_shardings(
      abstract_params(), mesh, sharding.DEFAULT_RULES))
  want = {p: WANT[name].get(p, P(*([None] * len(s))))
          for p, s in SHAPES.items()}
  assert got == want


def test_rules_from_config_overrides():
  cfg = common.mesh()
  cfg.rules = 'embed=fsdp+tensor, vocab='
  rules = sharding.rules_from_config(cfg)
  assert rules['embed'] == ('fsdp', 'tensor') and rules['vocab'] == ()
  assert rules['expert'] == sharding.DEFAULT_RULES['expert']
  mesh = mesh_for('fsdp2_expert2_tensor2')
  specs = flat_specs(sharding.param_shardings(abstract_params(), mesh, rules))
  # embed takes tensor too, so mlp (later dim) finds tensor used: replicated.
  assert specs['layers_0/mlp/wi_0'] == P(('fsdp', 'tensor'), None)
  assert specs['layers_0/mlp/wo'] == P('tensor', 'fsdp')


@pytest.mark.parametrize('rules', ['nope=fsdp', 'embed=fsdp+model', 'embed'])
def test_rules_from_config_errors(rules):
  cfg = common.mesh()
  cfg.rules = rules
  with pytest.raises(ConfigError, match='mesh.rules'):
    sharding.rules_from_config(cfg)


def test_unknown_param_and_wrong_rank_raise():
  mesh = mesh_for('data2_expert4')
  with pytest.raises(ConfigError, match='layers_0/attn/rope'):
    sharding.param_shardings(abstract_params({'layers_0/attn/rope': (8,)}),
                             mesh, sharding.DEFAULT_RULES)
  with pytest.raises(ConfigError, match='lm_head has shape'):
    sharding.param_shardings(abstract_params({'lm_head': (8, 13, 2)}),
                             mesh, sharding.DEFAULT_RULES)


def toy_init(key):
  # One random draw sliced into leaves: one RNG op compiles fast on CPU.
  sizes = [int(np.prod(s)) for s in SHAPES.values()]
  flat = jax.random.normal(key, (sum(sizes),))
  starts = np.cumsum([0] + sizes)
  return paths.unflatten({p: flat[a:a + n].reshape(s)
               for (p, s), a, n in zip(SHAPES.items(), starts, sizes)})


def test_shard_init_births_params_sharded():
  mesh = mesh_for('fsdp2_expert2_tensor2')
  key = jax.random.key(0)
  params = sharding.shard_init(toy_init, mesh, sharding.DEFAULT_RULES, key)
  want = sharding.param_shardings(abstract_params(), mesh,
                                  sharding.DEFAULT_RULES)
  for got, s, plain in zip(jax.tree.leaves(params), jax.tree.leaves(want),
                           jax.tree.leaves(jax.jit(toy_init)(key))):
    assert got.sharding == s
    assert got.addressable_shards[0].data.shape == s.shard_shape(got.shape)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(plain))


def test_opt_state_shardings_mirror_params():
  mesh = mesh_for('fsdp2_expert2_tensor2')
  params = abstract_params()
  p_shard = sharding.param_shardings(params, mesh, sharding.DEFAULT_RULES)
  tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
  state = jax.eval_shape(tx.init, params)
  got = sharding.opt_state_shardings(state, params, p_shard)
  adam = got[1][0]
  assert adam.mu == p_shard and adam.nu == p_shard
  assert adam.count.spec == P()
  # The shardings are usable: the state is born sharded too.
  real = jax.jit(tx.init, out_shardings=got)(
      sharding.shard_init(toy_init, mesh, sharding.DEFAULT_RULES,
                          jax.random.key(0)))
  assert (real[1][0].mu['layers_1']['moe']['experts']['wo'].sharding
          == p_shard['layers_1']['moe']['experts']['wo'])


def test_opt_state_shardings_by_shape_and_ambiguity():
  # D == F: mlp/wi_0 and mlp/wo are both [8, 8] with different shardings.
  shapes = {'layers_0/mlp/wi_0': (8, 8), 'layers_0/mlp/wo': (8, 8),
            'layers_1/moe/experts/wi_0': (4, 8, 8)}
  mesh = mesh_for('fsdp2_expert2_tensor2')
  params = abstract_params(shapes)
  p_shard = sharding.param_shardings(params, mesh, sharding.DEFAULT_RULES)
  f32 = jnp.float32
  state = {'ema': [jax.ShapeDtypeStruct((4, 8, 8), f32),
                   jax.ShapeDtypeStruct((8, 8), f32)],
           'row_stats': jax.ShapeDtypeStruct((4, 8), f32)}
  got = sharding.opt_state_shardings(state, params, p_shard)
  assert got['ema'][0] == p_shard['layers_1']['moe']['experts']['wi_0']
  assert got['ema'][1].spec == P()
  assert got['row_stats'].spec == P()


def test_batch_sharding():
  mesh = mesh_for('data2_expert4')
  assert sharding.batch_sharding(mesh).spec == P(('data', 'expert'))
  assert sharding.batch_sharding(mesh, batch_size=16).spec == P(
      ('data', 'expert'))
  with pytest.raises(ConfigError, match='batch_size=6'):
    sharding.batch_sharding(mesh, batch_size=6)


def test_logical_spec_skips_used_axes_for_activations():
  mesh = mesh_for('fsdp2_expert2_tensor2')
  spec = sharding.logical_spec(('batch', 'length', 'embed'), mesh,
                               sharding.DEFAULT_RULES, shape=(8, 5, 8))
  assert spec == P(('fsdp', 'expert'), None, None)
