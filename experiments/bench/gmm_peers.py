"""The grouped matmuls the MoE layer benchmark times ours against
(experiments/bench/moe_layer.py): XLA's `ragged_dot`, jax's own Mosaic GPU
ragged dot on a GPU, and tokamax's kernels where it is installed.
"""
import functools

import jax
import jax.numpy as jnp


def sorted_rows(x_TD, idx_Tk, num_experts):
  """The k routed copies of each token sorted by expert, unpadded, and the
  group sizes: the operands of a `ragged_dot`-style grouped matmul."""
  order = jnp.argsort(idx_Tk.reshape(-1), stable=True)
  counts_E = jnp.bincount(idx_Tk.reshape(-1), length=num_experts)
  return x_TD[order // idx_Tk.shape[1]], counts_E.astype(jnp.int32)


# jax's Mosaic GPU ragged dot at the tiles of our Mosaic GPU kernel (128 x
# 128 x 64, four stages); its own sweep (its main()) was not run.
JAX_MGPU_TILES = dict(block_m=128, block_n=128, block_k=64,
                      max_concurrent_steps=4, grid_block_n=8)


def gmms():
  """The grouped matmuls to compare ours with: XLA's `ragged_dot`; on GPU the
  Mosaic GPU ragged dot that ships with jax (unpadded groups, masked stores);
  the Pallas kernels of `tokamax` where it is installed (optional)."""
  peers = {'ragged_dot': jax.jit(jax.lax.ragged_dot)}
  if jax.default_backend() == 'gpu':
    from jax.experimental.pallas.ops.gpu import ragged_dot_mgpu  # pylint: disable=g-import-not-at-top
    peers['jax_ragged_dot_mgpu'] = jax.jit(
        lambda x, w, sizes: ragged_dot_mgpu.ragged_dot(
            x, w, group_sizes=sizes, **JAX_MGPU_TILES))
  try:
    import tokamax  # pylint: disable=g-import-not-at-top
  except ImportError:
    return peers
  from absl import flags  # pylint: disable=g-import-not-at-top
  if not flags.FLAGS.is_parsed():   # tokamax reads absl flags at call time
    flags.FLAGS.mark_as_parsed()
  for impl in ('triton', 'mosaic'):
    peers[f'tokamax_{impl}'] = jax.jit(functools.partial(
        tokamax.ragged_dot, implementation=impl))
  return peers
