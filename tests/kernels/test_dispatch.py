"""Counting-sort routing metadata against a plain numpy construction."""
import numpy as np
import pytest

from moe_jax.kernels import dispatch
from tests.kernels import routings


def numpy_route(idx_Tk, num_experts, tile_m):
  """Slot of each assignment by walking the assignments in order."""
  counts = np.bincount(idx_Tk.reshape(-1), minlength=num_experts)
  padded = -(-counts // tile_m) * tile_m
  offsets = np.concatenate([[0], np.cumsum(padded)[:-1]])
  seen = np.zeros(num_experts, np.int64)
  slots = np.zeros(idx_Tk.size, np.int64)
  for a, e in enumerate(idx_Tk.reshape(-1)):
    slots[a] = offsets[e] + seen[e]
    seen[e] += 1
  return counts, offsets, slots.reshape(idx_Tk.shape), padded


@pytest.mark.parametrize('routing', routings.ROUTINGS)
@pytest.mark.parametrize('num_experts,top_k,tile_m', [(4, 1, 8), (8, 2, 8),
                                                       (16, 8, 4), (8, 2, 1)])
def test_route_matches_numpy(routing, num_experts, top_k, tile_m):
  idx_Tk = routings.make_idx(routing, 37, num_experts, top_k)
  r = dispatch.route(idx_Tk, num_experts, tile_m)
  counts, offsets, slots, padded = numpy_route(idx_Tk, num_experts, tile_m)
  np.testing.assert_array_equal(r.counts_E, counts)
  np.testing.assert_array_equal(r.offsets_E, offsets)
  np.testing.assert_array_equal(r.slot_Tk, slots)
  np.testing.assert_array_equal(r.tile_count_E * tile_m, padded)
  assert int(r.num_tiles[0]) == padded.sum() // tile_m
  # Padding is minimal: fewer than tile_m spare rows per expert.
  assert np.all(padded - counts < tile_m)
  # The static buffer holds every used tile.
  assert r.row_token_R.shape[0] >= padded.sum()

  tokens = np.repeat(np.arange(37), top_k)
  assign = np.full(r.row_token_R.shape[0], -1)
  assign[slots.reshape(-1)] = np.arange(slots.size)
  np.testing.assert_array_equal(r.row_assign_R, assign)
  np.testing.assert_array_equal(r.row_token_R,
                                np.where(assign >= 0, tokens[assign], 0))
  # Every used tile lies inside exactly its own expert's group.
  group_of_row = np.repeat(np.arange(num_experts), padded)
  used = int(r.num_tiles[0])
  np.testing.assert_array_equal(r.tile_group_M[:used],
                                group_of_row[::tile_m][:used])
  np.testing.assert_array_equal(r.tile_start_E * tile_m, offsets)


def test_max_tiles_is_tight_for_worst_case():
  # 9 experts with 1 assignment each need 9 tiles of 8 rows.
  assert dispatch.max_tiles(9, 9, 8) == 9
  assert dispatch.max_tiles(64, 4, 16) == 4 + 3
