"""Every key that changes the training stream is one a resumed run must
match: for each, a changed value is shown to change the first batches, and a
workdir a run has trained in refuses it by name (files.check_compatible), so
a resumed run never reads another stream from a saved position. Every key of
sources.stream_keys has its case here, so a key dropped from the list fails
its case and a key added to it needs one."""
import os

import numpy as np
import pytest

from configs import common
from moe_jax.data import pipeline, sources
from moe_jax.errors import ConfigError
from moe_jax.workdir import files
from tests.data import documents

# (key, its new value, the base's other keys it needs to matter)
CASES = [
    ('seed', 1, {}),
    ('batch_size', 2, {}),
    ('seq_len', 8, {}),
    ('data.source', 'shakespeare', {}),
    ('data.tokenizer', 'bpe', {'data.bpe_vocab_size': 270}),
    ('data.bpe_vocab_size', 300, {'data.tokenizer': 'bpe', 'data.bpe_vocab_size': 270}),
    ('data.val_fraction', 0.5, {}),
    ('data.split_seed', 1, {}),
    ('data.part', 'pretrain', {}),
    ('data.cpt_fraction', 0.25, {'data.part': 'cpt'}),
    ('data.patterns', 'doc0*.txt', {}),
    ('data.encoding', 'latin-1', {}),
]


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  # One word outside ASCII: data.encoding=latin-1 reads it otherwise.
  return documents.write(tmp_path_factory.mktemp('corpus'),
                         ['thee', 'thou', 'hath', 'O', 'love', 'night', 'café'])


def _config(corpus, overrides):
  config = common.base()
  config.update(seq_len=16, batch_size=4)
  config.data.update(source='text_files', patterns=f'{corpus}/*.txt', val_fraction=0.25)
  for key, value in overrides.items():
    if key == 'data.patterns':
      value = f'{corpus}/{value}'
    *groups, leaf = key.split('.')
    node = config
    for group in groups:
      node = node[group]
    node[leaf] = value
  return config


def _first_batches(config, n=3):
  it = pipeline.train_iterator(config, pipeline.tokenizer_for(config, None))
  return [next(it) for _ in range(n)]


def _same(a, b):
  return all(x[k].shape == y[k].shape and np.array_equal(x[k], y[k])
             for x, y in zip(a, b) for k in x)


def test_every_stream_key_has_a_case(corpus):
  keys = set(sources.stream_keys(_config(corpus, {}), _config(corpus, {'data.source': 'shakespeare'})))
  assert keys - {key for key, _, _ in CASES} == set()


@pytest.mark.parametrize('key, value, base', CASES, ids=[c[0] for c in CASES])
def test_a_key_that_changes_the_stream_is_refused_on_resume(corpus, tmp_path, key, value, base):
  saved, changed = _config(corpus, base), _config(corpus, dict(base, **{key: value}))
  assert not _same(_first_batches(saved), _first_batches(changed)), f'{key} kept the stream'
  workdir = tmp_path / 'run'
  for item in ('opt_state', 'data'):   # a training run's checkpoint: it has read the stream
    os.makedirs(workdir / 'checkpoints' / '3' / item)
  files.write_config(str(workdir), saved)
  files.check_compatible(saved, str(workdir))
  with pytest.raises(ConfigError, match=rf'a run on another data stream \(.*{key}: workdir'):
    files.check_compatible(changed, str(workdir))
