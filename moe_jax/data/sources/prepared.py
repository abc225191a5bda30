"""data.source='prepared': the ArrayRecord shards of `moe_jax.data.prepare` at
`data.path`, read lazily, with the tokenizer they were written with
(moe_jax/data/prepared.py)."""
import os

from moe_jax.data import prepared, sources
from moe_jax.errors import ConfigError


@sources.register
class Prepared(sources.Source):
  name = 'prepared'
  keys = ('data.path',)
  brings_tokenizer = True

  def tokenizer(self, data):
    if not data.path:
      prepared.read_manifest('')   # the error that names data.path
    tok = prepared.opened(os.path.abspath(data.path))[1]
    if data.tokenizer == 'bpe' and tok.fingerprint == 'byte':
      raise ConfigError(f'data.tokenizer=bpe, but {os.path.join(data.path, prepared.MANIFEST)} '
                        'holds byte tokens: a prepared corpus brings its tokenizer; set '
                        'data.tokenizer=byte or prepare the corpus with --tokenizer=bpe')
    return tok

  def rows(self, config, tok, split):
    if config.data.part:
      raise ConfigError(f'data.part={config.data.part!r} splits documents of an in-memory '
                        'source; data.source=prepared streams its shards whole')
    path = os.path.abspath(config.data.path)
    rows = prepared.Rows(path, prepared.opened(path)[0], split, config.seq_len, tok.pad_id)
    if not len(rows):
      raise ConfigError(f'the {split} split of {path} ({rows.total} tokens) fills no row of '
                        f'seq_len={config.seq_len}')
    return rows

  def validation_entropy(self, config, tok):
    return prepared.opened(os.path.abspath(config.data.path))[0]['validation_unigram_entropy']
