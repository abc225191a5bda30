"""Data sources: what `data.source` names, behind one interface.

A source turns the `data` config group into training and validation rows. The
in-memory kind (shakespeare and text_files, read by corpus.py; sft, the
records of sft.py) lists its documents; the pipeline splits them by document
(corpus.select) and packs each split once per process. A source that reads
lazily from disk (prepared, a corpus tokenised by `moe_jax.data.prepare`)
overrides `rows` and brings its own tokenizer. Every module of this package
is one source and registers itself when the package is imported, so a new
source is one file here:

  @sources.register
  class Poems(sources.Source):
    name = 'poems'
    keys = ('data.patterns',)     # config keys that fix its stream
    def documents(self, data):
      return [corpus.Document(path, text) for path, text in ...]

The pipeline, the tokenizer, resume checks (workdir/files.py reads
`stream_keys`) and evaluation then work unchanged.
"""
import functools

import ml_collections
import numpy as np

from moe_jax import registry, schema
from moe_jax.data import corpus, packing
from moe_jax.errors import ConfigError

REGISTRY = registry.Registry('data.source')


class Source:
  """The interface. In-memory sources define `documents` (and `pack` when
  packing differs); the rest has defaults."""
  name = None
  keys = ()   # data.* keys besides schema.STREAM_KEYS that fix the stream
  brings_tokenizer = False   # `tokenizer` reads it from the corpus (which a workdir copies)

  def documents(self, data):
    """Every document (objects with `.name` and `.text`) in a fixed order;
    the split is by `.name`."""
    raise NotImplementedError

  def pack(self, docs, tok, data, seq_len):
    """`docs` of one split as packing.Packed rows of seq_len + 1 tokens."""
    del data
    return packing.pack(tokenize(docs, tok), seq_len, tok.pad_id)

  def tokenizer(self, data):
    """The tokenizer this source dictates, or None: the configured one
    (data.tokenizer), trained on the training documents for BPE."""
    del data

  def rows(self, config, tok, split):
    """The `split` rows: anything with len() and `batch(idx) -> features`
    (packing.Packed, prepared.Rows)."""
    return _packed(self, _frozen(config.data), split, tok, config.seq_len)

  def split(self, data, which):
    """The `which` ('train' | 'validation') documents (corpus.select)."""
    return corpus.select(_documents(self, _frozen(data)), data, which)

  def validation_entropy(self, config, tok):
    """Unigram entropy of the validation targets: every token of each document
    but its first (the <bos>), which is what the validation loss averages over."""
    docs = tokenize(self.split(config.data, 'validation'), tok)
    return unigram_entropy(np.concatenate([t[1:] for t in docs]))


def register(cls):
  """Class decorator: makes `cls.name` a value of data.source."""
  if not cls.name:
    raise ValueError(f'{cls.__name__} has no name')
  REGISTRY.register(cls.name, cls())
  return cls


def get(name):
  return REGISTRY.get(name)


def stream_keys(*configs):
  """The keys that fix the data stream of any of `configs` (a resumed run must
  match them all): every source's (the fields marked `stream` in
  moe_jax/schema/: the batch a step reads, and the tokens) and each one's own;
  a source that no longer exists adds none."""
  keys = list(schema.STREAM_KEYS)
  for config in configs:
    for key in getattr(REGISTRY.entries.get(config['data']['source']), 'keys', ()):
      if key not in keys:
        keys.append(key)
  return tuple(keys)


def tokenize(docs, tok):
  """Token arrays <bos> text <eos> of documents (no <bos> if the vocabulary has none)."""
  return tokenize_texts([doc.text for doc in docs], tok)


def tokenize_texts(texts, tok):
  head = [] if tok.bos_id is None else [tok.bos_id]
  return [np.concatenate([np.asarray(head, np.int32), ids, np.asarray([tok.eos_id], np.int32)])
          for ids in tok.encode_batch(texts)]


def unigram_entropy(tokens):
  """Entropy (nats per token) of the empirical unigram distribution of `tokens`:
  the loss of the best model that ignores context."""
  return counts_entropy(np.bincount(np.asarray(tokens).ravel()))


def counts_entropy(counts):
  """Entropy (nats) of the distribution of token counts `counts` [V]: for a
  corpus counted in pieces (prepare's streamed validation shards)."""
  prob = counts[counts > 0] / counts.sum()
  return float(-(prob * np.log(prob)).sum())


def _frozen(data):
  """The data group as a hashable cache key (a process reads a corpus once)."""
  return data if isinstance(data, ml_collections.FrozenConfigDict) else (
      ml_collections.FrozenConfigDict(data))


@functools.lru_cache(maxsize=2)
def _documents(source, data):
  return source.documents(data)


@functools.lru_cache(maxsize=4)
def _packed(source, data, split, tok, seq_len):
  rows = source.pack(source.split(data, split), tok, data, seq_len)
  if not len(rows):
    raise ConfigError(f'the {split} split of data.source={source.name} packs into no rows')
  return rows


registry.import_all(__path__, __name__)
