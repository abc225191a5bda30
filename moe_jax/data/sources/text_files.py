"""data.source='text_files': one document per file that `data.patterns`
matches, decoded by `data.encoding` or detected per file (moe_jax/data/corpus.py)."""
from moe_jax.data import corpus, sources


@sources.register
class TextFiles(sources.Source):
  name = 'text_files'
  keys = ('data.patterns', 'data.encoding')

  def documents(self, data):
    return corpus.text_files(data.patterns, data.encoding)
