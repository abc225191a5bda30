"""The data pipeline the trainer calls: tokenizer, training iterator, eval batches.

  tok = pipeline.tokenizer_for(config, workdir)   # byte | bpe (trained once, cached)
  it = pipeline.train_iterator(config, tok)       # grain DatasetIterator, endless
  batch = next(it)                                # dict of [batch_size / processes, seq_len]
  state = it.get_state()                          # small JSON-serialisable dict
  it.set_state(state)                             # a fresh iterator resumes exactly there
  val = pipeline.eval_batches(config, tok)        # fixed list of batches

Checkpointing the iterator: `get_state()` returns `{'next_index': steps_taken}`
(more keys with `data.worker_count > 0`); store it as JSON (Orbax
`args.JsonSave`) and hand it back to `set_state` on a fresh iterator built from
the same config. It is the same on every process, so one copy serves all.
`grain.checkpoint.CheckpointSave(it)` / `CheckpointRestore(it)` work as well
and write one file per process.

Resume is exact because nothing is streamed: the corpus is read, tokenised
and packed once per process into numpy rows (cached in memory per corpus,
tokenizer and seq_len; files edited later in the same process are not
re-read), and a batch is a pure function of (seed, step, process): grain's
index shuffle permutes the rows of each epoch with a seed derived from
(`seed`, epoch), so epochs differ and a different `seed` gives a different
order. `batch_size` is global: the global batch of step s holds the rows
s * B ... (s + 1) * B - 1 of the shuffled stream, and process p of P reads
the p-th block of B / P of them. The union over processes is the same global
batch for any process count, and with the processes' devices in process order
along the batch axes (moe_jax.sharding.make_mesh), every device holds the rows
it holds in one process: the same computation, whatever P.
"""
import functools
import os

import grain
import jax
import numpy as np

from moe_jax.data import corpus, packing, sft
from moe_jax.data.tokenizer import SPECIALS_FILE, BpeTokenizer, ByteTokenizer, train_bpe
from moe_jax.errors import ConfigError

TOKENIZER_FILE = 'tokenizer.json'
# What a workdir's tokenizer is: the BPE and, for an imported one, its special tokens.
TOKENIZER_FILES = (TOKENIZER_FILE, SPECIALS_FILE)
_EVAL_ORDER_SEED = 0   # eval rows are sampled the same way whatever `seed` is


@functools.lru_cache(maxsize=2)
def _split(source, patterns, encoding, val_fraction, split_seed):
  docs = (sft.load(patterns) if source == sft.SOURCE else
          corpus.load(source, patterns, encoding))
  return corpus.split(docs, val_fraction, split_seed)


def documents(config, split):
  """The `split` ('train' | 'validation') documents of config's corpus (records
  for data.source=sft)."""
  d = config.data
  train, val = _split(d.source, d.patterns, d.get('encoding', ''), d.val_fraction, d.split_seed)
  return train if split == 'train' else val


def tokenizer_for(config, workdir, train=True):
  """The configured tokenizer. BPE comes from data.tokenizer_path, else from
  WORKDIR/tokenizer.json, else is trained on the training split (train=True).

  Nothing is written here: the trainer caches a BPE it trained at
  `tokenizer_cache(config, workdir)` once every check of the run has passed,
  so a resumed run tokenises exactly as before. Readers of a checkpoint
  (evaluate, upcycle) pass train=False: a BPE trained again is not
  guaranteed to be the one the model learned.
  """
  d = config.data
  if d.tokenizer == 'byte':
    return ByteTokenizer()
  if d.tokenizer != 'bpe':
    raise ConfigError(f'data.tokenizer={d.tokenizer!r} is not one of byte, bpe')
  if d.tokenizer_path:
    if not os.path.isfile(d.tokenizer_path):
      raise ConfigError(f'data.tokenizer_path: {d.tokenizer_path} does not exist')
    return BpeTokenizer.load(d.tokenizer_path)
  cached = tokenizer_cache(config, workdir)
  if cached and os.path.isfile(cached):
    tok = BpeTokenizer.load(cached)
    if tok.vocab_size > d.bpe_vocab_size:
      raise ConfigError(f'{cached} has {tok.vocab_size} tokens, more than '
                        f'data.bpe_vocab_size={d.bpe_vocab_size}; use a new workdir')
    return tok
  if not train:
    raise ConfigError(f'{cached or "the workdir"} is missing: data.tokenizer=bpe needs the '
                      'tokenizer the model was trained with (set data.tokenizer_path)')
  return train_bpe([doc.text for doc in documents(config, 'train')], d.bpe_vocab_size)


def tokenizer_cache(config, workdir):
  """WORKDIR/tokenizer.json, where a run keeps the BPE it trained (None for
  the byte tokenizer, an explicit data.tokenizer_path or no workdir)."""
  d = config.data
  if d.tokenizer != 'bpe' or d.tokenizer_path or not workdir:
    return None
  return os.path.join(workdir, TOKENIZER_FILE)


def resolve_vocab_size(config, tok):
  """Sets model.vocab_size to the tokenizer's when it is 0; refuses a smaller
  one, whose embedding the tokenizer's ids would index past."""
  size = config.model.vocab_size
  if not size:
    config.model.vocab_size = tok.vocab_size
  elif size < tok.vocab_size:
    raise ConfigError(f'model.vocab_size={size} is smaller than the {config.data.tokenizer} '
                      f'tokenizer\'s {tok.vocab_size} ids')


def tokenize(docs, tok):
  """Token arrays <bos> text <eos> (no <bos> if the vocabulary has none)."""
  head = [] if tok.bos_id is None else [tok.bos_id]
  return [np.concatenate([np.asarray(head, np.int32), ids, np.asarray([tok.eos_id], np.int32)])
          for ids in tok.encode_batch([doc.text for doc in docs])]


@functools.lru_cache(maxsize=4)
def _packed(source, patterns, encoding, val_fraction, split_seed, split, tok, seq_len,
            chat_template):
  train, val = _split(source, patterns, encoding, val_fraction, split_seed)
  docs = train if split == 'train' else val
  if source == sft.SOURCE:
    rows = sft.pack(docs, tok, chat_template, seq_len)
  else:
    rows = packing.pack(tokenize(docs, tok), seq_len, tok.pad_id)
  if not len(rows):
    raise ConfigError(f'the {split} split of data.source={source} packs into no rows')
  return rows


def packed(config, tok, split):
  """The `split` documents packed into rows of config.seq_len + 1 tokens."""
  d = config.data
  if config.seq_len < 1:
    raise ConfigError(f'seq_len={config.seq_len} must be positive')
  return _packed(d.source, d.patterns, d.get('encoding', ''), d.val_fraction, d.split_seed,
                 split, tok, config.seq_len, d.get('chat_template', 'model'))


def _batch(rows, idx):
  return packing.features(rows.tokens[idx], rows.segment_ids[idx], rows.positions[idx],
                          None if rows.mask is None else rows.mask[idx])


def _local_batch_size(config, process_count):
  if config.batch_size < 1 or config.batch_size % process_count:
    raise ConfigError(f'batch_size={config.batch_size} must be a positive multiple of the '
                      f'process count {process_count}')
  return config.batch_size // process_count


def _processes(process_index, process_count):
  if process_index is None:
    return jax.process_index(), jax.process_count()
  return process_index, process_count


def train_dataset(config, tok, process_index=None, process_count=None):
  """This process's batches as a grain MapDataset (index i = training step i)."""
  p, num = _processes(process_index, process_count)
  local = _local_batch_size(config, num)
  rows = packed(config, tok, 'train')
  if config.seed < 0:
    raise ConfigError(f'seed={config.seed} must be non-negative')
  # grain reshuffles epoch e with seed + e; mixing `seed` first keeps seed s's
  # second epoch from being seed s + 1's first.
  shuffle_seed = int(np.random.SeedSequence(config.seed).generate_state(1)[0])
  ds = grain.MapDataset.range(len(rows)).shuffle(seed=shuffle_seed).repeat()
  # drop_remainder: the stream is endless, and it keeps grain's length arithmetic integer.
  return ds.batch(config.batch_size, drop_remainder=True).map(
      lambda idx: _batch(rows, idx[p * local:(p + 1) * local]))


def train_iterator(config, tok, process_index=None, process_count=None):
  """An endless grain DatasetIterator over this process's slice of each global
  batch; see the module docstring for its state."""
  ds = train_dataset(config, tok, process_index, process_count).to_iter_dataset(
      grain.ReadOptions(num_threads=1, prefetch_buffer_size=2))
  if config.data.worker_count > 0:
    # grain's worker processes read absl flags; a notebook or test has none parsed.
    from absl import flags  # pylint: disable=g-import-not-at-top
    if not flags.FLAGS.is_parsed():
      flags.FLAGS.mark_as_parsed()
    ds = ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=config.data.worker_count))
  return iter(ds)


def eval_batches(config, tok, *, full=False, process_index=None, process_count=None):
  """Fixed validation batches: the first `config.eval_batches` (fewer if the split
  is smaller), or with `full=True` every validation row once.

  Rows come in one fixed shuffled order, independent of `seed`, so a subset
  samples the whole split; a short last batch is filled with padding rows
  (segment_ids 0, loss_mask 0). Processes slice each batch as in training.
  """
  p, num = _processes(process_index, process_count)
  local = _local_batch_size(config, num)
  rows = packed(config, tok, 'validation')
  order = np.random.default_rng(_EVAL_ORDER_SEED).permutation(len(rows))
  count = -(-len(rows) // config.batch_size)
  if not full:
    count = min(count, config.eval_batches)
  # Index len(rows) is an all-padding row appended below.
  order = order[:count * config.batch_size]
  order = np.concatenate([order, np.full(count * config.batch_size - len(order), len(rows))])
  padded = packing.Packed(*(None if a is None else np.concatenate([a, np.zeros_like(a[:1])])
                            for a in (rows.tokens, rows.segment_ids, rows.positions, rows.mask)))
  padded.tokens[-1] = tok.pad_id
  return [_batch(padded, order[s * config.batch_size:(s + 1) * config.batch_size]
                 [p * local:(p + 1) * local]) for s in range(count)]


def unigram_entropy(tokens):
  """Entropy (nats per token) of the empirical unigram distribution of `tokens`:
  the loss of the best model that ignores context."""
  counts = np.bincount(np.asarray(tokens).ravel())
  prob = counts[counts > 0] / counts.sum()
  return float(-(prob * np.log(prob)).sum())


def validation_entropy(config, tok):
  """Unigram entropy of the validation split's targets: every token of each
  document but its first (the <bos>), which is what the validation loss averages
  over; for SFT records, their response tokens."""
  if config.data.source == sft.SOURCE:
    rows = _batch(packed(config, tok, 'validation'), slice(None))
    return unigram_entropy(rows['targets'][rows['loss_mask'] > 0])
  docs = tokenize(documents(config, 'validation'), tok)
  return unigram_entropy(np.concatenate([t[1:] for t in docs]))
