"""data.source=prepared: rows against a slow reference, process slices, resume, bad shards."""
import json
import os
import re
import shutil

import numpy as np
import pytest

from configs import common
from moe_jax.data import pipeline, prepare, prepared, sources
from moe_jax.data.tokenizer import train_bpe
from moe_jax.errors import ConfigError
from moe_jax.eval import validation
from moe_jax.train import trainer
from tests.data.test_prepare import shard_records, texts, write_jsonl
from tests.train import tiny

KEYS = ('inputs', 'targets', 'segment_ids', 'positions', 'loss_mask')


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  """The split hashes each document's name, FILE:LINE as given: a relative
  FILE keeps the split, and so every count below, the same in every run."""
  root = tmp_path_factory.mktemp('prepared')
  write_jsonl(root / 'a.jsonl', texts(120))
  out = str(root / 'out')
  with pytest.MonkeyPatch.context() as mp:
    mp.chdir(root)
    prepare.prepare('a.jsonl', out, val_fraction=0.2, shard_mb=0.001)
  return out


def _config(path, **overrides):
  c = common.base()
  c.data.source, c.data.path = 'prepared', path
  c.update(dict(dict(seq_len=16, batch_size=4, eval_batches=3), **overrides))
  return c


def _reference(path, split, seq_len):
  """Rows built the slow way: the split's whole token stream in memory, cut every
  seq_len tokens into windows of seq_len + 1, a segment per document piece."""
  manifest = prepared.read_manifest(path)
  docs, _ = shard_records(path, manifest, split)
  stream = np.concatenate(docs).astype(np.int32)
  doc_of = np.repeat(np.arange(len(docs)), [len(d) for d in docs])
  start_of = np.repeat(np.cumsum([0] + [len(d) for d in docs])[:-1], [len(d) for d in docs])
  rows = []
  for i in range((len(stream) - 1) // seq_len):
    at = slice(i * seq_len, i * seq_len + seq_len + 1)
    doc = doc_of[at]
    seg = np.cumsum(np.r_[True, doc[1:] != doc[:-1]]).astype(np.int32)
    first = np.maximum(start_of[at], i * seq_len)   # a piece's positions restart at the row
    rows.append((stream[at], seg, (np.arange(at.start, at.stop) - first).astype(np.int32)))
  return rows


@pytest.mark.parametrize('split', ['train', 'validation'])
def test_rows_match_the_in_memory_reference(corpus, split):
  config = _config(corpus)
  tok = pipeline.tokenizer_for(config, None)
  rows = pipeline.packed(config, tok, split)
  want = _reference(corpus, split, config.seq_len)
  assert len(rows) == len(want) > 10
  got = rows.batch(np.arange(len(rows)))
  for i, (tokens, seg, pos) in enumerate(want):
    np.testing.assert_array_equal(got['inputs'][i], tokens[:-1])
    np.testing.assert_array_equal(got['targets'][i], tokens[1:])
    np.testing.assert_array_equal(got['segment_ids'][i], seg[:-1])
    np.testing.assert_array_equal(got['positions'][i], pos[:-1])
    np.testing.assert_array_equal(got['loss_mask'][i], (seg[:-1] == seg[1:]).astype(np.float32))
  # Documents never attend across a boundary: a row holds several, each its own segment.
  assert (got['segment_ids'].max(axis=1) > 1).any()


@pytest.mark.parametrize('split', ['train', 'validation'])
def test_a_seq_len_that_divides_the_stream_leaves_out_its_last_window(corpus, split):
  """A stream of n * seq_len tokens holds n - 1 rows: the n-th would need one
  token past the end (its last target)."""
  total = prepared.read_manifest(corpus)['splits'][split]
  total = sum(shard['tokens'] for shard in total['shards'])
  seq_len = min(d for d in range(8, total) if total % d == 0)
  config = _config(corpus, seq_len=seq_len)
  rows = pipeline.packed(config, pipeline.tokenizer_for(config, None), split)
  assert len(rows) == len(_reference(corpus, split, seq_len)) == total // seq_len - 1
  last = rows.batch(np.array([len(rows) - 1]))
  assert last['segment_ids'][0, -1] > 0   # the last row is whole: no padding


def test_processes_read_disjoint_rows_whose_union_is_the_global_batch(corpus):
  config = _config(corpus, batch_size=8)
  tok = pipeline.tokenizer_for(config, None)
  whole = [next(it) for it in [pipeline.train_iterator(config, tok)] for _ in range(6)]
  for count in (2, 4):
    its = [pipeline.train_iterator(config, tok, process_index=p, process_count=count)
           for p in range(count)]
    for step in range(6):
      parts = [next(it) for it in its]
      for k in KEYS:
        # Process p reads the p-th block of the global batch (pipeline's docstring).
        np.testing.assert_array_equal(np.concatenate([part[k] for part in parts]),
                                      whole[step][k])


def test_epochs_reshuffle_and_the_iterator_resumes_exactly(corpus):
  config = _config(corpus, batch_size=1)
  tok = pipeline.tokenizer_for(config, None)
  n = len(pipeline.packed(config, tok, 'train'))
  it = pipeline.train_iterator(config, tok)
  seen = [next(it)['inputs'][0].tobytes() for _ in range(2 * n)]
  assert sorted(seen[:n]) == sorted(seen[n:]) and seen[:n] != seen[n:]
  every = pipeline.packed(config, tok, 'train').batch(np.arange(n))['inputs']
  assert sorted(seen[:n]) == sorted(x.tobytes() for x in every)   # every row once an epoch
  it = pipeline.train_iterator(config, tok)
  for _ in range(n - 3):
    next(it)
  state = json.loads(json.dumps(it.get_state()))
  fresh = pipeline.train_iterator(config, tok)
  fresh.set_state(state)
  assert [next(fresh)['inputs'][0].tobytes() for _ in range(7)] == seen[n - 3:n + 4]


def test_eval_batches_cover_the_validation_split_once(corpus):
  config = _config(corpus)
  tok = pipeline.tokenizer_for(config, None)
  rows = pipeline.packed(config, tok, 'validation')
  full = pipeline.eval_batches(config, tok, full=True)
  real = sorted(b['inputs'][r].tobytes() for b in full for r in range(4)
                if b['segment_ids'][r].any())
  assert real == sorted(x.tobytes() for x in rows.batch(np.arange(len(rows)))['inputs'])
  assert pipeline.eval_batches(config, tok)[0]['inputs'].tobytes() == full[0]['inputs'].tobytes()
  assert pipeline.validation_entropy(config, tok) > 0


def test_training_on_a_prepared_corpus_resumes_bit_exactly(corpus, tmp_path):
  config = tiny.config(**{'data.source': 'prepared', 'data.path': corpus, 'seq_len': 16})
  straight, resumed = str(tmp_path / 'straight'), str(tmp_path / 'resumed')
  trainer.train_and_evaluate(config, straight)
  trainer.train_and_evaluate(config, resumed, stop_at=3)
  sources.get('prepared')   # the registry survives; nothing is cached per run
  trainer.train_and_evaluate(config, resumed)

  def losses(workdir):
    with open(os.path.join(workdir, 'metrics.jsonl')) as f:
      return [(r['step'], r['loss'], r.get('val_loss')) for r in map(json.loads, f)]
  assert losses(resumed) == losses(straight) and len(losses(straight)) == 6
  # evaluate reads the prepared validation split: the trainer's last val_loss again.
  got = validation.evaluate_checkpoint(straight)
  assert got['val_loss'] == pytest.approx(losses(straight)[-1][2], rel=1e-5)


def _copy(corpus, tmp_path):
  dst = str(tmp_path / 'copy')
  shutil.copytree(corpus, dst)
  return dst


def _shard(path, split='train', k=0):
  return os.path.join(path, prepared.read_manifest(path)['splits'][split]['shards'][k]['file'])


@pytest.mark.parametrize('damage', ['truncated', 'corrupted', 'lengths', 'manifest_missing',
                                    'incomplete'])
def test_damaged_corpus_is_a_one_line_error_naming_the_file(corpus, tmp_path, damage):
  path = _copy(corpus, tmp_path)
  shard = _shard(path)
  if damage == 'truncated':
    with open(shard, 'r+b') as f:
      f.truncate(os.path.getsize(shard) // 2)
    want = f'shard {shard}: cannot open'
  elif damage == 'corrupted':
    with open(shard, 'r+b') as f:
      f.seek(300)   # inside the first chunk of records (the file is padded to 64 KB blocks)
      f.write(b'\xff' * 16)
    want = f'shard {shard}: record'
  elif damage == 'lengths':
    lengths = shard.replace('.array_record', '.lengths.npy')
    np.save(lengths, np.ones(3, np.uint32))
    want = f'{lengths} does not match the manifest'
  elif damage == 'manifest_missing':
    os.remove(os.path.join(path, prepared.MANIFEST))
    want = f'{path}/manifest.json is missing'
  else:
    manifest = json.load(open(os.path.join(path, prepared.MANIFEST)))
    manifest['complete'] = False
    json.dump(manifest, open(os.path.join(path, prepared.MANIFEST), 'w'))
    want = f'{path}/manifest.json: the prepare run that writes it did not finish'
  prepared.opened.cache_clear()
  config = _config(path, batch_size=1)
  with pytest.raises(ConfigError, match='^' + re.escape(want)):
    tok = pipeline.tokenizer_for(config, None)
    rows = pipeline.packed(config, tok, 'train')
    rows.batch(np.arange(len(rows)))


def test_tokenizer_mismatch_and_small_vocab_are_refused(corpus, tmp_path):
  config = _config(corpus)
  workdir = tmp_path / 'run'
  workdir.mkdir()
  # A workdir whose model was trained with a BPE cannot go on with byte shards.
  train_bpe(texts(10), 270).save(str(workdir / pipeline.TOKENIZER_FILE))
  with pytest.raises(ConfigError, match='tokenised with another tokenizer than'):
    pipeline.tokenizer_for(config, str(workdir))
  config.model.vocab_size = 100
  with pytest.raises(ConfigError, match=r"model.vocab_size=100 is smaller than the .*manifest"
                     r"\.json tokenizer's 259 ids"):
    pipeline.resolve_vocab_size(config, pipeline.tokenizer_for(config, None))


def test_a_bpe_corpus_brings_its_tokenizer_into_the_workdir(tmp_path):
  write_jsonl(tmp_path / 'a.jsonl', texts(40))
  out = str(tmp_path / 'bpe')
  prepare.prepare(f'{tmp_path}/a.jsonl', out, tokenizer='bpe', bpe_vocab_size=300,
                  val_fraction=0.5)   # 40 documents: never an empty validation split
  config = _config(out)
  tok = pipeline.tokenizer_for(config, None)
  assert tok.fingerprint.startswith('bpe:') and tok.vocab_size > 259
  cache = pipeline.tokenizer_cache(config, str(tmp_path / 'run'))
  assert cache == str(tmp_path / 'run' / pipeline.TOKENIZER_FILE)
  os.makedirs(os.path.dirname(cache))
  with open(cache, 'w') as f:   # what the trainer writes once its checks pass
    f.write(tok.to_json())
  assert pipeline.tokenizer_for(config, str(tmp_path / 'run')) == tok
  rows = pipeline.packed(config, tok, 'train')
  assert int(rows.batch(np.arange(len(rows)))['inputs'].max()) >= 259   # merged ids


def test_a_document_part_is_refused_for_prepared_shards(corpus):
  config = _config(corpus)
  config.data.part = 'cpt'
  tok = pipeline.tokenizer_for(config, None)
  with pytest.raises(ConfigError, match=r"data.part='cpt' splits documents of an in-memory"):
    pipeline.packed(config, tok, 'train')
