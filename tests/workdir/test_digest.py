"""Checkpoint digests: the on-device hash against a numpy reference, for every
dtype a state holds and any sharding, and what it catches."""
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import ml_dtypes
import numpy as np
import pytest

from moe_jax.errors import CorruptCheckpointError
from moe_jax.workdir import digest
from tests import compiles


def _fmix(h):
  h = h ^ (h >> np.uint32(16))
  h = h * np.uint32(0x85EBCA6B)
  h = h ^ (h >> np.uint32(13))
  h = h * np.uint32(0xC2B2AE35)
  return h ^ (h >> np.uint32(16))


def _reference(x):
  """The slow reference: the bits as uint32 words in row-major order,
  each mixed with its flat index, summed mod 2**32; two seeds."""
  x = np.asarray(x)
  if x.dtype == np.bool_:
    words = x.astype(np.uint32).ravel()
  elif x.dtype.itemsize == 8:
    words = x.view(np.uint32).ravel()
  else:
    words = x.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize]).astype(
        np.uint32).ravel()
  index = np.arange(words.size, dtype=np.uint32)
  with np.errstate(over='ignore'):
    lanes = [int(_fmix(words ^ _fmix(index ^ np.uint32(s))).sum(dtype=np.uint32))
             for s in digest._SEEDS]  # pylint: disable=protected-access
  return f'{lanes[0]:08x}{lanes[1]:08x}'


def _tree():
  rng = np.random.default_rng(0)
  return {'w': rng.standard_normal((8, 6, 16)).astype(np.float32),
          'b': rng.standard_normal((37,)).astype(ml_dtypes.bfloat16),
          'count': np.arange(5, dtype=np.int32), 'flag': np.array([True, False]),
          'scalar': np.float32(3.5), 'empty': np.zeros((0, 4), np.float32)}


def _hex(summaries):
  return [f'{int(a):08x}{int(b):08x}' for (a, b), _ in summaries]


@pytest.mark.parametrize('path', [digest.on_device, digest.on_host])
def test_matches_the_numpy_reference_on_any_sharding(path):
  """Both paths (on_host: one process, CPU memory; on_device otherwise)."""
  tree = _tree()
  want = [_reference(v) for v in tree.values()]
  assert _hex(path([jnp.asarray(v) for v in tree.values()])) == want
  assert _hex(path(list(tree.values()))) == want   # numpy leaves, as check_tree gets
  mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ('a', 'b'))
  sharded = dict(tree, w=jax.device_put(tree['w'], NamedSharding(mesh, P('a', None, 'b'))),
                 count=jax.device_put(tree['count'], NamedSharding(mesh, P())))
  assert _hex(path(list(sharded.values()))) == want
  keys = jax.random.split(jax.random.key(0), 3)
  assert _hex(path([keys])) == [_reference(jax.random.key_data(keys))]
  finite = [f for _, f in path([jnp.asarray(v) for v in (
      np.array([1.0, np.inf], np.float32), np.array([np.nan], ml_dtypes.bfloat16),
      np.array([1.0], ml_dtypes.bfloat16), np.arange(3))])]
  assert finite == [False, False, True, True]


def test_on_device_compiles_once_per_leaf_signature_and_never_again():
  """A GPU's save and restore: a state of many layers with few distinct
  leaf shapes compiles one program per (shape, dtype) the first time, and a
  second save of the same shapes (or the moments, or a restore) none."""
  rng = np.random.default_rng(1)
  layer = lambda: {'q': rng.standard_normal((6, 5)).astype(np.float32),
                   'norm': rng.standard_normal((11,)).astype(np.float32)}
  params = [jnp.asarray(v) for _ in range(5) for v in layer().values()]
  moments = [jnp.asarray(v) for _ in range(5) for v in layer().values()]
  with compiles.recorded() as first:
    got = _hex(digest.on_device(params))
  with compiles.recorded() as again:
    _hex(digest.on_device(params)), _hex(digest.on_device(moments))
  assert got == [_reference(x) for x in params]
  assert first.count('_leaf') == 2 and again == []   # (6, 5) and (6,) float32


def test_of_tree_names_every_leaf_by_its_path():
  tree = _tree()
  assert digest.of_tree(tree) == {f"['{k}']": _reference(v) for k, v in tree.items()}


def test_changes_with_any_element_and_with_order():
  w = _tree()['w']
  base = digest.of_tree({'w': w})
  zeroed = w.copy()
  zeroed.reshape(-1)[100:164] = 0.0
  swapped = w.copy()
  swapped[0, 0, [0, 1]] = swapped[0, 0, [1, 0]]
  flipped = w.copy()
  flipped.view(np.uint32)[3, 2, 1] ^= 1   # one bit
  for other in (zeroed, swapped, flipped):
    assert digest.of_tree({'w': other}) != base


def test_check_tree_names_the_leaf():
  tree = {'a': np.ones(3, np.float32), 'b': np.zeros(2, np.float32)}
  recorded = digest.of_tree(tree)
  digest.check_tree('ckpt/5', 'params', tree, recorded)
  with pytest.raises(CorruptCheckpointError, match=r"ckpt/5: params\['b'\] does not match"):
    digest.check_tree('ckpt/5', 'params', dict(tree, b=np.ones(2, np.float32)), recorded)
  with pytest.raises(CorruptCheckpointError, match=r"params\['a'\] has no recorded digest"):
    digest.check_tree('ckpt/5', 'params', tree, {"['b']": recorded["['b']"]})
  nan = dict(tree, a=np.array([1, np.nan, 0], np.float32))
  with pytest.raises(CorruptCheckpointError, match=r"params\['a'\] holds non-finite values"):
    digest.check_tree('ckpt/5', 'params', nan, None)   # a checkpoint saved before digests
