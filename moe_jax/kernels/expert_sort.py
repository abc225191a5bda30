"""The expert sort under the grouped kernels: where each (token, choice)
assignment sits once sorted by expert, with every expert group padded to a
multiple of the row tile. (Dispatch itself, choosing a path, is
moe_jax/models/dispatch.py.)

A counting sort, not a comparison sort: a histogram over experts gives the
group sizes, an exclusive prefix sum over the padded sizes gives the group
offsets, and a prefix sum over the one-hot assignment matrix gives each
assignment's rank inside its group. Slot = offset[e] + rank. Everything is
O(T·k·E) elementwise work with static shapes, which XLA fuses; no argsort.

Padding each group to tile_m rows means a row tile never straddles two
experts, so the grouped matmul reads one expert's weights per tile. The padded
buffer has the static worst-case size R = tile_m * buffer_tiles; tiles past
`num_tiles` are unused and the kernels skip them, so the compute wasted on
padding is < tile_m rows per non-empty expert.

An index equal to num_experts means "no expert": expert parallelism
(moe_jax/parallel/expert.py) receives buffers whose empty rows have no local
expert, and giving them no row (rather than a real expert with gate 0) keeps
the FLOPs proportional to the rows actually routed. Such an assignment is left
out of counts_E and row_assign_R, and its slot is the last row of the buffer,
which one spare tile keeps unused whenever any assignment is unrouted: every
kernel writes zeros for tiles past `num_tiles`, so the combine reads 0 for it
and its gate's gradient is 0 in every backward buffer, with no mask to apply.
"""
from typing import NamedTuple

import jax.numpy as jnp


class SortedRows(NamedTuple):
  """Metadata of one routing decision (a pytree of int32 arrays).

  counts_E       routed assignments per expert (the histogram)
  offsets_E      first row of each expert's group in the padded buffer
  slot_Tk        row of each assignment in the padded buffer (the last row,
                 always zero, for an assignment to "no expert")
  row_token_R    token each row copies (0 on padding rows)
  row_assign_R   flat assignment index t*k + j of each row (-1 on padding)
  tile_group_M   expert of each row tile (the last used one past num_tiles)
  tile_start_E   first tile of each group; tile_count_E its number of tiles
  num_tiles      [1] tiles in use
  """
  counts_E: jnp.ndarray
  offsets_E: jnp.ndarray
  slot_Tk: jnp.ndarray
  row_token_R: jnp.ndarray
  row_assign_R: jnp.ndarray
  tile_group_M: jnp.ndarray
  tile_start_E: jnp.ndarray
  tile_count_E: jnp.ndarray
  num_tiles: jnp.ndarray


def max_tiles(num_assignments, num_experts, tile_m):
  """Static bound on row tiles: each non-empty group wastes < tile_m rows."""
  groups = min(num_experts, num_assignments)
  return (num_assignments + groups * (tile_m - 1)) // tile_m


def buffer_tiles(num_assignments, num_experts, tile_m):
  """Row tiles of the padded buffer: every used tile, plus one left unused
  whenever an assignment is unrouted.

  With all A assignments routed, at most max_tiles(A) tiles are used; with one
  or more unrouted, at most max_tiles(A - 1), so the tile after those is free
  and its last row is zero. max_tiles grows by at most one per assignment, so
  max_tiles(A - 1) + 1 covers both cases.
  """
  return max_tiles(num_assignments - 1, num_experts, tile_m) + 1


def route(idx_Tk, num_experts, tile_m):
  """Counting-sort metadata for idx_Tk (int, [T, k], each in [0, num_experts]:
  num_experts meaning "no expert") over num_experts."""
  num_tokens, top_k = idx_Tk.shape
  num_assign = num_tokens * top_k
  e_A = idx_Tk.reshape(-1).astype(jnp.int32)
  routed_A = e_A < num_experts
  onehot_AE = (e_A[:, None] == jnp.arange(num_experts)).astype(jnp.int32)
  counts_E = jnp.sum(onehot_AE, axis=0)
  # Rank inside the group: how many earlier assignments chose the same expert.
  rank_A = jnp.sum((jnp.cumsum(onehot_AE, axis=0) - 1) * onehot_AE, axis=1)
  tile_count_E = (counts_E + tile_m - 1) // tile_m
  tile_start_E = jnp.cumsum(tile_count_E) - tile_count_E
  offsets_E = tile_start_E * tile_m
  num_m = buffer_tiles(num_assign, num_experts, tile_m)
  rows = num_m * tile_m
  slot_A = jnp.where(routed_A,
                     offsets_E[jnp.minimum(e_A, num_experts - 1)] + rank_A,
                     rows - 1)
  a_A = jnp.arange(num_assign, dtype=jnp.int32)
  row_assign_R = jnp.full((rows,), -1, jnp.int32).at[
      jnp.where(routed_A, slot_A, rows)].set(a_A, mode='drop')
  row_token_R = jnp.maximum(row_assign_R, 0) // top_k
  num_tiles = jnp.sum(tile_count_E)
  # Group of tile m: number of groups that end at or before m. Unused tiles
  # repeat the last used tile's group so a TPU grid keeps that output block.
  tile_end_E = jnp.cumsum(tile_count_E)
  m_M = jnp.minimum(jnp.arange(num_m, dtype=jnp.int32), num_tiles - 1)
  tile_group_M = jnp.sum(tile_end_E[None, :] <= m_M[:, None], axis=1)
  return SortedRows(
      counts_E=counts_E, offsets_E=offsets_E,
      slot_Tk=slot_A.reshape(num_tokens, top_k), row_token_R=row_token_R,
      row_assign_R=row_assign_R, tile_group_M=tile_group_M.astype(jnp.int32),
      tile_start_E=tile_start_E, tile_count_E=tile_count_E,
      num_tiles=num_tiles.reshape(1))
