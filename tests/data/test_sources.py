"""The data-source registry: a new source is one class in one file (this one)."""
import pytest

from configs import common
from moe_jax import schema
from moe_jax.data import corpus, pipeline, sources
from moe_jax.data.tokenizer import ByteTokenizer
from moe_jax.errors import ConfigError
from moe_jax.workdir import files


@sources.register
class Counting(sources.Source):
  """A toy corpus: document i counts from 0 to i + data.patterns."""
  name = 'toy_counting'
  keys = ('data.patterns',)

  def documents(self, data):
    extra = int(data.patterns or 0)
    return [corpus.Document(f'doc{i}', ' '.join(map(str, range(i + extra)))) for i in range(30)]


def _config(**data):
  config = common.base()
  config.data.update(dict(dict(source='toy_counting', val_fraction=0.2), **data))
  config.update(seq_len=16, batch_size=4)
  return config


def test_a_registered_source_feeds_the_pipeline_and_its_keys_fix_the_stream():
  config = _config()
  tok = pipeline.tokenizer_for(config, None)
  batch = next(pipeline.train_iterator(config, tok))
  assert batch['inputs'].shape == (4, 16)
  assert pipeline.eval_batches(config, tok)[0]['inputs'].shape == (4, 16)
  names = {d.name for d in pipeline.documents(config, 'validation')}
  assert len(names) == 6 and not names & {d.name for d in pipeline.documents(config, 'train')}
  assert pipeline.validation_entropy(config, tok) > 0
  # A BPE is trained on its training documents like any in-memory source's.
  config.data.tokenizer, config.data.bpe_vocab_size = 'bpe', 270
  assert pipeline.tokenizer_for(config, None).vocab_size <= 270
  # Its own key is part of the stream a resumed run must match.
  other = _config(patterns='3')
  assert 'data.patterns' in sources.stream_keys(other)
  assert files.diffs(_config().to_dict(), other) == ["data.patterns: workdir '' vs requested '3'"]
  assert files.diffs(common.base().to_dict(), common.base()) == []


def test_an_unknown_source_names_the_registered_ones():
  with pytest.raises(ConfigError, match=r"data.source='books' is not one of .*prepared.*"
                     r"shakespeare.*text_files.*toy_counting"):
    pipeline.packed(_config(source='books'), ByteTokenizer(), 'train')


def test_sft_and_text_sources_keep_their_own_keys():
  assert sources.stream_keys(_config(source='text_files')) == schema.STREAM_KEYS + (
      'data.patterns', 'data.encoding')
  assert sources.stream_keys(_config(source='prepared'))[-1] == 'data.path'
  assert sources.stream_keys(_config(source='sft'), _config(source='shakespeare')) == (
      schema.STREAM_KEYS + ('data.patterns',))
