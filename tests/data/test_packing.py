"""Packing invariants: every next-token pair of every document is trained exactly once,
segments and positions are well formed, padding is masked."""
import collections

import numpy as np
import pytest

from moe_jax.data import packing

SEQ_LEN = 7
ROW = SEQ_LEN + 1


def _docs(lengths):
  """Documents with globally distinct token values, so every (input, target) pair
  names its document and place."""
  starts = np.cumsum([1] + list(lengths))
  return [np.arange(s, s + n, dtype=np.int32) for s, n in zip(starts, lengths)]


LENGTHS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 30, 5, 4, 6, 2, 11]


def test_every_document_pair_appears_once_with_loss():
  docs = _docs(LENGTHS)
  rows = packing.pack(docs, SEQ_LEN)
  f = packing.features(rows.tokens, rows.segment_ids, rows.positions)
  on = f['loss_mask'] == 1
  got = collections.Counter(zip(f['inputs'][on].tolist(), f['targets'][on].tolist()))
  want = collections.Counter((int(a), int(b)) for d in docs for a, b in zip(d[:-1], d[1:]))
  assert got == want


def test_segments_positions_and_padding_are_well_formed():
  rows = packing.pack(_docs(LENGTHS), SEQ_LEN, pad_id=0)
  assert rows.tokens.shape == rows.segment_ids.shape == rows.positions.shape
  assert rows.tokens.shape[1] == ROW
  for tok, seg, pos in zip(rows.tokens, rows.segment_ids, rows.positions):
    used = int((seg > 0).sum())
    # Padding only at the end of a row, with the pad id and position 0.
    assert (seg[:used] > 0).all() and (seg[used:] == 0).all()
    assert (tok[used:] == 0).all() and (pos[used:] == 0).all()
    # Segments are numbered 1, 2, ... left to right, positions restart at each.
    starts = np.flatnonzero(np.diff(seg[:used], prepend=0))
    assert seg[starts].tolist() == list(range(1, len(starts) + 1))
    for a, b in zip(starts, list(starts[1:]) + [used]):
      assert pos[a:b].tolist() == list(range(b - a))
      # One segment is a contiguous run of one document.
      assert (np.diff(tok[a:b]) == 1).all()


def test_loss_mask_is_same_segment_and_not_padding():
  tokens = np.array([[5, 6, 7, 9, 9, 0, 0]])
  seg = np.array([[1, 1, 1, 2, 2, 0, 0]])
  pos = np.array([[0, 1, 2, 0, 1, 0, 0]])
  f = packing.features(tokens, seg, pos)
  assert f['inputs'].tolist() == [[5, 6, 7, 9, 9, 0]]
  assert f['targets'].tolist() == [[6, 7, 9, 9, 0, 0]]
  assert f['loss_mask'].tolist() == [[1, 1, 0, 1, 0, 0]]
  assert f['loss_mask'].dtype == np.float32


@pytest.mark.parametrize('n', [1, 2, SEQ_LEN, ROW, ROW + 1, 2 * SEQ_LEN + 1, 2 * SEQ_LEN + 2, 50])
def test_long_documents_are_chunked_with_one_shared_token(n):
  doc = np.arange(1, n + 1, dtype=np.int32)
  full, rest = packing.pieces(doc, SEQ_LEN)
  assert full.shape == ((n - 1) // SEQ_LEN, ROW)
  pieces = list(full) + ([rest] if len(rest) else [])
  for a, b in zip(pieces, pieces[1:]):
    assert a[-1] == b[0]
  covered = np.unique(np.concatenate(pieces)) if pieces else np.array([], np.int32)
  assert covered.tolist() == (doc.tolist() if n >= 2 else [])
  assert len(rest) != 1


def test_leftovers_are_packed_tightly():
  # Best fit never leaves two rows that would fit together: at most one leftover
  # row is half full or less.
  rng = np.random.default_rng(0)
  rows = packing.pack(_docs(rng.integers(2, ROW, size=200).tolist()), SEQ_LEN)
  fill = (rows.segment_ids > 0).sum(1)
  assert (fill <= ROW // 2).sum() <= 1
