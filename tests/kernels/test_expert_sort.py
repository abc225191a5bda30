"""Counting-sort routing metadata against a plain numpy construction."""
import numpy as np
import pytest

from moe_jax.kernels import expert_sort
from tests.kernels import routings


def numpy_route(idx_Tk, num_experts, tile_m):
  """Slot of each assignment by walking the assignments in order; -1 for an
  assignment to "no expert" (index num_experts)."""
  routed = idx_Tk.reshape(-1)[idx_Tk.reshape(-1) < num_experts]
  counts = np.bincount(routed, minlength=num_experts)
  padded = -(-counts // tile_m) * tile_m
  offsets = np.concatenate([[0], np.cumsum(padded)[:-1]])
  seen = np.zeros(num_experts, np.int64)
  slots = np.full(idx_Tk.size, -1, np.int64)
  for a, e in enumerate(idx_Tk.reshape(-1)):
    if e < num_experts:
      slots[a] = offsets[e] + seen[e]
      seen[e] += 1
  return counts, offsets, slots.reshape(idx_Tk.shape), padded


def unroute(idx_Tk, num_experts, every):
  """Marks every `every`-th assignment "no expert" (index num_experts)."""
  flat = idx_Tk.reshape(-1).copy()
  flat[::every] = num_experts
  return flat.reshape(idx_Tk.shape)


@pytest.mark.parametrize('routing', routings.ROUTINGS)
@pytest.mark.parametrize('num_experts,top_k,tile_m', [(4, 1, 8), (8, 2, 8),
                                                       (16, 8, 4), (8, 2, 1)])
def test_route_matches_numpy(routing, num_experts, top_k, tile_m):
  idx_Tk = routings.make_idx(routing, 37, num_experts, top_k)
  r = expert_sort.route(idx_Tk, num_experts, tile_m)
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


@pytest.mark.parametrize('routing', routings.ROUTINGS)
@pytest.mark.parametrize('num_experts,top_k,tile_m,every', [
    (4, 1, 8, 3), (8, 2, 8, 1), (16, 8, 4, 5)])
def test_unrouted_assignments_get_no_row(routing, num_experts, top_k, tile_m,
                                         every):
  idx_Tk = unroute(routings.make_idx(routing, 37, num_experts, top_k),
                   num_experts, every)
  r = expert_sort.route(idx_Tk, num_experts, tile_m)
  counts, offsets, slots, padded = numpy_route(idx_Tk, num_experts, tile_m)
  rows = r.row_token_R.shape[0]
  unrouted = slots < 0
  np.testing.assert_array_equal(r.counts_E, counts)
  np.testing.assert_array_equal(r.offsets_E, offsets)
  np.testing.assert_array_equal(r.slot_Tk, np.where(unrouted, rows - 1, slots))
  assert int(r.num_tiles[0]) == padded.sum() // tile_m
  # The last row, which unrouted assignments read, lies past every used tile.
  assert rows - 1 >= padded.sum()
  assign = np.full(rows, -1)
  assign[slots[~unrouted]] = np.flatnonzero(~unrouted.reshape(-1))
  np.testing.assert_array_equal(r.row_assign_R, assign)


@pytest.mark.parametrize('num_experts,tile_m', [(1, 8), (3, 8), (9, 8),
                                                (4, 16), (8, 1)])
def test_buffer_holds_used_tiles_and_a_zero_row(num_experts, tile_m):
  for num_assign in range(1, 70):
    tiles = expert_sort.buffer_tiles(num_assign, num_experts, tile_m)
    # All routed: every used tile fits.
    assert tiles >= expert_sort.max_tiles(num_assign, num_experts, tile_m)
    # One or more unrouted: a tile past the used ones is left over.
    assert tiles > expert_sort.max_tiles(num_assign - 1, num_experts, tile_m)


def test_full_buffer_with_one_unrouted_gets_a_spare_tile():
  # 7 routed assignments to one expert fill its only tile of 8 rows; the
  # eighth, unrouted, must read a row outside it.
  idx_Tk = np.array([[0]] * 7 + [[1]], np.int32)
  r = expert_sort.route(idx_Tk, 1, 8)
  assert int(r.num_tiles[0]) == 1 and r.row_token_R.shape[0] == 16
  assert int(r.slot_Tk[7, 0]) == 15


def test_max_tiles_is_tight_for_worst_case():
  # 9 experts with 1 assignment each need 9 tiles of 8 rows.
  assert expert_sort.max_tiles(9, 9, 8) == 9
  assert expert_sort.max_tiles(64, 4, 16) == 4 + 3
