"""Checkpoint digests: a 64-bit hash of every saved array, computed on device;
and `file_digest`, the SHA-256 of files an import records in its lineage.

A step's `meta` records the digest of each params and opt_state leaf (and a
SHA-256 of the data iterator state); restoring recomputes them from the
restored arrays and refuses a step where one differs, naming the leaf.

Why the values on device rather than the files Orbax wrote: the hash is a sum
over elements of murmur3-mixed (bits, position) words in uint32 arithmetic,
which wraps exactly and is associative, so XLA computes it shard by shard with
one scalar all-reduce. It costs one read of memory the device already holds,
no extra I/O (hashing the files would read back every byte of a 100B-model
checkpoint), and gives the same number on every host, for any mesh or process
count that wrote or restores the step: files are per process and per
layout, values are not. It checks the whole path from storage through
TensorStore's decoding to the device, which is what training consumes; a
flipped byte that does not change a restored value is harmless by definition.

One process holding every leaf in CPU memory (CPU training, the test suite)
hashes with numpy instead: the same words, positions and sums, so the same
digest, without a trace and compile per leaf signature (0.2-1.5 s a process
on 2 cores, for microseconds of arithmetic on a small model's state).
tests/workdir/test_digest.py holds both paths to one numpy reference.
"""
import hashlib
import json
import os

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from moe_jax.errors import CorruptCheckpointError

ALGORITHM = 'fmix32-sum-x2'
_SEEDS = (0x9E3779B9, 0x85EBCA77)


def _fmix(h, u32=jnp.uint32):
  """murmur3's 32-bit finaliser: every input bit flips about half the output
  bits. `u32` is jnp.uint32 or np.uint32, for either path's arrays."""
  h = h ^ (h >> u32(16))
  h = h * u32(0x85EBCA6B)
  h = h ^ (h >> u32(13))
  h = h * u32(0xC2B2AE35)
  return h ^ (h >> u32(16))


def _words(x):
  """The bits of `x` as uint32 (a 64-bit value as two words on a new last axis)."""
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  width = jnp.dtype(x.dtype).itemsize
  if width == 8:
    return lax.bitcast_convert_type(x, jnp.uint32)
  narrow = {4: jnp.uint32, 2: jnp.uint16, 1: jnp.uint8}[width]
  return lax.bitcast_convert_type(x, narrow).astype(jnp.uint32)


def _positions(shape):
  """Each element's row-major index mod 2**32, built axis by axis (an iota
  per axis keeps a sharded array sharded; a reshape to 1-D would not)."""
  index, stride = jnp.zeros(shape, jnp.uint32), 1
  for axis in reversed(range(len(shape))):
    index = index + lax.broadcasted_iota(jnp.uint32, shape, axis) * jnp.uint32(stride % 2**32)
    stride *= shape[axis]
  return index


def _leaf(x):
  words = _words(x)
  positions = _positions(words.shape)
  lanes = [jnp.sum(_fmix(words ^ _fmix(positions ^ jnp.uint32(seed))), dtype=jnp.uint32)
           for seed in _SEEDS]
  finite = jnp.isfinite(x).all() if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.bool_(True)
  return lanes, finite


_leaf_jit = jax.jit(_leaf)


def on_device(leaves):
  """[((lane, lane), finite)] of `leaves`: one small program per leaf
  signature (shape, dtype, sharding), which jit's cache keeps for the
  process. A model's leaves share a few signatures (every layer's q has one
  shape), so saving a tree compiles those few once, and later saves, the
  optimizer's moments and restores of the same shapes compile nothing; one
  program over the whole tree compiled again for every new tree (after a
  transition, or a restore's first check) and grew with the leaf count
  (about 2,200 fusions for the GPU workflow's optimizer state).

  Across processes each program sums over devices of both, and XLA:CPU may
  run two dispatched programs at once, their collectives meeting out of
  order: the two processes of tests/multihost/ hung here at every try. So
  there each leaf's program completes before the next is dispatched."""
  if jax.process_count() > 1:
    return [jax.device_get(_leaf_jit(x)) for x in leaves]
  return jax.device_get([_leaf_jit(x) for x in leaves])


def _host_words(x):
  """`_words` of a numpy array, flattened row-major (a 64-bit value's two
  words in a row)."""
  x = x.reshape(-1)
  if x.dtype == np.bool_:
    return x.astype(np.uint32)
  if x.dtype.itemsize == 8:
    return x.view(np.uint32)
  return x.view({4: np.uint32, 2: np.uint16, 1: np.uint8}[x.dtype.itemsize]).astype(np.uint32)


def on_host(leaves):
  """`on_device`'s summaries computed by numpy, for leaves in host memory."""
  out = []
  for x in leaves:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    x = np.asarray(x)   # once: the words and the finiteness check read it
    words = _host_words(x)
    positions = np.arange(words.size, dtype=np.uint64).astype(np.uint32)   # mod 2**32
    lanes = [np.sum(_fmix(words ^ _fmix(positions ^ np.uint32(seed), np.uint32), np.uint32),
                    dtype=np.uint32) for seed in _SEEDS]
    inexact = jnp.issubdtype(x.dtype, jnp.inexact)
    out.append((lanes, bool(np.isfinite(x).all()) if inexact else True))
  return out


def _in_host_memory(leaves):
  """Whether this one process holds every leaf whole in CPU memory."""
  return jax.process_count() == 1 and all(
      isinstance(x, (np.ndarray, np.generic)) or (
          isinstance(x, jax.Array) and all(d.platform == 'cpu' for d in x.devices()))
      for x in leaves)


def _summarise(tree):
  """{leaf path: (hex digest, all finite)} of a pytree of arrays."""
  pairs = jax.tree_util.tree_leaves_with_path(tree)
  paths, leaves = [p for p, _ in pairs], [x for _, x in pairs]
  summaries = (on_host if _in_host_memory(leaves) else on_device)(leaves)
  return {jax.tree_util.keystr(path): (f'{int(a):08x}{int(b):08x}', bool(finite))
          for path, ((a, b), finite) in zip(paths, summaries)}


def of_tree(tree):
  """{leaf path: hex digest} of a pytree of arrays (for a step's meta)."""
  return {path: digest for path, (digest, _) in _summarise(tree).items()}


def of_json(value):
  """Digest of a JSON-serialisable value as it reads back from JSON."""
  canonical = json.dumps(json.loads(json.dumps(value)), sort_keys=True)
  return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def check_tree(where, name, tree, recorded):
  """Raises CorruptCheckpointError for the first leaf of `tree` (item `name`
  of the checkpoint `where`) that is not finite or differs from its recorded
  digest. `recorded` None (a checkpoint older than digests) checks finiteness
  only."""
  for path, (digest, finite) in sorted(_summarise(tree).items()):
    if recorded is not None and recorded.get(path) != digest:
      what = 'has no recorded digest' if path not in recorded else (
          f'does not match its digest (recorded {recorded[path]}, read {digest})')
      raise CorruptCheckpointError(f'{where}: {name}{path} {what}')
    if not finite:
      raise CorruptCheckpointError(f'{where}: {name}{path} holds non-finite values')


def file_digest(path, chunk=1 << 20):
  """SHA-256 of a file, or of a directory's files (names and contents, in
  sorted order): the hash `record_import` records."""
  h = hashlib.sha256()
  paths = [path] if os.path.isfile(path) else sorted(
      os.path.join(d, n) for d, _, names in os.walk(path) for n in names)
  for p in paths:
    h.update(os.path.relpath(p, path).encode() if p != path else b'')
    with open(p, 'rb') as f:
      for block in iter(lambda: f.read(chunk), b''):
        h.update(block)
  return h.hexdigest()
