"""data.source='sft': the chat records of `data.patterns` (JSONL), packed
whole with the loss on their responses (moe_jax/data/sft.py)."""
from moe_jax.data import sft, sources


@sources.register
class Sft(sources.Source):
  name = 'sft'
  keys = ('data.patterns',)

  def documents(self, data):
    return sft.load(data.patterns)

  def pack(self, docs, tok, data, seq_len):
    return sft.pack(docs, tok, data.chat_template, seq_len)

  def validation_entropy(self, config, tok):
    """Over the validation records' response tokens, the loss's targets."""
    rows = self.rows(config, tok, 'validation').batch(slice(None))
    return sources.unigram_entropy(rows['targets'][rows['loss_mask'] > 0])
