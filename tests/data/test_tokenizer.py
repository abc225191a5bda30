"""Byte tokenizer ids, and BPE trained on the training split, cached, reloaded."""
import os

import numpy as np
import pytest

from configs import common
from moe_jax.data import pipeline, sources, tokenizer
from moe_jax.errors import ConfigError

TEXT = ('Now is the winter of our discontent\n'
        'Made glorious summer by this sun of York; caf\u00e9 \u2014 \u00e6')


def test_byte_ids_leave_room_for_specials_and_roundtrip():
  tok = tokenizer.ByteTokenizer()
  ids = tok.encode(TEXT)
  assert ids.dtype == np.int32
  assert len(ids) == len(TEXT.encode('utf-8'))
  assert ids.min() >= 3 and ids.max() < tok.vocab_size == 259
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
  assert tok.decode(ids) == TEXT
  assert tok.decode(np.concatenate([[tok.bos_id], ids, [tok.eos_id, tok.pad_id]])) == TEXT


def _bpe_config(tmp_path, vocab=300):
  for i in range(6):
    (tmp_path / f'doc{i}.txt').write_text(f'{TEXT} {i}\n' * 20)
  config = common.base()
  config.data.source = 'text_files'
  config.data.patterns = f'{tmp_path}/doc*.txt'
  config.data.val_fraction = 0.34
  config.data.tokenizer = 'bpe'
  config.data.bpe_vocab_size = vocab
  return config


def test_bpe_trains_caches_and_reloads(tmp_path, monkeypatch):
  config = _bpe_config(tmp_path)
  workdir = str(tmp_path / 'work')
  tok = pipeline.tokenizer_for(config, workdir)
  assert not os.path.exists(workdir)   # the trainer caches it, after its checks
  with pytest.raises(ConfigError, match='tokenizer.json is missing'):
    pipeline.tokenizer_for(config, workdir, train=False)
  os.makedirs(workdir)
  with open(pipeline.tokenizer_cache(config, workdir), 'w') as f:
    f.write(tok.to_json())
  assert 259 < tok.vocab_size <= 300
  assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
  ids = tok.encode(TEXT)
  assert len(ids) < len(TEXT.encode('utf-8'))   # merges learned
  assert tok.decode(ids) == TEXT

  # Second call: loaded from the cache, never retrained.
  monkeypatch.setattr(pipeline, 'train_bpe', lambda *a: pytest.fail('retrained'))
  again = pipeline.tokenizer_for(config, workdir)
  assert again == tok
  np.testing.assert_array_equal(again.encode(TEXT), ids)

  # data.tokenizer_path loads the same file for another workdir.
  config.data.tokenizer_path = os.path.join(workdir, 'tokenizer.json')
  assert pipeline.tokenizer_for(config, str(tmp_path / 'other')) == tok


def test_bpe_training_is_deterministic_and_uses_the_training_split_only(tmp_path):
  config = _bpe_config(tmp_path)
  val_only = 'zyzzyva quixotry'
  for doc in pipeline.documents(config, 'validation'):
    with open(doc.name, 'a') as f:
      f.write(val_only * 50)
  sources._documents.cache_clear()  # pylint: disable=protected-access
  first = pipeline.tokenizer_for(config, None)
  assert first == pipeline.tokenizer_for(config, None)
  # Text seen 50 times only in validation documents got no merges of its own.
  assert len(first.encode(val_only)) > len(first.encode(TEXT[:len(val_only)]))


def test_bpe_errors_name_the_key(tmp_path):
  config = _bpe_config(tmp_path, vocab=100)
  with pytest.raises(ConfigError, match='data.bpe_vocab_size=100'):
    pipeline.tokenizer_for(config, None)
  config.data.tokenizer_path = str(tmp_path / 'missing.json')
  with pytest.raises(ConfigError, match='data.tokenizer_path.*missing.json'):
    pipeline.tokenizer_for(config, None)
  (tmp_path / 'junk.json').write_text('{not json')
  config.data.tokenizer_path = str(tmp_path / 'junk.json')
  with pytest.raises(ConfigError, match='junk.json'):
    pipeline.tokenizer_for(config, None)
  config.data.tokenizer = 'sentencepiece'
  with pytest.raises(ConfigError, match='data.tokenizer'):
    pipeline.tokenizer_for(config, None)


def test_cached_bpe_larger_than_requested_is_refused(tmp_path):
  config = _bpe_config(tmp_path, vocab=300)
  (tmp_path / 'tokenizer.json').write_text(pipeline.tokenizer_for(config, None).to_json())
  config.data.bpe_vocab_size = 270
  with pytest.raises(ConfigError, match='data.bpe_vocab_size=270'):
    pipeline.tokenizer_for(config, str(tmp_path))
