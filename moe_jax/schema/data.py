"""The `data` config group: corpus, tokenizer, split and packing. The keys
marked `stream` fix every source's data stream; each source adds its own
(data/sources/: `keys`)."""
import dataclasses

from moe_jax.schema.field import field


@dataclasses.dataclass(frozen=True)
class DataConfig:
  """These defaults are the config's (configs/common.py builds the group from them)."""
  # shakespeare | text_files | sft | prepared (data/sources/)
  source: str = field('shakespeare', stream=True)
  patterns: str = ''             # text_files, sft: comma-separated glob patterns
  path: str = field('', added='')   # prepared: the --out of moe_jax.data.prepare (b552563)
  # text_files: '' detects each file's (data/corpus.py; 6aedcec)
  encoding: str = field('', added='')
  # sft: the tokenizer's own (model) | plain (data/chat.py; 4986e54, the sft source)
  chat_template: str = field('model', added='model')
  tokenizer: str = field('byte', stream=True)   # byte | bpe
  bpe_vocab_size: int = field(4096, stream=True)
  tokenizer_path: str = ''       # bpe: an existing tokenizer.json
  # share of documents held out for validation
  val_fraction: float = field(0.05, stream=True)
  # picks the validation documents (independent of `seed`)
  split_seed: int = field(0, stream=True)
  # '' every training document | pretrain | cpt: two disjoint parts by
  # document, cpt_fraction of them for CPT (corpus.py; 802a292: every document)
  part: str = field('', added='', stream=True)
  cpt_fraction: float = field(0.5, added=0.5, stream=True)
  worker_count: int = field(0, at_least=0)   # grain workers; 0: in-process
