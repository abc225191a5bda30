"""Training on a mesh: the same losses as one device, params laid out by the
rules, and the MoE block dispatching through the expert-parallel path."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import common
from moe_jax import sharding
from moe_jax.errors import ConfigError
from moe_jax.kernels import reference
from moe_jax.models import config as model_config, dispatch, moe
from moe_jax.train import trainer
from moe_jax.workdir import placement
from tests.parallel import capacity_model
from tests.train import tiny

MESHES = {
    'data2_expert4': dict(data=2, expert=4),
    'fsdp2_expert2_tensor2': dict(data=1, fsdp=2, expert=2, tensor=2),
}

# The one-layer tiny model (D=32, H=2, G=1, K=16, F=64, E=4, V=259) as
# DEFAULT_RULES lay it out, trailing Nones dropped; unlisted params are
# replicated. G=1 and V=259 divide by no mesh axis, so kv_heads and vocab stay
# whole.
WANT = {
    'data2_expert4': {
        'layers_0/moe/experts/wi_0': ('expert',),
        'layers_0/moe/experts/wi_1': ('expert',),
        'layers_0/moe/experts/wo': ('expert',),
    },
    'fsdp2_expert2_tensor2': {
        'embed/embedding': (None, 'fsdp'),
        'lm_head': ('fsdp',),
        'layers_0/attn/q': ('fsdp', 'tensor'),
        'layers_0/attn/k': ('fsdp',),
        'layers_0/attn/v': ('fsdp',),
        'layers_0/attn/o': ('tensor', None, 'fsdp'),
        'layers_0/moe/router/w': ('fsdp',),
        'layers_0/moe/experts/wi_0': ('expert', 'fsdp', 'tensor'),
        'layers_0/moe/experts/wi_1': ('expert', 'fsdp', 'tensor'),
        'layers_0/moe/experts/wo': ('expert', 'tensor', 'fsdp'),
    },
}


def make_mesh(name):
  cfg = common.mesh()
  cfg.update(MESHES[name])
  return sharding.make_mesh(cfg)


def run_config(**mesh):
  # One layer: compiling is most of a test's time on CPU.
  c = tiny.config(total_steps=3, eval_every_steps=0, **{'model.num_layers': 1})
  c.mesh.update(mesh)
  return c


def losses(workdir):
  with open(os.path.join(workdir, 'metrics.jsonl')) as f:
    return {row['step']: row['loss'] for row in map(json.loads, f)}


def saved_specs(workdir, step):
  """Param path -> PartitionSpec (trailing Nones dropped) of the arrays the
  trainer saved: the layout the train step produced."""
  path = os.path.join(workdir, 'checkpoints', str(step), 'params')
  tree = ocp.StandardCheckpointer().metadata(path).item_metadata
  tree = getattr(tree, 'tree', tree)
  out = {}
  for key, leaf in jax.tree_util.tree_leaves_with_path(tree):
    spec = tuple(leaf.sharding.partition_spec)
    while spec and spec[-1] is None:
      spec = spec[:-1]
    out[sharding.path_str(key)] = spec
  return out


@pytest.fixture(scope='module')
def one_device(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp('one_device'))
  trainer.train_and_evaluate(run_config(num_devices=1), workdir)
  return losses(workdir)


@pytest.mark.parametrize('name', sorted(MESHES))
def test_mesh_matches_one_device(name, one_device, tmp_path):
  workdir = str(tmp_path)
  trainer.train_and_evaluate(run_config(**MESHES[name]), workdir)
  got = losses(workdir)
  assert sorted(got) == sorted(one_device) == [1, 2, 3]
  np.testing.assert_allclose([got[s] for s in (1, 2, 3)], [one_device[s] for s in (1, 2, 3)],
                             rtol=0, atol=1e-5)
  specs = saved_specs(workdir, 3)
  assert specs == {path: WANT[name].get(path, ()) for path in specs}


def test_moe_block_under_expert_mesh_is_expert_parallel():
  c = tiny.config()
  c.model.vocab_size = 64
  block = moe.MoE(model_config.from_config(c))
  x_BLD = jax.random.normal(jax.random.key(1), (4, 8, c.model.d_model))
  tokens_BL = jnp.zeros((4, 8), jnp.int32)
  valid_BL = jnp.arange(8) < jnp.array([[8], [8], [5], [0]])   # some padding
  params = block.init(jax.random.key(0), x_BLD, tokens_BL, valid_BL)
  apply = jax.jit(lambda p, x: block.apply(p, x, tokens_BL, valid_BL))
  mesh = make_mesh('data2_expert4')
  assert 'all_to_all' not in str(jax.make_jaxpr(apply)(params, x_BLD))
  with jax.set_mesh(mesh):
    assert str(jax.make_jaxpr(apply)(params, x_BLD)).count('all_to_all') >= 2   # there and back
    got = apply(params, x_BLD)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), got,
               apply(params, x_BLD))


@pytest.mark.parametrize('capacity_factor', [0.5, 8.0])
def test_einsum_under_expert_mesh_is_capacity_mode(capacity_factor):
  # 37 tokens over 8 token shards: 5 per shard, the last one padded with 3.
  tokens, d, f, e, k = 37, 8, 16, 4, 2
  keys = jax.random.split(jax.random.key(0), 5)
  x = jax.random.normal(keys[0], (tokens, d))
  w0, w1 = (0.3 * jax.random.normal(key, (e, d, f)) for key in keys[1:3])
  wo = 0.3 * jax.random.normal(keys[3], (e, f, d))
  idx = jax.vmap(lambda key: jax.random.permutation(key, e)[:k])(
      jax.random.split(keys[4], tokens)).astype(jnp.int32)
  gates = jnp.full((tokens, k), 1.0 / k)
  mesh = make_mesh('data2_expert4')
  fn = dispatch.get('einsum', capacity_factor, mesh)
  y, dropped = jax.jit(fn)(x, idx, gates, w0, w1, wo)
  # Against the numpy drop rule and the loop reference, not against the
  # expert-parallel function that dispatch.get wraps.
  keep = capacity_model.kept_by_capacity(idx, gates, dispatch.capacity(5, k, e, capacity_factor),
                                         8, e)
  want_y = reference.moe_ffn(x, idx, jnp.where(keep, gates, 0), w0, w1, wo)
  np.testing.assert_allclose(y, want_y, atol=1e-5)
  np.testing.assert_allclose(float(dropped), (~keep).sum() / keep.size, rtol=1e-6)
  if capacity_factor > 1:   # C >= 5 tokens: nothing can drop
    assert keep.all()
  else:
    assert 0 < (~keep).sum() < keep.size


def test_num_devices_picks_the_first_devices():
  cfg = common.mesh()
  cfg.update(num_devices=4, expert=2)
  mesh = placement.make_mesh(cfg)
  assert dict(mesh.shape) == dict(data=2, fsdp=1, expert=2, tensor=1)
  assert set(mesh.devices.flat) == set(jax.devices()[:4])
  cfg.num_devices = 16
  with pytest.raises(ConfigError, match='mesh.num_devices=16'):
    placement.make_mesh(cfg)
