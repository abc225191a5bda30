"""Packing tokenised documents into fixed rows of seq_len + 1 tokens.

A row of R = seq_len + 1 tokens gives `inputs = row[:-1]`, `targets = row[1:]`.
A document longer than a row is cut into chunks of R tokens that start every
seq_len tokens, so consecutive chunks share one token: the last target of a
chunk is the first input of the next, and every next-token prediction of the
document appears exactly once. Full chunks fill a row each; the leftover
pieces (the tail of each long document, and whole short documents) are packed
best-fit decreasing, several to a row, the rest of a row padded.

Each piece in a row is a segment: `segment_ids` 1, 2, ... in the row, 0 on
padding; `positions` restart at 0 in every segment. A model that attends only
within a segment therefore sees each chunk as its own sequence (a chunk from
the middle of a play starts without the text before it: the price of fixed
rows). `loss_mask` is 1 exactly where the target is the next token of the
input's own segment.

Supervised fine-tuning records are packed whole instead (`pack_whole`, each
at most a row), with a `mask` row marking the tokens that are trained as
targets (the responses); `loss_mask` is then also 0 where the target is not
one of them.
"""
import bisect
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Packed:
  tokens: np.ndarray        # [N, R] int32, R = seq_len + 1
  segment_ids: np.ndarray   # [N, R] int32, 0 = padding
  positions: np.ndarray     # [N, R] int32
  mask: np.ndarray | None = None   # [N, R] bool: tokens trained as targets (None: all)

  def __len__(self):
    return len(self.tokens)

  def batch(self, idx):
    """Model inputs (`features`) of the rows `idx`."""
    return features(self.tokens[idx], self.segment_ids[idx], self.positions[idx],
                    None if self.mask is None else self.mask[idx])

  def eval_order(self, seed, size):
    """The first `size` rows of a fixed shuffle (the rows interface of sources.Source)."""
    return np.random.default_rng(seed).permutation(len(self))[:size]


def pieces(tokens, seq_len):
  """A document's full chunks [k, seq_len + 1] and its leftover (may be empty)."""
  row = seq_len + 1
  k = max(0, (len(tokens) - 1) // seq_len)
  full = (np.lib.stride_tricks.sliding_window_view(tokens, row)[::seq_len][:k] if k
          else np.zeros((0, row), np.int32))
  rest = tokens[k * seq_len:]
  # A 1-token tail is the previous chunk's last target: nothing left to predict.
  return full, (rest if len(rest) >= 2 else rest[:0])


def _best_fit_decreasing(sizes, capacity):
  """Bins (lists of item indices) for items of `sizes`, each bin holding at most
  `capacity`; every item goes to the fullest bin it fits in, largest items first."""
  order = sorted(range(len(sizes)), key=lambda i: -sizes[i])   # stable: ties keep doc order
  bins, by_room, rooms = [], {}, []   # rooms: sorted distinct free space with open bins
  for i in order:
    at = bisect.bisect_left(rooms, sizes[i])
    if at < len(rooms):
      room = rooms[at]
      b = by_room[room].pop()
      if not by_room[room]:
        del by_room[room], rooms[at]
    else:
      room, b = capacity, len(bins)
      bins.append([])
    bins[b].append(i)
    left = room - sizes[i]
    if left:
      if left not in by_room:
        by_room[left] = []
        bisect.insort(rooms, left)
      by_room[left].append(b)
  return bins


def _rows(full, items, bins, pad_id, masks=None):
  """Packed rows: one per full chunk of `full` [k, R], then one per bin of `items`."""
  row = full.shape[1]
  n = len(full) + len(bins)
  tokens = np.full((n, row), pad_id, np.int32)
  segment_ids = np.zeros((n, row), np.int32)
  positions = np.zeros((n, row), np.int32)
  mask = None if masks is None else np.zeros((n, row), bool)
  tokens[:len(full)] = full
  segment_ids[:len(full)] = 1
  positions[:len(full)] = np.arange(row)
  for r, members in enumerate(bins, start=len(full)):
    at = 0
    for seg, i in enumerate(members, start=1):
      size = len(items[i])
      tokens[r, at:at + size] = items[i]
      segment_ids[r, at:at + size] = seg
      positions[r, at:at + size] = np.arange(size)
      if mask is not None:
        mask[r, at:at + size] = masks[i]
      at += size
  return Packed(tokens, segment_ids, positions, mask)


def pack(docs, seq_len, pad_id=0):
  """Packs token arrays `docs` (each already <bos> ... <eos>) into rows."""
  row = seq_len + 1
  fulls, rests = [], []
  for tokens in docs:
    full, rest = pieces(np.asarray(tokens, np.int32), seq_len)
    fulls.append(full)
    if len(rest):
      rests.append(rest)
  full = np.concatenate(fulls or [np.zeros((0, row), np.int32)])
  return _rows(full, rests, _best_fit_decreasing([len(r) for r in rests], row), pad_id)


def pack_whole(docs, masks, seq_len, pad_id=0):
  """Packs token arrays `docs` of at most seq_len + 1 tokens each, never cut,
  with their bool `masks` (tokens trained as targets)."""
  row = seq_len + 1
  if any(len(d) > row for d in docs):
    raise ValueError(f'pack_whole: a document is longer than seq_len + 1 = {row}')
  bins = _best_fit_decreasing([len(d) for d in docs], row)
  return _rows(np.zeros((0, row), np.int32), docs, bins, pad_id, masks)


def features(tokens, segment_ids, positions, mask=None):
  """Model inputs for rows [..., R] -> dict of [..., seq_len] arrays (the batch format
  of docs/internals.md)."""
  seg_in, seg_out = segment_ids[..., :-1], segment_ids[..., 1:]
  loss_mask = (seg_in == seg_out) & (seg_in != 0)
  if mask is not None:
    loss_mask &= mask[..., 1:]
  return dict(
      inputs=tokens[..., :-1],
      targets=tokens[..., 1:],
      segment_ids=seg_in,
      positions=positions[..., :-1],
      loss_mask=loss_mask.astype(np.float32),
  )
