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

`data.source` names a source (moe_jax/data/sources/). The in-memory ones
read, tokenise and pack their corpus once per process into numpy rows
(cached in memory per corpus, tokenizer and seq_len; files edited later in
the same process are not re-read); `prepared` reads rows lazily from the
ArrayRecord shards of `moe_jax.data.prepare`, holding no token stream.
Resume is exact either way because a batch is a pure function of (seed,
step, process) over a fixed row count: grain's
index shuffle permutes the rows of each epoch with a seed derived from
(`seed`, epoch), so epochs differ and a different `seed` gives a different
order. `batch_size` is global: the global batch of step s holds the rows
s * B ... (s + 1) * B - 1 of the shuffled stream, and process p of P reads
the p-th block of B / P of them. The union over processes is the same global
batch for any process count, and with the processes' devices in process order
along the batch axes (moe_jax.sharding.make_mesh), every device holds the rows
it holds in one process: the same computation, whatever P.
"""
import os

import grain
import jax
import numpy as np

from moe_jax.data import sources
from moe_jax.data.tokenizer import (SPECIALS_FILE, TOKENIZER_FILE, BpeTokenizer, ByteTokenizer,
                                    train_bpe)
from moe_jax.errors import ConfigError

# What a workdir's tokenizer is: the BPE and, for an imported one, its special tokens.
TOKENIZER_FILES = (TOKENIZER_FILE, SPECIALS_FILE)
_EVAL_ORDER_SEED = 0   # eval rows are sampled the same way whatever `seed` is
unigram_entropy = sources.unigram_entropy


def documents(config, split):
  """The `split` ('train' | 'validation') documents of config's corpus (records
  for data.source=sft)."""
  return sources.get(config.data.source).split(config.data, split)


def tokenizer_for(config, workdir, train=True):
  """The configured tokenizer. BPE comes from data.tokenizer_path, else from
  WORKDIR/tokenizer.json, else is trained on the training split (train=True).

  Nothing is written here: the trainer caches a BPE it trained at
  `tokenizer_cache(config, workdir)` once every check of the run has passed,
  so a resumed run tokenises exactly as before. Readers of a checkpoint
  (evaluate, upcycle, generate, export) pass train=False: a BPE trained again
  is not guaranteed to be the one the model learned. A workdir is
  self-contained for them: where a source that brings its own tokenizer (a
  prepared corpus) cannot be read (moved, deleted), the workdir's copy stands in.
  """
  d = config.data
  source = sources.get(d.source)
  try:
    fixed = source.tokenizer(d)
  except ConfigError:
    fixed = None if train or not workdir else _own_tokenizer(source, config, workdir)
    if fixed is None:
      raise
    return fixed
  if fixed is not None:
    if workdir:
      _check_cached(fixed, os.path.join(workdir, TOKENIZER_FILE), d.source)
    return fixed
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
  return train_bpe([doc.text for doc in source.split(d, 'train')], d.bpe_vocab_size)


def tokenizer_cache(config, workdir):
  """WORKDIR/tokenizer.json, where a run keeps the BPE it trained or its
  source dictates (None for the byte tokenizer, an explicit
  data.tokenizer_path or no workdir)."""
  d = config.data
  fixed = sources.get(d.source).tokenizer(d)
  if fixed is not None:
    return os.path.join(workdir, TOKENIZER_FILE) if workdir and fixed.fingerprint != 'byte' else None
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
    # A prepared corpus's tokenizer names its manifest (`origin`).
    what = getattr(tok, 'origin', config.data.tokenizer)
    raise ConfigError(f'model.vocab_size={size} is smaller than the {what} '
                      f'tokenizer\'s {tok.vocab_size} ids')


def packed(config, tok, split):
  """The `split` rows of config.seq_len + 1 tokens (packing.Packed for an
  in-memory source)."""
  if config.seq_len < 1:
    raise ConfigError(f'seq_len={config.seq_len} must be positive')
  return sources.get(config.data.source).rows(config, tok, split)


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
      lambda idx: rows.batch(idx[p * local:(p + 1) * local]))


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
  count = -(-len(rows) // config.batch_size)
  if not full:
    count = min(count, config.eval_batches)
  size = count * config.batch_size
  order = rows.eval_order(_EVAL_ORDER_SEED, size)
  # Index len(rows) stands for an all-padding row.
  order = np.concatenate([order, np.full(size - len(order), len(rows))])
  return [_padded_batch(rows, order[s * config.batch_size:(s + 1) * config.batch_size]
                        [p * local:(p + 1) * local], tok.pad_id) for s in range(count)]


def _padded_batch(rows, idx, pad_id):
  pad = idx == len(rows)
  batch = rows.batch(np.where(pad, 0, idx))
  for key, value in batch.items():
    value[pad] = pad_id if key in ('inputs', 'targets') else 0
  return batch


def validation_entropy(config, tok):
  """Unigram entropy of the validation split's targets: every token of each
  document but its first (the <bos>), which is what the validation loss averages
  over; for SFT records, their response tokens."""
  return sources.get(config.data.source).validation_entropy(config, tok)


def _own_tokenizer(source, config, workdir):
  """What a reader uses without the corpus of a source that brings its own
  tokenizer: the workdir's tokenizer.json (a BPE corpus's, cached by the
  trainer), or the byte tokenizer where the config names it and the model
  has exactly its ids (a byte corpus caches nothing); None for another
  source or where neither holds."""
  if source.brings_tokenizer:
    path = os.path.join(workdir, TOKENIZER_FILE)
    if os.path.isfile(path):
      return BpeTokenizer.load(path)
    if (config.data.tokenizer == 'byte'
        and config.model.vocab_size == ByteTokenizer().vocab_size):
      return ByteTokenizer()
  return None


def _check_cached(tok, path, what):
  """Refuses a source's own tokenizer when the workdir already keeps another:
  its model was trained with that one."""
  # The vocabulary decides: the trainer caches tokenizer.json without the
  # tokenizer_config.json that may sit beside the manifest's.
  if not os.path.isfile(path):
    return
  if not isinstance(tok, BpeTokenizer) or BpeTokenizer.load(path).to_json() != tok.to_json():
    raise ConfigError(f'data.source={what}: the corpus was tokenised with another tokenizer '
                      f'than {path}, the one this workdir\'s model was trained with')
