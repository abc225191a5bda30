"""data.source='prepared': a corpus tokenised by `moe_jax.data.prepare`, read lazily.

  config.data.source = 'prepared'
  config.data.path = DIR          # holds manifest.json and the ArrayRecord shards

Each split is the concatenation of its shards' documents (token arrays, one
ArrayRecord record each, <bos> ... <eos>), in shard order. Row i of a split
is the window of tokens [i * seq_len, i * seq_len + seq_len + 1) of that
stream: consecutive rows share one token, so every next-token prediction
appears exactly once, and nothing is padded. Inside a row each document piece
is a segment (segment ids 1, 2, ... ; positions restart at 0), so no token
attends across a document boundary and the loss skips the boundary (packing.py
has the same row format).

Nothing is read at start but the manifest, each shard's record count (its
footer), its first and last records and its document lengths (`*.lengths.npy`,
written by prepare, memory-mapped and checked against the manifest), so a
damaged shard is refused before a run writes anything; memory and start-up
do not grow with the corpus beyond 4 bytes a document.
The pipeline shuffles row indices (grain's index shuffle, a new order per
epoch) and a batch reads its rows' records, so the batch of step s is a pure
function of (seed, s) exactly as for an in-memory source, and resume is exact.
The tokenizer comes from the manifest.
"""
import functools
import json
import os

import numpy as np

from moe_jax.data import packing
from moe_jax.data.tokenizer import BpeTokenizer, ByteTokenizer
from moe_jax.errors import ConfigError

MANIFEST = 'manifest.json'
SPLITS = ('train', 'validation')
FORMAT_VERSION = 1


def read_manifest(path, complete=True):
  """DIR/manifest.json, checked; `complete` refuses one of an interrupted prepare."""
  if not path:
    raise ConfigError('data.path is empty; data.source=prepared needs the --out of '
                      'moe_jax.data.prepare')
  where = os.path.join(path, MANIFEST)
  if not os.path.isfile(where):
    raise ConfigError(f'{where} is missing: data.path must be the --out of '
                      'moe_jax.data.prepare')
  try:
    with open(where) as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    raise ConfigError(f'{where}: cannot read ({_first_line(e)})') from None
  if not isinstance(manifest, dict):
    raise ConfigError(f'{where}: not a manifest (a JSON object)')
  if manifest.get('format_version') != FORMAT_VERSION:
    raise ConfigError(f'{where}: format_version {manifest.get("format_version")!r}, '
                      f'expected {FORMAT_VERSION}')
  if complete and not manifest.get('complete'):
    raise ConfigError(f'{where}: the prepare run that writes it did not finish; run the same '
                      'command again to complete it')
  return manifest


def load_tokenizer(path, manifest):
  """The manifest's tokenizer, checked against its recorded fingerprint."""
  spec = manifest['tokenizer']
  if spec['fingerprint'] == 'byte':
    tok = ByteTokenizer()
  else:
    tok = BpeTokenizer.load(os.path.join(path, spec['file']))
  if tok.fingerprint != spec['fingerprint']:
    raise ConfigError(f'{os.path.join(path, MANIFEST)}: the tokenizer in {path} is not the one '
                      'the shards were written with (fingerprint differs)')
  tok.origin = os.path.join(path, MANIFEST)
  return tok


@functools.lru_cache(maxsize=4)
def opened(path):
  """(manifest, tokenizer) of the prepared corpus at the absolute `path`, read once."""
  manifest = read_manifest(path)
  return manifest, load_tokenizer(path, manifest)


class Rows:
  """The rows of one split (see the module docstring); len() and batch(idx)."""

  def __init__(self, path, manifest, split, seq_len, pad_id):
    self.path, self.seq_len, self.pad_id = path, seq_len, pad_id
    self.dtype = np.dtype(manifest['dtype'])
    self.shards = manifest['splits'][split]['shards']   # [{file, docs, tokens}]
    if not self.shards:
      raise ConfigError(f'{os.path.join(path, MANIFEST)}: the {split} split has no shards')
    self.starts = np.cumsum([0] + [s['tokens'] for s in self.shards])
    self.sources = [self._open(s) for s in self.shards]
    for k in range(len(self.shards)):   # lengths and the records at both ends, before any write
      ends = self._ends(k)
      for doc in sorted({0, len(ends) - 1}):
        got = len(self._record(k, doc))
        want = int(ends[doc] - (ends[doc - 1] if doc else 0))
        if got != want:
          raise ConfigError(f'shard {os.path.join(path, self.shards[k]["file"])}: record {doc} '
                            f'holds {got} tokens, its lengths.npy says {want}; prepare it again')
    self.total = int(self.starts[-1])
    self.count = max(0, (self.total - 1) // seq_len)

  def _open(self, shard):
    import grain  # pylint: disable=g-import-not-at-top (prepare's workers need no grain)
    where = os.path.join(self.path, shard['file'])
    try:
      source = grain.sources.ArrayRecordDataSource([where])
      count = len(source)
    except (RuntimeError, ValueError, OSError) as e:
      raise ConfigError(f'shard {where}: cannot open ({_first_line(e)}); prepare it again') from None
    if count != shard['docs']:
      raise ConfigError(f'shard {where}: {count} records, the manifest says {shard["docs"]}')
    return source

  def __len__(self):
    return self.count

  @functools.lru_cache(maxsize=64)
  def _ends(self, k):
    """Cumulative document lengths of shard k (memory-mapped)."""
    where = os.path.join(self.path, self.shards[k]['file']).replace('.array_record', '.lengths.npy')
    try:
      lengths = np.load(where, mmap_mode='r')
    except (OSError, ValueError) as e:
      raise ConfigError(f'{where}: cannot read ({_first_line(e)}); prepare it again') from None
    if len(lengths) != self.shards[k]['docs'] or int(lengths.sum()) != self.shards[k]['tokens']:
      raise ConfigError(f'{where} does not match the manifest; prepare it again')
    return np.cumsum(lengths, dtype=np.int64)

  def _window(self, start):
    """tokens and segment ids [seq_len + 1] of the stream from `start`."""
    row = self.seq_len + 1
    tokens = np.full(row, self.pad_id, np.int32)
    segment_ids = np.zeros(row, np.int32)
    positions = np.zeros(row, np.int32)
    at, seg = 0, 0
    k = int(np.searchsorted(self.starts, start, side='right')) - 1
    offset = start - self.starts[k]
    while at < row:
      ends = self._ends(k)
      doc = int(np.searchsorted(ends, offset, side='right'))
      while at < row and doc < len(ends):
        first = ends[doc - 1] if doc else 0
        ids = self._record(k, doc)
        piece = ids[offset - first:offset - first + row - at]
        seg += 1
        tokens[at:at + len(piece)] = piece
        segment_ids[at:at + len(piece)] = seg
        positions[at:at + len(piece)] = np.arange(len(piece))
        at, offset, doc = at + len(piece), first + len(ids), doc + 1
      k, offset = k + 1, 0
    return tokens, segment_ids, positions

  def _record(self, k, doc):
    try:
      raw = self.sources[k][doc]
    except RuntimeError as e:
      raise ConfigError(f'shard {os.path.join(self.path, self.shards[k]["file"])}: record {doc}'
                        f' unreadable ({_first_line(e)}); prepare it again') from None
    return np.frombuffer(raw, self.dtype)

  def batch(self, idx):
    """Model inputs (packing.features) of rows `idx`."""
    idx = np.asarray(idx)
    windows = [self._window(int(i) * self.seq_len) for i in idx.ravel()]
    stack = lambda j: np.stack([w[j] for w in windows]).reshape(idx.shape + (-1,))
    return packing.features(stack(0), stack(1), stack(2))

  def eval_order(self, seed, size):
    """The first `size` rows of a fixed shuffle, without a permutation of them all."""
    import grain  # pylint: disable=g-import-not-at-top
    shuffled = grain.MapDataset.range(self.count).shuffle(seed=seed)
    return np.asarray([shuffled[i] for i in range(min(size, self.count))], np.int64)


def _first_line(error):
  return (str(error).splitlines() or [type(error).__name__])[0]
