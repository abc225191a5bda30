"""The grain pipeline: determinism, exact resume, per-process slices, eval batches."""
import json

import numpy as np
import pytest
import scipy.stats

from configs import common
from moe_jax.data import pipeline
from moe_jax.data.tokenizer import ByteTokenizer
from moe_jax.errors import ConfigError
from tests.data import documents

TOK = ByteTokenizer()
KEYS = ('inputs', 'targets', 'segment_ids', 'positions', 'loss_mask')


@pytest.fixture(scope='module')
def config(tmp_path_factory):
  root = documents.write(tmp_path_factory.mktemp('corpus'),
                         ['thee', 'thou', 'hath', 'doth', 'O', 'love', 'night'])
  config = common.base()
  config.data.source = 'text_files'
  config.data.patterns = f'{root}/*.txt'
  config.data.val_fraction = 0.25
  config.seq_len = 16
  config.batch_size = 4
  config.eval_batches = 3
  return config


def _take(it, n):
  return [next(it) for _ in range(n)]


def _equal(a, b):
  return len(a) == len(b) and all(
      np.array_equal(x[k], y[k]) for x, y in zip(a, b) for k in KEYS)


def test_batch_format(config):
  (batch,) = _take(pipeline.train_iterator(config, TOK), 1)
  assert set(batch) == set(KEYS)
  for k in KEYS:
    assert batch[k].shape == (config.batch_size, config.seq_len), k
  assert batch['loss_mask'].dtype == np.float32
  assert all(batch[k].dtype == np.int32 for k in KEYS[:4])
  np.testing.assert_array_equal(batch['inputs'][:, 1:], batch['targets'][:, :-1])


def test_same_seed_same_batches_different_seed_different(config):
  first = _take(pipeline.train_iterator(config, TOK), 20)
  assert _equal(first, _take(pipeline.train_iterator(config, TOK), 20))
  other = config.copy_and_resolve_references()
  other.seed = 1
  assert not _equal(first, _take(pipeline.train_iterator(other, TOK), 20))


def test_resume_from_saved_state_is_exact(config):
  straight = _take(pipeline.train_iterator(config, TOK), 30)
  it = pipeline.train_iterator(config, TOK)
  _take(it, 13)
  state = json.loads(json.dumps(it.get_state()))   # as it is stored in a checkpoint
  resumed = pipeline.train_iterator(config, TOK)
  resumed.set_state(state)
  assert _equal(_take(resumed, 17), straight[13:])


def test_epochs_cover_every_row_once_in_a_new_order(config):
  rows = pipeline.packed(config, TOK, 'train')
  n = len(rows) * 2
  config = config.copy_and_resolve_references()
  config.batch_size = 1
  seen = [b['inputs'][0].tobytes() + b['segment_ids'][0].tobytes()
          for b in _take(pipeline.train_iterator(config, TOK), n)]
  features = rows.batch(np.arange(len(rows)))
  every = sorted(i.tobytes() + s.tobytes()
                 for i, s in zip(features['inputs'], features['segment_ids']))
  first, second = seen[:len(rows)], seen[len(rows):]
  assert sorted(first) == every and sorted(second) == every
  assert first != second


@pytest.mark.parametrize('processes', [2, 4])
def test_processes_read_disjoint_slices_of_the_global_batch(config, processes):
  config = config.copy_and_resolve_references()
  config.batch_size = 8
  whole = _take(pipeline.train_iterator(config, TOK, 0, 1), 5)
  parts = [_take(pipeline.train_iterator(config, TOK, p, processes), 5)
           for p in range(processes)]
  for step, batch in enumerate(whole):
    for k in KEYS:
      local = [parts[p][step][k] for p in range(processes)]
      assert all(x.shape == (8 // processes, config.seq_len) for x in local)
      # Process p holds the p-th block of B / P rows of the global batch.
      np.testing.assert_array_equal(np.concatenate(local), batch[k])


def test_batch_size_must_divide_over_processes(config):
  with pytest.raises(ConfigError, match='batch_size=4'):
    pipeline.train_iterator(config, TOK, 0, 3)


def test_eval_batches_are_fixed_and_full_mode_covers_the_split(config):
  val = pipeline.eval_batches(config, TOK)
  assert len(val) == config.eval_batches
  other = config.copy_and_resolve_references()
  other.seed = 7
  assert _equal(val, pipeline.eval_batches(other, TOK))

  full = pipeline.eval_batches(config, TOK, full=True)
  assert _equal(full[:len(val)], val)
  rows = pipeline.packed(config, TOK, 'validation')
  assert len(full) == -(-len(rows) // config.batch_size)
  real = [(b['inputs'][r].tobytes(), b['segment_ids'][r].tobytes())
          for b in full for r in range(config.batch_size) if b['segment_ids'][r].any()]
  want = rows.batch(np.arange(len(rows)))
  assert sorted(real) == sorted(zip((x.tobytes() for x in want['inputs']),
                                    (x.tobytes() for x in want['segment_ids'])))
  pad_rows = len(full) * config.batch_size - len(rows)
  assert sum(not b['segment_ids'][r].any() for b in full for r in range(config.batch_size)) \
      == pad_rows
  assert all(b['loss_mask'][b['segment_ids'] == 0].sum() == 0 for b in full)


def test_eval_batches_slice_per_process(config):
  whole = pipeline.eval_batches(config, TOK, full=True, process_index=0, process_count=1)
  parts = [pipeline.eval_batches(config, TOK, full=True, process_index=p, process_count=2)
           for p in range(2)]
  for k in KEYS:
    for s, batch in enumerate(whole):
      np.testing.assert_array_equal(np.concatenate([parts[0][s][k], parts[1][s][k]]), batch[k])


def test_train_and_validation_rows_come_from_disjoint_documents(config):
  train = {d.name for d in pipeline.documents(config, 'train')}
  val = {d.name for d in pipeline.documents(config, 'validation')}
  assert len(val) == 3 and not train & val
  # Each document opens with its number; a number shows up on its split's side only.
  text = {split: ''.join(TOK.decode(r) for r in pipeline.packed(config, TOK, split).tokens)
          for split in ('train', 'validation')}
  for i in range(12):
    mark = f'Document {i}.'
    in_val = any(name.endswith(f'doc{i:02d}.txt') for name in val)
    assert (mark in text['validation'], mark in text['train']) == (in_val, not in_val)


def test_unigram_entropy_matches_scipy():
  tokens = np.random.default_rng(0).integers(0, 50, size=10_000) ** 2 % 37
  want = scipy.stats.entropy(np.bincount(tokens))
  assert pipeline.unigram_entropy(tokens) == pytest.approx(want, rel=1e-12)
  assert pipeline.unigram_entropy(np.arange(8)) == pytest.approx(np.log(8), rel=1e-12)


def test_validation_entropy_is_over_the_eval_targets(config):
  targets = np.concatenate([b['targets'][b['loss_mask'] == 1]
                            for b in pipeline.eval_batches(config, TOK, full=True)])
  assert pipeline.validation_entropy(config, TOK) == pytest.approx(
      pipeline.unigram_entropy(targets), rel=1e-12)


def test_worker_processes_give_the_same_batches_and_resume(config):
  config = config.copy_and_resolve_references()
  in_process = _take(pipeline.train_iterator(config, TOK), 8)
  config.data.worker_count = 1
  it = pipeline.train_iterator(config, TOK)
  assert _equal(_take(it, 5), in_process[:5])
  state = json.loads(json.dumps(it.get_state()))
  resumed = pipeline.train_iterator(config, TOK)
  resumed.set_state(state)
  assert _equal(_take(resumed, 3), in_process[5:])


def _with(config, **data):
  c = config.copy_and_resolve_references()
  c.data.update(data)
  return c


def test_pretrain_and_cpt_parts_share_no_document_and_cover_the_training_split(config):
  every = {d.name for d in pipeline.documents(config, 'train')}
  pre, cpt = ({d.name for d in pipeline.documents(_with(config, part=p), 'train')}
              for p in ('pretrain', 'cpt'))
  assert pre and cpt and not pre & cpt and pre | cpt == every
  assert len(cpt) == round(0.5 * len(every))
  assert len({d.name for d in pipeline.documents(_with(config, part='cpt', cpt_fraction=0.25),
                                                 'train')}) == round(0.25 * len(every))
  # Validation is the same for both parts.
  for p in ('pretrain', 'cpt'):
    assert ([d.name for d in pipeline.documents(_with(config, part=p), 'validation')] ==
            [d.name for d in pipeline.documents(config, 'validation')])
  # Down to the packed rows: each document's opening mark is on its part's side only.
  text = {p: ''.join(TOK.decode(r) for r in pipeline.packed(_with(config, part=p), TOK,
                                                            'train').tokens)
          for p in ('pretrain', 'cpt')}
  for i in range(12):
    name = next((n for n in every if n.endswith(f'doc{i:02d}.txt')), None)
    mark = f'Document {i}.'
    assert (mark in text['pretrain'], mark in text['cpt']) == (name in pre, name in cpt)


def test_default_part_reads_every_training_document_as_before(config):
  from moe_jax.data import corpus, sources   # pylint: disable=g-import-not-at-top
  from moe_jax import schema   # pylint: disable=g-import-not-at-top
  from moe_jax.workdir import files   # pylint: disable=g-import-not-at-top
  assert config.data.part == ''
  docs = sources.get('text_files').documents(config.data)
  want, _ = corpus.split(docs, config.data.val_fraction, config.data.split_seed)
  assert pipeline.documents(config, 'train') == want
  # A run saved before data.part existed resumes on the same stream (read upgraded).
  old = json.loads(config.to_json())
  del old['data']['part'], old['data']['cpt_fraction']
  old = schema.upgrade(old)
  assert files.diffs(old, config) == []
  assert files.diffs(old, _with(config, part='cpt'))   # another part is another stream


def test_bad_part_is_a_one_line_error(config):
  with pytest.raises(ConfigError, match=r"data.part='finetune' is not one of"):
    pipeline.documents(_with(config, part='finetune'), 'train')
  with pytest.raises(ConfigError, match=r'data.cpt_fraction=1.0 must be in \(0, 1\)'):
    pipeline.documents(_with(config, part='cpt', cpt_fraction=1.0), 'train')
